"""Data preparation time, first run and cache hit: Multi30k (issue 6) and the long tasks (#41).

Corpora (< 10 s on CPU, and cached): each tokenizer is prepared into a fresh cache folder
(read, split, tokenise, vocabularies; BPE and unigram also train their subword model), then
loaded again from that cache. Then the default toy task (reverse, 20,000 training pairs, as
JoeyNMT's tutorial), too small to be cached.

Long tasks (#41: 100,000 examples of 512 tokens per task in < 10 s): mqar, selective-copy and
induction at their presets' settings with ``data.max_len=512`` and 100,000 training examples,
drawn into a fresh cache folder (``attnlab.data.task_cache``), then loaded from it. ListOps
draws LRA's trees one at a time and keeps those of 256..512 tokens (rejection sampling, as LRA
does): ``--listops-examples`` of them are drawn and the time scaled to 100,000; its cache
hit is the same array read as the other tasks'.

    python benchmarks/prepare_speed.py                  # corpora and long tasks
    python benchmarks/prepare_speed.py --only tasks     # the long tasks only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from attnlab.config import DataConfig  # noqa: E402
from attnlab.data.dataset import load_dataset  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpora" / "multi30k"
TARGET_S = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--path", default=str(CORPUS), help="corpus folder (default: ../shared/corpora/multi30k)"
    )
    parser.add_argument("--tokenizers", nargs="+", default=["word", "bpe", "unigram"])
    parser.add_argument("--only", choices=("corpora", "tasks"), default=None)
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--listops-examples", type=int, default=300)
    args = parser.parse_args()
    code = 0 if args.only == "tasks" else corpora(args)
    if args.only != "corpora":
        code = max(code, long_tasks(args))
    return code


def long_tasks(args: argparse.Namespace) -> int:
    """The #41 tasks at ``--length`` tokens, ``--examples`` training examples each."""
    from attnlab.experiment import apply_overrides, load_preset

    print(
        f"\n{'task':15s} {'examples':>9s} {'tokens':>8s} {'first s':>8s} {'cached s':>9s}  "
        f"target < {TARGET_S:.0f} s per task"
    )
    worst = 0.0
    sizes = [f"data.train_size={args.examples}", "data.dev_size=100", "data.test_size=100"]
    for task in ("mqar", "selective-copy", "induction"):
        config = apply_overrides(
            load_preset(f"{task}-transformer"), [*sizes, f"data.max_len={args.length}"]
        )
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            ds = load_dataset(config.data, Path(cache))
            first = time.perf_counter() - start
            start = time.perf_counter()
            hit = load_dataset(config.data, Path(cache))
            cached = time.perf_counter() - start
        assert hit.splits.stats.get("cache") == "hit", hit.splits.stats
        worst = max(worst, first)
        tokens = len(ds.splits.train[0].src_tokens)
        print(f"{task:15s} {len(ds.splits.train):9d} {tokens:8d} {first:8.2f} {cached:9.2f}")
    n = args.listops_examples
    config = apply_overrides(
        load_preset("listops-transformer"),
        [
            f"data.train_size={n}",
            "data.dev_size=1",
            "data.test_size=1",
            f"data.min_len={args.length // 2}",
            f"data.max_len={args.length}",
        ],
    )
    start = time.perf_counter()
    ds = load_dataset(config.data)
    per = (time.perf_counter() - start) / (n + 2)
    mean = sum(len(e.src_tokens) for e in ds.splits.train) / max(len(ds.splits.train), 1)
    print(
        f"{'listops':15s} {n:9d} {mean:8.0f} {per * args.examples:8.0f} {'-':>9s}  "
        f"(first: {per * 1000:.1f} ms a tree of {args.length // 2}..{args.length} tokens, "
        f"scaled to {args.examples:,})"
    )
    print(
        f"slowest first draw of mqar / selective-copy / induction {worst:.2f} s: "
        f"{'met' if worst < TARGET_S else 'NOT met'}; listops first draw "
        f"{'met' if per * args.examples < TARGET_S else 'NOT met'} (cached: an array read)"
    )
    return 0


def corpora(args: argparse.Namespace) -> int:
    if not Path(args.path).is_dir():
        print(
            f"error: {args.path} is not a folder "
            "(the Multi30k corpus lives in ../shared/corpora/multi30k)",
            file=sys.stderr,
        )
        return 2
    print(
        f"{'tokenizer':10s} {'pairs':>7s} {'vocab src/tgt':>14s} {'first s':>8s} {'cached s':>9s}  "
        f"target < {TARGET_S:.0f} s"
    )
    worst = 0.0
    for name in args.tokenizers:
        cfg = DataConfig(task="corpus", path=args.path, tokenizer=name, lowercase=True, min_freq=2)
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            ds = load_dataset(cfg, Path(cache))
            first = time.perf_counter() - start
            start = time.perf_counter()
            load_dataset(cfg, Path(cache))
            cached = time.perf_counter() - start
        worst = max(worst, first)
        vocab = f"{len(ds.src_vocab)}/{len(ds.tgt_vocab)}"
        print(f"{name:10s} {len(ds.splits.train):7d} {vocab:>14s} {first:8.2f} {cached:9.2f}")
    start = time.perf_counter()
    toy = load_dataset(
        DataConfig(task="reverse", train_size=20000, min_len=3, max_len=20, vocab_size=30)
    )
    print(
        f"{'reverse':10s} {len(toy.splits.train):7d} "
        f"{f'{len(toy.src_vocab)}/{len(toy.tgt_vocab)}':>14s} "
        f"{time.perf_counter() - start:8.2f} {'-':>9s}"
    )
    print(
        f"slowest first corpus preparation {worst:.2f} s: "
        f"{'met' if worst < TARGET_S else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
