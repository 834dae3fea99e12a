"""Multi30k de->en: train the three reference presets, print test BLEU beside the published numbers.

Published (bentrevett/pytorch-seq2seq, greedy, lowercased spaCy tokens, see
../shared/notes/corpora-and-peers.md §2b): GRU without attention 20.61, GRU + additive
attention 28.30, Transformer 36.52.

We report, on test_2016_flickr with greedy decoding from the best (dev BLEU) checkpoint:
- ``BLEU lc``: sacrebleu 13a, lowercased, detokenised hypotheses against the raw references
  (comparable with the reference, which lowercases both sides);
- ``BLEU``: sacrebleu's default (cased) against the raw references, plus chrF;
with wall time and training tokens/s.

Full run (hours on CPU, minutes on one GPU):
    .venv/bin/python benchmarks/multi30k.py --device cuda
Smoke run of the whole path (2k training pairs, a few steps):
    .venv/bin/python benchmarks/multi30k.py --steps 20 --max-pairs 2000 --eval-sentences 100
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PUBLISHED = {
    "multi30k-gru-none": 20.61,
    "multi30k-gru-bahdanau": 28.30,
    "multi30k-transformer": 36.52,
}


def run_preset(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from attnlab.data.dataset import load_dataset
    from attnlab.errors import AttnlabError
    from attnlab.evaluate import evaluate_split
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.runs import load_checkpoint
    from attnlab.train.trainer import Trainer

    overrides = list(args.set)
    if args.steps:
        overrides += [
            f"train.max_steps={args.steps}",
            f"train.eval_every={max(1, min(args.steps, 500))}",
        ]
    if args.max_pairs:
        overrides.append(f"data.max_pairs={args.max_pairs}")
    if args.eval_sentences:
        overrides.append(f"train.eval_sentences={args.eval_sentences}")
    config = apply_overrides(load_preset(name), overrides)

    start = time.perf_counter()
    dataset = load_dataset(config.data)
    prepare_s = time.perf_counter() - start
    run_dir = Path(args.out) / name
    from attnlab.runs import META_FILE, checkpoint_dir

    resume = args.resume and (checkpoint_dir(run_dir, "last") / META_FILE).is_file()
    if resume:
        print(f"   resuming {run_dir} from its last checkpoint", file=sys.stderr, flush=True)
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise AttnlabError(
            f"{run_dir} already holds a run; pass --resume to continue it or --out for a new folder"
        )
    trainer = Trainer(
        config, run_dir, device=args.device, dataset=dataset, resume=resume, install_signals=True
    )
    # A time cap stops the run the way the lab's Stop does (a checkpoint at that step).
    max_seconds = args.max_seconds
    timer = threading.Timer(max_seconds, trainer.control, args=("stop",)) if max_seconds else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        summary = trainer.run()
    finally:
        if timer is not None:
            timer.cancel()
    if summary.get("reason") == "interrupted":
        raise AttnlabError(
            f"{name} interrupted at step {summary['step']}; rerun with --resume to continue"
        )
    best = Path(summary["best_checkpoint"])
    if not (best / META_FILE).is_file():  # stopped before its first evaluation
        best = checkpoint_dir(run_dir, "last")
    loaded = load_checkpoint(best, device=args.device_resolved)
    decode_cfg = replace(config.decode, beam=1, sample=False, nbest=1)
    # The same scoring as `attnlab eval RUN --split test` (greedy, sacrebleu on detokenised text).
    test = evaluate_split(
        loaded.model,
        dataset,
        "test",
        decode_cfg,
        device=args.device_resolved,
        max_sentences=args.test_sentences,
    )
    tokens_per_s = summary["tokens_per_s"] or 0.0
    achieved = None
    if config.model.arch == "transformer":  # model FLOP/s of the training loop (flops.py)
        from flops import flops_per_target_token

        achieved = flops_per_target_token(loaded.model, dataset.splits.train) * tokens_per_s
    return {
        "preset": name,
        "published_bleu": PUBLISHED.get(name),
        "test_bleu_lc": round(test["bleu_lc"], 2),
        "test_bleu": round(test["bleu"], 2),
        "test_chrf": round(test["chrf"], 2),
        "test_loss": round(test["loss"], 4),
        "bleu_lc_signature": test["bleu_lc_signature"],
        "steps": summary["step"],
        "budget_steps": config.train.max_steps,
        "reason": summary["reason"],
        "params": summary["params"],
        "wall_s": round(summary["wall_s"], 1),
        "prepare_s": round(prepare_s, 2),
        "tokens_per_s": round(tokens_per_s, 1),
        "train_tflops": None if achieved is None else round(achieved / 1e12, 3),
        "device": summary["device"],
        "best_dev": {
            k: summary["best"].get(k) for k in ("bleu", "chrf", "loss") if k in summary["best"]
        },
        "n_test": test["n"],
    }


def require_at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, minimums: dict[str, float]
) -> None:
    """One line naming the flag (``parser.error``, exit 2) for a value under its minimum
    (``minimums``: option dest -> smallest valid value; also gpu_check's)."""
    for name, low in minimums.items():
        if (value := getattr(args, name)) < low:
            parser.error(f"--{name.replace('_', '-')} must be at least {low}: {value}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (gpu_check builds one per preset, for this process or its own)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--presets",
        nargs="+",
        default=list(PUBLISHED),
        help="presets to train (default: the three references)",
    )
    parser.add_argument(
        "--steps", type=int, default=0, help="override train.max_steps (0 = the preset's)"
    )
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=0,
        help="data.max_pairs: first N pairs of each split (smoke runs)",
    )
    parser.add_argument(
        "--eval-sentences",
        type=int,
        default=0,
        help="train.eval_sentences for dev evals (0 = the preset's)",
    )
    parser.add_argument(
        "--test-sentences",
        type=int,
        default=0,
        help="score only the first N test sentences (0 = all 1000)",
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | mps")
    parser.add_argument("--out", default="runs/bench-multi30k", help="where the run directories go")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="extra config override",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=0,
        help="stop each preset's training after N s, as the lab's Stop does (0 = its budget)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue runs found under --out from their last checkpoint",
    )
    args = parser.parse_args(argv)
    counts = ("steps", "max_pairs", "eval_sentences", "test_sentences", "max_seconds")
    require_at_least(parser, args, dict.fromkeys(counts, 0))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from attnlab.device import resolve_device
    from attnlab.errors import AttnlabError

    try:
        args.device_resolved = resolve_device(args.device)
        results = []
        for name in args.presets:
            print(f"== {name}", file=sys.stderr, flush=True)
            results.append(run_preset(name, args))
            # Each finished preset is kept at once: a later failure or Ctrl+C loses nothing.
            (Path(args.out) / f"{name}.json").write_text(
                json.dumps(results[-1], indent=2, ensure_ascii=False)
            )
    except AttnlabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Multi30k de->en, test_2016_flickr, greedy")
    for col in ("preset", "published", "BLEU lc", "Δ", "BLEU", "chrF", "steps", "wall s", "tok/s"):
        table.add_column(col, justify="left" if col == "preset" else "right")
    for r in results:
        pub = r["published_bleu"]
        delta = f"{r['test_bleu_lc'] - pub:+.2f}" if pub is not None else "-"
        table.add_row(
            r["preset"].removeprefix("multi30k-"),
            f"{pub:.2f}" if pub is not None else "-",
            f"{r['test_bleu_lc']:.2f}",
            delta,
            f"{r['test_bleu']:.2f}",
            f"{r['test_chrf']:.2f}",
            str(r["steps"]),
            f"{r['wall_s']:.0f}",
            f"{r['tokens_per_s']:,.0f}",
        )
    Console().print(table)
    for r in results:
        print(
            f"{r['preset']}: {r['params']:,} parameters on {r['device']}; "
            f"data prepared in {r['prepare_s']} s"
        )
    print(f"BLEU lc signature: {results[0]['bleu_lc_signature']}" if results else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
