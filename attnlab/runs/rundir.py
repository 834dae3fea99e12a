"""Run directories: creating one, its ``config.toml``, its lock and its control file.

``RUN/.lock`` is flock'ed by the one process training the run (it holds that process's pid;
the OS releases it when the process dies). ``RUN/control`` holds one word written by a
controller (pause | resume | save | stop), see ``write_control``.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress
from pathlib import Path

from attnlab.config import ExperimentConfig, check_name, dumps_toml, load_toml
from attnlab.errors import AttnlabError
from attnlab.events import (
    EVENTS_FILE,
    ControlCommand,
)
from attnlab.regular_files import read_prefix
from attnlab.runs.atomic import atomic_write_text

CONFIG_FILE = "config.toml"


CONTROL_FILE = "control"


CONTROL_COMMANDS = tuple(c.value for c in ControlCommand)  # what write_control accepts


LOCK_FILE = ".lock"


LOCK_WAIT_S = 0.5  # a lab's lock probe (a shared lock for a moment) is not a second trainer


class RunLock:
    """An exclusive ``flock`` on ``RUN/.lock``: one trainer per run directory. The OS drops
    it when the process dies, so a crash never leaves a stale lock (the file stays)."""

    def __init__(self, path: Path, fd: int | None):
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def lock_run_dir(run_dir: Path) -> RunLock:
    """Lock an existing run directory for training, or AttnlabError naming the holder's pid."""
    path = Path(run_dir) / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        return RunLock(path, None)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise AttnlabError(f"{path}: cannot create the run lock ({err.strerror})") from None
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            os.close(fd)
            raise _busy(run_dir) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(path, fd)


def _busy(run_dir: Path) -> AttnlabError:
    holder = _read_lock_pid(Path(run_dir) / LOCK_FILE) or "unknown"
    return AttnlabError(
        f"{run_dir} is being trained by pid {holder}; wait for it to end or stop it "
        "(a run directory has one trainer at a time)"
    )


def check_run_dir_free(run_dir: Path) -> None:
    """Refuse a run directory a trainer holds (a probe; ``lock_run_dir`` takes the lock)."""
    if run_dir_locked(run_dir):
        raise _busy(run_dir)


def _read_lock_pid(path: Path) -> str:
    try:
        return read_prefix(path, 64).decode("utf-8", errors="replace").strip()
    except (OSError, AttnlabError):  # gone, or not a regular file: no pid to name
        return ""


def run_dir_locked(run_dir: Path) -> bool | None:
    """True while a trainer holds ``RUN/.lock``, False when none does, None without a lock
    file (runs written before locks existed). A shared lock for a moment: no side effect."""
    try:
        import fcntl

        # Non-blocking: a FIFO in the lock's place must not stop `attnlab runs` or the lab.
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops our shared lock
    return False


def new_run_dir(out: Path, name: str, what: str = "run name") -> tuple[Path, RunLock]:
    """``out/name``, created and locked; refuses a name that is not one plain path component
    (it could point outside ``out``) and a directory that already holds a run."""
    run_dir = Path(out) / check_name(name, what)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnlabError(f"{run_dir}: cannot create the run directory ({err.strerror})") from None
    lock = lock_run_dir(run_dir)
    if _holds_run(run_dir):
        lock.release()
        raise _taken(run_dir)
    return run_dir, lock


def check_new_run_dir(out: Path, name: str, what: str = "run name") -> Path:
    """``out/name`` checked as ``new_run_dir`` checks it, but neither created nor locked: the
    ``--nproc`` launcher refuses mistakes early; its rank 0 then makes and locks it."""
    run_dir = Path(out) / check_name(name, what)
    check_run_dir_free(run_dir)
    if _holds_run(run_dir):
        raise _taken(run_dir)
    return run_dir


def _holds_run(run_dir: Path) -> bool:
    return (run_dir / CONFIG_FILE).exists() or (run_dir / EVENTS_FILE).exists()


def _taken(run_dir: Path) -> AttnlabError:
    return AttnlabError(f"{run_dir} already holds a run; choose another --run-name or use --resume")


def remove_unstarted_run(run_dir: Path, lock: RunLock) -> None:
    """Undo ``new_run_dir`` for a run that failed or was interrupted before its first step:
    remove the files its set-up writes, then the directory if nothing else is in it."""
    for name in (CONFIG_FILE, EVENTS_FILE, CONTROL_FILE, LOCK_FILE):
        with suppress(OSError):
            (Path(run_dir) / name).unlink()
    lock.release()
    with suppress(OSError):
        Path(run_dir).rmdir()


def write_config(run_dir: Path, config: ExperimentConfig) -> None:
    atomic_write_text(Path(run_dir) / CONFIG_FILE, dumps_toml(config))


def read_config(run_dir: Path) -> ExperimentConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise AttnlabError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    from attnlab.experiment import from_dict, validate  # the registries import torch: lazily

    return validate(from_dict(load_toml(path), source=str(path)))


def require_run_dir(run_dir: Path) -> None:
    """Refuse to write into a run directory that lost its ``config.toml`` (deleted while the
    trainer ran): saving must not re-create an orphan ``RUN/checkpoints/...``."""
    if not (Path(run_dir) / CONFIG_FILE).is_file():
        raise AttnlabError(
            f"{run_dir}: the run directory was deleted (no {CONFIG_FILE}); not saving a checkpoint"
        )


def write_control(run_dir: Path, command: ControlCommand | str) -> None:
    """The one way a controller (the lab, a test, a script) asks a running trainer to
    ``pause`` | ``resume`` | ``save`` | ``stop``: one word in ``RUN/control``, written
    atomically (the trainer never reads half a word). An unknown word raises
    ``UnknownControlCommand`` (an AttnlabError and a ValueError) naming the valid ones."""
    word = ControlCommand.parse(command)
    Path(run_dir).mkdir(parents=True, exist_ok=True)  # the lab may ask before the child made it
    atomic_write_text(Path(run_dir) / CONTROL_FILE, word.value + "\n")
