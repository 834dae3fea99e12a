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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mfu-profile", "-1"], "--mfu-profile must be at least 0: -1"),
        (["--mfu-batch", "4", "0"], "--mfu-batch: each size must be at least 1: [4, 0]"),
        (["--ddp-steps", "0"], "--ddp-steps must be at least 1: 0"),
        (["--skip", "bogus"], "invalid choice: 'bogus'"),
        (["--mfu-set", "model.d_modle=512"], "--mfu-set: unknown key model.d_modle (did you mean"),
    ],
)
def test_bad_arguments_get_one_line_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_mfu_set_changes_only_the_model_the_mfu_rows_time():
    config = gpu_check.mfu_config(["model.d_model=512", "model.ff=2048"])
    preset = gpu_check.mfu_config([])
    assert (config.model.d_model, config.model.ff) == (512, 2048)
    assert (preset.model.d_model, preset.model.ff) == (256, 512)
    assert config.train == preset.train and config.data == preset.data


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


def test_model_flops_by_hand_for_a_two_layer_decoder_only_lm():
    from attnlab.config import ExperimentConfig, ModelConfig
    from attnlab.nn.model import build_model

    d, ff, vocab, layers = 8, 16, 10, 2
    config = ExperimentConfig(
        model=ModelConfig(arch="decoder-only", d_model=d, heads=2, ff=ff, dec_layers=layers)
    )
    model = build_model(config, vocab, vocab)
    windows = [6, 6, 6]  # an LM batch: empty sources, windows of 6 tokens
    per_token = layers * (4 * d * d + 2 * d * ff) + vocab * d  # attention q k v o; ff; output
    dense = 6 * per_token * sum(windows)
    attention = sum(12 * layers * d * t * t for t in windows)
    flops = gpu_check.model_flops(model, [0] * len(windows), windows)
    assert flops == pytest.approx(dense + attention)


def test_profile_summary_counts_device_time_once_and_per_step():
    """The device's busy time is the kernels' own time (as the profiler's "Self CUDA time
    total"): not again through the host operator that launched a kernel, nor through an
    annotation on the device's timeline (``Optimizer.step``)."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(key, device, count=1, cpu_us=0.0, device_us=0.0, annotation=False):
        return SimpleNamespace(
            key=key,
            device_type=device,
            count=count,
            self_cpu_time_total=cpu_us,
            self_device_time_total=device_us,
            is_user_annotation=annotation,
        )

    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    averages = [
        event("aten::mm", cpu, count=6, cpu_us=900.0, device_us=80.0),  # its kernels' time
        event("gemm_kernel", cuda, count=2, device_us=30.0),
        event("copy_kernel", cuda, count=3, device_us=50.0),
        event("Optimizer.step#AdamW.step", cuda, device_us=500.0, annotation=True),
        event("cudaLaunchKernel", cpu, count=4, cpu_us=40.0),
        event("cuLaunchKernelEx", cpu, count=1, cpu_us=10.0),
        event("cudaStreamSynchronize", cpu, count=2, cpu_us=5.0),
    ]
    summary = gpu_check.summarise_profile(averages, steps=2)
    assert summary["device_busy_ms_per_step"] == pytest.approx((30 + 50) / 1e3 / 2)
    assert summary["kernels_per_step"] == 2.5
    assert summary["kernel_launches_per_step"] == 2.5
    assert summary["host_syncs_per_step"] == 1.0
    assert summary["aten_ops_per_step"] == 3.0
    assert list(summary["top_device_ms_per_step"]) == ["copy_kernel", "gemm_kernel"]
    assert next(iter(summary["top_host_ms_per_step"])) == "aten::mm"


MULTI30K = REPO.parent / "shared" / "corpora" / "multi30k"


@pytest.mark.slow
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/corpora/multi30k is absent")
def test_every_part_runs_on_the_cpu_and_the_json_holds_its_figures(tmp_path):
    """``--device cpu`` walks the whole script at toy sizes: the Transformer preset stopped by
    its time cap (before its budget), a GRU preset in its own process beside the tests' slot
    and a one-process torchrun job (``--side-by-side``), the MFU rows, decoding with the
    trained Transformer and the training loop's profile; the JSON holds each part's figures
    and no part failed."""
    out = tmp_path / "check.json"
    argv = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--device", "cpu"]
    argv += ["--skip", "tests", "--presets", "multi30k-transformer", "multi30k-gru-none"]
    argv += ["--side-by-side", "--preset-seconds", "3", "--profile-steps", "3"]
    argv += ["--set", "data.max_pairs=200", "--set", "data.max_len=12", "--test-sentences", "5"]
    argv += ["--mfu-batch", "2", "3", "--mfu-len", "4", "--mfu-steps", "1", "--ddp-steps", "2"]
    argv += ["--mfu-profile", "1", "--mfu-set", "model.ff=64", "--graphs-steps", "50"]
    argv += ["--runs", str(tmp_path / "runs"), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ATTNLAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    transformer, gru = report["presets"]
    for preset in (transformer, gru):
        assert "error" not in preset, preset
        assert preset["reason"] == "stopped" and preset["steps"] < preset["budget_steps"] == 2270
        assert preset["n_test"] == 5
    assert transformer["train_tflops"] is not None and "side_by_side" not in transformer
    assert gru["preset"] == "multi30k-gru-none" and gru["side_by_side"] is True
    # The preset's own rows, then the --mfu-set model's.
    assert [row["batch"] for row in report["mfu"]["rows"]] == [2, 3, 2, 3]
    assert [row["overrides"] for row in report["mfu"]["rows"]] == [[], [], *[["model.ff=64"]] * 2]
    assert report["mfu"]["overrides"] == ["model.ff=64"] and "model.ff=64" in done.stdout
    assert all(row["mfu"] is None for row in report["mfu"]["rows"])  # no bf16 peak for a CPU
    # Profiled rows: no device timeline on a CPU (summarise_profile's counting is tested above).
    assert all(row["profile"]["kernels_per_step"] == 0 for row in report["mfu"]["rows"])
    assert report["decoding"]["sentences"] == 5 and report["decoding"]["greedy_sent_per_s"] > 0
    ddp = report["ddp"]
    assert (ddp["nproc"], ddp["exit_code"], ddp["steps"], ddp["reason"]) == (1, 0, 2, "finished")
    profile = report["profile"]
    assert profile["steps_profiled"] == 25  # whole log windows: the loop's syncs as in a run
    assert profile["ms_per_step"] > 0 and profile["aten_ops_per_step"] > 100
    assert profile["device_busy_fraction"] == 0 and profile["cuda_graphs"] is False  # a CPU
    graphs_rows = report["graphs"]["rows"]
    assert [row["cuda_graphs"] for row in graphs_rows] == ["off", "on"]
    assert all(row["steps"] == 50 and row["steps_per_s"] > 0 for row in graphs_rows)
    assert not any(row["captured"] for row in graphs_rows)  # no CUDA: eager, said once
    assert graphs_rows[0]["notes"] == [] and len(graphs_rows[1]["notes"]) == 1
    assert "train.cuda_graphs=on" in graphs_rows[1]["notes"][0]
    assert "train.cuda_graphs=on, 50 steps" in done.stdout
    assert "aten::mm" in out.with_suffix(".profile.txt").read_text()
    assert "multi30k-transformer" in done.stdout and "train --nproc 1" in done.stdout
    assert "upper bound" in done.stdout and "training loop" in done.stdout


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
