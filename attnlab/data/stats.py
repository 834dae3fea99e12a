"""Dataset statistics: sizes, length histograms, vocabulary coverage, padding; dict + rich view.

``dataset_stats(dataset, batch_size, batch_tokens)`` returns plain JSON (what
``attnlab data stats --json`` prints and the TUI shows); ``render_stats(stats)`` turns that
dict into a rich renderable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from attnlab.data.batching import padding_fraction, plan_batches
from attnlab.data.dataset import Dataset
from attnlab.data.example import Example
from attnlab.data.vocab import UNK_ID, Vocab

SPLITS = ("train", "dev", "test")


def _lengths(examples: Sequence[Example], side: str) -> list[int]:
    attr = "src_tokens" if side == "src" else "tgt_tokens"
    return [len(getattr(e, attr)) for e in examples]


def length_summary(lengths: Sequence[int]) -> dict[str, float]:
    if not lengths:
        return {"min": 0, "mean": 0.0, "max": 0, "p95": 0}
    ordered = sorted(lengths)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return {
        "min": ordered[0],
        "mean": round(sum(ordered) / len(ordered), 2),
        "max": ordered[-1],
        "p95": p95,
    }


def length_histogram(
    src: Sequence[int], tgt: Sequence[int], bins: int = 10
) -> list[dict[str, Any]]:
    """Counts of source and target lengths in ``bins`` equal-width buckets ``lo-hi``."""
    longest = max([*src, *tgt, 1])
    width = max(1, math.ceil(longest / bins))
    rows = []
    for lo in range(1, longest + 1, width):
        hi = lo + width - 1
        rows.append(
            {
                "bucket": f"{lo}-{hi}" if width > 1 else str(lo),
                "src": sum(lo <= n <= hi for n in src),
                "tgt": sum(lo <= n <= hi for n in tgt),
            }
        )
    return rows


def oov_rate(examples: Sequence[Example], vocab: Vocab, side: str) -> float:
    """Share of tokens that map to <unk> (0 for an empty split)."""
    attr = "src_tokens" if side == "src" else "tgt_tokens"
    total = unknown = 0
    for e in examples:
        ids = vocab.encode(getattr(e, attr))
        total += len(ids)
        unknown += sum(i == UNK_ID for i in ids)
    return unknown / total if total else 0.0


def dataset_stats(
    dataset: Dataset, batch_size: int = 64, batch_tokens: int = 0, seed: int = 0
) -> dict[str, Any]:
    splits = dataset.splits
    raw = dict(splits.stats)
    out: dict[str, Any] = {
        "name": dataset.name,
        "tokenizer": raw.get(
            "tokenizer",
            {"src": dataset.src_tokenizer.describe(), "tgt": dataset.tgt_tokenizer.describe()},
        ),
        "vocab": {
            "src": len(dataset.src_vocab),
            "tgt": len(dataset.tgt_vocab),
            "shared": dataset.src_vocab is dataset.tgt_vocab,
        },
        "has_alignment": dataset.has_alignment,
        "splits": {},
    }
    if isinstance(out["tokenizer"], str):
        out["tokenizer"] = {"src": out["tokenizer"], "tgt": out["tokenizer"]}
    if dataset.streams is not None:  # a language model: token streams, not sentence pairs
        out["lm"] = lm_stats(dataset.streams, batch_size)
        return out
    for key in (
        "sources",
        "empty_skipped",
        "split_off",
        "train_too_long_dropped",
        "dev_too_long_dropped",
        "test_too_long_dropped",
        "cache",
        "cache_file",
        "prepare_seconds",
        "overlap",
    ):
        if key in raw:
            out[key] = raw[key]
    for name in SPLITS:
        examples = splits.split(name)
        src, tgt = _lengths(examples, "src"), _lengths(examples, "tgt")
        entry: dict[str, Any] = {
            "pairs": len(examples),
            "src_tokens": sum(src),
            "tgt_tokens": sum(tgt),
            "src_len": length_summary(src),
            "tgt_len": length_summary(tgt),
            "histogram": length_histogram(src, tgt),
        }
        if name != "train":
            entry["oov_src"] = round(oov_rate(examples, dataset.src_vocab, "src"), 5)
            entry["oov_tgt"] = round(oov_rate(examples, dataset.tgt_vocab, "tgt"), 5)
        out["splits"][name] = entry
    plan = plan_batches(
        splits.train, batch_size, batch_tokens, shuffle=True, seed=seed, bucket=True
    )
    out["batching"] = {
        "batch_size": batch_size,
        "batch_tokens": batch_tokens,
        "batches_per_epoch": len(plan),
        "padding_fraction": round(padding_fraction(splits.train, plan), 4),
    }
    return out


def lm_stats(streams: Any, batch_size: int) -> dict[str, Any]:
    """An LM's splits: tokens, non-overlapping windows of ``block_size`` (+ 1) tokens, the
    dev windows scored, and what one training step reads."""
    from attnlab.data.lm import window_starts

    block = streams.block_size
    splits = {
        name: {
            "tokens": int(len(ids)),
            "windows": int(len(window_starts(len(ids), block))),
        }
        for name, ids in (("train", streams.train), ("dev", streams.dev))
    }
    return {
        "block_size": block,
        "windows": streams.windows,
        "splits": splits,
        "dev_windows_scored": int(len(streams.eval_starts("dev"))),
        "tokens_per_step": batch_size * block,
    }


def _render_lm(header: Any, lm: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"splits (windows of {lm['block_size']} tokens)", title_justify="left")
    for col in ("split", "tokens", "windows"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, s in lm["splits"].items():
        table.add_row(split, f"{s['tokens']:,}", f"{s['windows']:,}")
    note = (
        f"test is the dev split; dev is scored on {lm['dev_windows_scored']:,} fixed windows; "
        f"train: {lm['windows']} windows, {lm['tokens_per_step']:,} tokens per step"
    )
    return Group(header, table, Text(note))


def render_stats(stats: dict[str, Any]) -> Any:
    """A rich renderable (tables + bar histograms) for ``dataset_stats`` output."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    tok = stats["tokenizer"]
    tok_line = tok["src"] if tok["src"] == tok["tgt"] else f"src {tok['src']}, tgt {tok['tgt']}"
    vocab = stats["vocab"]
    header = Text.assemble(
        (f"{stats['name']}", "bold"),
        f"  tokenizer: {tok_line}",
        f"  vocab: src {vocab['src']}, tgt {vocab['tgt']}"
        + (" (shared)" if vocab["shared"] else ""),
    )
    if "lm" in stats:
        return _render_lm(header, stats["lm"])
    parts: list[Any] = [header]
    if "sources" in stats:
        for split, source in stats["sources"].items():
            parts.append(Text(f"  {split}: {source}", style="dim"))

    sizes = Table(title="splits (src/tgt)", title_justify="left", expand=False)
    for col in ("split", "pairs", "tokens", "mean len", "max len", "OOV %", "empty"):
        sizes.add_column(col, justify="left" if col == "split" else "right")
    for split, s in stats["splits"].items():
        oov = f"{100 * s['oov_src']:.1f}/{100 * s['oov_tgt']:.1f}" if "oov_src" in s else "-"
        sizes.add_row(
            split,
            f"{s['pairs']:,}",
            f"{s['src_tokens']:,}/{s['tgt_tokens']:,}",
            f"{s['src_len']['mean']:.1f}/{s['tgt_len']['mean']:.1f}",
            f"{s['src_len']['max']}/{s['tgt_len']['max']}",
            oov,
            str(stats.get("empty_skipped", {}).get(split, 0)),
        )
    parts.append(sizes)

    hist = Table(title="train length histogram (tokens)", title_justify="left", expand=False)
    hist.add_column("length")
    hist.add_column("source", min_width=22)
    hist.add_column("target", min_width=22)
    rows = stats["splits"]["train"]["histogram"]
    peak = max([max(r["src"], r["tgt"]) for r in rows] + [1])
    for r in rows:
        hist.add_row(r["bucket"], _bar(r["src"], peak, "cyan"), _bar(r["tgt"], peak, "magenta"))
    parts.append(hist)

    parts.extend(Text(n) for n in stats_notes(stats))
    return Group(*parts)


