"""Writing ``events.jsonl`` (``EventLog``) and the one forgiving reader of it
(``EventReader``) with its shortcuts."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from attnlab.events.fields import parse_event_line
from attnlab.events.typed_events import Event, Note, make_event
from attnlab.regular_files import NotRegularFile, not_regular, open_regular

EVENTS_FILE = "events.jsonl"
# How the note that opens a log started again begins (followers recognise it).
RESTART_NOTE = f"{EVENTS_FILE} was deleted or replaced while this run wrote it"


def _open_for_append(path: Path) -> TextIO:
    """``path`` opened for appending, created with the umask's mode if absent; a FIFO or any
    other non-regular file is refused without blocking (a FIFO's write-open waits for a
    reader)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        if err.errno == errno.ENXIO:  # a FIFO with no reader: O_NONBLOCK's answer
            raise NotRegularFile(
                f"{path}: is a FIFO, not a regular file; attnlab writes only regular files"
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise not_regular(path, info.st_mode)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


class EventLog:
    """Appends events to ``run_dir/events.jsonl``; optionally forwards them (typed) to a
    callback.

    A log deleted or replaced while the run writes it (another inode at the path) is noticed
    at the next event: a new log is started there with a ``note`` saying so, and the run goes
    on in it (writing on into the unlinked file lost every later event)."""

    def __init__(self, run_dir: Path, on_event: Any = None):
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = _open_for_append(self.path)
        if _ends_mid_line(self.path):
            # A writer killed mid-line left a fragment: end it, so our first event is not glued
            # to it (the reader skips the fragment as one malformed line).
            self._handle.write("\n")
        self.on_event = on_event
        self.restarted = 0  # how many times the log was found deleted and started again

    def emit(self, event: Event | str, step: int = 0, **values: Any) -> Event:
        """Write one event (stamped with the time) and pass it to ``on_event``. The keyword
        form ``emit("note", 3, message=...)`` builds the event first."""
        event = _event_arg(event, step, values)
        if self._replaced():
            self._start_again(event.step)
        event.time = round(time.time(), 3)
        self._handle.write(event.to_line() + "\n")
        self._handle.flush()
        if self.on_event is not None:
            self.on_event(event)
        return event

    def _replaced(self) -> bool:
        """Whether the path no longer names the file we write (deleted, or replaced)."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        mine = os.fstat(self._handle.fileno())
        return (on_disk.st_dev, on_disk.st_ino) != (mine.st_dev, mine.st_ino)

    def _start_again(self, step: int) -> None:
        """A new log at the path, opened with a note; the old handle is closed. Nothing is
        re-created when the run directory itself is gone (the trainer stops on that)."""
        if not self.path.parent.is_dir():
            return
        try:
            handle = _open_for_append(self.path)
        except (OSError, NotRegularFile):  # a FIFO put in its place: keep the old file
            return
        self._handle.close()
        self._handle = handle
        self.restarted += 1
        note = Note(
            step,
            message=f"{RESTART_NOTE}; a new log starts here at step {step} (the events "
            "before it are gone)",
        )
        note.time = round(time.time(), 3)
        self._handle.write(note.to_line() + "\n")

    def close(self) -> None:
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError:
            pass
        self._handle.close()


class NullEventLog:
    """The event log of a data-parallel rank other than 0: rank 0 is the one writer."""

    on_event: Any = None

    def emit(self, event: Event | str, step: int = 0, **values: Any) -> Event:
        return _event_arg(event, step, values)

    def close(self) -> None:
        pass


def _event_arg(event: Event | str, step: int, values: dict[str, Any]) -> Event:
    if isinstance(event, Event):
        if values:
            raise TypeError("emit(event) takes no keyword values")
        return event
    return make_event(event, step, **values)


def _ends_mid_line(path: Path) -> bool:
    try:
        with open_regular(path) as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except (OSError, NotRegularFile):
        return False


MAX_PROBLEMS = 3  # how many skipped lines a warning names
# An event line longer than this is skipped (an eval event with samples and their attention
# maps is tens of KB); the reader holds at most this plus one chunk in memory.
MAX_LINE_BYTES = 8 << 20
READ_CHUNK = 1 << 20


@dataclass
class EventReader:
    """Incremental, forgiving reader of ``RUN/events.jsonl`` (see the module docstring).

    ``read()`` returns the complete, well-shaped events after ``offset`` and advances it past
    every complete line (good or skipped); a last line without its newline stays unread until
    it is complete. ``skipped`` counts malformed lines, ``dropped`` mistyped fields.
    """

    run_dir: Path
    offset: int = 0
    line: int = 0  # complete lines consumed so far (for "line N" in warnings)
    skipped: int = 0
    dropped: int = 0
    problems: list[str] = field(default_factory=list)  # the first MAX_PROBLEMS, "line N: why"
    pending: int = 0  # bytes of a last line still without its newline
    shrunk: bool = False  # the file became shorter than ``offset``: replaced or truncated
    io_error: str = ""  # the last OS error reading it (not file content; the next read retries)
    _skipping: bool = False  # inside an over-long line (skipped; its newline not read yet)
    _file_id: tuple[int, int] | None = None  # (device, inode) of the file read so far

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / EVENTS_FILE

    def read(self) -> list[dict[str, Any]]:
        """Reads in chunks of READ_CHUNK bytes: memory stays bounded by MAX_LINE_BYTES
        however large the file (a 2 GB sparse log cost 2 GB); a longer line is skipped and
        counted, also while it is still being written."""
        events: list[dict[str, Any]] = []
        try:
            with open_regular(self.path) as handle:
                info = os.fstat(handle.fileno())
                file_id = (info.st_dev, info.st_ino)
                if info.st_size < self.offset or (self._file_id not in (None, file_id)):
                    self.shrunk = True  # truncated, or another file now (deleted, started again)
                    return events
                self._file_id = file_id
                handle.seek(self.offset)
                self._read_lines(handle, events)
        except FileNotFoundError:
            return events
        except NotRegularFile as err:  # a FIFO or a device: never opened blocking, never read
            self.io_error = str(err).split(": ", 1)[-1]
            return events
        except OSError as err:  # unreadable (permissions, a directory): say so, do not crash
            self.io_error = f"{self.path}: {err.strerror or err}"
            return events
        self.io_error = ""
        return events

    def _read_lines(self, handle: BinaryIO, events: list[dict[str, Any]]) -> None:
        partial = b""  # the start of a line whose newline has not been read yet
        while chunk := handle.read(READ_CHUNK):
            start = 0
            while (newline := chunk.find(b"\n", start)) >= 0:
                piece = chunk[start:newline]
                if self._skipping:  # the end of an over-long line, counted when it began
                    self._skipping = False
                    self.line += 1
                else:
                    self._line(partial + piece, events)
                self.offset += len(partial) + len(piece) + 1
                partial, start = b"", newline + 1
            rest = chunk[start:]
            if self._skipping:
                self.offset += len(rest)
                continue
            partial += rest
            if len(partial) > MAX_LINE_BYTES:  # skipped from here on, never held whole
                self._skip_long()
                self.offset += len(partial)
                partial = b""
        # An unfinished last line stays unread (it is being written): read again next time.
        self.pending = len(partial)

    def _line(self, raw: bytes, events: list[dict[str, Any]]) -> None:
        self.line += 1
        if len(raw) > MAX_LINE_BYTES:
            self._skip(f"longer than {MAX_LINE_BYTES:,} bytes")
            return
        if not raw.strip():
            return  # a blank line carries nothing; not worth a warning
        event, why, dropped = parse_event_line(raw)
        self.dropped += dropped
        if event is None:
            self._skip(why)
        else:
            events.append(event)

    def _skip_long(self) -> None:
        self._skipping = True
        self.line += 1
        self._skip(f"longer than {MAX_LINE_BYTES:,} bytes")
        self.line -= 1  # counted again at its newline

    def _skip(self, why: str) -> None:
        self.skipped += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"line {self.line}: {why}")

    def warning(self, include_pending: bool = False) -> str:
        """One line for the user, or "" when every line was read: ``RUN/events.jsonl: skipped
        2 malformed lines (line 3: invalid UTF-8; line 9: not valid JSON)``. With
        ``include_pending`` an unfinished last line counts too (a run that is not writing)."""
        skipped, problems = self.skipped, list(self.problems)
        if include_pending and self.pending:
            skipped += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(f"line {self.line + 1}: truncated (no newline)")
        parts = []
        if skipped:
            more = ", ..." if skipped > len(problems) else ""
            lines = "line" if skipped == 1 else "lines"
            parts.append(f"skipped {skipped} malformed {lines} ({'; '.join(problems)}{more})")
        if self.dropped:
            fields = "field" if self.dropped == 1 else "fields"
            parts.append(f"ignored {self.dropped} {fields} of the wrong type")
        if self.io_error:
            parts.append(f"cannot read it ({self.io_error})")
        return f"{self.path}: {'; '.join(parts)}" if parts else ""


def read_events(run_dir: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Events from byte ``offset`` on; returns them and the offset to continue from."""
    reader = EventReader(Path(run_dir), offset)
    return reader.read(), reader.offset


def read_event_log(run_dir: Path) -> tuple[list[dict[str, Any]], EventReader]:
    """The whole log at once: its events and the reader (for ``skipped`` / ``warning()``)."""
    reader = EventReader(Path(run_dir))
    return reader.read(), reader


def iter_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    events, _ = read_event_log(run_dir)
    yield from events


def typed(events: list[dict[str, Any]]) -> list[Event]:
    """``EventReader``'s dicts as typed events (they are well-shaped: none is dropped)."""
    return [e for e in map(Event.from_json, events) if e is not None]


def read_typed_log(run_dir: Path) -> tuple[list[Event], EventReader]:
    """``read_event_log`` with typed events."""
    events, reader = read_event_log(run_dir)
    return typed(events), reader


def iter_typed_events(run_dir: Path) -> Iterator[Event]:
    yield from read_typed_log(run_dir)[0]
