"""Variants x tasks: every Transformer self-attention variant on copy / reverse / sort.

Each cell trains the reverse-transformer recipe (2+2 layers, d_model 128, 4 heads, ff 256)
with ``model.self_attention=VARIANT`` (the decoder takes the same variant where it can be
causal, else scaled-dot) on the task, for the same step budget, and reports test exact
match, BLEU, alignment accuracy (cross-attention, last layer, head average), steps and
seconds. Prints a Markdown table for the README.

    OMP_NUM_THREADS=2 python benchmarks/variants_table.py                 # all: ~1 h on 2 cores
    OMP_NUM_THREADS=2 python benchmarks/variants_table.py --tasks reverse --steps 400
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from attnlab.evaluate import evaluate_split
from attnlab.experiment import apply_overrides, load_preset
from attnlab.nn.attention import ATTENTION, ROLE_SELF
from attnlab.runs import load_checkpoint
from attnlab.train.trainer import Trainer


def self_attention_variants() -> list[str]:
    return [e.name for e in ATTENTION.entries() if ROLE_SELF in e.meta.roles]


def run_cell(task: str, variant: str, steps: int, out: Path) -> dict:
    config = apply_overrides(
        load_preset("reverse-transformer"),
        [
            f"data.task={task}",
            f"model.self_attention={variant}",
            f"train.max_steps={steps}",
            f"train.eval_every={max(steps // 4, 1)}",
            "train.eval_sentences=200",
            "train.samples=0",
            "train.device=cpu",
        ],
    ).replace(name=f"{task}-{variant}")
    run_dir = out / f"{task}-{variant}"
    started = time.perf_counter()
    summary = Trainer(config, run_dir, device="cpu").run()
    seconds = time.perf_counter() - started
    loaded = load_checkpoint(run_dir)  # best dev checkpoint
    from attnlab.data.dataset import load_dataset

    dataset = load_dataset(loaded.config.data)
    test = evaluate_split(loaded.model, dataset, "test", loaded.config.decode)
    return {
        "exact_match": test["exact_match"],
        "bleu": test["bleu"],
        "alignment": test["alignment_accuracy"],
        "steps": summary["step"],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", default="copy,reverse,sort")
    parser.add_argument("--variants", default=",".join(self_attention_variants()))
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(tempfile.mkdtemp(prefix="attnlab-variants-"))
    rows = []
    for variant in args.variants.split(","):
        for task in args.tasks.split(","):
            cell = run_cell(task, variant, args.steps, out)
            rows.append((variant, task, cell))
            print(
                f"{variant:15s} {task:8s} EM {cell['exact_match']:.3f} BLEU {cell['bleu']:6.2f} "
                f"align {cell['alignment'] if cell['alignment'] is not None else float('nan'):.3f} "
                f"{cell['steps']} steps {cell['seconds']:.0f} s",
                flush=True,
            )
    print(
        "\n| self-attention | task | test exact match | test BLEU | alignment acc. "
        "| steps | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant, task, c in rows:
        align = "–" if c["alignment"] is None else f"{c['alignment']:.3f}"
        print(
            f"| {variant} | {task} | {c['exact_match']:.3f} | {c['bleu']:.2f} | {align} "
            f"| {c['steps']} | {c['seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()
