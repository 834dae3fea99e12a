"""The types of the event fields readers use, as one table, and the one checker that reads it.

A field of the wrong type is dropped from its event (the typed event then has its default) and
counted; the rest of the event is kept. Unknown types and fields pass through. ``null`` stands
for a non-finite float (the writer uses ``allow_nan=False``), so NaN / Infinity / 1e999 (which
``json.loads`` accepts) can only come from a damaged or hand-edited line: a wrong value, not a
score ("best chrF inf"); so is a score outside its range (BLEU 1e308).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldType:
    """What one field may hold. ``kind``: number | integer | text | flag | table (any object) |
    list (of ``item``) | map (object of ``item`` values) | record (object whose ``keys`` have
    those types; a missing key reads as null)."""

    kind: str
    nullable: bool = False  # null is a value (a number: a non-finite one)
    low: float = -math.inf  # a number's range, inclusive (with the rounding slack written in)
    high: float = math.inf
    item: FieldType | None = None  # a list's items, a map's values
    rectangular: bool = False  # a list of equally long lists (an attention map)
    keys: tuple[tuple[str, FieldType], ...] = ()  # a record's fields


NUMBER = FieldType("number", nullable=True)
FINITE = FieldType("number")  # an attention weight: never null
PERCENT = FieldType("number", nullable=True, low=-1e-9, high=100 + 1e-9)  # BLEU, chrF
FRACTION = FieldType("number", nullable=True, low=-1e-12, high=1 + 1e-12)  # exact match, AER
INTEGER = FieldType("integer")
TEXT = FieldType("text")
FLAG = FieldType("flag")
TABLE = FieldType("table")
TOKENS = FieldType("list", item=TEXT)
NAMES = FieldType("map", item=TEXT)  # role -> variant / normalisation
NUMBERS = FieldType("list", nullable=True, item=NUMBER)  # per layer
MATRIX = FieldType("list", nullable=True, item=FieldType("list", item=FINITE), rectangular=True)
BUCKETS = FieldType("list", item=FieldType("record", keys=(("bleu", PERCENT), ("n", NUMBER))))
# attnlab.evaluate.COST_KEYS, repeated here (the events sit below evaluate)
COST = FieldType(
    "record",
    nullable=True,
    keys=tuple(
        (key, NUMBER)
        for key in (
            "parameters",
            "train_tokens_per_s",
            "train_peak_memory_mb",
            "decode_sentences_per_s",
            "kv_cache_bytes_per_token",
        )
    ),
)
ROLE_GRIDS = FieldType("map", item=FieldType("list", item=FieldType("list", item=NUMBER)))

# The fields readers use, by event type (the typed events' fields).
FIELD_TYPES: dict[str, dict[str, FieldType]] = {
    "start": {
        "run_dir": TEXT,
        "name": TEXT,
        "config": TABLE,
        "params": INTEGER,
        "device": TEXT,
        "resumed": FLAG,
        "max_steps": INTEGER,
        "pid": INTEGER,
        "host": TEXT,
        "roles": NAMES,
        "dropped_pairs": INTEGER,
        "world_size": INTEGER,
        "metrics": TOKENS,
    },
    "step": {
        **dict.fromkeys(
            (
                "loss",
                "lr",
                "tokens_per_s",
                "mean_tokens_per_s",
                "tf_ratio",
                "grad_norm",
                "elapsed_s",
                "tokens",
                "padding",
            ),
            NUMBER,
        ),
        "world_size": INTEGER,
    },
    "eval": {
        "split": TEXT,
        "bleu_by_length": BUCKETS,
        "best": FLAG,
        "bleu_signature": TEXT,
        "chrf_signature": TEXT,
        "bleu_lc_signature": TEXT,
        "n": INTEGER,
        **dict.fromkeys(("loss", "ppl", "perplexity", "bits_per_token", "elapsed_s"), NUMBER),
        "tokens": INTEGER,
        **dict.fromkeys(("bleu", "chrf", "bleu_lc"), PERCENT),
        **dict.fromkeys(("exact_match", "alignment_accuracy", "aer"), FRACTION),
        "attention_entropy": ROLE_GRIDS,
        "attention_normalisation": NAMES,
        "alignment_accuracy_by_layer": NUMBERS,
        "cost": COST,
    },
    "sample": {
        "index": INTEGER,
        "src": TOKENS,
        "ref": TOKENS,
        "hyp": TOKENS,
        "attention": MATRIX,
        "normalisation": TEXT,
        "attention_file": TEXT,
    },
    "checkpoint": {"tag": TEXT, "path": TEXT},
    "error": {"message": TEXT, "kind": TEXT},
    "done": {"reason": TEXT, "best": TABLE, "elapsed_s": NUMBER, "tokens_per_s": NUMBER},
    "control": {"command": TEXT},
    "note": {"message": TEXT},
}
COMMON_FIELDS = {"time": NUMBER}  # every event's, besides type and step (checked on their own)

_PLAIN = {"text": str, "flag": bool, "table": dict}


def fits(spec: FieldType, value: Any) -> bool:
    """Whether ``value`` (parsed JSON) has the type ``spec`` describes."""
    if value is None:
        return spec.nullable
    if spec.kind in _PLAIN:
        return isinstance(value, _PLAIN[spec.kind])
    if spec.kind == "integer":
        return _integer(value)
    if spec.kind == "number":
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return is_number and math.isfinite(value) and spec.low <= value <= spec.high
    if spec.kind == "record":
        return isinstance(value, dict) and all(fits(t, value.get(k)) for k, t in spec.keys)
    item = spec.item
    assert item is not None, spec  # list and map declare their items
    if spec.kind == "map":
        return isinstance(value, dict) and all(fits(item, v) for v in value.values())
    if not isinstance(value, list) or not all(fits(item, v) for v in value):
        return False
    return not spec.rectangular or len({len(row) for row in value}) <= 1


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    types = {**COMMON_FIELDS, **FIELD_TYPES.get(kind, {})}
    bad = [key for key, spec in types.items() if key in obj and not fits(spec, obj[key])]
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
