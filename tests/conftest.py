"""Shared test helpers: tiny configurations that train in well under a second."""

from __future__ import annotations

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
