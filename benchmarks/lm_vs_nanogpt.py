"""Character language modelling beside nanoGPT: training tokens/s, val loss, generation speed.

Runs, in one sitting and interleaved round by round (the order alternates), nanoGPT itself
(``../shared/bench/run-nanogpt.sh``: its unchanged ``train.py`` with its CPU recipe, 4 layers,
4 heads, 128 wide, context 64, batch 12) and ``attnlab train --preset shakespeare-char`` on the
same corpus for the same number of steps (``--steps``, nanoGPT's ``max_iters`` and
``lr_decay_iters``), and prints:

- training tokens/s of each: batch × block over the median step time of steps 10..N (what
  run-nanogpt.sh prints from nanoGPT's ``dt``; attnlab's from its per-step events, optimizer
  step and batch sampling included in both), and attnlab / nanoGPT: the median and the
  min–max of the per-round ratios;
- both val losses after N steps: nanoGPT's estimate (the mean loss over ``eval_iters`` = 20
  random batches of 12 val windows), attnlab's own (its fixed dev windows) and attnlab's model
  scored as nanoGPT scores (20 seeded random batches of 12 val windows);
- generation per token, 500 new tokens from "\\n" at batch 1: ``attnlab.decode.generate``
  (KV cache, a window of block_size tokens) against nanoGPT's ``GPT.generate`` (model.py as is:
  it re-runs the whole cropped context for every token) on a model of the same shape (random
  weights: the time per token does not depend on their values);
- the fraction of the float32 matmul peak each training loop reaches (flops.py, as
  throughput.py prints it: the model FLOPs per token counted on attnlab's model, the same
  shapes as nanoGPT's).

    python benchmarks/lm_vs_nanogpt.py                      # 1 round of 2000 steps each
    python benchmarks/lm_vs_nanogpt.py --rounds 3 --steps 500
    python benchmarks/lm_vs_nanogpt.py --device cuda        # both on the GPU

Training uses 2 threads (OMP_NUM_THREADS=2, train.threads=2) on the CPU. Timings on a shared
machine are noisy: compare medians over rounds taken in one sitting.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # --shared changes it (a checkout elsewhere)
BENCH = SHARED / "bench"
NANOGPT = BENCH / "nanogpt"
CORPUS = SHARED / "corpora" / "tinyshakespeare" / "input.txt"
ENV = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PYTHONHASHSEED": "0"}
PRESET = "shakespeare-char"
EVAL_ITERS = 20  # nanoGPT's estimate_loss batches (run-nanogpt.sh's NANOGPT_EVAL_ITERS)
GENERATE_TOKENS = 500
FIRST_TIMED_STEP = 10  # run-nanogpt.sh's median skips iterations 0..9


def result_field(output: str, name: str) -> float:
    match = re.search(rf"RESULT .*\b{name}=([0-9.]+|nan)", output)
    if not match:
        raise RuntimeError(f"no {name} in nanoGPT's output:\n{output[-2000:]}")
    return float(match.group(1))


def run_nanogpt(steps: int, device: str) -> dict[str, float]:
    """nanoGPT's own run: its tokens/s (median over iterations 10..N) and last val loss."""
    env = {
        **ENV,
        "NANOGPT_ITERS": str(steps),
        "NANOGPT_DEVICE": device,
        "NANOGPT_PYTHON": os.environ.get("NANOGPT_PYTHON", sys.executable),
        "NANOGPT_EVAL_ITERS": str(EVAL_ITERS),
    }
    if device == "cuda":  # the CPU recipe on the GPU too (run-nanogpt.sh's default ARGS)
        env.setdefault(
            "NANOGPT_ARGS",
            "--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --dropout=0.0",
        )
    done = subprocess.run(
        ["bash", str(BENCH / "run-nanogpt.sh")], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"run-nanogpt.sh failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return {
        "tok_s": result_field(done.stdout, "tok_s"),
        "val_loss": result_field(done.stdout, "val_loss"),
    }


