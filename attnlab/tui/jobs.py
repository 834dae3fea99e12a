"""One helper for every lab worker that computes from a run: serialised, numbered, one line.

Textual's ``exclusive=True`` cancels the *worker*, not the thread under it: an old decode
keeps running next to a new one, and two decodes sharing one loaded model raise torch errors
(issue 44). So each kind of job holds a ``Jobs``: the UI thread numbers each request
(``issue``); the thread runs it under the kind's lock, skips it when a newer request came
while it waited, and turns any error into one line; the handler drops an answer whose number
is not the latest (``stale``); a write (``every=True``) is queued instead, never dropped.
No textual import: the engine-facing half is plain threading.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    number: int
    value: T | None = None
    error: str = ""  # one line for the user; "" when it worked
    skipped: bool = False  # superseded before it started: nothing to show


def error_line(err: BaseException) -> str:
    """An engine refusal as it is; anything else named as unexpected, on one line."""
    from attnlab.errors import AttnlabError

    if isinstance(err, AttnlabError):
        return str(err)
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror}"
    text = " ".join(str(err).split()) or type(err).__name__
    return f"unexpected error ({type(err).__name__}: {text})"


class Jobs:
    """The latest request of one kind of job (a view's decode, a screen's report, …)."""

    def __init__(
        self, lock: threading.Lock | threading.RLock | None = None, *, every: bool = False
    ) -> None:
        """``every``: a write (an export) the user asked for runs and answers even when a
        newer one came: requests queue, none is dropped."""
        self._lock = lock if lock is not None else threading.Lock()
        self._every = every
        self._latest = 0
        self._count = threading.Lock()  # issue() may be called from two screens' threads

    @property
    def latest(self) -> int:
        return self._latest

    def issue(self) -> int:
        """Number a new request; every older one is now stale."""
        with self._count:
            self._latest += 1
            return self._latest

    def stale(self, number: int | None) -> bool:
        """An answer to an older request (``None``: an unnumbered message, always shown)."""
        return not self._every and number is not None and number != self._latest

    def run(self, number: int, job: Callable[[], T]) -> Outcome[T]:
        """Run ``job`` alone (after any older one of this kind has finished), unless it was
        superseded while it waited; an exception becomes ``Outcome.error``."""
        with self._lock:
            if self.stale(number):
                return Outcome(number, skipped=True)
            try:
                return Outcome(number, job())
            except Exception as err:  # a broken checkpoint must not take the lab down
                return Outcome(number, error=error_line(err))
