"""What the benchmark scripts that compare configurations share: each builds a study (cells ×
seeds) and hands it to the study engine (attnlab.study), which trains, scores and tabulates.
One engine, not a loop per script."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from attnlab.study.render import markdown
from attnlab.study.runner import run_study
from attnlab.study.spec import study_from_dict
from attnlab.study.table import StudyTable, load_table


def add_study_options(parser: argparse.ArgumentParser, seeds: int = 1) -> None:
    parser.add_argument("--seeds", type=int, default=seeds, help=f"seeds per cell ({seeds})")
    parser.add_argument("--workers", type=int, default=None, help="runs at once")
    parser.add_argument("--threads", type=int, default=None, help="threads per run (1)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="study directory parent (default: a temp dir)"
    )


def run_and_tabulate(raw: dict[str, Any], source: str, args: argparse.Namespace) -> StudyTable:
    """Run the study ``raw`` (a study file's table) with the script's options; print and
    return its table."""
    raw = {**raw, "seeds": args.seeds, "set": [*raw.get("set", []), *args.overrides]}
    study = study_from_dict(raw, source)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"attnlab-{study.name}-"))
    result, directory = run_study(study, out, workers=args.workers, threads=args.threads)
    for outcome in result.failed:
        print(f"failed: {outcome.run_name}: {outcome.error}")
    table = load_table(directory)
    print(markdown(table))
    print(f"\n(runs in {directory}; `attnlab study show {directory}` prints this again)")
    return table
