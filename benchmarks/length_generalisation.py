"""Length generalisation: train on short sequences, test on longer ones. A thin wrapper over
the shipped study ``studies/length-generalisation.toml`` (``attnlab study run
length-generalisation`` is the same with its 5 seeds), for a quicker or narrower look.

    OMP_NUM_THREADS=1 python benchmarks/length_generalisation.py --seeds 1            # 800 steps
    OMP_NUM_THREADS=1 python benchmarks/length_generalisation.py --quick --only alibi

Every cell trains the reverse-transformer-sized model (2+2 layers, d_model 128, 4 heads, ff 256)
on the copy task (``--task reverse`` for reverse) with sources of 3..20 symbols, then the final
model decodes the test split, sources of 21..40 symbols (dev is in-distribution). Cells: the
encoder's and decoder's self-attention with sinusoidal, rotary, relative (Shaw), ALiBi,
stick-breaking and NSA positions; cross-attention is scaled-dot. The table: test exact match and
BLEU (mean ± 95 % t interval over seeds), and test BLEU per source-length bucket.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _studies import add_study_options, run_and_tabulate

from attnlab.config import load_toml

STUDY = Path(__file__).resolve().parent.parent / "studies" / "length-generalisation.toml"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="copy", choices=["copy", "reverse"])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 800)")
    parser.add_argument("--only", action="append", default=[], help="run only these cells")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a couple of minutes: 100 steps (unless --steps), 2000 training and 100 dev/test "
        "sentences per run",
    )
    add_study_options(parser, seeds=5)
    args = parser.parse_args()
    raw = load_toml(STUDY)
    extra = [f"data.task={args.task}"]
    if args.quick:
        extra += ["data.train_size=2000", "data.dev_size=100", "data.test_size=100"]
    steps = args.steps or (100 if args.quick else None)
    if steps:
        extra += [f"train.max_steps={steps}", f"train.eval_every={steps}"]
    raw["set"] = [*raw["set"], *extra]
    if args.only:
        raw["cells"] = [cell for cell in raw["cells"] if cell["name"] in args.only]
        if not raw["cells"]:
            names = ", ".join(cell["name"] for cell in load_toml(STUDY)["cells"])
            parser.error(f"--only: no such cell; cells: {names}")
        if raw["baseline"] not in args.only:
            raw["baseline"] = raw["cells"][0]["name"]
    run_and_tabulate(raw, str(STUDY), args)


if __name__ == "__main__":
    main()
