"""End to end (slow): a preset really learns; Ctrl+C in a child process; resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from attnlab.experiment import load_preset
from attnlab.runs import load_checkpoint
from attnlab.train.events import iter_events, read_events
from attnlab.train.trainer import Trainer

pytestmark = pytest.mark.slow


def test_reverse_bahdanau_learns_within_its_preset_budget(tmp_path):
    config = load_preset("reverse-bahdanau")
    summary = Trainer(config, tmp_path / "run", device="cpu").run()
    assert summary["reason"] == "finished"
    assert summary["step"] <= config.train.max_steps
    assert summary["best"]["bleu"] > 90, summary["best"]
    # Reported for a task with gold alignments (how sharp it gets is the model's business:
    # additive attention often lags one position behind on long inputs).
    assert 0.0 <= summary["best"]["alignment_accuracy"] <= 1.0
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.metrics["bleu"] == summary["best"]["bleu"]


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sigint_saves_last_exits_130_and_resume_continues(tmp_path, tiny_sets):
    run_dir = tmp_path / "sig"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "attnlab", "train", "--out", str(tmp_path), "--run-name", "sig", "--quiet", *tiny_sets]
    child = subprocess.Popen(
        [*args, "--set", "train.max_steps=100000", "--set", "train.eval_every=100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_for(lambda: any(e["type"] == "step" for e in read_events(run_dir)[0]), 120, "the first step event")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    assert "Traceback" not in err
    events = list(iter_events(run_dir))
    done = events[-1]
    assert done["type"] == "done" and done["reason"] == "interrupted"
    stopped_at = done["step"]
    assert 0 < stopped_at < 100000
    loaded = load_checkpoint(run_dir / "checkpoints" / "last")
    assert loaded.step == stopped_at and not loaded.model.training

    resumed = subprocess.run(
        [sys.executable, "-m", "attnlab", "train", "--resume", str(run_dir), "--quiet", "--set", f"train.max_steps={stopped_at + 4}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    events = list(iter_events(run_dir))
    starts = [e for e in events if e["type"] == "start"]
    assert [(s["step"], s["resumed"]) for s in starts] == [(0, False), (stopped_at, True)]
    steps = [e["step"] for e in events if e["type"] == "step"]
    assert steps[-4:] == [stopped_at + 1, stopped_at + 2, stopped_at + 3, stopped_at + 4]
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "finished"
    assert load_checkpoint(run_dir / "checkpoints" / "last").step == stopped_at + 4
