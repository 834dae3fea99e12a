"""The trainer's static-shape, sync-free and CUDA-graph settings on a tiny config (CPU; the
CUDA-only checks skip without a device)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.events import iter_events
from attnlab.experiment import apply_overrides
from attnlab.runs import read_tensors
from attnlab.train.trainer import Trainer


def _steps(run_dir):
    return [e for e in iter_events(run_dir) if e["type"] == "step"]


def _weights(run_dir):
    return read_tensors(run_dir / "checkpoints" / "last" / "model.safetensors")[0]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_bucket_padded_training_equals_unpadded_training(tmp_path, tiny_config, arch):
    """train.pad_buckets=on pads every batch to a bucket shape on the CPU too: the same
    losses and weights as unpadded training (no dropout: its masks depend on the shape),
    with the larger padding share logged."""
    overrides = ["model.dropout=0", "train.eval_every=1000", "train.batch_size=12"]
    if arch == "transformer":
        overrides += ["model.arch=transformer", "model.d_model=16", "model.heads=2"]
        overrides += ["model.ff=32", "model.enc_layers=1", "model.dec_layers=1"]
    base = apply_overrides(tiny_config, overrides)
    for setting in ("off", "on"):
        config = replace(base, train=replace(base.train, pad_buckets=setting, pad_multiple=8))
        assert Trainer(config, tmp_path / setting, device="cpu").run()["reason"] == "finished"
    off, on = _steps(tmp_path / "off"), _steps(tmp_path / "on")
    assert [e["step"] for e in on] == [e["step"] for e in off]
    for a, b in zip(on, off, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["tokens"] == b["tokens"]  # real target tokens, not padded positions
        assert a["padding"] > b["padding"]
    on_w, off_w = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    for key, value in off_w.items():
        if key.endswith("k_proj.bias"):  # its exact gradient is 0 (softmax is shift-invariant):
            continue  # AdamW scales float rounding there up to lr-sized steps either way
        torch.testing.assert_close(on_w[key], value, rtol=1e-4, atol=1e-5, msg=key)
