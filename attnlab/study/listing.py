"""Every run the lab can open: the runs directory's own runs, then each study's runs grouped
under their study and cell (issue 44: Inspect, Compare and Runs saw only the first kind).

A study is a folder holding ``study.json`` in ``RUNS/studies`` (``attnlab study run``'s
default ``--out``) or in ``RUNS``; its runs are its sub-folders ``CELL-sSEED`` (listed in the
record's cell order, then by seed), its tuning runs are under ``tune/``. No torch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from attnlab.runs.listing import RunSummary, list_runs, summarize_run
from attnlab.runs.rundir import CONFIG_FILE
from attnlab.study.tune import TUNE_DIR

STUDY_RECORD = "study.json"  # attnlab.study.runner.STUDY_FILE (imported there with torch)
SEED_SUFFIX = re.compile(r"-s(\d+)$")


def find_studies(runs_dir: Path) -> list[Path]:
    """Study directories (holding study.json) in ``runs/studies`` and ``runs``, newest first."""
    found: dict[Path, float] = {}
    for parent in (Path(runs_dir) / "studies", Path(runs_dir)):
        try:
            children = list(parent.iterdir()) if parent.is_dir() else []
        except OSError:
            continue
        for child in children:
            record = child / STUDY_RECORD
            try:
                if record.is_file():
                    found[child] = record.stat().st_mtime
            except OSError:
                continue
    return sorted(found, key=lambda p: -found[p])


def _cell_order(directory: Path) -> list[str]:
    try:
        record = json.loads((directory / STUDY_RECORD).read_text(encoding="utf-8"))
        return [str(c["name"]) for c in record.get("cells", []) if isinstance(c, dict)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []  # a damaged record: its runs are still listed, by name


def _run_dirs(folder: Path) -> list[Path]:
    try:
        return sorted(d for d in folder.iterdir() if d.is_dir() and (d / CONFIG_FILE).is_file())
    except OSError:
        return []


def _cell_and_seed(name: str) -> tuple[str, int]:
    match = SEED_SUFFIX.search(name)
    return (name[: match.start()], int(match.group(1))) if match else (name, 0)


def study_runs(directory: Path) -> list[RunSummary]:
    """One study's runs: by cell (in the record's order), then seed; then its tuning runs."""
    order = {name: i for i, name in enumerate(_cell_order(directory))}

    def key(run_dir: Path) -> tuple[int, str, int]:
        cell, seed = _cell_and_seed(run_dir.name)
        return (order.get(cell, len(order)), cell, seed)

    out = []
    for prefix, folder in (("", directory), (f"{TUNE_DIR}/", directory / TUNE_DIR)):
        for run_dir in sorted(_run_dirs(folder), key=key):
            summary = summarize_run(run_dir)
            summary.study = directory.name if not prefix else f"{directory.name}/{TUNE_DIR}"
            summary.cell = _cell_and_seed(run_dir.name)[0]
            out.append(summary)
    return out


def lab_runs(runs_dir: Path) -> list[RunSummary]:
    """The runs directory's runs (newest first), then every study's (newest study first)."""
    runs = list_runs(runs_dir)
    for directory in find_studies(runs_dir):
        runs.extend(study_runs(directory))
    return runs


def lab_signature(runs_dir: Path) -> tuple:
    """A cheap change detector over every run the lab lists: each event log's size and mtime
    (the runs directory's and the studies' run folders)."""
    folders: list[Path] = []
    try:
        folders = [d for d in Path(runs_dir).iterdir() if d.is_dir()]
    except OSError:
        return ()
    for directory in find_studies(runs_dir):
        folders.extend(_run_dirs(directory))
        folders.extend(_run_dirs(directory / TUNE_DIR))
    entries = []
    for d in folders:
        try:
            stat = (d / "events.jsonl").stat()
            entries.append((str(d), stat.st_size, stat.st_mtime))
        except OSError:
            entries.append((str(d), -1, 0.0))
    return tuple(sorted(entries))


def listed_name(run_dir: Path) -> str:
    """``RunSummary.listed_name`` from a path alone: ``STUDY/RUN`` (``STUDY/tune/RUN``) for a
    study's run, else the folder's name."""
    run_dir = Path(run_dir)
    parent = run_dir.parent
    if (parent / STUDY_RECORD).is_file():
        return f"{parent.name}/{run_dir.name}"
    if parent.name == TUNE_DIR and (parent.parent / STUDY_RECORD).is_file():
        return f"{parent.parent.name}/{TUNE_DIR}/{run_dir.name}"
    return run_dir.name
