"""Typed events: one small dataclass per event type, read tolerantly from the checked JSON
(``Event.from_json``) and written back in a fixed field order (``to_json``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar

from attnlab.events.fields import check_event, parse_event_line
from attnlab.events.words import ControlCommand, DoneReason

EVENT_TYPES = ("start", "step", "eval", "sample", "checkpoint", "error", "done", "control", "note")


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
    # The dev metrics the run's task declares (attnlab.data.task_registry.task_metrics; an
    # LM: loss, perplexity, bits_per_token), what readers show instead of BLEU; absent: BLEU.
    metrics: list[str] | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Step(Event):
    TYPE: ClassVar[str] = "step"

    loss: float | None = None  # per target token; None = not finite
    lr: float | None = None
    tokens_per_s: float | None = None  # global under DDP; this window's figure
    # Total tokens over total training time so far: the one throughput shown to users (#44).
    mean_tokens_per_s: float | None = field(default=None, metadata=OPTIONAL)
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
    # What the run costs (attnlab.evaluate.COST_KEYS): parameters, training throughput and
    # peak memory so far, this evaluation's decoding speed, KV-cache bytes per token.
    cost: dict[str, float | None] | None = field(default=None, metadata=OPTIONAL)
    # A language model's (data.task = "lm"; attnlab.evaluate.lm_scores): exp(loss) uncapped,
    # loss / ln 2, and the tokens scored; absent for sentence-pair tasks.
    perplexity: float | None = field(default=None, metadata=OPTIONAL)
    bits_per_token: float | None = field(default=None, metadata=OPTIONAL)
    tokens: int | None = field(default=None, metadata=OPTIONAL)
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
    # A long map is not inline: RUN/samples/<this name> holds it (attnlab.runs.sample_maps).
    attention_file: str | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Checkpoint(Event):
    TYPE: ClassVar[str] = "checkpoint"

    tag: str = "last"  # "best" | "last"
    path: str = ""


@dataclass
class Error(Event):
    TYPE: ClassVar[str] = "error"

    message: str = ""
    kind: str = "exception"  # "nan" | "exception" | "oom" | "io" | "peer" (a rank is gone)


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
