"""Shared test helpers: tiny configurations that train in well under a second."""

from __future__ import annotations

import pytest
import torch

# --set overrides for a model and data small enough for fast CLI and trainer tests.
TINY_OVERRIDES = (
    "data.train_size=64",
    "data.dev_size=16",
    "data.test_size=16",
    "data.max_len=8",
    "model.hidden=16",
    "model.emb=8",
    "train.max_steps=6",
    "train.batch_size=16",
    "train.eval_every=3",
    "train.log_every=1",
    "train.samples=2",
)


@pytest.fixture
def tiny_config():
    """reverse + GRU + Bahdanau at toy sizes (a fresh config per test)."""
    from attnlab.config import ExperimentConfig
    from attnlab.experiment import apply_overrides

    return apply_overrides(ExperimentConfig(name="tiny"), list(TINY_OVERRIDES))


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
