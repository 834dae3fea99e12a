"""Variants x tasks: Transformer self-attention variants on copy / reverse / sort, as a study
(each cell compared with scaled-dot on its task). A thin wrapper over the study engine; the
shipped ``studies/variants-x-tasks.toml`` is the version with seeds on harder settings.

Each cell trains the reverse-transformer recipe (2+2 layers, d_model 128, 4 heads, ff 256)
with ``model.self_attention=VARIANT`` (the decoder takes the same variant where it can be
causal, else scaled-dot) for the same step budget; the table gives test exact match and BLEU
(mean ± 95 % t interval over seeds with --seeds N > 1).

    OMP_NUM_THREADS=1 python benchmarks/variants_table.py                 # every variant
    OMP_NUM_THREADS=1 python benchmarks/variants_table.py --tasks reverse --steps 400 --seeds 3
"""

from __future__ import annotations

import argparse

from _studies import add_study_options, run_and_tabulate

from attnlab.nn.attention import ATTENTION, ROLE_SELF


def self_attention_variants() -> list[str]:
    return [e.name for e in ATTENTION.entries() if ROLE_SELF in e.meta.roles]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="copy,reverse,sort")
    parser.add_argument("--variants", default=",".join(self_attention_variants()))
    parser.add_argument("--steps", type=int, default=800)
    add_study_options(parser)
    args = parser.parse_args()
    variants = args.variants.split(",")
    if "scaled-dot" not in variants:
        variants.insert(0, "scaled-dot")  # the baseline of every task
    raw = {
        "name": "variants-table",
        "preset": "reverse-transformer",
        "set": [
            f"train.max_steps={args.steps}",
            f"train.eval_every={max(args.steps // 4, 1)}",
            "train.eval_sentences=200",
            "train.samples=0",
        ],
        "metrics": ["exact_match", "bleu", "alignment_accuracy"],
        "baseline": {"model.self_attention": "scaled-dot"},
        "grid": {"data.task": args.tasks.split(","), "model.self_attention": variants},
    }
    run_and_tabulate(raw, "benchmarks/variants_table.py", args)


if __name__ == "__main__":
    main()
