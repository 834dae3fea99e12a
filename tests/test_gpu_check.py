"""benchmarks/gpu_check.py: its CPU fallback (what CI runs), its peak table and FLOP count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import gpu_check  # noqa: E402


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    assert not (tmp_path / "x.json").exists()


def test_peak_table_by_device_name_and_override():
    assert gpu_check.peak_flops("NVIDIA H200") == 989.5e12
    assert gpu_check.peak_flops("NVIDIA H100 80GB HBM3") == 989.5e12
    assert gpu_check.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_check.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_check.peak_flops("Tesla T4") is None
    assert gpu_check.peak_flops("Tesla T4", override_tflops=65) == 65e12


def test_model_flops_by_hand_for_a_one_layer_transformer():
    from attnlab.config import ExperimentConfig, ModelConfig
    from attnlab.nn.model import build_model

    d, ff, vocab = 8, 16, 10
    model = build_model(
        ExperimentConfig(
            model=ModelConfig(
                arch="transformer", d_model=d, heads=2, ff=ff, enc_layers=1, dec_layers=1
            )
        ),
        vocab,
        vocab,
    )
    src, tgt = [3, 5], [4, 2]
    s_tok, t_tok = sum(src), sum(tgt)
    on_source = (4 * d * d + 2 * d * ff) + 2 * d * d  # encoder layer; cross-attention k, v
    on_target = 4 * d * d + 2 * d * d + 2 * d * ff + vocab * d  # dec self; cross q, o; ff; output
    dense = 6 * (on_source * s_tok + on_target * t_tok)
    attention = sum(12 * d * (s * s + t * t + t * s) for s, t in zip(src, tgt, strict=True))
    assert gpu_check.model_flops(model, src, tgt) == pytest.approx(dense + attention)
