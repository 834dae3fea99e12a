"""Start training in a child process and talk to it through its run directory.

Training never runs on the UI loop: the lab (and the study runner) writes the experiment to a
temporary TOML file and runs ``python -m attnlab train --preset FILE --out RUNS --run-name NAME
--quiet``. A crash, OOM or CUDA error kills only the child. The child reads one word from
``RUN/control`` (``pause``, ``resume``, ``save``, ``stop``) at every step; the caller follows
``RUN/events.jsonl``. Pure logic (no textual), so it is tested without the app.

Each child gets a scratch directory ``attnlab-lab-*`` in the system temp folder (its preset file
and stderr); ``remove_scratch_dirs`` (called when the lab exits, and at interpreter exit) removes
them, and starting a child sweeps the ones left by labs that were killed.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.config import ExperimentConfig, dumps_toml, safe_name
from attnlab.events import ControlCommand
from attnlab.runs import (  # noqa: F401 - write_control: the one writer, re-exported
    CONTROL_FILE,
    pid_alive,
    write_control,
)

SCRATCH_PREFIX = "attnlab-lab-"
OWNER_FILE = "owner"  # "<lab pid> <child pid>": the sweep keeps a scratch dir while either lives
STDERR_TAIL_BYTES = 64 << 10  # how much of a child's stderr.log the lab reads back
UNOWNED_MAX_AGE_S = 3600.0  # scratch dirs from before owner files: removed once this old


def run_name_for(config: ExperimentConfig, runs_dir: Path, now: float | None = None) -> str:
    """A new run directory name by the engine's rule (``attnlab.naming.run_name_for``:
    ``<task>-<arch>-<variants>-<YYYYmmdd-HHMMSS>``), plus ``-2``, ``-3``... when taken;
    always a valid run name (attnlab.config.check_name: naming leaves room for the suffix)."""
    from attnlab.naming import run_name_for as shared_name

    base = shared_name(config, now)
    name, n = base, 1
    while (runs_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def train_command(preset_file: Path, runs_dir: Path, run_name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--preset",
        str(preset_file),
        "--out",
        str(runs_dir),
        "--run-name",
        run_name,
        "--quiet",
    ]


@dataclass
class TrainingProcess:
    """One child training process and where its output goes."""

    config: ExperimentConfig
    runs_dir: Path
    run_name: str
    command: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _scratch: Path | None = None
    _terminated_at: float | None = None  # monotonic time of the SIGTERM sent by terminate()

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.run_name

    @classmethod
    def start(
        cls,
        config: ExperimentConfig,
        runs_dir: Path,
        run_name: str | None = None,
        command: Callable[[Path, Path, str], Sequence[str]] | None = None,
        env: dict[str, str] | None = None,
    ) -> TrainingProcess:
        """Write the preset file and start the child.

        ``command(preset, runs_dir, name)`` replaces the default
        ``python -m attnlab train ...`` argv (tests start a child that dies).
        """
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        name = run_name or run_name_for(config, runs_dir)
        sweep_scratch_dirs()
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        preset = scratch / f"{name}.toml"
        # The child validates the preset's name (the default run-name prefix): keep it valid.
        named = config.replace(name=safe_name(config.name))
        preset.write_text(dumps_toml(named), encoding="utf-8")
        argv = list((command or train_command)(preset, runs_dir, name))
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        with open(scratch / "stderr.log", "wb") as stderr:  # the child keeps its own handle
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=child_env,
                # Its own session: Ctrl+C in the lab's terminal does not reach the child, and
                # "keep running in the background" survives the lab quitting.
                start_new_session=True,
            )
        (scratch / OWNER_FILE).write_text(f"{os.getpid()} {proc.pid}\n", encoding="utf-8")
        process = cls(config, runs_dir, name, argv, proc, scratch)
        _register(process)
        return process

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def poll(self) -> int | None:
        """The exit code, or None while the child runs."""
        return self._proc.poll() if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def control(self, word: ControlCommand | str) -> None:
        write_control(self.run_dir, word)

    def stderr_tail(self, max_lines: int = 5) -> list[str]:
        """The last lines the child wrote to stderr (its traceback or one-line error)."""
        if self._scratch is None:
            return []
        path = self._scratch / "stderr.log"
        try:  # its end only: a child that printed for hours must not cost the lab memory
            with open(path, "rb") as handle:
                handle.seek(max(os.fstat(handle.fileno()).st_size - STDERR_TAIL_BYTES, 0))
                text = handle.read(STDERR_TAIL_BYTES).decode("utf-8", errors="replace")
        except OSError:
            return []
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-max_lines:]

    def wait(self, timeout: float | None = None) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def interrupt(self) -> None:
        """SIGINT: the trainer finishes its step, saves ``last`` and exits (like Ctrl+C)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        """Last resort when a stop request is not honoured: SIGKILL to the child's whole
        process group (its own session). A ``--nproc`` child's torchrun and ranks end with
        it (they watch their parent: attnlab.train.distributed.die_with_parent)."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:  # not a group leader (a test's command): the child alone
                self._proc.kill()
            self._proc.wait()

    def terminate(self, grace_s: float = 5.0) -> None:
        """Stop the child without blocking the caller: SIGTERM on the first call (the trainer
        stops at its next step), SIGKILL on a call ``grace_s`` later. Call it until ``running``
        is False (the lab does, on every poll)."""
        if not self.running:
            return
        assert self._proc is not None
        now = time.monotonic()
        if self._terminated_at is None:
            self._terminated_at = now
            self._proc.send_signal(signal.SIGTERM)
        elif now - self._terminated_at >= grace_s:
            self.kill()

    def remove_scratch(self) -> bool:
        """Remove this child's scratch directory unless the child may still need its preset
        (running, and no ``config.toml`` in its run directory yet). True when it is gone."""
        if self._scratch is None:
            return True
        if self.running and not (self.run_dir / "config.toml").is_file():
            return False
        shutil.rmtree(self._scratch, ignore_errors=True)
        self._scratch = None
        return True


# -- scratch directories ------------------------------------------------------------------------

_STARTED: list[TrainingProcess] = []  # children of this lab whose scratch dir may remain
_AT_EXIT: list[bool] = []  # non-empty once remove_scratch_dirs is registered with atexit


def _register(process: TrainingProcess) -> None:
    if not _AT_EXIT:
        atexit.register(remove_scratch_dirs)  # also when the lab dies of an exception
        _AT_EXIT.append(True)
    _STARTED.append(process)


def remove_scratch_dirs() -> None:
    """Remove the scratch directories of this lab's children (called when the lab exits).

    A child kept running that has not read its preset yet keeps its directory; the next lab's
    sweep removes it once that child has exited."""
    _STARTED[:] = [process for process in _STARTED if not process.remove_scratch()]

    return True


def sweep_scratch_dirs(temp_dir: Path | None = None) -> list[Path]:
    """Remove the ``attnlab-lab-*`` directories of ours whose lab and child have both exited
    (a lab killed with SIGKILL cannot clean up after itself). Returns what was removed."""
    removed = []
    temp = Path(temp_dir or tempfile.gettempdir())
    uid = os.getuid() if hasattr(os, "getuid") else None
    for scratch in temp.glob(f"{SCRATCH_PREFIX}*"):
        try:
            if not scratch.is_dir() or (uid is not None and scratch.stat().st_uid != uid):
                continue
            owner = scratch / OWNER_FILE
            if owner.is_file():
                pids = [int(word) for word in owner.read_text(encoding="utf-8").split()[:2]]
                in_use = any(pid_alive(pid) for pid in pids)
            else:
                in_use = time.time() - scratch.stat().st_mtime < UNOWNED_MAX_AGE_S
        except (OSError, ValueError):
            continue  # vanished meanwhile, or not ours to judge
        if not in_use:
            shutil.rmtree(scratch, ignore_errors=True)
            removed.append(scratch)
    return removed
