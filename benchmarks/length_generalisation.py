"""Length generalisation: train on short sequences, test on longer ones (issue 14).

    OMP_NUM_THREADS=2 python benchmarks/length_generalisation.py                # 800 steps each
    OMP_NUM_THREADS=2 python benchmarks/length_generalisation.py --steps 2000 --json out.json
    OMP_NUM_THREADS=1 python benchmarks/length_generalisation.py --quick        # ~2-3 minutes

Every configuration trains the reverse-transformer-sized model (2+2 layers, d_model 128, 4 heads,
ff 256) on the copy task (``--task reverse`` for reverse) with sources of 3..20 symbols
(``data.max_len=20``), then decodes the test split, whose sources are 21..40 symbols long
(``data.test_min_len=21``, ``data.test_max_len=40``), plus the in-distribution dev split.
Configurations (the encoder's and decoder's self-attention; cross-attention is scaled-dot):

- scaled-dot + sinusoidal absolute positions (the Transformer's default),
- scaled-dot + rotary positions,
- alibi (model.positions = none),
- stick-breaking (model.positions = none).

The final model of each run is scored (not the best dev checkpoint: dev is in-distribution).
Printed: a Markdown table of test exact match and BLEU, dev exact match, and test BLEU per
source-length bucket (21-30, 31-40; sacrebleu inside each bucket). --json writes the rows too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from attnlab.evaluate import evaluate_split
from attnlab.experiment import apply_overrides, load_preset
from attnlab.train.trainer import Trainer

# label -> config overrides (on top of the reverse-transformer preset and the length settings)
CONFIGS: dict[str, list[str]] = {
    "scaled-dot + sinusoidal": ["model.self_attention=scaled-dot", "model.positions=sinusoidal"],
    "scaled-dot + rotary": ["model.self_attention=scaled-dot", "model.positions=rotary"],
    "alibi": ["model.self_attention=alibi", "model.positions=none"],
    "stick-breaking": ["model.self_attention=stick-breaking", "model.positions=none"],
}


def length_overrides(args: argparse.Namespace) -> list[str]:
    return [
        f"data.task={args.task}",
        "data.min_len=3",
        f"data.max_len={args.train_max}",
        f"data.test_min_len={args.train_max + 1}",
        f"data.test_max_len={args.test_max}",
        f"data.train_size={args.train_size}",
        f"data.dev_size={args.eval_size}",
        f"data.test_size={args.eval_size}",
        "model.decoder_self_attention=",  # the encoder's variant (all four can be causal)
        f"train.max_steps={args.steps}",
        f"train.eval_every={args.steps}",  # one dev evaluation, at the end
        "train.eval_sentences=0",
        "train.samples=0",
        f"train.seed={args.seed}",
    ]


def run_one(label: str, extra: list[str], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    config = apply_overrides(
        load_preset("reverse-transformer"), [*length_overrides(args), *extra, *args.overrides]
    )
    run_dir = out / f"lengthgen-{label.replace(' ', '').replace('+', '-')}"
    start = time.perf_counter()
    trainer = Trainer(config, run_dir, device=args.device)
    trainer.run()
    train_s = time.perf_counter() - start
    scores = {
        split: evaluate_split(trainer.model, trainer.dataset, split, device=trainer.device)
        for split in ("dev", "test")
    }
    test = scores["test"]
    return {
        "config": label,
        "overrides": extra,
        "steps": args.steps,
        "train_s": round(train_s, 1),
        "dev_exact_match": scores["dev"]["exact_match"],
        "test_exact_match": test["exact_match"],
        "test_bleu": test["bleu"],
        "test_bleu_by_length": test["bleu_by_length"],
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    buckets: list[str] = []
    for row in rows:
        for b in row["test_bleu_by_length"]:
            if b["bucket"] not in buckets:
                buckets.append(b["bucket"])
    head = ["config", "dev exact", "test exact", "test BLEU", *[f"BLEU {b}" for b in buckets]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        by_bucket = {b["bucket"]: b.get("bleu") for b in row["test_bleu_by_length"]}
        cells = [
            row["config"],
            f"{row['dev_exact_match']:.3f}",
            f"{row['test_exact_match']:.3f}",
            f"{row['test_bleu']:.1f}",
            *["–" if by_bucket.get(b) is None else f"{by_bucket[b]:.1f}" for b in buckets],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="copy", choices=["copy", "reverse"])
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps per config (default 800)"
    )
    parser.add_argument("--train-max", type=int, default=20, help="longest training source")
    parser.add_argument("--test-max", type=int, default=40, help="longest test source")
    parser.add_argument("--train-size", type=int, default=20000)
    parser.add_argument("--eval-size", type=int, default=500, help="dev and test sentences")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | mps | auto")
    parser.add_argument(
        "--only", action="append", default=[], choices=list(CONFIGS), help="run only these"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a couple of minutes: 100 steps (unless --steps), 2000 training and 100 dev/test "
        "sentences per config",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory parent (default: a temp dir)"
    )
    args = parser.parse_args()
    if args.quick:
        args.train_size, args.eval_size = 2000, 100
    args.steps = args.steps or (100 if args.quick else 800)

    torch.set_num_threads(args.threads)
    out = args.out or Path(tempfile.mkdtemp(prefix="attnlab-lengthgen-"))
    rows = []
    for label, extra in CONFIGS.items():
        if args.only and label not in args.only:
            continue
        row = run_one(label, extra, args, out)
        print(
            f"{label}: test exact {row['test_exact_match']:.3f}, BLEU {row['test_bleu']:.1f} "
            f"({row['train_s']:.0f} s)",
            flush=True,
        )
        rows.append(row)
    print()
    print(
        f"{args.task}: train lengths 3-{args.train_max}, test {args.train_max + 1}-"
        f"{args.test_max}, {args.steps} steps per config"
    )
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
