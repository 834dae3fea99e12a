"""benchmarks/gpu_check.py: its CPU fallback (what CI runs), its peak table and FLOP count."""

from __future__ import annotations

import json
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


MULTI30K = REPO.parent / "shared" / "corpora" / "multi30k"


@pytest.mark.slow
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/corpora/multi30k is absent")
def test_every_part_runs_on_the_cpu_and_the_json_holds_its_figures(tmp_path):
    """``--device cpu`` walks the whole script at toy sizes: a preset stopped by its time cap
    (before its budget), the MFU rows, decoding with the trained Transformer and a one-process
    torchrun job; the JSON holds each part's figures and no part failed."""
    out = tmp_path / "check.json"
    argv = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    argv += ["--skip-tests", "--presets", "multi30k-transformer", "--preset-seconds", "3"]
    argv += ["--set", "data.max_pairs=200", "--set", "data.max_len=12", "--test-sentences", "5"]
    argv += ["--mfu-batch", "2", "3", "--mfu-len", "4", "--mfu-steps", "1", "--ddp-steps", "2"]
    argv += ["--runs", str(tmp_path / "runs"), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ATTNLAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    [preset] = report["presets"]
    assert "error" not in preset, preset
    assert preset["reason"] == "stopped" and preset["steps"] < preset["budget_steps"] == 2270
    assert preset["n_test"] == 5 and preset["train_tflops"] is not None
    assert [row["batch"] for row in report["mfu"]["rows"]] == [2, 3]
    assert all(row["mfu"] is None for row in report["mfu"]["rows"])  # no bf16 peak for a CPU
    assert report["decoding"]["sentences"] == 5 and report["decoding"]["greedy_sent_per_s"] > 0
    ddp = report["ddp"]
    assert (ddp["nproc"], ddp["exit_code"], ddp["steps"], ddp["reason"]) == (1, 0, 2, "finished")
    assert "multi30k-transformer" in done.stdout and "train --nproc 1" in done.stdout


def test_a_failing_part_is_reported_with_where_and_the_rest_still_run(tmp_path):
    """run_part: an exception becomes {'error', 'where'}; past --deadline a part is skipped."""
    import argparse
    import time

    saved = []
    args = argparse.Namespace(deadline=0, started=time.perf_counter(), save=lambda: saved.append(1))
    report: dict = {}

    def broken(_args):
        raise ValueError("no such thing")

    gpu_check.run_part(args, report, "broken", broken)
    gpu_check.run_part(args, report, "fine", lambda _args: {"value": 1})
    assert report["broken"]["error"] == "ValueError: no such thing"
    assert "broken" in report["broken"]["where"][-1]
    assert report["fine"]["value"] == 1 and "seconds" in report["fine"]
    args.deadline, args.started = 1, time.perf_counter() - 2
    gpu_check.run_part(args, report, "late", lambda _args: {"value": 2})
    assert report["late"] == {"skipped": "past --deadline"} and len(saved) == 3
