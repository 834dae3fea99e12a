"""``attnlab export RUN --tensorboard DIR``: a run's events.jsonl as TensorBoard event files.

Scalars (tag: source): ``train/loss``, ``train/lr``, ``train/tokens_per_s``,
``train/grad_norm``, ``train/tf_ratio`` from ``step`` events; ``dev/loss``, ``dev/ppl``,
``dev/bleu``, ``dev/bleu_lc``, ``dev/chrf``, ``dev/exact_match``,
``dev/alignment_accuracy``, ``dev/aer``, an LM's ``dev/perplexity`` and
``dev/bits_per_token``, and ``entropy/<role>/layer<l>/head<h>`` from ``eval`` events; text
``samples/<index>`` (source, reference, hypothesis) from ``sample`` events. Written with
tensorboardX (the optional ``[tensorboard]`` extra), each value at its event's step and wall
time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError

STEP_SCALARS = ("loss", "lr", "tokens_per_s", "grad_norm", "tf_ratio")
EVAL_SCALARS = (
    "loss",
    "ppl",
    "bleu",
    "bleu_lc",
    "chrf",
    "exact_match",
    "alignment_accuracy",
    "aer",
    "perplexity",  # a language model's (data.task = "lm"); absent elsewhere
    "bits_per_token",
)


def scalars_of(event: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """(tag, value) of every finite number an event carries."""
    kind = event.get("type")
    names = STEP_SCALARS if kind == "step" else EVAL_SCALARS if kind == "eval" else ()
    prefix = "train" if kind == "step" else "dev"
    for name in names:
        value = event.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            yield f"{prefix}/{name}", float(value)
    if kind == "eval":
        for role, layers in (event.get("attention_entropy") or {}).items():
            for layer, heads in enumerate(layers):
                for head, value in enumerate(heads):
                    if isinstance(value, (int, float)):
                        yield f"entropy/{role}/layer{layer}/head{head}", float(value)


def sample_text(event: dict[str, Any]) -> str:
    def line(key: str) -> str:
        return " ".join(str(t) for t in event.get(key) or [])

    return f"source: {line('src')}  \nreference: {line('ref')}  \nhypothesis: {line('hyp')}"


def export_tensorboard(run_dir: Path, out_dir: Path) -> dict[str, int]:
    """Write ``out_dir``'s event file; returns counts {"scalars": n, "texts": m}."""
    from attnlab.events import EVENTS_FILE, iter_events

    run_dir = Path(run_dir)
    if not (run_dir / EVENTS_FILE).is_file():
        raise AttnlabError(f"{run_dir}: no {EVENTS_FILE} to export (not a run directory)")
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise AttnlabError(
            "--tensorboard needs tensorboardX; install it with: pip install 'attnlab[tensorboard]'"
        ) from None
    counts = {"scalars": 0, "texts": 0}
    writer = SummaryWriter(logdir=str(out_dir), flush_secs=3600)
    try:
        for event in iter_events(run_dir):
            step, wall = int(event.get("step", 0)), event.get("time")
            for tag, value in scalars_of(event):
                writer.add_scalar(tag, value, global_step=step, walltime=wall)
                counts["scalars"] += 1
            if event.get("type") == "sample":
                writer.add_text(f"samples/{event.get('index', 0)}", sample_text(event), step, wall)
                counts["texts"] += 1
    finally:
        writer.close()
    return counts


def read_event_files(directory: Path) -> list[Any]:
    """Every tensorboard ``Event`` proto under ``directory`` (TFRecord framing, CRCs not
    checked): a reader for tests and checks that needs only tensorboardX."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(Path(directory).rglob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            start = offset + 12  # u64 length, u32 masked CRC of the length
            event = Event()
            event.ParseFromString(data[start : start + length])
            events.append(event)
            offset = start + length + 4  # the record, u32 masked CRC of the data
    return events
