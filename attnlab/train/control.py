"""How a running trainer is controlled: the words of ``RUN/control`` (or
``Trainer.control``), pausing, and SIGINT/SIGTERM (see attnlab.train.trainer's docstring).

``ControlAndSignals`` is a base class of ``attnlab.train.trainer.Trainer``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.events import INTERRUPT_WORD, Control, ControlCommand, Note
from attnlab.regular_files import NotRegularFile, read_prefix
from attnlab.runs import CONTROL_FILE
from attnlab.train import distributed

PAUSE_POLL_S = 0.2
# A control word is one short word: only this many first bytes of RUN/control are read.
CONTROL_MAX_BYTES = 64


class ControlAndSignals:
    """Control words, pausing and signal handlers, mixed into ``Trainer``."""

    # Set by Trainer (declared here for the type checker and the reader).
    run_dir: Path
    events: Any
    step: int
    install_signals: bool
    _pending: ControlCommand | None
    _signalled: bool
    _signal_at: float | None
    _control_sig: tuple[int, int, int] | None
    _start_time: float
    _sync_control: Callable[[int], tuple[ControlCommand | None, int]]  # agreed by every rank
    _save: Callable[[str], None]  # EvaluationAndCheckpoints._save

    @staticmethod
    def _stat_signature(path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _poll_control(self) -> ControlCommand | str | None:
        """A new command from control() or a changed ``run_dir/control`` file, else None."""
        if self._pending is not None:
            command, self._pending = self._pending, None
            return command
        path = self.run_dir / CONTROL_FILE
        signature = self._stat_signature(path)
        if signature == self._control_sig:
            return None
        self._control_sig = signature
        if signature is None:
            return None
        try:
            # The first bytes only (a 3 GB sparse control file took the trainer past 8.5 GB);
            # never a blocking open (a FIFO); errors="replace": garbage is an unknown word.
            head = read_prefix(path, CONTROL_MAX_BYTES)
        except NotRegularFile as err:
            self.events.emit(Note(self.step, message=f"control: {err}; ignored"))
            return None
        except OSError:
            return None
        word = head.decode("utf-8", errors="replace").strip().lower()
        if word == INTERRUPT_WORD:
            return word
        command = ControlCommand.coerce(word)
        if isinstance(command, ControlCommand):
            return command
        if word:  # dropped with no trace before: say what was ignored, as git does
            valid = ", ".join(c.value for c in ControlCommand)
            shown = word if len(word) <= 32 else word[:32] + "..."
            self.events.emit(
                Note(
                    self.step,
                    message=f"control: unknown word {shown!r} in {path} ignored; valid: {valid}",
                )
            )
        return None

    def _paused(self) -> ControlCommand | None:
        """Wait while paused; returns the command that ended the pause (resume/stop/save)."""
        pause_start = time.perf_counter()
        self.events.emit(Control(self.step, command=ControlCommand.PAUSE))
        try:
            while not self._signalled:
                command, _ = self._sync_control(0)  # every rank pauses and wakes together
                if command == ControlCommand.SAVE:
                    self._save("last")
                elif command in (ControlCommand.RESUME, ControlCommand.STOP):
                    self.events.emit(Control(self.step, command=ControlCommand.RESUME))
                    return command
                time.sleep(PAUSE_POLL_S)
            return None
        finally:
            # Time spent paused is not training time.
            self._start_time += time.perf_counter() - pause_start

    def _install_signal_handlers(self) -> Callable[[], None]:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        # Under torchrun a terminal's Ctrl+C reaches a rank twice (directly and forwarded by
        # torchrun): a repeat within this grace is the same request.
        grace = distributed.SIGNAL_GRACE_S if distributed.launched_by_torchrun() else 0.0

        def handler(signum: int, frame: Any) -> None:
            now = time.monotonic()
            if self._signal_at is not None and now - self._signal_at >= grace:
                # second signal: abort now
                for sig, old in previous.items():
                    signal.signal(sig, old)
                raise KeyboardInterrupt
            if self._signal_at is None:
                self._signal_at = now
            self._signalled = True

        for sig in previous:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore
