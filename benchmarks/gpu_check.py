"""One command that checks attnlab's GPU path on a CUDA machine and prints one table.

    .venv/bin/python benchmarks/gpu_check.py --out gpu-check.json           # full budgets
    .venv/bin/python benchmarks/gpu_check.py --quick --out gpu-check.json   # ~8 min on an H200

What it does, in order (each part is skipped with a reason rather than failing the rest):
1. the CUDA tests: ``pytest -m "not slow" -k cuda tests`` (the device-parametrised tests:
   attention references, model equivalences, decoding, one end-to-end train);
2. trains each Multi30k preset to its budget (``--quick``: ``--quick-steps`` steps, a subset
   of the test set) through benchmarks/multi30k.py's ``run_preset``: wall time, training
   tokens/s, test BLEU (greedy, the same scoring as ``attnlab eval --split test``);
3. the Transformer's model FLOPs utilisation in bf16 (``model_flops`` below says how FLOPs
   are counted) on a synthetic batch at ``--mfu-batch`` sentences of ``--mfu-len`` tokens;
4. greedy and beam-5 decoding, sentences/s, with the trained Transformer on the test sources;
5. ``attnlab train --nproc 2`` (DDP over 2 GPUs, NCCL) when there are 2 GPUs, else
   ``--nproc 1``: wall time and tokens/s from the run's events.
It writes every figure to ``--out`` (JSON). Without CUDA it says so and exits 0.

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
from flops import model_flops  # noqa: E402  (one home: also throughput.py's fraction of peak)

PRESETS = ("multi30k-gru-none", "multi30k-gru-bahdanau", "multi30k-transformer")


def peak_flops(device_name: str, override_tflops: float = 0.0) -> float | None:
    """The device's dense bf16 peak in FLOP/s (``override_tflops`` wins), None if unknown."""
    if override_tflops > 0:
        return override_tflops * 1e12
    for key, value in PEAK_BF16:
        if all(part in device_name for part in key.split()):
            return value
    return None


def run_cuda_tests(timeout_s: int) -> dict[str, Any]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-m",
        "not slow",
        "-k",
        "cuda",
        "-p",
        "no:cacheprovider",
        "tests",
    ]
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "summary": f"timed out after {timeout_s} s"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {
        "ok": done.returncode == 0,
        "summary": lines[-1] if lines else done.stderr[-300:],
        "seconds": round(time.perf_counter() - start, 1),
    }


def train_presets(args: argparse.Namespace) -> list[dict[str, Any]]:
    import multi30k

    results = []
    for name in args.presets:
        bench = argparse.Namespace(
            set=["train.device=cuda", *args.set],
            steps=args.quick_steps if args.quick else 0,
            max_pairs=0,
            eval_sentences=200 if args.quick else 0,
            test_sentences=args.test_sentences,
            device="cuda",
            out=str(Path(args.runs) / "presets"),
            resume=False,
            device_resolved=args.device,
        )
        print(f"== training {name}", file=sys.stderr, flush=True)
        try:
            results.append(multi30k.run_preset(name, bench))
        except Exception as err:  # one preset failing must not hide the others' figures
            results.append({"preset": name, "error": f"{type(err).__name__}: {err}"})
    return results


def measure_mfu(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from attnlab.device import autocast
    from attnlab.evaluate import token_loss_sum
    from attnlab.experiment import load_preset
    from attnlab.nn.model import build_model
    from attnlab.train.trainer import make_optimizer

    config = load_preset("multi30k-transformer")
    vocab = config.data.subword_vocab
    torch.manual_seed(0)
    model = build_model(config, vocab, vocab).to(args.device).train()
    optimizer = make_optimizer(model, config.train)
    b, n = args.mfu_batch, args.mfu_len
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.randint(4, vocab, (b, n), generator=gen).to(args.device)
    tgt = torch.randint(4, vocab, (b, n + 1), generator=gen).to(args.device)
    mask = torch.ones(b, n, dtype=torch.bool, device=args.device)

    def step() -> None:
        with autocast(args.device, True):
            out = model(src, mask, tgt[:, :-1])
        loss = token_loss_sum(out.logits, tgt[:, 1:]) / (b * n)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(5):  # warm-up: kernels chosen, allocator settled
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.mfu_steps):
        step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.mfu_steps
    flops = model_flops(model, [n] * b, [n] * b)
    name = torch.cuda.get_device_name(args.device)
    peak = peak_flops(name, args.peak_tflops)
    return {
        "device": name,
        "batch": f"{b} x {n} tokens",
        "step_ms": round(seconds * 1e3, 2),
        "model_tflops_per_step": round(flops / 1e12, 4),
        "achieved_tflops": round(flops / seconds / 1e12, 1),
        "peak_tflops": None if peak is None else round(peak / 1e12, 1),
        "mfu": None if peak is None else round(flops / seconds / peak, 4),
        "tokens_per_s": round(2 * b * n / seconds, 0),
    }


