"""End to end (slow): a preset really learns; Ctrl+C in a child process; resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from attnlab.events import iter_events, read_events
from attnlab.experiment import apply_overrides, load_preset
from attnlab.runs import load_checkpoint
from attnlab.train.trainer import Trainer

pytestmark = pytest.mark.slow


# A fraction of the preset's 1500 steps that already proves learning. Measured on this CPU
# (dev BLEU, best of the evals at 100..400 steps; train.seed 1234 / 1 / 2 / 3 / 4):
# 97.5 / 97.4 / 97.6 / 96.7 / 96.7; the same budget without attention (model.attention=none)
# reaches 27.0, an untrained model about 0.
LEARN_STEPS = 400
LEARN_BLEU = 90.0


def test_reverse_bahdanau_preset_learns_reverse_within_400_steps(tmp_path):
    """The default lab run (the reverse-bahdanau preset, unchanged but for its step budget and
    eval interval) learns to reverse: dev BLEU > 90 within 400 steps, on the CPU, end to end
    (data, model, trainer, evaluation, checkpoint). Any model that does not learn, or that
    cannot attend, fails: attention-less it stays near 27, untrained near 0."""
    config = apply_overrides(
        load_preset("reverse-bahdanau"), [f"train.max_steps={LEARN_STEPS}", "train.eval_every=100"]
    )
    summary = Trainer(config, tmp_path / "run", device="cpu").run()
    assert summary["reason"] == "finished"
    assert summary["step"] <= config.train.max_steps
    assert summary["best"]["bleu"] > LEARN_BLEU, summary["best"]
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
    args = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--out",
        str(tmp_path),
        "--run-name",
        "sig",
        "--quiet",
        *tiny_sets,
    ]
    child = subprocess.Popen(
        [*args, "--set", "train.max_steps=100000", "--set", "train.eval_every=100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        _wait_for(
            lambda: any(e["type"] == "step" for e in read_events(run_dir)[0]),
            120,
            "the first step event",
        )
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
        [
            sys.executable,
            "-m",
            "attnlab",
            "train",
            "--resume",
            str(run_dir),
            "--quiet",
            "--set",
            f"train.max_steps={stopped_at + 4}",
        ],
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
