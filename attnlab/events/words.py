"""The closed sets of words in events: control commands, done reasons, run statuses."""

from __future__ import annotations

from enum import Enum
from typing import Any

from attnlab.errors import AttnlabError


class _Word(str, Enum):
    """A closed set of words that is also a ``str`` (compares, hashes and prints as its value)."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def coerce(cls, value: Any) -> Any:
        """The member for a known word; anything else unchanged (a newer writer's word)."""
        try:
            return cls(value)
        except ValueError:
            return value


class ControlCommand(_Word):
    """What a controller writes to ``RUN/control`` (and ``Trainer.control`` takes)."""

    PAUSE = "pause"
    RESUME = "resume"
    SAVE = "save"
    STOP = "stop"

    @classmethod
    def parse(cls, word: str) -> ControlCommand:
        """The command for ``word``, else ``UnknownControlCommand`` naming the valid words."""
        try:
            return cls(word)
        except ValueError:
            valid = ", ".join(c.value for c in cls)
            raise UnknownControlCommand(
                f'unknown control command "{word}"; valid: {valid}'
            ) from None


class UnknownControlCommand(AttnlabError, ValueError):
    """A control word outside ``ControlCommand`` (a user error, and a ValueError for callers
    that check arguments)."""


# Written to RUN/control by `attnlab train --nproc` on Ctrl+C / SIGTERM: not a user command.
INTERRUPT_WORD = "interrupt"


class DoneReason(_Word):
    """Why a run ended (the ``done`` event's ``reason``)."""

    FINISHED = "finished"
    EARLY_STOP = "early-stop"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    ERROR = "error"

    @property
    def status(self) -> RunStatus:
        return DONE_STATUS[self]

    @property
    def exit_code(self) -> int:
        """``attnlab train``'s exit code (130: ended by a signal, as a shell reports it)."""
        return DONE_EXIT_CODES[self]


class RunStatus(_Word):
    """A run's status in ``attnlab runs`` and the lab."""

    RUNNING = "running"  # a live process holds the run's lock (or, without one, its pid lives)
    FINISHED = "finished"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    # No end event and no live trainer to show for it: no start event, or only malformed ones
    INCOMPLETE = "incomplete"


# The one mapping from a done reason to the run's status (and the CLI's exit code).
DONE_STATUS: dict[DoneReason, RunStatus] = {
    DoneReason.FINISHED: RunStatus.FINISHED,
    DoneReason.EARLY_STOP: RunStatus.FINISHED,
    DoneReason.STOPPED: RunStatus.STOPPED,
    DoneReason.INTERRUPTED: RunStatus.INTERRUPTED,
    DoneReason.ERROR: RunStatus.ERROR,
}


DONE_EXIT_CODES: dict[DoneReason, int] = {
    DoneReason.FINISHED: 0,
    DoneReason.EARLY_STOP: 0,
    DoneReason.STOPPED: 0,
    DoneReason.INTERRUPTED: 130,
    DoneReason.ERROR: 1,
}


def run_status(reason: DoneReason | str) -> RunStatus | str:
    """The status of a run that ended with ``reason``; a reason this version does not know
    (a newer writer's) is shown as it is."""
    known = DoneReason.coerce(reason)
    return known.status if isinstance(known, DoneReason) else str(reason)


def exit_code(reason: DoneReason | str) -> int:
    known = DoneReason.coerce(reason)
    return known.exit_code if isinstance(known, DoneReason) else 1
