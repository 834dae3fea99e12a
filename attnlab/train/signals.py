"""Signals while a training process starts up, and a torchrun worker's view of its job.

Torch-free on purpose: these decide things before the seconds-long imports (the command line
uses them too, to let only rank 0 speak).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

# Under torchrun a terminal's Ctrl+C reaches a worker twice (directly and forwarded).
TORCHRUN_SIGNAL_GRACE_S = 2.0  # = attnlab.train.distributed.SIGNAL_GRACE_S


# Set by `attnlab train --nproc N` for its workers: rank 0 writes its exit code there.
EXIT_FILE_ENV = "ATTNLAB_EXIT_FILE"
# The Error event's kind when another rank of the job is gone (killed or crashed).
PEER_LOST_KIND = "peer"


def under_launcher() -> bool:
    """True in a rank started by ``attnlab train --nproc`` (whose launcher names a dead rank)."""
    return bool(os.environ.get(EXIT_FILE_ENV))


def primary_process() -> bool:
    """True unless torchrun's environment names a rank other than 0."""
    return os.environ.get("RANK", "0") in ("", "0")


def torchrun_worker() -> bool:
    """True in a process of a torchrun job with more than one process."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    except ValueError:
        return False


class DeferredSignals:
    """SIGINT/SIGTERM while ``train`` starts up: remembered as a flag, never lost.

    Python's default handler raises KeyboardInterrupt wherever the main thread is, and in
    the start-up imports that can be inside code that swallows it: Cython's memoryview
    set-up, run when lxml.etree is imported (sacrebleu imports it), registers its types with
    ``collections.abc`` under a bare ``try: ... except: pass``. A Ctrl+C that arrived while
    lxml loaded was dropped there and the run trained to the end (1 start in 5). The flag is
    checked between start-up stages and handed to the Trainer, whose handlers take over.
    A second signal raises at once, unless it comes within ``grace`` seconds of the first
    (a torchrun worker gets each Ctrl+C twice).
    """

    def __init__(self, grace: float = 0.0) -> None:
        self.hit = False
        self.trainer: Any = None
        self.grace = grace
        self._first_at: float | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        again, self.hit = self.hit, True
        if self._first_at is None:
            self._first_at = now
        if self.trainer is not None:
            self.trainer.interrupt()
        if again and now - self._first_at >= self.grace:
            raise KeyboardInterrupt  # a second Ctrl+C: do not wait for the next check

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def restore(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
