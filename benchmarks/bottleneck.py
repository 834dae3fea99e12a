"""The information-bottleneck experiment: no attention vs Bahdanau vs Luong-general on reverse
with source lengths 5-40, the same training budget for each, BLEU by source length on test.

    OMP_NUM_THREADS=2 python benchmarks/bottleneck.py [--steps 1500] \
[--variants none bahdanau luong-general]

Expectation (Bahdanau et al. 2015, Fig. 2): without attention BLEU falls as sentences grow;
with attention it does not. The check: attention >= 20 BLEU above ``none`` on the longest
bucket (31-40).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from attnlab.config import ExperimentConfig
from attnlab.evaluate import evaluate_split
from attnlab.experiment import apply_overrides
from attnlab.runs import load_checkpoint
from attnlab.train.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1500, help="training steps per variant")
    parser.add_argument("--variants", nargs="+", default=["none", "bahdanau", "luong-general"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory parent (default: a temp dir)"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    out = args.out or Path(tempfile.mkdtemp(prefix="attnlab-bottleneck-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, dict] = {}
    for variant in args.variants:
        config = apply_overrides(
            ExperimentConfig(name=f"bottleneck-{variant}"),
            [
                "data.task=reverse",
                "data.min_len=5",
                "data.max_len=40",
                "data.train_size=30000",
                f"model.attention={variant}",
                f"train.max_steps={args.steps}",
                f"train.eval_every={max(args.steps // 6, 1)}",
                "train.eval_sentences=200",
                "train.samples=0",
                *args.overrides,
            ],
        )
        run_dir = out / f"{config.name}-{stamp}"
        started = time.perf_counter()
        summary = Trainer(config, run_dir, device="cpu").run()
        train_s = time.perf_counter() - started
        loaded = load_checkpoint(run_dir)  # the best dev checkpoint
        from attnlab.data.dataset import load_dataset

        test = evaluate_split(loaded.model, load_dataset(config.data), "test", config.decode)
        results[variant] = {
            "test_bleu": test["bleu"],
            "exact_match": test["exact_match"],
            "by_length": {row["bucket"]: row["bleu"] for row in test["bleu_by_length"]},
            "train_s": train_s,
            "tokens_per_s": summary["tokens_per_s"],
            "params": summary["params"],
        }
        print(
            f"{variant:>14}: test BLEU {test['bleu']:.2f}, exact {test['exact_match']:.3f}, "
            f"{train_s:.0f} s, {summary['tokens_per_s']:.0f} tok/s",
            flush=True,
        )

    buckets = sorted(
        {b for r in results.values() for b in r["by_length"]}, key=lambda b: int(b.split("-")[0])
    )
    print()
    print("BLEU by source length (test, greedy)")
    print(f"{'bucket':>8} " + " ".join(f"{v:>14}" for v in args.variants))
    for bucket in buckets:
        cells = " ".join(
            f"{results[v]['by_length'].get(bucket, float('nan')):14.2f}" for v in args.variants
        )
        print(f"{bucket:>8} {cells}")
    print(f"{'all':>8} " + " ".join(f"{results[v]['test_bleu']:14.2f}" for v in args.variants))
    if "none" in results and buckets:
        longest = buckets[-1]
        base = results["none"]["by_length"].get(longest, 0.0)
        for v in args.variants:
            if v != "none":
                gap = results[v]["by_length"].get(longest, 0.0) - base
                print(
                    f"longest bucket {longest}: {v} - none = {gap:+.2f} BLEU "
                    f"({'ok' if gap >= 20 else 'below 20'})"
                )
    print(json.dumps({"steps": args.steps, "threads": args.threads, "results": results}))


if __name__ == "__main__":
    main()
