"""The run directory's append-only event log (``events.jsonl``): the contract between a
training process and anything that watches it (the CLI progress bar, the TUI, other tools).

One JSON object per line. Every event has ``type``, ``time`` (unix seconds) and ``step``.
In Python each type is a small dataclass (``Start``, ``Step``, ``Eval``, ``Sample``,
``Checkpoint``, ``Error``, ``Done``, ``Control``, ``Note``; ``Unknown`` for a type this
version does not know): ``EventLog.emit`` writes one, ``Event.from_json`` reads one back
(tolerantly: mistyped fields get their default, unknown fields are kept in ``extra`` and
written back after the known ones), ``to_json`` gives the object written to disk. Control
words are ``ControlCommand``, done reasons ``DoneReason``; ``run_status`` is the one
mapping from a done reason to a run's status.

| type / class       | fields (besides type/time/step), in the order written                  |
|--------------------|-------------------------------------------------------------------------|
| start  Start       | run_dir, name, config (TOML-shaped dict), params, device, resumed,      |
|                    | max_steps, roles (attention role -> variant as built), pid, host,       |
|                    | dropped_pairs, world_size (data-parallel processes)                     |
| step   Step        | loss (per target token), lr, tokens_per_s, tf_ratio, grad_norm,         |
|                    | elapsed_s, tokens, padding (mean padding fraction since the last step   |
|                    | event), world_size; under DDP loss and tokens_per_s are global          |
| eval   Eval        | split, n, loss, ppl, bleu, chrf, bleu_signature, chrf_signature,        |
|                    | bleu_lc, bleu_lc_signature, exact_match, alignment_accuracy (null if    |
|                    | no gold), bleu_by_length [{bucket, n, bleu}], best (bool), elapsed_s    |
| sample Sample      | index, src, ref, hyp (tokens), attention (hyp_len x src_len floats),    |
|                    | normalisation (optional; absent = softmax)                              |
| checkpoint         | tag ("best" | "last"), path                                             |
|   Checkpoint       |                                                                         |
| error  Error       | message, kind ("nan" | "exception" | "oom" | "io")                      |
| done   Done        | reason (DoneReason), best (metrics), elapsed_s, tokens_per_s            |
| control Control    | command (ControlCommand "pause" | "resume"): the trainer acknowledged   |
| note   Note        | message: a one-line notice (torch.compile failed: training goes on)     |

Fields are additive: a field this version does not know is kept in the event's ``extra``
and written back after the known ones; a known field missing from an older line reads as its
default. ``eval``'s interpretability fields are optional (written only when the writer gave
them, so older lines write back unchanged): aer (null if no gold; after
alignment_accuracy), attention_entropy ({role: [[mean entropy in nats per head] per
layer]}) and, with gold, alignment_accuracy_by_layer (both after bleu_by_length).

Writers append whole lines and flush, so a reader that sees a partial last line can wait for
the newline. ``EventReader`` is the one reader (the CLI's ``attnlab runs``, the run list and the
lab all use it): it reads from a byte offset, leaves a last line without its newline for the next
read, skips and counts malformed lines (invalid UTF-8, not JSON, not an object, no string
``type``, no integer ``step``), drops fields of the wrong type, and never raises on file content.
It returns the checked JSON objects (dicts: ``read_events``, ``read_event_log``, ``iter_events``);
``typed``, ``read_typed_log`` and ``iter_typed_events`` give the typed events built from them.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from attnlab.errors import AttnlabError

EVENT_TYPES = ("start", "step", "eval", "sample", "checkpoint", "error", "done", "control", "note")
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


# -- reading: one forgiving reader for every consumer ------------------------------------------

Check = Callable[[Any], bool]


def _number(value: Any) -> bool:
    # null stands for a non-finite float (the writer uses allow_nan=False), so NaN / Infinity
    # / 1e999 (which json.loads accepts) can only come from a damaged or hand-edited line:
    # a wrong value, not a score ("best chrF inf").
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _percent(value: Any) -> bool:
    """null or a score in [0, 100] (BLEU, chrF): 1e308 is a damaged line, not a score."""
    return _number(value) and (value is None or -1e-9 <= value <= 100 + 1e-9)


def _fraction(value: Any) -> bool:
    """null or a share in [0, 1] (exact match, alignment accuracy, AER)."""
    return _number(value) and (value is None or -1e-12 <= value <= 1 + 1e-12)


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
        len(row) == width and all(type(w) in (int, float) and math.isfinite(w) for w in row)
        for row in value
    )


def _buckets(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(b, dict) and _percent(b.get("bleu")) and _number(b.get("n")) for b in value
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


# The fields readers use, by event type (the typed events' fields); a field of another type is
# dropped (the typed event then has its default), the rest of the event is kept. Unknown types
# and fields pass through.
FIELD_TYPES: dict[str, dict[str, Check]] = {
    "start": {
        "run_dir": _text,
        "name": _text,
        "config": _table,
        "params": _integer,
        "device": _text,
        "resumed": _flag,
        "max_steps": _integer,
        "pid": _integer,
        "host": _text,
        "roles": _names,
        "dropped_pairs": _integer,
        "world_size": _integer,
    },
    "step": {
        **dict.fromkeys(
            (
                "loss",
                "lr",
                "tokens_per_s",
                "tf_ratio",
                "grad_norm",
                "elapsed_s",
                "tokens",
                "padding",
            ),
            _number,
        ),
        "world_size": _integer,
    },
    "eval": {
        "split": _text,
        "bleu_by_length": _buckets,
        "best": _flag,
        "bleu_signature": _text,
        "chrf_signature": _text,
        "bleu_lc_signature": _text,
        "n": _integer,
        **dict.fromkeys(("loss", "ppl", "elapsed_s"), _number),
        **dict.fromkeys(("bleu", "chrf", "bleu_lc"), _percent),
        **dict.fromkeys(("exact_match", "alignment_accuracy", "aer"), _fraction),
        "attention_entropy": _role_grids,
        "attention_normalisation": _names,
        "alignment_accuracy_by_layer": _numbers,
    },
    "sample": {
        "index": _integer,
        "src": _tokens,
        "ref": _tokens,
        "hyp": _tokens,
        "attention": _matrix,
        "normalisation": _text,
    },
    "checkpoint": {"tag": _text, "path": _text},
    "error": {"message": _text, "kind": _text},
    "done": {"reason": _text, "best": _table, "elapsed_s": _number, "tokens_per_s": _number},
    "control": {"command": _text},
    "note": {"message": _text},
}


MAX_STEP = 2**63 - 1  # the largest step a reader takes: a damaged line's 10^29 is not a step


def check_event(obj: Any) -> tuple[dict[str, Any] | None, str, int]:
    """(event, "", fields dropped) for a well-shaped event, else (None, why, 0).

    Well-shaped: an object with a string ``type`` and a non-negative integer ``step``; fields
    that readers use and that have the wrong type are dropped (counted)."""
    if not isinstance(obj, dict):
        return None, f"not a JSON object ({type(obj).__name__})", 0
    kind = obj.get("type")
    if not isinstance(kind, str):
        return None, 'no string "type"', 0
    step = obj.get("step")
    if not _integer(step) or step < 0:
        return None, f'"step" is not a non-negative integer ({_short(step)})', 0
    if step > MAX_STEP:  # tensorboard, torch and numpy count steps in int64
        return None, f'"step" is beyond int64 ({_short(step)})', 0
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


# -- words: control commands, done reasons, run statuses -------------------------------------


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

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    ERROR = "error"


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


# -- typed events ------------------------------------------------------------------------------

_BASE_FIELDS = ("step", "time", "extra", "given_null")
# Field metadata: an optional field is written only when it has a value or the writer gave it
# as null, so a line without it (an older writer's) writes back without it.
OPTIONAL = {"optional": True}


@dataclass
class Event:
    """One line of ``events.jsonl``. Subclasses declare their fields in the order they are
    written; ``extra`` keeps fields this version does not know (written after the known ones),
    so additive fields from newer writers (or other branches) survive a read and a write."""

    TYPE: ClassVar[str] = ""

    step: int = 0
    time: float | None = None  # unix seconds; set by EventLog.emit
    extra: dict[str, Any] = field(default_factory=dict)
    # Optional fields given explicitly as null (written as null; absent ones are not written).
    given_null: set[str] = field(default_factory=set, repr=False)

    @property
    def type(self) -> str:
        return self.TYPE

    @classmethod
    def build(cls, step: int, **values: Any) -> Event:
        """The event from keyword values: declared fields set, the others kept in ``extra``."""
        names = _field_names(cls)
        known = {k: v for k, v in values.items() if k in names}
        extra = {k: v for k, v in values.items() if k not in names and k != "type"}
        event = cls(step=int(step), **known)
        event.extra.update(extra)
        event.given_null = {k for k in _optional_names(cls) if k in known and known[k] is None}
        return event

    @staticmethod
    def from_json(obj: Any) -> Event | None:
        """The typed event for a JSON object (a dict, or one line as str/bytes), or None when
        it is not a well-shaped event (see ``check_event``). Never raises on content: fields of
        the wrong type get their default, unknown types become ``Unknown``."""
        if isinstance(obj, (str, bytes)):
            raw = obj.encode("utf-8") if isinstance(obj, str) else obj
            checked, _, _ = parse_event_line(raw.rstrip(b"\n"))
        else:
            checked, _, _ = check_event(obj)
        if checked is None:
            return None
        kind = checked["type"]
        values = {k: v for k, v in checked.items() if k not in ("type", "time", "step")}
        cls = EVENT_CLASSES.get(kind)
        if cls is None:
            event: Event = Unknown(step=checked["step"], kind=kind, extra=values)
        else:
            event = cls.build(checked["step"], **values)
        event.time = checked.get("time")
        event._coerce()
        return event

    def _coerce(self) -> None:
        """Words read from disk become their enum member where known."""

    def to_json(self) -> dict[str, Any]:
        """The object written to disk: type, time (when set), step, the declared fields in
        order, then ``extra``."""
        out: dict[str, Any] = {"type": self.type}
        if self.time is not None:
            out["time"] = self.time
        out["step"] = self.step
        optional = _optional_names(type(self))
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if value is not None or name not in optional or name in self.given_null:
                out[name] = _plain(value)
        for key, value in self.extra.items():
            out.setdefault(key, _plain(value))
        return out

    def to_line(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, allow_nan=False)

    # Read-only dict view, for callbacks written when events were dicts (``event["loss"]``).
    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls) if f.name not in _BASE_FIELDS)


def _optional_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.metadata.get("optional"))


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


@dataclass
class Start(Event):
    TYPE: ClassVar[str] = "start"

    run_dir: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # TOML-shaped
    params: int = 0
    device: str = ""
    resumed: bool = False
    max_steps: int = 0
    roles: dict[str, str] = field(default_factory=dict)  # attention role -> variant, as built
    pid: int | None = None
    host: str = ""
    dropped_pairs: int = 0  # training pairs over data.train_max_tokens
    world_size: int = 1  # data-parallel processes


@dataclass
class Step(Event):
    TYPE: ClassVar[str] = "step"

    loss: float | None = None  # per target token; None = not finite
    lr: float | None = None
    tokens_per_s: float | None = None  # global under DDP
    tf_ratio: float | None = None
    grad_norm: float | None = None
    elapsed_s: float | None = None
    tokens: int | None = None
    padding: float | None = None  # mean padding fraction since the last step event
    world_size: int = 1


@dataclass
class Eval(Event):
    TYPE: ClassVar[str] = "eval"

    split: str = "dev"
    n: int | None = None
    loss: float | None = None
    ppl: float | None = None
    bleu: float | None = None
    chrf: float | None = None
    bleu_signature: str = ""
    chrf_signature: str = ""
    bleu_lc: float | None = None
    bleu_lc_signature: str = ""
    exact_match: float | None = None  # a fraction in [0, 1]
    alignment_accuracy: float | None = None  # None without gold alignments
    # Optional (older lines lack them): AER (None without gold), written after
    # alignment_accuracy; mean attention entropy {role: [[nats per head] per layer]} and, with
    # gold, alignment accuracy per layer, written after bleu_by_length.
    aer: float | None = field(default=None, metadata=OPTIONAL)
    bleu_by_length: list[dict[str, Any]] = field(default_factory=list)  # [{bucket, n, bleu}]
    attention_entropy: dict[str, list[list[float | None]]] | None = field(
        default=None, metadata=OPTIONAL
    )
    alignment_accuracy_by_layer: list[float | None] | None = field(default=None, metadata=OPTIONAL)
    # role -> normalisation of each role that is not softmax (a signed role has no entropy)
    attention_normalisation: dict[str, str] | None = field(default=None, metadata=OPTIONAL)
    best: bool = False
    elapsed_s: float | None = None

    def metric(self, name: str) -> Any:
        """A metric by name, declared or extra (a newer writer's field), else None."""
        if name in _field_names(Eval):
            return getattr(self, name)
        return self.extra.get(name)


@dataclass
class Sample(Event):
    TYPE: ClassVar[str] = "sample"

    index: int = 0
    src: list[str] = field(default_factory=list)
    ref: list[str] = field(default_factory=list)
    hyp: list[str] = field(default_factory=list)
    attention: list[list[float]] | None = None  # hyp_len x src_len
    # How the map's rows are normalised when not softmax (attnlab.attention_map.NORMALISATIONS)
    normalisation: str | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Checkpoint(Event):
    TYPE: ClassVar[str] = "checkpoint"

    tag: str = "last"  # "best" | "last"
    path: str = ""


@dataclass
class Error(Event):
    TYPE: ClassVar[str] = "error"

    message: str = ""
    kind: str = "exception"  # "nan" | "exception" | "oom" | "io"


@dataclass
class Done(Event):
    TYPE: ClassVar[str] = "done"

    reason: DoneReason | str | None = None  # None: not given (or not a string)
    best: dict[str, Any] = field(default_factory=dict)  # the best eval's metrics
    elapsed_s: float | None = None
    tokens_per_s: float | None = None

    def _coerce(self) -> None:
        if self.reason is not None:
            self.reason = DoneReason.coerce(self.reason)


@dataclass
class Control(Event):
    TYPE: ClassVar[str] = "control"

    command: ControlCommand | str = ""  # the trainer acknowledged "pause" / "resume"

    def _coerce(self) -> None:
        self.command = ControlCommand.coerce(self.command)


@dataclass
class Note(Event):
    TYPE: ClassVar[str] = "note"

    message: str = ""


@dataclass
class Unknown(Event):
    """An event of a type this version does not know: its fields stay in ``extra``."""

    kind: str = ""

    @property
    def type(self) -> str:
        return self.kind

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.kind}
        if self.time is not None:
            out["time"] = self.time
        out["step"] = self.step
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out


