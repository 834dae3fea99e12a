"""The study prompt's time estimate: a finished run's seconds per step, scaled by the batch
size, × steps × the rounds the workers need (figures worked out by hand here)."""

from __future__ import annotations

from pathlib import Path

from _tui_support import lab_config, run_events, write_run

from attnlab.experiment import apply_overrides
from attnlab.runs import list_runs
from attnlab.study.estimate import duration_text, estimate_study


def test_estimate_from_the_closest_finished_run(tmp_path: Path) -> None:
    write_run(tmp_path, "timed", run_events(steps=40))  # done at step 40 after 4.0 s
    (finished,) = list_runs(tmp_path)
    assert finished.steps == 40 and finished.wall_s == 4.0  # 0.1 s per step at its batch size
    batch = lab_config().train.batch_size
    config = apply_overrides(lab_config(), [f"train.batch_size={batch * 2}", "train.max_steps=50"])
    estimate = estimate_study(config, runs=5, workers=2, finished=[finished])
    assert estimate is not None and estimate.reference == "timed"
    # 0.1 s/step × 2 (twice the batch) × 50 steps × 3 rounds (5 runs on 2 workers)
    assert abs(estimate.per_step_s - 0.2) < 1e-12
    assert abs(estimate.seconds - 30.0) < 1e-9


def test_no_finished_run_no_figure(tmp_path: Path) -> None:
    write_run(tmp_path, "running", run_events(done=None))
    assert estimate_study(lab_config(), 4, 1, list_runs(tmp_path)) is None


def test_duration_text() -> None:
    assert duration_text(40) == "≈ 40 s"
    assert duration_text(12 * 60 + 10) == "≈ 12 min"
    assert duration_text(2 * 3600 + 5 * 60) == "≈ 2 h 05 min"
