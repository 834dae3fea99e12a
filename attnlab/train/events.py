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
| error      | message, kind ("nan" | "exception" | "oom")                                             |
| done       | reason ("finished" | "interrupted" | "stopped" | "early-stop" | "error"), best (metrics) |
| control    | command ("pause" | "resume"): the trainer acknowledged a control command          |

Fields added later are additive: ``start`` also carries max_steps, pid and host; ``eval``
also bleu_signature and chrf_signature, aer (null if no gold), attention_entropy ({role:
[[mean entropy in nats per head] per layer]}) and, with gold, alignment_accuracy_by_layer;
``done`` also elapsed_s and tokens_per_s.

Writers append whole lines and flush, so a reader that sees a partial last line can wait for
the newline; ``read_events`` skips a trailing partial line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EVENT_TYPES = ("start", "step", "eval", "sample", "checkpoint", "error", "done", "control")
EVENTS_FILE = "events.jsonl"


class EventLog:
    """Appends events to ``run_dir/events.jsonl``; optionally forwards them to a callback."""

    def __init__(self, run_dir: Path, on_event: Any = None):
        self.path = Path(run_dir) / EVENTS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the log
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


def read_events(run_dir: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Events from byte ``offset`` on; returns them and the offset to continue from."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return [], offset
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    events = []
    consumed = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # partial line still being written
        consumed += len(line)
        if line.strip():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events, offset + consumed


def iter_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    events, _ = read_events(run_dir)
    yield from events
