"""Writing ``events.jsonl`` (``EventLog``) and the one forgiving reader of it
(``EventReader``) with its shortcuts."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.events.fields import parse_event_line
from attnlab.events.typed_events import Event, make_event

EVENTS_FILE = "events.jsonl"


class EventLog:
    """Appends events to ``run_dir/events.jsonl``; optionally forwards them (typed) to a
    callback."""

    def __init__(self, run_dir: Path, on_event: Any = None):
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the log
        if _ends_mid_line(self.path):
            # A writer killed mid-line left a fragment: end it, so our first event is not glued
            # to it (the reader skips the fragment as one malformed line).
            self._handle.write("\n")
        self.on_event = on_event

    def emit(self, event: Event | str, step: int = 0, **values: Any) -> Event:
        """Write one event (stamped with the time) and pass it to ``on_event``. The keyword
        form ``emit("note", 3, message=...)`` builds the event first."""
        event = _event_arg(event, step, values)
        event.time = round(time.time(), 3)
        self._handle.write(event.to_line() + "\n")
        self._handle.flush()
        if self.on_event is not None:
            self.on_event(event)
        return event

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
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


MAX_PROBLEMS = 3  # how many skipped lines a warning names


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

    @property
    def path(self) -> Path:
        return Path(self.run_dir) / EVENTS_FILE

    def read(self) -> list[dict[str, Any]]:
        data = self._read_bytes()
        if not data:
            return []
        end = data.rfind(b"\n") + 1  # 0 when no line is complete yet
        self.pending = len(data) - end
        self.offset += end
        events = []
        for raw in data[:end].split(b"\n")[:-1]:
            self.line += 1
            if not raw.strip():
                continue  # a blank line carries nothing; not worth a warning
            event, why, dropped = parse_event_line(raw)
            self.dropped += dropped
            if event is None:
                self._skip(why)
            else:
                events.append(event)
        return events

    def _read_bytes(self) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:
                    self.shrunk = True
                    return b""
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return b""
        except OSError as err:  # unreadable (permissions, a directory): say so, do not crash
            self.io_error = f"{self.path}: {err.strerror or err}"
            return b""
        self.io_error = ""
        return data

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
