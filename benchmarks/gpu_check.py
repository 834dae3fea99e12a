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
3. the Transformer's model FLOPs utilisation in bf16 on synthetic batches of ``--mfu-batch``
   sentences of ``--mfu-len`` tokens each (``model_flops`` below says how FLOPs are counted),
   eager and, with ``--mfu-compile``, compiled;
4. greedy and beam-5 decoding, sentences/s, with the trained Transformer on the test sources;
5. ``attnlab train --nproc 2`` (DDP over 2 GPUs, NCCL) when there are 2 GPUs, else
   ``--nproc 1``: exit code, wall time and tokens/s from the run's events;
6. the two GRU presets, as in 2 (last, so that a deadline cuts them first).
The JSON (``--out``) is rewritten after every part, so a run cut short keeps what it measured.
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
from flops import model_flops  # noqa: E402  (one home: also throughput.py's fraction of peak)

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
    import multi30k

    results = []
    for name in names:
        if past_deadline(args):
            results.append({"preset": name, "skipped": "past --deadline"})
            continue
        # Training stops at --preset-seconds, and at the deadline at the latest.
        caps = [args.preset_seconds] if args.preset_seconds else []
        if args.deadline:
            caps.append(max(1.0, seconds_left(args)))
        bench = argparse.Namespace(
            set=[f"train.device={args.device.type}", *args.set],
            steps=args.steps,
            max_pairs=0,
            eval_sentences=0,
            test_sentences=args.test_sentences,
            device=args.device.type,
            out=str(Path(args.runs) / "presets"),
            resume=False,
            device_resolved=args.device,
            max_seconds=min(caps, default=0),
        )
        print(f"== training {name}", file=sys.stderr, flush=True)
        try:
            results.append(multi30k.run_preset(name, bench))
        except Exception as err:  # one preset failing must not hide the others' figures
            results.append({"preset": name, **failure(err)})
        args.save()
    return results


def _vocab_sizes(args: argparse.Namespace, fallback: int) -> tuple[int, int]:
    """The trained Transformer's vocabularies (the real output layer), else ``fallback``."""
    from attnlab.runs import load_checkpoint

    run = Path(args.runs) / TRANSFORMER_RUN
    if not (run / "checkpoints").is_dir():
        return fallback, fallback
    loaded = load_checkpoint(run, device="cpu")
    return len(loaded.src_vocab), len(loaded.tgt_vocab)


def seconds_per_step(
    model: Any, optimizer: Any, b: int, n: int, vocab: tuple[int, int], args: argparse.Namespace
) -> float:
    """Mean seconds of a bf16-autocast training step on a synthetic batch of ``b`` x ``n``
    (``model`` may be a compiled module: its compilation falls in the warm-up)."""
    import torch

    from attnlab.device import autocast
    from attnlab.evaluate import token_loss_sum

    src_v, tgt_v = vocab
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.randint(4, src_v, (b, n), generator=gen).to(args.device)
    tgt = torch.randint(4, tgt_v, (b, n + 1), generator=gen).to(args.device)
    mask = torch.ones(b, n, dtype=torch.bool, device=args.device)

    def step() -> None:
        with autocast(args.device, True):
            out = model(src, mask, tgt[:, :-1])
        loss = token_loss_sum(out.logits, tgt[:, 1:]) / (b * n)
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
    return (time.perf_counter() - start) / args.mfu_steps


def measure_mfu(args: argparse.Namespace) -> dict[str, Any]:
    """Model FLOP/s of bf16 training steps on synthetic batches, one row per batch size."""
    import torch

    from attnlab.experiment import load_preset
    from attnlab.nn.model import build_model
    from attnlab.train.trainer import make_optimizer

    config = load_preset("multi30k-transformer")
    src_v, tgt_v = _vocab_sizes(args, config.data.subword_vocab)
    on_cuda = args.device.type == "cuda"
    name = torch.cuda.get_device_name(args.device) if on_cuda else "cpu"
    peak = peak_flops(name, args.peak_tflops)
    n = args.mfu_len
    rows = []
    modes = (False, True) if args.mfu_compile else (False,)
    for b, compiled in [(b, compiled) for b in args.mfu_batch for compiled in modes]:
        torch.manual_seed(0)
        model = build_model(config, src_v, tgt_v)
        flops = model_flops(model, [n] * b, [n] * b)
        model = model.to(args.device).train()
        optimizer = make_optimizer(model, config.train)
        if on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(args.device)
        stepped = torch.compile(model) if compiled else model  # as train.compile does
        try:
            seconds = seconds_per_step(stepped, optimizer, b, n, (src_v, tgt_v), args)
        except torch.OutOfMemoryError:
            rows.append({"batch": b, "compiled": compiled, "error": "out of memory"})
            break
        memory = torch.cuda.max_memory_allocated(args.device) if on_cuda else 0
        rows.append(
            {
                "batch": b,
                "compiled": compiled,
                "tokens_per_step": 2 * b * n,
                "step_ms": round(seconds * 1e3, 2),
                "achieved_tflops": round(flops / seconds / 1e12, 2),
                "mfu": None if peak is None else round(flops / seconds / peak, 4),
                "peak_memory_gib": round(memory / 2**30, 2),
            }
        )
    return {
        "device": name,
        "sentence_tokens": n,
        "vocab": [src_v, tgt_v],
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
    return text


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"attnlab gpu_check — {report['device']} — {report['date']}")
    table.add_column("check", style="bold")
    table.add_column("result")
    tests = report.get("cuda_tests") or {"skipped": "--skip-tests"}
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
        table.add_row(
            f"MFU bf16, {row['batch']} x {mfu['sentence_tokens']}{compiled}",
            row.get("error")
            or f"{shown}: {row['achieved_tflops']} TFLOP/s, {row['step_ms']} ms/step, "
            f"{row['peak_memory_gib']} GiB",
        )
    if "rows" not in mfu:
        table.add_row("MFU bf16", _status(mfu) or "skipped")
    dec = report.get("decoding") or {}
    table.add_row(
        "decoding",
        _status(dec) or ", ".join(f"{k} {v}" for k, v in dec.items() if k != "seconds"),
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
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
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
        "--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (TFLOP/s)"
    )
    parser.add_argument("--ddp-steps", type=int, default=300)
    parser.add_argument("--ddp-timeout", type=int, default=240)
    return parser.parse_args(argv)


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
    if not args.skip_tests:
        run_part(args, report, "cuda_tests", run_cuda_tests)
    # The Transformer (which MFU's vocabulary and the decoding figures use) first, the other
    # presets last: a --deadline cuts from the end.
    first, rest = args.presets[:1], args.presets[1:]
    report["presets"] = [] if args.skip_train else train_presets(args, first)
    run_part(args, report, "mfu", measure_mfu)
    run_part(args, report, "decoding", measure_decoding)
    run_part(args, report, "ddp", run_ddp)
    if not args.skip_train:
        report["presets"] += train_presets(args, rest)
    report["total_s"] = round(time.perf_counter() - args.started, 1)
    args.save()
    print_table(report)
    print(f"figures in {args.out}; total {report['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
