"""One ``attnlab study run`` per study directory: ``STUDY/.study-lock`` is flock'ed by the
runner (it holds the runner's pid; the OS drops the lock when the process dies, so a crash
never leaves a stale lock). A second runner of the same study refuses in one line naming the
pid, so ``outcomes.json`` has one writer."""

from __future__ import annotations

import os
from pathlib import Path

from attnlab.errors import AttnlabError
from attnlab.regular_files import read_prefix

STUDY_LOCK = ".study-lock"


class StudyLock:
    def __init__(self, fd: int | None) -> None:
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> StudyLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(directory: Path) -> str:
    try:
        return read_prefix(Path(directory) / STUDY_LOCK, 64).decode("utf-8", "replace").strip()
    except (OSError, AttnlabError):
        return ""


def _busy(directory: Path) -> AttnlabError:
    return AttnlabError(
        f"{directory}: this study is already running (pid {_holder(directory) or 'unknown'}); "
        "wait for it to end, or stop it (Ctrl+C in its terminal, or kill -INT PID)"
    )


def lock_study(directory: Path) -> StudyLock:
    """Take the study's lock, or AttnlabError naming the pid that holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        return StudyLock(None)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / STUDY_LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise AttnlabError(f"{path}: cannot create the study lock ({err.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _busy(directory) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return StudyLock(fd)


def check_study_free(directory: Path) -> None:
    """Refuse a study another runner holds (a probe with a shared lock; no side effect)."""
    try:
        import fcntl

        fd = os.open(Path(directory) / STUDY_LOCK, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (ImportError, OSError):
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(directory) from None
    except OSError:
        return
    finally:
        os.close(fd)
