"""The run directory's append-only event log (``events.jsonl``): the contract between a
training process and anything that watches it (the CLI progress bar, the TUI, other tools).

One JSON object per line. Every event has ``type``, ``time`` (unix seconds) and ``step``.

| type       | fields (besides type/time/step)                                                       |
|------------|----------------------------------------------------------------------------------------|
| start      | run_dir, name, config (TOML-shaped dict), params, device, resumed (bool)               |
| step       | loss (per target token), lr, tokens_per_s, tf_ratio, grad_norm, elapsed_s, tokens,      |
|            | padding (mean padding fraction of the batches since the last step event)               |
| eval       | split, loss, ppl, bleu, chrf, exact_match, alignment_accuracy (null if no gold),        |
|            | bleu_by_length [{bucket, n, bleu}], best (bool), elapsed_s                             |
| sample     | index, src (tokens), ref (tokens), hyp (tokens), attention (hyp_len x src_len floats)   |
| checkpoint | tag ("best" or "last"), path                                                           |
| error      | message, kind ("nan" | "exception" | "oom" | "io")                                      |
| done       | reason ("finished" | "interrupted" | "stopped" | "early-stop" | "error"), best (metrics) |
| control    | command ("pause" | "resume"): the trainer acknowledged a control command          |
| note       | message: a one-line notice (torch.compile failed: training goes on eagerly)            |

Fields added later are additive: ``start`` also carries max_steps, pid and host; ``eval``
also bleu_signature and chrf_signature, aer (null if no gold), attention_entropy ({role:
[[mean entropy in nats per head] per layer]}) and, with gold, alignment_accuracy_by_layer;
``done`` also elapsed_s and tokens_per_s; ``start`` and ``step`` also world_size
(data-parallel processes; loss and tokens_per_s are global).

Writers append whole lines and flush, so a reader that sees a partial last line can wait for
the newline. ``EventReader`` is the one reader (the CLI's ``attnlab runs``, the run list and the
lab all use it): it reads from a byte offset, leaves a last line without its newline for the next
read, skips and counts malformed lines (invalid UTF-8, not JSON, not an object, no string
``type``, no integer ``step``), drops fields of the wrong type, and never raises on file content.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENT_TYPES = ("start", "step", "eval", "sample", "checkpoint", "error", "done", "control", "note")
EVENTS_FILE = "events.jsonl"


class EventLog:
    """Appends events to ``run_dir/events.jsonl``; optionally forwards them to a callback."""

    def __init__(self, run_dir: Path, on_event: Any = None):
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the log
        if _ends_mid_line(self.path):
            # A writer killed mid-line left a fragment: end it, so our first event is not glued
            # to it (the reader skips the fragment as one malformed line).
            self._handle.write("\n")
        self.on_event = on_event

    def emit(self, type_: str, step: int, **fields: Any) -> dict[str, Any]:
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}")
        event = {"type": type_, "time": round(time.time(), 3), "step": int(step), **fields}
        self._handle.write(json.dumps(event, ensure_ascii=False, allow_nan=False) + "\n")
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

    def emit(self, type_: str, step: int, **fields: Any) -> dict[str, Any]:
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown event type {type_!r}")
        return {"type": type_, "step": int(step), **fields}

    def close(self) -> None:
        pass


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


# -- reading: one forgiving reader for every consumer ------------------------------------------

Check = Callable[[Any], bool]


def _number(value: Any) -> bool:
    # null stands for a non-finite float (the writer uses allow_nan=False).
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _table(value: Any) -> bool:
    return isinstance(value, dict)


def _tokens(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(token, str) for token in value)


def _matrix(value: Any) -> bool:
    """null, [] or a rectangular list of rows of numbers (what Inspect turns into an array)."""
    if value is None or value == []:
        return True
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        return False
    width = len(value[0])
    return all(
        len(row) == width and all(type(w) in (int, float) for w in row) for row in value
    )


def _buckets(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(b, dict) and _number(b.get("bleu")) and _number(b.get("n")) for b in value
    )


def _names(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _numbers(value: Any) -> bool:
    """null or a list of numbers (null entries: non-finite values)."""
    return value is None or (isinstance(value, list) and all(_number(x) for x in value))


def _role_grids(value: Any) -> bool:
    """{role: [[number per head] per layer]} (``attention_entropy``)."""
    return isinstance(value, dict) and all(
        isinstance(layers, list) and all(isinstance(h, list) and _numbers(h) for h in layers)
        for layers in value.values()
    )


# The fields readers use, by event type; a field of another type is dropped (the reader then
# sees its default), the rest of the event is kept. Unknown types and fields pass through.
FIELD_TYPES: dict[str, dict[str, Check]] = {
    "start": {
        "run_dir": _text, "name": _text, "config": _table, "params": _integer, "device": _text,
        "resumed": _flag, "max_steps": _integer, "pid": _integer, "host": _text,
        "roles": _names,
        "world_size": _integer,
    },
    "step": {
        **dict.fromkeys(
            ("loss", "lr", "tokens_per_s", "tf_ratio", "grad_norm", "elapsed_s", "tokens",
             "padding"),
            _number,
        ),
        "world_size": _integer,
    },
    "eval": {
        "split": _text, "bleu_by_length": _buckets, "best": _flag, "bleu_signature": _text,
        "chrf_signature": _text,
        **dict.fromkeys(
            ("loss", "ppl", "bleu", "chrf", "exact_match", "alignment_accuracy", "elapsed_s",
             "aer"),
            _number,
        ),
        "attention_entropy": _role_grids, "alignment_accuracy_by_layer": _numbers,
    },
    "sample": {
        "index": _integer, "src": _tokens, "ref": _tokens, "hyp": _tokens, "attention": _matrix,
    },
    "checkpoint": {"tag": _text, "path": _text},
    "error": {"message": _text, "kind": _text},
    "done": {"reason": _text, "best": _table, "elapsed_s": _number, "tokens_per_s": _number},
    "control": {"command": _text},
    "note": {"message": _text},
}


def check_event(obj: Any) -> tuple[dict[str, Any] | None, str, int]:
    """(event, "", fields dropped) for a well-shaped event, else (None, why, 0).

    Well-shaped: an object with a string ``type`` and a non-negative integer ``step``; fields
    that readers use and that have the wrong type are dropped (counted)."""
    if not isinstance(obj, dict):
        return None, f"not a JSON object ({type(obj).__name__})", 0
    kind = obj.get("type")
    if not isinstance(kind, str):
        return None, "no string \"type\"", 0
    step = obj.get("step")
    if not _integer(step) or step < 0:
        return None, f"\"step\" is not a non-negative integer ({_short(step)})", 0
    checks = {"time": _number, **FIELD_TYPES.get(kind, {})}
    bad = [key for key, check in checks.items() if key in obj and not check(obj[key])]
    if not bad:
        return obj, "", 0
    return {k: v for k, v in obj.items() if k not in bad}, "", len(bad)


def parse_event_line(line: bytes) -> tuple[dict[str, Any] | None, str, int]:
    """One complete line of ``events.jsonl`` -> ``check_event``'s triple; never raises."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid UTF-8", 0
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, a 5000-digit int, deep nesting
        return None, "not valid JSON", 0
    return check_event(obj)


def _short(value: Any) -> str:
    plain = value is None or isinstance(value, (str, int, float))
    text = json.dumps(value) if plain else type(value).__name__
    return text if len(text) <= 20 else text[:17] + "..."


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
