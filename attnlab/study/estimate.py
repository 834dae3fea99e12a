"""How long a study of N runs would take, from runs already trained here (no torch).

The time per step of the closest finished run (same architecture and task first, then same
architecture, then any), scaled by the batch size (a step's work is about linear in it), ×
the steps of each run × the runs each worker trains in turn. An estimate, said as one: no
finished run means no figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlab.config import ExperimentConfig, load_toml
from attnlab.errors import AttnlabError
from attnlab.runs.listing import RunSummary


@dataclass(frozen=True)
class StudyEstimate:
    seconds: float  # wall time of the whole study
    per_step_s: float  # the reference run's seconds per step, at this batch size
    reference: str  # the run timed
    workers: int


def _batch_size(run: RunSummary) -> int | None:
    try:
        value = load_toml(run.path / "config.toml").get("train", {}).get("batch_size")
    except (AttnlabError, OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def estimate_study(
    config: ExperimentConfig, runs: int, workers: int, finished: list[RunSummary]
) -> StudyEstimate | None:
    """The wall time of ``runs`` runs of ``config`` on ``workers`` workers, from ``finished``
    (summaries of runs trained on this machine; those without steps or time are ignored)."""
    timed = [r for r in finished if r.status == "finished" and r.steps > 0 and r.wall_s]
    arch, task = config.model.arch, config.data.task
    for pick in (
        lambda r: r.arch == arch and r.task == task,
        lambda r: r.arch == arch,
        lambda r: True,
    ):
        chosen = [r for r in timed if pick(r)]
        if chosen:
            break
    else:
        return None
    ref = chosen[0]  # newest first (attnlab.runs.listing.list_runs' order)
    per_step = float(ref.wall_s or 0.0) / ref.steps
    batch = _batch_size(ref)
    if batch:
        per_step *= config.train.batch_size / batch
    workers = max(1, workers)
    rounds = math.ceil(max(runs, 0) / workers)
    return StudyEstimate(rounds * config.train.max_steps * per_step, per_step, ref.name, workers)


def duration_text(seconds: float) -> str:
    """``≈ 2 h 05 min``, ``≈ 12 min``, ``≈ 40 s``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"≈ {seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"≈ {minutes} min"
    return f"≈ {minutes // 60} h {minutes % 60:02d} min"
