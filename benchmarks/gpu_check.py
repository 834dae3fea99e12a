"""One command that checks attnlab's GPU path on a CUDA machine and prints one table.

    python benchmarks/gpu_check.py --out gpu-check.json                     # everything, no cap
    python benchmarks/gpu_check.py --deadline 450 --preset-seconds 150 --out gpu-check.json

What it does, in order (a part that fails is reported and the next one runs; a part that
would start after ``--deadline`` seconds is skipped with that reason):
1. the CUDA tests: ``pytest -m "not slow" -k cuda tests`` (tests/test_cuda.py: every
   attention variant in every role, both RNN cells, bf16 autocast steps, search and a real
   ``torch.compile`` run against the CPU; and the device-parametrised tests elsewhere;
   ``--tests-k`` narrows them);
2. trains the Multi30k Transformer preset to its budget (or until ``--preset-seconds`` or
   the deadline, stopped as the lab's Stop does) through benchmarks/multi30k.py's
   ``run_preset``: steps, wall time, training tokens/s, test BLEU (greedy, the scoring of
   ``attnlab eval --split test``), and the model FLOP/s of its training loop at the preset's
   own batches;
3. greedy and beam-5 decoding, sentences/s, with the trained Transformer on the test sources;
4. with ``--profile-steps N``, N steps of the real training loop under torch.profiler: ms per
   step, the device's busy time and its fraction of the step, kernel launches and host syncs
   per step, the top operators;
4b. with ``--graphs-steps N``, the Transformer preset's training loop for N steps with
   ``train.cuda_graphs`` off and on (issue 32): steps/s after the first log window, the
   training wall time, the bucket shapes captured and any fallback note;
5. the Transformer's model FLOPs utilisation in bf16 on synthetic batches of ``--mfu-batch``
   sentences of ``--mfu-len`` tokens each (``model_flops`` below says how FLOPs are counted),
   eager and, with ``--mfu-compile``, compiled (the model and the loss, as ``train.compile``);
   the eager rows first, and a row that would start after the deadline is skipped;
   ``--mfu-profile N`` profiles N more steps of each row (the device's busy time, top kernels);
   ``--mfu-set SECTION.KEY=VALUE`` adds the same rows for a changed model (e.g. a wider one,
   ``--mfu-set model.d_model=1024 --mfu-set model.ff=4096 --mfu-set model.heads=16``) after the
   preset's own rows;
6. ``attnlab train --nproc 2`` (DDP over 2 GPUs, NCCL) when there are 2 GPUs, else
   ``--nproc 1``: exit code, wall time and tokens/s from the run's events;
7. the two GRU presets, as in 2 (last, so that a deadline cuts them first).
``--side-by-side`` trains the presets other than the Transformer each in its own process
(benchmarks/multi30k.py) at once, right after the Transformer, while the tests and the DDP
run go on; MFU, decoding and the profile wait for them to finish (they time the device).
Sharing the device and the CPU only slows a run, so those wall times are upper bounds.
``--skip PART ...`` leaves parts out. The JSON (``--out``) is rewritten after every part, so
a run cut short keeps what it measured.
Without CUDA it says so and exits 0. ``--device cpu`` runs the same parts on the CPU (a smoke
test of this script; its figures mean nothing for a GPU).

MFU = achieved model FLOP/s ÷ the device's peak dense bf16 FLOP/s (PEAK_BF16 by device
name, or ``--peak-tflops``). Model FLOPs of one training step (forward + backward = 3 ×
forward, each multiply-add 2 FLOPs):
- matmuls: 6 × (weights) × (tokens they process): every 2-D ``.weight`` of the encoder
  layers and the decoder's cross-attention key/value projections × source tokens, every
  other 2-D ``.weight`` (decoder layers, the output layer) × target tokens; embedding
  lookups, biases and norms are not counted;
- attention scores and weighted sums: 12 · L · d · (keys) per query token and layer
  (Qkᵀ and A·V, 2·d·keys each, × 3 for the backward): encoder self-attention keys = source
  length, decoder self-attention keys = target length (the causal half is counted whole, the
  usual convention), cross-attention keys = source length.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

# Dense bf16 tensor-core peaks (FLOP/s), NVIDIA data sheets (SXM unless the name says PCIe).
PEAK_BF16 = (
    ("H200", 989.5e12),
    ("H100 PCIe", 756e12),
    ("H100", 989.5e12),
    ("A100", 312e12),
)
import multi30k  # noqa: E402  (its run_preset trains each preset; its argument checks)
from flops import model_flops  # noqa: E402  (one home: also throughput.py's fraction of peak)

PARTS = ("tests", "train", "mfu", "decoding", "profile", "graphs", "ddp")
# The Transformer first: its figure is the headline, and a --deadline cuts from the end.
PRESETS = ("multi30k-transformer", "multi30k-gru-bahdanau", "multi30k-gru-none")
TRANSFORMER_RUN = Path("presets") / "multi30k-transformer"


def peak_flops(device_name: str, override_tflops: float = 0.0) -> float | None:
    """The device's dense bf16 peak in FLOP/s (``override_tflops`` wins), None if unknown."""
    if override_tflops > 0:
        return override_tflops * 1e12
    for key, value in PEAK_BF16:
        if all(part in device_name for part in key.split()):
            return value
    return None


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (timing); nothing to wait for on the CPU."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_cuda_tests(args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-k", args.tests_k]
    argv += ["-p", "no:cacheprovider", "--tb=short", "tests"]
    try:
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=args.tests_timeout
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "summary": f"timed out after {args.tests_timeout} s"}
    log = Path(args.out).with_suffix(".pytest.txt")  # the whole output, tracebacks included
    log.write_text(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    return {
        "ok": done.returncode == 0,
        "summary": lines[-1] if lines else done.stderr[-300:],
        "failed": failed[:40],
        "log": str(log),
    }


def train_presets(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    results = []
    for name in names:
        if past_deadline(args):
            results.append({"preset": name, "skipped": "past --deadline"})
            continue
        bench = multi30k.parse_args(preset_argv(args, name))
        bench.device_resolved = args.device
        print(f"== training {name}", file=sys.stderr, flush=True)
        try:
            results.append(multi30k.run_preset(name, bench))
        except Exception as err:  # one preset failing must not hide the others' figures
            results.append({"preset": name, **failure(err)})
        args.save()
    return results


def preset_argv(args: argparse.Namespace, name: str) -> list[str]:
    """benchmarks/multi30k.py's arguments for one preset as this check trains it, in this
    process (``train_presets``) or in its own (``--side-by-side``)."""
    argv = ["--presets", name, "--device", args.device.type]
    argv += ["--out", str(Path(args.runs) / "presets"), "--steps", str(args.steps)]
    argv += ["--test-sentences", str(args.test_sentences), "--max-seconds", str(preset_cap(args))]
    for item in [f"train.device={args.device.type}", *args.set]:
        argv += ["--set", item]
    return argv


def preset_cap(args: argparse.Namespace) -> float:
    """Seconds a preset may train: --preset-seconds, and the deadline at the latest (0: none)."""
    caps = [args.preset_seconds] if args.preset_seconds else []
    if args.deadline:
        caps.append(max(1.0, seconds_left(args)))
    return min(caps, default=0)


SideBySide = list[tuple[str, subprocess.Popen, Path]]


def launch_side_by_side(args: argparse.Namespace, names: list[str]) -> SideBySide:
    """Each preset in its own process (benchmarks/multi30k.py), all started at once. They share
    the device and the CPU, so each wall time is an upper bound of that preset's run alone;
    at these batch sizes a step is bound by kernel launches, so the device has room."""
    started = []
    for name in names:
        script = str(REPO / "benchmarks" / "multi30k.py")
        argv = [sys.executable, script, *preset_argv(args, name), "--json"]
        log = Path(args.out).with_suffix(f".{name}.log")
        print(f"== training {name} (side by side)", file=sys.stderr, flush=True)
        with log.open("w") as sink:  # the child keeps its own handle
            proc = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
        started.append((name, proc, log))
    return started


def collect_side_by_side(args: argparse.Namespace, started: SideBySide) -> list[dict[str, Any]]:
    """Each side-by-side preset's figures (multi30k.py's JSON), or why there are none."""
    results = []
    for name, proc, log in started:
        # Training stops itself at the deadline; the test scoring after it gets 5 minutes.
        timeout = max(seconds_left(args), 0) + 300 if args.deadline else None
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            results.append({"preset": name, "error": f"still running past --deadline; {log}"})
            continue
        figures = Path(args.runs) / "presets" / f"{name}.json"
        if code != 0 or not figures.is_file():
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            results.append({"preset": name, "error": f"exit {code}: {tail[-300:]}"})
            continue
        results.append({**json.loads(figures.read_text()), "side_by_side": True})
    return results


def profile_training(args: argparse.Namespace) -> dict[str, Any]:
    """The real training loop (Trainer on the Transformer preset's batches) under
    torch.profiler: per step, the wall time unprofiled, the device's busy time, kernel
    launches, host syncs, and the operators that take the host's and the device's time."""
    from torch.profiler import profile

    from attnlab.data.dataset import load_dataset
    from attnlab.events import Step
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.train.trainer import Trainer

    window = 25  # steps between the loop's log syncs, as in the preset
    profiled = max(window, -(-args.profile_steps // window) * window)
    steps = 2 * window + profiled  # a window to warm up, one timed unprofiled, then profiled
    overrides = [f"train.device={args.device.type}", *args.set]
    overrides += [f"train.max_steps={steps}", f"train.eval_every={steps}"]
    overrides += [f"train.log_every={window}", "train.eval_sentences=20"]
    config = apply_overrides(load_preset("multi30k-transformer"), overrides)
    prof = profile(activities=profiler_activities(args.device))
    marks: dict[int, float] = {}

    def on_event(event: Any) -> None:  # called in the training loop, at each Step event
        if not isinstance(event, Step) or event.step % window:
            return
        synchronize(args.device)
        marks[event.step] = time.perf_counter()
        if event.step == 2 * window:
            prof.start()
        elif event.step == steps:
            prof.stop()

    run_dir = Path(args.runs) / f"profile-{time.strftime('%H%M%S')}"
    trainer = Trainer(
        config, run_dir, on_event, device=args.device.type, dataset=load_dataset(config.data)
    )
    trainer.run()
    averages = prof.key_averages()
    table = averages.table(sort_by="self_cpu_time_total", row_limit=40)
    if args.device.type == "cuda":
        table += "\n" + averages.table(sort_by="self_device_time_total", row_limit=40)
    Path(args.out).with_suffix(".profile.txt").write_text(table)
    summary = summarise_profile(averages, profiled)
    profiled_ms = (marks[steps] - marks[2 * window]) * 1e3 / profiled
    return {
        "steps_profiled": profiled,
        "cuda_graphs": trainer.step_graphs is not None,
        "ms_per_step": round((marks[2 * window] - marks[window]) * 1e3 / window, 2),
        "profiled_ms_per_step": round(profiled_ms, 2),
        # The "device busy" goal: kernel time over the (profiled) step's wall time.
        "device_busy_fraction": round(summary["device_busy_ms_per_step"] / profiled_ms, 4),
        **summary,
    }


def measure_graphs(args: argparse.Namespace) -> dict[str, Any]:
    """The Transformer preset's real training loop for ``--graphs-steps`` steps, with
    train.cuda_graphs off, then on: steps/s after the first log window (captures and
    allocator warm-up fall in it), the wall time of the steps, the bucket shapes captured."""
    from attnlab.data.dataset import load_dataset
    from attnlab.events import Note, Step
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.train.trainer import Trainer

    window = 25
    steps = max(args.graphs_steps, 2 * window)
    base = apply_overrides(load_preset("multi30k-transformer"), args.set)
    dataset = load_dataset(base.data)
    rows = []
    for setting in ("off", "on"):
        overrides = [f"train.device={args.device.type}", f"train.cuda_graphs={setting}"]
        overrides += [f"train.max_steps={steps}", f"train.eval_every={steps + 1}"]
        overrides += [f"train.log_every={window}", "train.eval_sentences=20"]
        config = apply_overrides(base, overrides)
        marks: dict[int, float] = {}
        notes: list[str] = []

        def on_event(event: Any, marks: dict = marks, notes: list = notes) -> None:
            if isinstance(event, Note):
                notes.append(event.message)
            if isinstance(event, Step) and event.step in (1, window, steps):
                synchronize(args.device)
                marks[event.step] = time.perf_counter()

        run_dir = Path(args.runs) / f"graphs-{setting}-{time.strftime('%H%M%S')}"
        trainer = Trainer(config, run_dir, on_event, device=args.device.type, dataset=dataset)
        summary = trainer.run()
        graphed = trainer.step_graphs
        rows.append(
            {
                "cuda_graphs": setting,
                "captured": graphed is not None,
                "shapes": len(graphed.graphs) if graphed is not None else 0,
                "steps": summary["step"],
                "steps_per_s": round((steps - window) / (marks[steps] - marks[window]), 2),
                "steps_wall_s": round(marks[steps] - marks[1], 2),
                "tokens_per_s": summary["tokens_per_s"],
                "notes": notes,
            }
        )
    return {"steps": steps, "rows": rows}


def profiler_activities(device: Any) -> list[Any]:
    from torch.profiler import ProfilerActivity

    extra = [ProfilerActivity.CUDA] if device.type == "cuda" else []
    return [ProfilerActivity.CPU, *extra]


LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def summarise_profile(averages: Any, steps: int) -> dict[str, Any]:
    """Per-step figures of a profile's ``key_averages()``. The device's busy time counts the
    kernels and copies on the device only, as the profiler's "Self CUDA time total" does: the
    host operators that launched them and the annotations on the device's timeline (e.g.
    ``Optimizer.step``) repeat that time and are left out."""
    from torch.autograd import DeviceType

    def per_step(value: float) -> float:
        return round(value / steps, 3)

    def calls(names: tuple[str, ...]) -> float:
        return per_step(sum(e.count for e in averages if e.key in names))

    on_device = [
        e
        for e in averages
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]
    top_host = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:12]
    top_device = sorted(on_device, key=lambda e: e.self_device_time_total, reverse=True)[:12]
    return {
        "device_busy_ms_per_step": per_step(sum(e.self_device_time_total for e in on_device) / 1e3),
        "kernels_per_step": per_step(sum(e.count for e in on_device)),
        "kernel_launches_per_step": calls(LAUNCH_CALLS),
        "host_syncs_per_step": calls(SYNC_CALLS),
        "aten_ops_per_step": per_step(sum(e.count for e in averages if e.key.startswith("aten::"))),
        "top_host_ms_per_step": {e.key: per_step(e.self_cpu_time_total / 1e3) for e in top_host},
        "top_device_ms_per_step": {
            e.key[:80]: per_step(e.self_device_time_total / 1e3) for e in top_device
        },
    }


def _vocab_sizes(args: argparse.Namespace, fallback: int) -> tuple[int, int]:
    """The trained Transformer's vocabularies (the real output layer), else ``fallback``."""
    from attnlab.runs import load_checkpoint

    run = Path(args.runs) / TRANSFORMER_RUN
    if not (run / "checkpoints").is_dir():
        return fallback, fallback
    loaded = load_checkpoint(run, device="cpu")
    return len(loaded.src_vocab), len(loaded.tgt_vocab)


def seconds_per_step(
    model: Any,
    loss_sum: Callable,
    optimizer: Any,
    b: int,
    n: int,
    vocab: tuple[int, int],
    args: argparse.Namespace,
) -> tuple[float, dict[str, Any] | None]:
    """Mean seconds of a bf16-autocast training step on a synthetic batch of ``b`` x ``n``
    (``model`` and ``loss_sum`` may be compiled: their compilation falls in the warm-up), and
    with ``--mfu-profile N`` the device's busy time and top kernels over N more steps."""
    import torch
    from torch.profiler import profile

    from attnlab.device import autocast

    src_v, tgt_v = vocab
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.randint(4, src_v, (b, n), generator=gen).to(args.device)
    tgt = torch.randint(4, tgt_v, (b, n + 1), generator=gen).to(args.device)
    mask = torch.ones(b, n, dtype=torch.bool, device=args.device)

    def step() -> None:
        with autocast(args.device, True):
            out = model(src, mask, tgt[:, :-1])
        loss = loss_sum(out.logits, tgt[:, 1:]) / (b * n)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(3):  # warm-up: kernels chosen, allocator settled
        step()
    synchronize(args.device)
    start = time.perf_counter()
    for _ in range(args.mfu_steps):
        step()
    synchronize(args.device)
    seconds = (time.perf_counter() - start) / args.mfu_steps
    if not args.mfu_profile:
        return seconds, None
    with profile(activities=profiler_activities(args.device)) as prof:
        for _ in range(args.mfu_profile):
            step()
        synchronize(args.device)
    summary = summarise_profile(prof.key_averages(), args.mfu_profile)
    kept = ("device_busy_ms_per_step", "kernels_per_step", "top_device_ms_per_step")
    return seconds, {key: summary[key] for key in kept}


def mfu_config(overrides: list[str]) -> Any:
    """The Transformer preset that the MFU rows time, with ``--mfu-set`` applied (e.g. a wider
    model, to see how far the same code gets where matmuls are larger)."""
    from attnlab.experiment import apply_overrides, load_preset

    return apply_overrides(load_preset("multi30k-transformer"), overrides)


def measure_mfu(args: argparse.Namespace) -> dict[str, Any]:
    """Model FLOP/s of bf16 training steps on synthetic batches, one row per batch size."""
    import torch

    from attnlab.evaluate import token_loss_sum
    from attnlab.nn.model import build_model
    from attnlab.train.trainer import make_optimizer

    preset = mfu_config([])
    src_v, tgt_v = _vocab_sizes(args, preset.data.subword_vocab)
    on_cuda = args.device.type == "cuda"
    name = torch.cuda.get_device_name(args.device) if on_cuda else "cpu"
    peak = peak_flops(name, args.peak_tflops)
    n = args.mfu_len
    rows = []
    modes = (False, True) if args.mfu_compile else (False,)
    # The preset's own rows, then the changed model's (--mfu-set: e.g. one that fills the
    # device); eager rows first: a deadline cuts the compiled ones (each compiles for minutes).
    sizes = [[]] + ([list(args.mfu_set)] if args.mfu_set else [])
    cases = [(size, c, b) for size in sizes for c in modes for b in args.mfu_batch]
    for overrides, compiled, b in cases:
        config = mfu_config(overrides)
        if past_deadline(args):
            rows.append(
                {
                    "batch": b,
                    "compiled": compiled,
                    "overrides": overrides,
                    "error": "skipped: past --deadline",
                }
            )
            continue
        torch.manual_seed(0)
        model = build_model(config, src_v, tgt_v)
        flops = model_flops(model, [n] * b, [n] * b)
        model = model.to(args.device).train()
        optimizer = make_optimizer(model, config.train)
        if on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(args.device)
        loss_sum = token_loss_sum
        if compiled:  # as train.compile does: the model and the loss, each compiled afresh
            torch._dynamo.reset()
            model, loss_sum = torch.compile(model), torch.compile(token_loss_sum)
        try:
            seconds, profiled = seconds_per_step(
                model, loss_sum, optimizer, b, n, (src_v, tgt_v), args
            )
        except torch.OutOfMemoryError:
            rows.append(
                {"batch": b, "compiled": compiled, "overrides": overrides, "error": "out of memory"}
            )
            continue  # the next model size or mode may fit
        memory = torch.cuda.max_memory_allocated(args.device) if on_cuda else 0
        rows.append(
            {
                "batch": b,
                "compiled": compiled,
                "overrides": overrides,
                "tokens_per_step": 2 * b * n,
                "step_ms": round(seconds * 1e3, 2),
                "achieved_tflops": round(flops / seconds / 1e12, 2),
                "mfu": None if peak is None else round(flops / seconds / peak, 4),
                "peak_memory_gib": round(memory / 2**30, 2),
                **({"profile": profiled} if profiled else {}),
            }
        )
    return {
        "device": name,
        "sentence_tokens": n,
        "vocab": [src_v, tgt_v],
        "overrides": list(args.mfu_set),
        "peak_tflops": None if peak is None else round(peak / 1e12, 1),
        "rows": rows,
    }


def measure_decoding(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from attnlab.config import DecodeConfig
    from attnlab.data.dataset import load_dataset
    from attnlab.decode.search import decode_sorted
    from attnlab.runs import load_checkpoint

    run = Path(args.runs) / TRANSFORMER_RUN
    if not (run / "checkpoints").is_dir():
        return {"skipped": "no trained multi30k-transformer run (train it first)"}
    loaded = load_checkpoint(run, device=args.device)
    data = load_dataset(loaded.config.data)
    test = data.splits.test[: args.test_sentences or None]
    sources = [loaded.src_vocab.encode(e.src_tokens) for e in test]
    out: dict[str, Any] = {"sentences": len(sources)}
    for label, beam in (("greedy", 1), ("beam5", 5)):
        cfg = DecodeConfig(beam=beam, alpha=0.6 if beam > 1 else 0.0)
        with torch.no_grad():
            decode_sorted(loaded.model, sources[:64], cfg, False, args.device)  # warm-up
            synchronize(args.device)
            start = time.perf_counter()
            decode_sorted(loaded.model, sources, cfg, False, args.device)
            synchronize(args.device)
        out[f"{label}_sent_per_s"] = round(len(sources) / (time.perf_counter() - start), 1)
    return out


def run_ddp(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from attnlab.events import iter_events

    gpus = torch.cuda.device_count() if args.device.type == "cuda" else 0
    nproc = 2 if gpus >= 2 else 1
    runs = Path(args.runs) / "ddp"
    name = f"transformer-nproc{nproc}-{time.strftime('%H%M%S')}"
    argv = [sys.executable, "-m", "attnlab", "train", "--preset", "multi30k-transformer"]
    argv += ["--nproc", str(nproc), "--device", args.device.type, "--out", str(runs)]
    argv += ["--run-name", name, "--quiet"]
    sets = [
        f"train.max_steps={args.ddp_steps}",
        f"train.eval_every={args.ddp_steps}",
        "train.eval_sentences=200",
        *args.set,
    ]
    for item in sets:
        argv += ["--set", item]
    timeout = args.ddp_timeout
    if args.deadline:  # the deadline, and a minute for start-up and the one evaluation
        timeout = min(timeout, seconds_left(args) + 60)
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"nproc": nproc, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - start
    events = list(iter_events(runs / name))
    final = next((e for e in reversed(events) if e["type"] == "done"), {})
    evals = [e for e in events if e["type"] == "eval"]
    return {
        "nproc": nproc,
        "exit_code": done.returncode,
        "steps": final.get("step"),
        "wall_s": round(wall, 1),
        "tokens_per_s": final.get("tokens_per_s"),
        "reason": final.get("reason"),
        "dev_bleu": evals[-1].get("bleu") if evals else None,
        "stderr_tail": done.stderr.strip().splitlines()[-3:] if done.returncode else [],
    }


def failure(err: Exception) -> dict[str, Any]:
    """The error in one line, and where it was raised (the last frames) in the JSON."""
    frames = traceback.extract_tb(err.__traceback__)[-4:]
    where = [f"{Path(f.filename).name}:{f.lineno} {f.name}: {f.line}" for f in frames]
    return {"error": f"{type(err).__name__}: {str(err)[:300]}", "where": where}


def seconds_left(args: argparse.Namespace) -> float:
    """Seconds until --deadline (negative past it; only meaningful when one is set)."""
    return args.deadline - (time.perf_counter() - args.started)


def past_deadline(args: argparse.Namespace) -> bool:
    return bool(args.deadline) and seconds_left(args) < 0


def run_part(args: argparse.Namespace, report: dict[str, Any], key: str, part: Callable) -> None:
    """``report[key] = part(args)`` with its seconds, or why it was skipped or failed; the
    JSON is rewritten after it."""
    if past_deadline(args):
        report[key] = {"skipped": "past --deadline"}
    else:
        print(f"== {key}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            result = part(args)
        except Exception as err:  # one part failing must not hide the others' figures
            result = failure(err)
        result["seconds"] = round(time.perf_counter() - start, 1)
        report[key] = result
    args.save()


def _status(part: dict[str, Any]) -> str | None:
    """'skipped: …' or 'error: …' for a part that has no figures, else None."""
    for key in ("skipped", "error"):
        if key in part:
            return f"{key}: {part[key]}"
    return None


def _preset_row(r: dict[str, Any]) -> str:
    status = _status(r)
    if status:
        return status
    capped = "" if r["steps"] >= r["budget_steps"] else f" ({r['reason']} at the time cap)"
    text = (
        f"test BLEU {r['test_bleu']:.2f} (lc {r['test_bleu_lc']:.2f}, {r['n_test']} sentences), "
        f"{r['steps']}/{r['budget_steps']} steps{capped} in {r['wall_s']:.0f} s, "
        f"{r['tokens_per_s']:,.0f} tok/s"
    )
    if r.get("train_tflops") is not None:
        text += f", {r['train_tflops']} model TFLOP/s"
    if r.get("side_by_side"):
        text += " (side by side: the wall time is an upper bound)"
    return text


def _busy(row: dict[str, Any]) -> str:
    """', device busy X ms (top: kernel Y ms)' for a profiled MFU row."""
    prof = row.get("profile")
    if not prof:
        return ""
    top = next(iter(prof["top_device_ms_per_step"].items()), None)
    shown = f" (top: {top[0][:40]} {top[1]} ms)" if top else ""
    return f", device busy {prof['device_busy_ms_per_step']} ms{shown}"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"attnlab gpu_check — {report['device']} — {report['date']}")
    table.add_column("check", style="bold")
    table.add_column("result")
    tests = report.get("cuda_tests") or {"skipped": "--skip tests"}
    table.add_row(
        "CUDA tests",
        _status(tests) or f"{'ok' if tests.get('ok') else 'FAILED'}: {tests.get('summary')}",
    )
    for line in tests.get("failed", []):
        table.add_row("", line)
    for r in report.get("presets", []):
        table.add_row(r["preset"], _preset_row(r))
    mfu = report.get("mfu") or {}
    for row in mfu.get("rows", []):
        shown = "?" if row.get("mfu") is None else f"{100 * row['mfu']:.1f} %"
        compiled = " (compiled)" if row.get("compiled") else ""
        changed = "".join(f", {item}" for item in row.get("overrides", []))
        table.add_row(
            f"MFU bf16, {row['batch']} x {mfu['sentence_tokens']}{compiled}{changed}",
            row.get("error")
            or f"{shown}: {row['achieved_tflops']} TFLOP/s, {row['step_ms']} ms/step, "
            f"{row['peak_memory_gib']} GiB{_busy(row)}",
        )
    if "rows" not in mfu:
        table.add_row("MFU bf16", _status(mfu) or "skipped")
    dec = report.get("decoding") or {"skipped": "not run"}
    table.add_row(
        "decoding",
        _status(dec) or ", ".join(f"{k} {v}" for k, v in dec.items() if k != "seconds"),
    )
    prof = report.get("profile")
    if prof is not None:
        table.add_row(
            "training loop",
            _status(prof)
            or f"{prof['ms_per_step']} ms/step, device busy {prof['device_busy_ms_per_step']} ms "
            f"({100 * prof['device_busy_fraction']:.1f} %), "
            f"{prof['kernel_launches_per_step']} launches, {prof['host_syncs_per_step']} syncs "
            "per step (operators: the .profile.txt beside the JSON)",
        )
    graphs = report.get("graphs")
    if graphs is not None and "rows" not in graphs:
        table.add_row("CUDA graphs", _status(graphs) or "no rows")
    for row in (graphs or {}).get("rows", []):
        captured = f", {row['shapes']} shapes captured" if row["captured"] else ""
        noted = f" (note: {row['notes'][0][:80]})" if row["notes"] else ""
        table.add_row(
            f"train.cuda_graphs={row['cuda_graphs']}, {graphs['steps']} steps",
            f"{row['steps_per_s']} steps/s, {row['steps_wall_s']} s, "
            f"{row['tokens_per_s']:,.0f} tok/s{captured}{noted}",
        )
    ddp = report.get("ddp") or {"skipped": "not run"}
    table.add_row(
        f"train --nproc {ddp.get('nproc', '?')}",
        _status(ddp)
        or f"exit {ddp['exit_code']}, {ddp['steps']} steps in {ddp['wall_s']} s, "
        f"{ddp['tokens_per_s']} tok/s, dev BLEU {ddp['dev_bleu']}",
    )
    Console(width=160).print(table)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu-check.json", help="JSON file for every figure")
    parser.add_argument("--runs", default="runs/gpu-check", help="where the run directories go")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test)")
    parser.add_argument(
        "--deadline", type=float, default=0, help="skip parts that would start after N s (0: none)"
    )
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument(
        "--steps", type=int, default=0, help="train.max_steps per preset (0 = its budget)"
    )
    parser.add_argument(
        "--preset-seconds",
        type=float,
        default=0,
        help="stop a preset's training after N s (0 = train to the budget)",
    )
    parser.add_argument(
        "--test-sentences", type=int, default=0, help="score/decode the first N (0 = all)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="extra config override for every training (e.g. data.path=...)",
    )
    parser.add_argument(
        "--skip", nargs="+", default=[], choices=PARTS, help="parts not to run", metavar="PART"
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="train the presets other than the Transformer in their own processes at once, "
        "alongside the tests and the DDP run (wall times: upper bounds of a run alone)",
    )
    parser.add_argument("--tests-timeout", type=int, default=300)
    parser.add_argument(
        "--tests-k", default="cuda", help="pytest -k expression of the CUDA tests to run"
    )
    parser.add_argument(
        "--mfu-batch", type=int, nargs="+", default=[256, 1024, 4096], help="sentences per step"
    )
    parser.add_argument(
        "--mfu-len", type=int, default=32, help="source and target tokens per sentence"
    )
    parser.add_argument("--mfu-steps", type=int, default=20)
    parser.add_argument(
        "--mfu-compile",
        action="store_true",
        help="also time each MFU batch size with torch.compile (what train.compile does)",
    )
    parser.add_argument(
        "--mfu-profile",
        type=int,
        default=0,
        metavar="N",
        help="profile N more steps of each MFU row: the device's busy time and top kernels",
    )
    parser.add_argument(
        "--mfu-set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override the preset for the MFU rows only (e.g. model.d_model=1024)",
    )
    parser.add_argument(
        "--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (TFLOP/s)"
    )
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="profile N steps of the real training loop (0: no profile part)",
    )
    parser.add_argument(
        "--graphs-steps",
        type=int,
        default=0,
        help="train the Transformer N steps with train.cuda_graphs off and on (0: no part)",
    )
    parser.add_argument("--ddp-steps", type=int, default=300)
    parser.add_argument("--ddp-timeout", type=int, default=240)
    args = parser.parse_args(argv)
    counts = ("deadline", "steps", "preset_seconds", "test_sentences", "mfu_profile")
    sizes = ("tests_timeout", "mfu_len", "mfu_steps", "ddp_steps", "ddp_timeout")
    minimums = dict.fromkeys((*counts, "peak_tflops", "profile_steps", "graphs_steps"), 0)
    multi30k.require_at_least(parser, args, minimums | dict.fromkeys(sizes, 1))
    if min(args.mfu_batch) < 1:
        parser.error(f"--mfu-batch: each size must be at least 1: {args.mfu_batch}")
    if args.mfu_set:
        from attnlab.errors import AttnlabError

        try:  # refused now, not minutes into the run
            mfu_config(args.mfu_set)
        except AttnlabError as err:
            parser.error(str(err).replace("--set", "--mfu-set", 1))  # the flag given
    args.skip = set(args.skip)
    if not args.profile_steps:
        args.skip.add("profile")
    if not args.graphs_steps:
        args.skip.add("graphs")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check (run it on a machine with a GPU)")
        return 0
    args.device = torch.device(args.device)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    on_cuda = args.device.type == "cuda"
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if on_cuda else "cpu",
        "gpus": torch.cuda.device_count() if on_cuda else 0,
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "argv": sys.argv[1:] if argv is None else argv,
    }
    args.started = time.perf_counter()
    args.save = lambda: Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False))
    parts = {
        "cuda_tests": ("tests", run_cuda_tests),
        "mfu": ("mfu", measure_mfu),
        "decoding": ("decoding", measure_decoding),
        "profile": ("profile", profile_training),
        "graphs": ("graphs", measure_graphs),
        "ddp": ("ddp", run_ddp),
    }

    def run(*keys: str) -> None:
        for key in keys:
            name, part = parts[key]
            if name not in args.skip:
                run_part(args, report, key, part)

    train = "train" not in args.skip
    # The Transformer (which MFU's vocabulary and the decoding figures use) trains first and
    # alone; the other presets last (a --deadline cuts from the end), or side by side with
    # the parts whose figures do not suffer from sharing the device (pass/fail, exit code).
    first = [n for n in args.presets if n == TRANSFORMER_RUN.name] if train else []
    rest = [n for n in args.presets if n not in first] if train else []
    side_by_side = args.side_by_side and bool(rest)
    if not side_by_side:
        run("cuda_tests")
    report["presets"] = train_presets(args, first)
    if side_by_side:  # the device-bound figures wait for the side-by-side presets to finish
        side = launch_side_by_side(args, rest)
        run("cuda_tests", "ddp")
        report["presets"] += collect_side_by_side(args, side)
        args.save()
        run("decoding", "profile", "graphs", "mfu")
    else:
        run("decoding", "profile", "graphs", "mfu", "ddp")
        report["presets"] += train_presets(args, rest)
    report["total_s"] = round(time.perf_counter() - args.started, 1)
    args.save()
    print_table(report)
    print(f"figures in {args.out}; total {report['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