def stats_notes(stats: dict[str, Any]) -> list[str]:
    """The one-line notes under the tables: batching, split-off splits, skipped pairs, cache."""
    b = stats["batching"]
    rule = (
        f"{b['batch_tokens']} tokens" if b["batch_tokens"] > 0 else f"{b['batch_size']} sentences"
    )
    notes = [
        f"batching: {rule} per batch, length-bucketed: {b['batches_per_epoch']} batches/epoch, "
        f"padding {100 * b['padding_fraction']:.1f}%"
    ]
    if stats.get("split_off"):
        notes.append(
            f"split off the training data: {', '.join(stats['split_off'])} "
            "(identical sources kept together)"
        )
    if stats.get("train_too_long_dropped"):
        notes.append(f"training pairs dropped as too long: {stats['train_too_long_dropped']}")
    for split in ("dev", "test"):
        if stats.get(f"{split}_too_long_dropped"):
            notes.append(
                f"{split} pairs skipped as longer than data.eval_max_tokens: "
                f"{stats[f'{split}_too_long_dropped']}"
            )
    if "cache" in stats:
        notes.append(
            f"cache: {stats['cache']} ({stats.get('cache_file', '')}), "
            f"prepared in {stats.get('prepare_seconds', 0):.2f} s"
        )
    return notes


def _bar(count: int, peak: int, style: str, width: int = 16) -> Any:
    from rich.text import Text

    cells = round(width * count / peak) if peak else 0
    return Text.assemble(("█" * cells, style), f" {count:,}")
