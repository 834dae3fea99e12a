"""Multi30k preparation time (issue 6: < 10 s on CPU, and cached), first run and cache hit.

Each tokenizer is prepared into a fresh cache folder (read, split, tokenise, vocabularies; BPE
and unigram also train their subword model), then loaded again from that cache. The last row
generates the default toy task (reverse, 20,000 training pairs, as JoeyNMT's tutorial), which
is not cached.

    python benchmarks/prepare_speed.py
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
    args = parser.parse_args()
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
