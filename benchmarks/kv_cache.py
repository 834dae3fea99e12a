"""KV-cache bytes per generated token and decoding speed: MHA, GQA, MQA and MLA side by side.

At the ``multi30k-transformer`` preset's size (d_model 256, 8 heads, 3+3 layers, ff 512), with
every attention role (encoder self, decoder self, cross) set to the variant:

- MHA: ``scaled-dot``; GQA: ``gqa`` with kv_heads 2; MQA: ``gqa`` with kv_heads 1;
  MLA: ``mla`` with kv_rank 4·d_h = 128 and rope_dim d_h/2 = 16 (DeepSeek-V2's ratios).
- Bytes per generated token (per sentence): how much the decoder state grows per step,
  summed over its tensors and divided by the batch (the self-attention caches of every layer;
  the cross-attention caches are built once per sentence and shown apart, per source token).
  Measured from the state that ``model.step`` returns (``attnlab.nn.kv_cache``), and checked
  against the figure every run records in its ``cost`` (``kv_cache_bytes_per_token``).
- Decoding speed, sentences per second: greedy and beam 5 (attnlab's batched searches,
  ``decode_sorted``) over the same source sentences. Random weights (no training: the cost of
  a step does not depend on what the weights learned) and </s> blocked (``decode.min_len``), so
  every search runs its full budget of 1.5·S + 10 steps and every variant decodes the same
  number of tokens. Source lengths are those of the Multi30k test set (test_2016_flickr.de,
  whitespace tokens) when ../shared/corpora/multi30k is present, else drawn from 5..30;
  vocabulary sizes those of the preset's vocabularies (lower-cased, min_freq 2), approximated
  by whitespace tokens.
- Timing: after one warm-up search per (variant, search) on 8 sentences, ``--repeats`` rounds;
  each round times every (variant, search) once, in a rotated order, so every variant sees the
  same machine load; the median round is reported.
  Threads: $OMP_NUM_THREADS (default 1).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kv_cache.py            # 1000 sentences, 5 rounds
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kv_cache.py --quick    # < 1 minute
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/kv_cache.py --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from attnlab.decode.search import decode_sorted  # noqa: E402
from attnlab.experiment import apply_overrides, load_preset  # noqa: E402
from attnlab.nn.kv_cache import (  # noqa: E402
    FIRST_WORD_ID,
    kv_cache_bytes_per_token,
    measured_state_growth,
)
from attnlab.nn.model import build_model  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpora" / "multi30k"
PRESET = "multi30k-transformer"


def variants(mla_rank: int, mla_rope: int) -> list[tuple[str, list[str]]]:
    """(label, --set overrides) of each attention, in every role."""

    def everywhere(name: str) -> list[str]:
        roles = ("self_attention", "decoder_self_attention", "cross_attention")
        return [f"model.{role}={name}" for role in roles]

    return [
        ("MHA (scaled-dot)", everywhere("scaled-dot")),
        ("GQA (kv_heads 2)", [*everywhere("gqa"), "model.gqa.kv_heads=2"]),
        ("MQA (gqa, kv_heads 1)", [*everywhere("gqa"), "model.gqa.kv_heads=1"]),
        (
            f"MLA (kv_rank {mla_rank}, rope_dim {mla_rope})",
            [*everywhere("mla"), f"model.mla.kv_rank={mla_rank}", f"model.mla.rope_dim={mla_rope}"],
        ),
    ]


def vocab_size(path: Path, min_freq: int = 2) -> int:
    counts = Counter(word for line in path.open(encoding="utf-8") for word in line.lower().split())
    return FIRST_WORD_ID + sum(1 for n in counts.values() if n >= min_freq)


def sources(count: int, src_vocab: int, seed: int) -> tuple[list[list[int]], str]:
    """``count`` random id sequences with realistic lengths, and where the lengths came from."""
    rng = random.Random(seed)
    test = CORPUS / "test_2016_flickr.de"
    if test.exists():
        lengths = [len(line.split()) for line in test.open(encoding="utf-8") if line.strip()]
        where = "Multi30k test_2016_flickr.de"
    else:
        lengths = [rng.randint(5, 30) for _ in range(1000)]
        where = "uniform 5..30 (no Multi30k corpus)"
    picked = [lengths[i % len(lengths)] for i in range(count)]
    return [[rng.randrange(FIRST_WORD_ID, src_vocab) for _ in range(n)] for n in picked], where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--mla-rank", type=int, default=128)
    parser.add_argument("--mla-rope", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="64 sentences, 1 round (< 1 min)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.sentences, args.repeats = 64, 1
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    if (CORPUS / "train.de").exists():
        src_vocab, tgt_vocab = vocab_size(CORPUS / "train.de"), vocab_size(CORPUS / "train.en")
    else:
        src_vocab, tgt_vocab = 8000, 6000
    batch, where = sources(args.sentences, src_vocab, args.seed)
    base = load_preset(PRESET)
    m = base.model
    print(
        f"{PRESET}: d_model {m.d_model}, {m.heads} heads, {m.enc_layers}+{m.dec_layers} layers, "
        f"vocab {src_vocab}/{tgt_vocab}; {len(batch)} sentences, lengths from {where} "
        f"(mean {statistics.mean(map(len, batch)):.1f}); torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {platform.processor() or platform.machine()}",
        flush=True,
    )

    # </s> blocked (min_len): every search runs its full budget of the preset's 1.5·S + 10
    searches = {
        name: dataclasses.replace(base.decode, beam=beam, min_len=10**6)
        for name, beam in (("greedy", 1), (f"beam {args.beam}", args.beam))
    }
    models, rows = {}, {}
    for label, overrides in variants(args.mla_rank, args.mla_rope):
        config = apply_overrides(base, overrides)
        torch.manual_seed(args.seed)
        model = build_model(config, src_vocab, tgt_vocab).eval()
        models[label] = (model, config)
        per_token, cross = measured_state_growth(model, batch[:8])
        expected = kv_cache_bytes_per_token(model)  # the run records' figure, from the shapes
        assert per_token == expected, (label, per_token, expected)
        rows[label] = {"bytes_per_token": per_token, "cross_bytes_per_source_token": cross}
        rows[label].update({name: [] for name in searches})

    labels = list(models)
    with torch.inference_mode():  # warm-up: first calls pay for allocations and kernel choice
        for model, _ in models.values():
            for cfg in searches.values():
                decode_sorted(model, batch[:8], cfg, tokens_only=True)
    for round_ in range(args.repeats):
        order = labels[round_ % len(labels) :] + labels[: round_ % len(labels)]
        for name, cfg in searches.items():
            for label in order:
                model, _ = models[label]
                start = time.perf_counter()
                with torch.inference_mode():
                    decode_sorted(model, batch, cfg, tokens_only=True)
                rows[label][name].append(len(batch) / (time.perf_counter() - start))
        print(f"  round {round_ + 1}/{args.repeats} done", flush=True)

    mha = rows[labels[0]]["bytes_per_token"]
    print()
    print(
        "| attention | KV-cache bytes / generated token | vs MHA | cross cache bytes / source "
        "token | greedy sent/s | " + f"beam {args.beam} sent/s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label in labels:
        row = rows[label]
        speeds = [statistics.median(row[name]) for name in searches]
        print(
            f"| {label} | {row['bytes_per_token']:,.0f} | {row['bytes_per_token'] / mha:.3f} | "
            f"{row['cross_bytes_per_source_token']:,.0f} | {speeds[0]:.1f} | {speeds[1]:.1f} |"
        )
    if args.json:
        out = {
            "preset": PRESET,
            "sentences": len(batch),
            "repeats": args.repeats,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "rows": rows,
        }
        args.json.write_text(json.dumps(out, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
