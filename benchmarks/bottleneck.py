"""The information-bottleneck experiment: no attention vs Bahdanau vs Luong-general on reverse
with source lengths 5-40, the same training budget for each, BLEU by source length on test.
A thin wrapper over the study engine (``attnlab study``).

    OMP_NUM_THREADS=1 python benchmarks/bottleneck.py [--steps 1500] [--seeds 3] \
[--variants none bahdanau luong-general]

Expectation (Bahdanau et al. 2015, Fig. 2): without attention BLEU falls as sentences grow;
with attention it does not. The check: attention >= 20 BLEU above ``none`` on the longest
bucket (31-40), mean over seeds.
"""

from __future__ import annotations

import argparse

from _studies import add_study_options, run_and_tabulate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=1500, help="training steps per run")
    parser.add_argument("--variants", nargs="+", default=["none", "bahdanau", "luong-general"])
    add_study_options(parser)
    args = parser.parse_args()
    raw = {
        "name": "bottleneck",
        "preset": "reverse-bahdanau",
        "set": [
            "data.task=reverse",
            "data.min_len=5",
            "data.max_len=40",
            "data.train_size=30000",
            f"train.max_steps={args.steps}",
            f"train.eval_every={max(args.steps // 6, 1)}",
            "train.eval_sentences=200",
            "train.samples=0",
        ],
        "metrics": ["bleu", "exact_match"],
        "baseline": args.variants[0],
        "grid": {"model.attention": args.variants},
    }
    table = run_and_tabulate(raw, "benchmarks/bottleneck.py", args)
    rows = {row.name: row for row in table.rows}
    if "none" in rows and rows["none"].buckets:
        longest = max(rows["none"].buckets, key=lambda b: int(b.split("-")[0]))
        base = rows["none"].buckets[longest].mean or 0.0
        for name, row in rows.items():
            if name != "none" and longest in row.buckets:
                gap = (row.buckets[longest].mean or 0.0) - base
                verdict = "ok" if gap >= 20 else "below 20"
                print(f"longest bucket {longest}: {name} - none = {gap:+.2f} BLEU ({verdict})")


if __name__ == "__main__":
    main()