def run_attnlab(steps: int, device: str, out: Path, extra: list[str]) -> dict[str, Any]:
    """``attnlab train --preset shakespeare-char`` for ``steps`` steps, one eval at the end:
    tokens/s (median of the per-step figures of steps 10..N) and the fixed-window dev loss."""
    sets = [
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        "train.log_every=1",  # per-step timings, as nanoGPT's log_interval=1
        "train.threads=2",
        f"data.path={CORPUS}",  # the corpus run-nanogpt.sh reads, wherever ../shared is
        *extra,
    ]
    command = [sys.executable, "-m", "attnlab", "train", "--preset", PRESET, "--out", str(out)]
    command += ["--run-name", PRESET, "--quiet", "--device", device]
    command += [arg for item in sets for arg in ("--set", item)]
    done = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"attnlab train failed:\n{(done.stdout + done.stderr)[-3000:]}")
    run_dir = out / PRESET
    events = [json.loads(line) for line in (run_dir / "events.jsonl").open()]
    per_step = [
        float(e["tokens_per_s"])
        for e in events
        if e.get("type") == "step" and e.get("step", 0) > FIRST_TIMED_STEP and e.get("tokens_per_s")
    ]
    evals = [e for e in events if e.get("type") == "eval" and e.get("split", "dev") == "dev"]
    if not per_step or not evals:
        raise RuntimeError(f"{run_dir}: no step timings or no dev eval in events.jsonl")
    # tokens/s of a step = tokens / its time, so the median of the figures is tokens over
    # the median time: run-nanogpt.sh's statistic
    return {
        "tok_s": statistics.median(per_step),
        "val_loss": float(evals[-1]["loss"]),
        "run": run_dir,
    }


def nanogpt_style_loss(loaded: Any, device: str) -> float:
    """attnlab's model scored as nanoGPT's ``estimate_loss`` (``attnlab.evaluate.
    nanogpt_estimate``): the mean over EVAL_ITERS batches of ``train.batch_size`` windows at
    seeded uniform random offsets of the val split."""
    import torch

    from attnlab.evaluate import nanogpt_estimate
    from attnlab.runs import load_checkpoint_data

    dataset = load_checkpoint_data(loaded)
    with torch.no_grad():
        return nanogpt_estimate(
            loaded.model,
            dataset,
            "dev",
            iters=EVAL_ITERS,
            batch_size=loaded.config.train.batch_size,
            device=device,
        )


def nanogpt_module() -> Any:
    """nanoGPT's model.py, imported from ../shared/bench/nanogpt as it is (never copied)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", NANOGPT / "model.py")
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import {NANOGPT / 'model.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def generation_ms_per_token(loaded: Any, device: str) -> dict[str, float]:
    """ms per new token of GENERATE_TOKENS tokens from one "\\n" at batch 1, both systems
    with temperature 1 and no filter (a few tokens first, untimed, to warm up)."""
    import torch

    from attnlab.decode.generate import Sampling, generate

    block = int(loaded.config.data.block_size)
    vocab = loaded.dataset.tgt_vocab
    start = vocab.stoi.get("\n", len(vocab) - 1)
    m = loaded.config.model

    def ours(n: int) -> None:
        generate(loaded.model, [[start]], n, Sampling(seed=0), context=block)

    nano = nanogpt_module()
    config = nano.GPTConfig(
        block_size=block,
        vocab_size=len(vocab) - 4,  # nanoGPT's vocabulary has no specials
        n_layer=m.dec_layers,
        n_head=m.heads,
        n_embd=m.d_model,
        dropout=0.0,
        bias=False,
    )
    torch.manual_seed(0)
    peer = nano.GPT(config).to(device).eval()
    context = torch.zeros((1, 1), dtype=torch.long, device=device)

    def theirs(n: int) -> None:
        peer.generate(context, n, temperature=1.0)

    out = {}
    for name, fn in (("attnlab", ours), ("nanogpt", theirs)):
        fn(8)
        _sync(device)
        began = time.perf_counter()
        fn(GENERATE_TOKENS)
        _sync(device)
        out[name] = (time.perf_counter() - began) * 1000 / GENERATE_TOKENS
    return out


def flops_per_token(loaded: Any) -> float:
    """Training FLOPs per token of one batch of windows (flops.py's count, as throughput.py)."""
    from flops import model_flops

    rows, block = loaded.config.train.batch_size, int(loaded.config.data.block_size)
    return model_flops(loaded.model, [0] * rows, [block] * rows) / (rows * block)


def print_machine(device: str) -> None:
    import torch

    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(
        f"machine: {where}, torch {torch.__version__}, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch threads, "
        f"{os.cpu_count()} CPUs visible",
        flush=True,
    )


def spread(values: list[float], digits: int = 2) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2000, help="training steps of each run")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--shared",
        type=Path,
        default=SHARED,
        help="the shared folder holding bench/run-nanogpt.sh and corpora/ (default ../shared)",
    )
    parser.add_argument(
        "--attnlab-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra override for attnlab's runs",
    )
    args = parser.parse_args()
    global BENCH, NANOGPT, CORPUS
    BENCH, CORPUS = args.shared / "bench", args.shared / "corpora/tinyshakespeare/input.txt"
    NANOGPT = BENCH / "nanogpt"
    if args.steps <= FIRST_TIMED_STEP:
        parser.error(f"--steps must exceed {FIRST_TIMED_STEP} (the first steps are not timed)")
    if not (BENCH / "run-nanogpt.sh").exists():
        sys.exit(f"no {BENCH / 'run-nanogpt.sh'}: the peer lives in ../shared/bench")
    import torch

    from attnlab.runs import load_checkpoint

    torch.set_num_threads(2)
    sys.path.insert(0, str(Path(__file__).parent))
    from flops import matmul_flops_per_s

    print_machine(args.device)
    peak = matmul_flops_per_s(device=args.device)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = ["nanogpt", "attnlab"] if index % 2 == 0 else ["attnlab", "nanogpt"]
            got: dict[str, Any] = {}
            for system in order:
                if system == "nanogpt":
                    got["nanogpt"] = run_nanogpt(args.steps, args.device)
                else:
                    out = Path(tmp, f"round{index}")
                    got["attnlab"] = run_attnlab(args.steps, args.device, out, args.attnlab_set)
            loaded = load_checkpoint(
                got["attnlab"].pop("run") / "checkpoints" / "last", args.device
            )
            got["attnlab"]["nanogpt_style"] = nanogpt_style_loss(loaded, args.device)
            got["generate"] = generation_ms_per_token(loaded, args.device)
            got["flops_per_token"] = flops_per_token(loaded)
            rounds.append(got)
            a, n, g = got["attnlab"], got["nanogpt"], got["generate"]
            print(
                f"round {index + 1}: nanoGPT {n['tok_s']:,.0f} tok/s val {n['val_loss']:.4f} | "
                f"attnlab {a['tok_s']:,.0f} tok/s val {a['val_loss']:.4f} (fixed windows), "
                f"{a['nanogpt_style']:.4f} (nanoGPT's estimate) | generate ms/token: "
                f"attnlab {g['attnlab']:.2f}, nanoGPT {g['nanogpt']:.2f}",
                flush=True,
            )
    peak = max(peak, matmul_flops_per_s(device=args.device))  # the better of before and after
    report(rounds, args.steps, peak)


