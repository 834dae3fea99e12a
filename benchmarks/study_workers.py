"""How much faster a study of small models runs with W workers × 1 thread than with 1 worker ×
W threads, side by side in one run (this machine is noisy: the ratio is what to read).

    python benchmarks/study_workers.py                   # 2 cells × 2 seeds, 300 steps each
    python benchmarks/study_workers.py --steps 100 --cores 2

Both arms train the same study (reverse-bahdanau at its default sizes, bahdanau and
luong-general) into fresh directories; the wall time of each whole study is printed, then the
ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from attnlab.study.runner import run_study
from attnlab.study.spec import study_from_dict


def timed_study(workers: int, threads: int, steps: int, seeds: int, out: Path) -> float:
    study = study_from_dict(
        {
            "name": f"workers-{workers}x{threads}",
            "preset": "reverse-bahdanau",
            "set": [f"train.max_steps={steps}", f"train.eval_every={steps}", "train.samples=0"],
            "seeds": seeds,
            "grid": {"model.attention": ["bahdanau", "luong-general"]},
        },
        "benchmarks/study_workers.py",
    )
    start = time.perf_counter()
    result, _ = run_study(study, out, workers=workers, threads=threads)
    seconds = time.perf_counter() - start
    failed = [o for o in result.outcomes if o.state != "scored"]
    if failed:
        raise SystemExit(f"{failed[0].run_name}: {failed[0].state}: {failed[0].error}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cores", type=int, default=2, help="W: workers, or threads of one")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="attnlab-study-workers-") as scratch:
        wide = timed_study(args.cores, 1, args.steps, args.seeds, Path(scratch) / "a")
        deep = timed_study(1, args.cores, args.steps, args.seeds, Path(scratch) / "b")
    print(f"{args.cores} workers × 1 thread: {wide:.1f} s")
    print(f"1 worker × {args.cores} threads: {deep:.1f} s")
    print(f"speed-up of workers over threads: {deep / wide:.2f}×")


if __name__ == "__main__":
    main()
