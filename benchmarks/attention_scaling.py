"""Forward + backward time and peak memory of one self-attention layer per variant.

    .venv/bin/python benchmarks/attention_scaling.py           # T = 256 ... 4096 (8192: linear)
    .venv/bin/python benchmarks/attention_scaling.py --quick   # T = 256, 1024, 2048, 4096 (8192)
    .venv/bin/python benchmarks/attention_scaling.py --causal  # decoder (causal) self-attention

One layer: d_model 256, 4 heads, batch 1, encoder self-attention, no weights requested (the
training path), except "scaled-dot (explicit)", which asks for weights and so runs the
explicit softmax(QKᵀ)V path that materialises the T×T matrix.

Memory: every (variant, T) runs in a fresh child process; after building the layer and a
warm-up at T = 16, we read the process's resident high-water mark (getrusage ru_maxrss), run
one forward + backward at T, and read it again. The difference is the peak resident memory
that forward + backward added: every tensor it allocated (activations kept for backward,
scores, gradients) at its largest simultaneous total, as the OS saw it. Time is the fastest of
``--repeats`` further forward + backward runs in the same process (the minimum is the figure
least disturbed by other processes on a shared machine). Threads: $OMP_NUM_THREADS, default 1.

The growth exponent is the log-log slope from T = 1024 to T = 4096: 1 = linear, 2 = quadratic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

QUADRATIC_MAX_T = 4096
# name, label, need_weights; the linear-complexity variants also run at 8192
VARIANTS = [
    ("scaled-dot", "scaled-dot (explicit)", True),
    ("scaled-dot", "scaled-dot (sdpa)", False),
    ("gated", "gated", False),
    ("alibi", "alibi", False),
    ("relative", "relative", False),
    ("additive", "additive", False),
    ("sliding-window", "sliding-window", False),
    ("dilated", "dilated", False),
    ("linformer", "linformer", False),
    ("performer", "performer", False),
    ("linear", "linear", False),
    ("gqa", "gqa (kv_heads 2)", False),
    ("mla", "mla", False),
    ("differential", "differential", False),
    ("sigmoid", "sigmoid", False),
    ("sinks", "sinks", False),
    ("qk-norm", "qk-norm", False),
    ("stick-breaking", "stick-breaking", False),
    # non-causal rows build the T x T decay matrix; --causal runs the chunked O(T) form
    ("decayed-linear", "decayed-linear", False),
    ("sparsemax", "sparsemax", False),
    ("entmax", "entmax (1.5)", False),
    ("nsa", "nsa", False),  # the selection scores are T²/block: quadratic, a smaller constant
]
LINEAR = {"sliding-window", "dilated", "linformer", "performer", "linear"}
MAX_T = {"additive": 512}  # O(T²·d) memory and time: 1024 already takes 3 GB and ~30 s


def worker(name: str, length: int, need_weights: bool, causal: bool, repeats: int) -> dict:
    import torch

    from attnlab.nn.attention import build_attention

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    hparams = {"max_len": max(length, 16)} if name == "linformer" else {}
    attn = build_attention(
        name, 256, 256, role="causal-self" if causal else "self", heads=4, hparams=hparams
    )

    def run(t: int) -> None:
        x = torch.randn(1, t, 256, requires_grad=True)
        mask = torch.ones(1, t, dtype=torch.bool)
        out = attn(x, x, x, mask, causal=causal, need_weights=need_weights)
        loss = out.context.sum() + (out.weights.sum() if out.weights is not None else 0)
        loss.backward()

    run(16)  # warm-up: thread pool, kernels
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    run(length)
    first = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    times = [first]
    for _ in range(repeats - 1):
        start = time.perf_counter()
        run(length)
        times.append(time.perf_counter() - start)
    # with several runs, drop the first (page faults on fresh memory)
    timed = times[1:] if len(times) > 1 else times
    return {"ms": 1000 * min(timed), "mb": peak_kib / 1024}


def measure(name: str, length: int, need_weights: bool, causal: bool, repeats: int) -> dict | None:
    args = [
        sys.executable,
        __file__,
        "--worker",
        name,
        str(length),
        str(int(need_weights)),
        str(int(causal)),
        str(repeats),
    ]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        print(
            f"  {name} T={length} failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr
        )
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slope(a: float, b: float, ta: int, tb: int) -> float:
    return math.log(b / a) / math.log(tb / ta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="T = 256, 1024, 2048, 4096 (8192 linear ones)"
    )
    parser.add_argument("--causal", action="store_true", help="causal self-attention")
    parser.add_argument(
        "--repeats", type=int, default=0, help="timed runs per point (default 3, quick 2)"
    )
    parser.add_argument(
        "--variants", default="", help="comma-separated labels to run (default all)"
    )
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, length, need_weights, causal, repeats = args.worker
        print(
            json.dumps(
                worker(name, int(length), bool(int(need_weights)), bool(int(causal)), int(repeats))
            )
        )
        return

    lengths = [256, 1024, 2048, 4096, 8192] if args.quick else [256, 512, 1024, 2048, 4096, 8192]
    repeats = args.repeats or 3
    chosen = [v for v in VARIANTS if not args.variants or v[1] in args.variants.split(",")]
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    print(
        f"one {'causal ' if args.causal else ''}self-attention layer, "
        "d_model 256, 4 heads, batch 1, "
        f"forward+backward, {threads} thread(s); cell = fastest ms / peak MB added"
    )
    results: dict[str, dict[int, dict]] = {}
    for name, label, need_weights in chosen:
        if args.causal and name == "linformer":
            continue
        results[label] = {}
        for length in lengths:
            limit = MAX_T.get(name, 8192 if name in LINEAR else QUADRATIC_MAX_T)
            if length > limit:
                continue
            result = measure(name, length, need_weights, args.causal, repeats)
            if result is not None:
                results[label][length] = result
            print(f"  {label:22s} T={length:5d}  {result}", file=sys.stderr, flush=True)

    header = (
        f"{'variant':22s}"
        + "".join(f"{t:>16d}" for t in lengths)
        + f"{'exp time':>10s}{'exp mem':>9s}"
    )
    print(header)
    print("-" * len(header))
    for label, row in results.items():
        cells = "".join(
            f"{row[t]['ms']:>8.1f}/{row[t]['mb']:<7.0f}" if t in row else f"{'—':>16s}"
            for t in lengths
        )
        exp_t = exp_m = float("nan")
        if 1024 in row and 4096 in row:
            exp_t = slope(row[1024]["ms"], row[4096]["ms"], 1024, 4096)
            exp_m = slope(max(row[1024]["mb"], 0.1), max(row[4096]["mb"], 0.1), 1024, 4096)
        print(f"{label:22s}{cells}{exp_t:>10.2f}{exp_m:>9.2f}")
    explicit = results.get("scaled-dot (explicit)", {}).get(4096)
    if explicit:
        print("\nmemory at T=4096 relative to scaled-dot (explicit):")
        for label, row in results.items():
            if 4096 in row and label != "scaled-dot (explicit)":
                print(f"  {label:22s} {explicit['mb'] / max(row[4096]['mb'], 0.1):6.1f}x less")


if __name__ == "__main__":
    main()
