"""Time to dev BLEU >= 95 on reverse with the reverse-bahdanau preset (issue 2's benchmark),
or to any dev metric with any preset (issue 3: exact match >= 0.99 with reverse-transformer).

    OMP_NUM_THREADS=2 python benchmarks/time_to_bleu.py [--target 95] [--eval-every 100]
    OMP_NUM_THREADS=2 python benchmarks/time_to_bleu.py --preset reverse-transformer \
--metric exact_match --target 0.99

Trains the preset in-process, evaluates on the full dev set every ``--eval-every`` steps and
stops at the first eval reaching the target. Prints the wall time to that eval (training +
evaluations, from the trainer's ``elapsed_s``), the training time alone, the step, and the
training throughput. JoeyNMT's reverse tutorial reports 95.42 dev BLEU at step 7000.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from attnlab.experiment import apply_overrides, load_preset
from attnlab.train.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="reverse-bahdanau")
    parser.add_argument("--metric", default="bleu", choices=["bleu", "chrf", "exact_match"])
    parser.add_argument("--target", type=float, default=95.0, help="dev metric value to reach")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory parent (default: a temp dir)"
    )
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    config = apply_overrides(
        load_preset(args.preset),
        [
            f"train.eval_every={args.eval_every}",
            "train.eval_sentences=0",
            "train.samples=0",
            *args.overrides,
        ],
    )
    out = args.out or Path(tempfile.mkdtemp(prefix="attnlab-ttb-"))
    run_dir = out / f"{config.name}-ttb-{time.strftime('%Y%m%d-%H%M%S')}"
    reached: dict[str, float] = {}
    trainer: Trainer

    def on_event(event: dict) -> None:
        if event["type"] == "eval":
            print(
                f"step {event['step']:5d}  dev BLEU {event['bleu']:6.2f}  "
                f"exact {event['exact_match']:.3f}  "
                f"{event['elapsed_s']:7.1f} s",
                flush=True,
            )
            if event[args.metric] >= args.target and not reached:
                reached.update(
                    step=event["step"], value=event[args.metric], elapsed_s=event["elapsed_s"]
                )
                trainer.control("stop")

    trainer = Trainer(config, run_dir, on_event=on_event, device="cpu")
    summary = trainer.run()
    result = {
        "preset": args.preset,
        "threads": args.threads,
        "metric": args.metric,
        "target": args.target,
        "reached": bool(reached),
        "step": reached.get("step"),
        "dev_value": reached.get("value"),
        "wall_s_to_target": reached.get("elapsed_s"),
        "train_tokens_per_s": summary["tokens_per_s"],
        "params": summary["params"],
        "run_dir": str(run_dir),
    }
    if reached:
        print(
            f"dev {args.metric} {reached['value']:.3f} >= {args.target} "
            f"at step {reached['step']} after {reached['elapsed_s']:.1f} s "
            f"({summary['tokens_per_s']:.0f} train tok/s, {args.threads} threads)"
        )
    else:
        print(
            f"target {args.metric} >= {args.target} not reached "
            f"within {config.train.max_steps} steps "
            f"(best dev {args.metric} {summary['best'].get(args.metric, 0):.3f})"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