EVENT_CLASSES: dict[str, type[Event]] = {
    cls.TYPE: cls for cls in (Start, Step, Eval, Sample, Checkpoint, Error, Done, Control, Note)
}
assert tuple(EVENT_CLASSES) == EVENT_TYPES


def as_event(obj: Event | Mapping[str, Any]) -> Event | None:
    """An event as given, or the typed event for a dict (None when it is malformed)."""
    return obj if isinstance(obj, Event) else Event.from_json(dict(obj))


def make_event(type_: str, step: int, **values: Any) -> Event:
    """The keyword form: ``make_event("note", 3, message="...")``."""
    cls = EVENT_CLASSES.get(type_)
    if cls is None:
        raise ValueError(f"unknown event type {type_!r}")
    event = cls.build(step, **values)
    event._coerce()
    return event


def typed(events: list[dict[str, Any]]) -> list[Event]:
    """``EventReader``'s dicts as typed events (they are well-shaped: none is dropped)."""
    return [e for e in map(Event.from_json, events) if e is not None]


def read_typed_log(run_dir: Path) -> tuple[list[Event], EventReader]:
    """``read_event_log`` with typed events."""
    events, reader = read_event_log(run_dir)
    return typed(events), reader


def iter_typed_events(run_dir: Path) -> Iterator[Event]:
    yield from read_typed_log(run_dir)[0]