def measure_decoding(args: argparse.Namespace, trained: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    from attnlab.config import DecodeConfig
    from attnlab.data.dataset import load_dataset
    from attnlab.decode.search import decode_sorted
    from attnlab.runs import load_checkpoint

    run = Path(args.runs) / "presets" / "multi30k-transformer"
    if not (run / "checkpoints").is_dir():
        return {
            "skipped": "no trained multi30k-transformer run (train it first: drop --skip-train)"
        }
    loaded = load_checkpoint(run, device=args.device)
    data = load_dataset(loaded.config.data)
    test = data.splits.test[: args.test_sentences or None]
    sources = [loaded.src_vocab.encode(e.src_tokens) for e in test]
    out: dict[str, Any] = {"sentences": len(sources)}
    for label, beam in (("greedy", 1), ("beam5", 5)):
        cfg = DecodeConfig(beam=beam, alpha=0.6 if beam > 1 else 0.0)
        with torch.no_grad():
            decode_sorted(loaded.model, sources[:64], cfg, False, args.device)  # warm-up
            torch.cuda.synchronize()
            start = time.perf_counter()
            decode_sorted(loaded.model, sources, cfg, False, args.device)
            torch.cuda.synchronize()
        out[f"{label}_sent_per_s"] = round(len(sources) / (time.perf_counter() - start), 1)
    return out


def run_ddp(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from attnlab.events import iter_events

    nproc = 2 if torch.cuda.device_count() >= 2 else 1
    runs = Path(args.runs) / "ddp"
    name = f"transformer-nproc{nproc}-{time.strftime('%H%M%S')}"
    argv = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--preset",
        "multi30k-transformer",
        "--nproc",
        str(nproc),
        "--device",
        "cuda",
        "--out",
        str(runs),
        "--run-name",
        name,
        "--quiet",
        "--set",
        f"train.max_steps={args.ddp_steps}",
        "--set",
        f"train.eval_every={args.ddp_steps}",
        "--set",
        "train.eval_sentences=200",
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=args.ddp_timeout)
    wall = time.perf_counter() - start
    events = list(iter_events(runs / name))
    final = next((e for e in reversed(events) if e["type"] == "done"), {})
    return {
        "nproc": nproc,
        "exit_code": done.returncode,
        "steps": final.get("step"),
        "wall_s": round(wall, 1),
        "tokens_per_s": final.get("tokens_per_s"),
        "reason": final.get("reason"),
        "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode else [],
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"attnlab gpu_check — {report['device']} — {report['date']}")
    table.add_column("check", style="bold")
    table.add_column("result")
    tests = report.get("cuda_tests") or {}
    table.add_row(
        "CUDA tests", f"{'ok' if tests.get('ok') else 'FAILED'}: {tests.get('summary', 'skipped')}"
    )
    for r in report.get("presets", []):
        if "error" in r:
            table.add_row(r["preset"], f"error: {r['error']}")
            continue
        table.add_row(
            r["preset"],
            f"test BLEU {r['test_bleu']:.2f} (lc {r['test_bleu_lc']:.2f}), "
            f"{r['steps']} steps in {r['wall_s']:.0f} s, {r['tokens_per_s']:,.0f} tok/s",
        )
    mfu = report.get("mfu") or {}
    if "mfu" in mfu:
        shown = (
            "unknown peak (use --peak-tflops)"
            if mfu["mfu"] is None
            else f"{100 * mfu['mfu']:.1f} %"
        )
        table.add_row(
            "Transformer MFU (bf16)",
            f"{shown}: {mfu['achieved_tflops']} TFLOP/s at "
            f"{mfu['batch']}, {mfu['step_ms']} ms/step",
        )
    dec = report.get("decoding") or {}
    table.add_row("decoding", ", ".join(f"{k} {v}" for k, v in dec.items()) or "skipped")
    ddp = report.get("ddp") or {}
    if ddp:
        table.add_row(
            f"train --nproc {ddp['nproc']}",
            f"exit {ddp['exit_code']}, {ddp['steps']} steps in "
            f"{ddp['wall_s']} s, {ddp['tokens_per_s']} tok/s",
        )
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu-check.json", help="JSON file for every figure")
    parser.add_argument("--runs", default="runs/gpu-check", help="where the run directories go")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="presets to --quick-steps steps (fits ~8 min on an H200)",
    )
    parser.add_argument(
        "--quick-steps", type=int, default=600, help="train.max_steps per preset under --quick"
    )
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument(
        "--test-sentences",
        type=int,
        default=0,
        help="score/decode the first N test sentences (0 = all)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="extra config override",
    )
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--tests-timeout", type=int, default=240)
    parser.add_argument("--mfu-batch", type=int, default=256, help="sentences per MFU step")
    parser.add_argument(
        "--mfu-len", type=int, default=32, help="source and target tokens per sentence"
    )
    parser.add_argument("--mfu-steps", type=int, default=30)
    parser.add_argument(
        "--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (TFLOP/s)"
    )
    parser.add_argument("--ddp-steps", type=int, default=300)
    parser.add_argument("--ddp-timeout", type=int, default=240)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing to check (run it on a machine with a GPU)")
        return 0
    args.device = torch.device("cuda")
    os.environ.setdefault("PYTHONPATH", str(REPO))
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "gpus": torch.cuda.device_count(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "quick": args.quick,
    }
    start = time.perf_counter()
    if not args.skip_tests:
        report["cuda_tests"] = run_cuda_tests(args.tests_timeout)
    if args.quick and not args.test_sentences:
        args.test_sentences = 500
    report["presets"] = [] if args.skip_train else train_presets(args)
    report["mfu"] = measure_mfu(args)
    report["decoding"] = measure_decoding(args, report["presets"])
    report["ddp"] = run_ddp(args)
    report["total_s"] = round(time.perf_counter() - start, 1)
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print_table(report)
    print(f"figures in {args.out}; total {report['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
