"""Dev curves of a study: per cell, the mean over seeds at each evaluated step and a band
(min..max over the seeds that reached that step). What the lab's study view draws."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from attnlab.study.runner import load_record

CURVE_METRICS = ("bleu", "chrf", "exact_match", "loss")


@dataclass(frozen=True)
class CellCurve:
    cell: str
    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: list[int]  # seeds that have at least one evaluation


def run_curve(run_dir: Path, metric: str) -> dict[int, float]:
    """step -> the dev metric of one run's ``eval`` events (a resumed run's later value wins)."""
    from attnlab.events import Eval, read_typed_log

    if not (run_dir / "events.jsonl").is_file():
        return {}
    events, _ = read_typed_log(run_dir)
    points: dict[int, float] = {}
    for event in events:
        if isinstance(event, Eval) and event.split == "dev":
            value = getattr(event, metric, None)
            if isinstance(value, (int, float)) and math.isfinite(value):
                points[event.step] = float(value)
    return points


def study_curves(directory: Path, metric: str = "bleu") -> list[CellCurve]:
    if metric not in CURVE_METRICS:
        raise ValueError(f"metric {metric!r}: valid {CURVE_METRICS}")
    record = load_record(directory)
    seeds = [int(s) for s in record.get("seeds", [])]
    curves = []
    for cell in record["cells"]:
        name = str(cell.get("name"))
        per_seed = {s: run_curve(Path(directory) / f"{name}-s{s}", metric) for s in seeds}
        per_seed = {s: points for s, points in per_seed.items() if points}
        steps = sorted({step for points in per_seed.values() for step in points})
        mean, low, high = [], [], []
        for step in steps:
            values = [points[step] for points in per_seed.values() if step in points]
            mean.append(sum(values) / len(values))
            low.append(min(values))
            high.append(max(values))
        curves.append(CellCurve(name, steps, mean, low, high, sorted(per_seed)))
    return curves