def report(rounds: list[dict[str, Any]], steps: int, peak: float) -> None:
    def col(system: str, key: str) -> list[float]:
        return [r[system][key] for r in rounds]

    ratio = [r["attnlab"]["tok_s"] / r["nanogpt"]["tok_s"] for r in rounds]
    gen_ratio = [r["generate"]["nanogpt"] / r["generate"]["attnlab"] for r in rounds]
    print(f"\n{len(rounds)} round(s) of {steps} steps each; median (min–max) over rounds")
    print(f"training tokens/s      nanoGPT {spread(col('nanogpt', 'tok_s'), 0)}")
    print(f"                       attnlab {spread(col('attnlab', 'tok_s'), 0)}")
    print(f"  attnlab / nanoGPT    {spread(ratio)}x")
    gen = {system: [r["generate"][system] for r in rounds] for system in ("attnlab", "nanogpt")}
    lines = [
        (f"val loss after {steps} steps (nats per character)", None, 0),
        (f"  nanoGPT, mean of {EVAL_ITERS} random val batches", col("nanogpt", "val_loss"), 4),
        ("  attnlab, the same estimate", col("attnlab", "nanogpt_style"), 4),
        ("  attnlab, its fixed dev windows", col("attnlab", "val_loss"), 4),
        (f"generation, {GENERATE_TOKENS} new tokens at batch 1 (ms per token)", None, 0),
        ("  attnlab (KV cache)", gen["attnlab"], 2),
        ("  nanoGPT (re-runs the context each token)", gen["nanogpt"], 2),
        ("  attnlab speed-up (x)", gen_ratio, 2),
    ]
    for label, values, digits in lines:
        print(label if values is None else f"{label:44s} {spread(values, digits)}")
    per_token = rounds[-1]["flops_per_token"]
    print(
        f"fraction of peak: model FLOP/s of the training loop / float32 matmul FLOP/s "
        f"({peak / 1e9:,.1f} GFLOP/s); {per_token / 1e6:.2f} MFLOP per token"
    )
    for system in ("nanogpt", "attnlab"):
        achieved = statistics.median(col(system, "tok_s")) * per_token
        print(f"  {system:8s} {achieved / 1e9:8.2f} GFLOP/s  {achieved / peak:7.1%}")


if __name__ == "__main__":
    main()
