"""Shared test helpers: tiny configurations that train in well under a second."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from _tiny import TINY_OVERRIDES
from _tiny import tiny_config as _tiny_config


@pytest.fixture
def tiny_config():
    """reverse + GRU + Bahdanau at toy sizes (a fresh config per test): ``_tiny.tiny_config()``."""
    return _tiny_config()


@pytest.fixture
def tiny_sets() -> list[str]:
    """TINY_OVERRIDES as command-line arguments: ["--set", "data.train_size=64", ...]."""
    return [arg for item in TINY_OVERRIDES for arg in ("--set", item)]


# "cpu", and "cuda" where a CUDA device exists: skipped (never silently run on the CPU)
# otherwise. Use as ``@pytest.mark.parametrize("device", DEVICES)`` or the ``device`` fixture.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """The device a device-parametrised test runs on (its id ends in [cpu] or [cuda])."""
    return torch.device(request.param)


# -- a tiny language-model run (data.task = lm) ------------------------------------------------

LM_WORDS = ["the king", "my lord", "good night", "sweet prince"]
LM_SETS = {
    "data.task": "lm",
    "data.tokenizer": "char",
    "data.block_size": 12,
    "data.dev_fraction": 0.1,
    "model.arch": "decoder-only",
    "model.d_model": 16,
    "model.heads": 2,
    "model.ff": 32,
    "model.dec_layers": 1,
    "model.positions": "learned",
    "model.dropout": 0.0,
    "train.max_steps": 40,
    "train.batch_size": 8,
    "train.eval_every": 40,
    "train.metric": "loss",
    "train.lr": 0.01,
    "train.samples": 0,
    "train.attention_history": 0,
}


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory) -> Path:
    """A tiny character LM trained once per session (four phrases, 40 steps)."""
    root = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    (root / "t.txt").write_text("\n".join(rng.choice(LM_WORDS) for _ in range(300)) + "\n")
    sets = {**LM_SETS, "data.path": str(root / "t.txt")}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    from click.testing import CliRunner

    from attnlab.cli import cli

    result = CliRunner().invoke(
        cli, ["train", "--out", str(root), "--run-name", "lm", "--quiet", *args]
    )
    assert result.exit_code == 0, result.output
    return root / "lm"
