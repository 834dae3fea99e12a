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

Trained-model rows (``--trained``): for T in 512, 1024, 2048, 4096, one training step (forward,
backward, Adam update) of a small Transformer — d_model 128, 4 heads, ff 256, 2 + 2 layers —
on a batch of 2 selective-copy sources of T tokens with 16-token targets, per variant as the
encoder self-attention (and the decoder's, where the variant can be causal; else scaled-dot;
cross-attention scaled-dot). Each (variant, T) runs in a fresh child process as above: a
warm-up step at T = 16, then the resident high-water mark's growth over the step at T (on CUDA
``torch.cuda.max_memory_allocated``) and the fastest of ``--repeats`` steps. Every T runs all
its variants in turn (side by side, the same machine load), and each is given as a ratio to
scaled-dot at the same T: speed = scaled-dot's time / the variant's, memory = the variant's
peak / scaled-dot's, beside the seed article's claims (Longformer 1.8× speed and 45 % memory,
Linformer 3.2× and 30 %, at 4096).

    .venv/bin/python benchmarks/attention_scaling.py --trained            # T = 512 ... 4096
    .venv/bin/python benchmarks/attention_scaling.py --trained --quick    # smoke: T = 512, 1024
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


TRAINED_LENGTHS = (512, 1024, 2048, 4096)
TRAINED_VARIANTS = (
    "scaled-dot",
    "sliding-window",
    "linformer",
    "performer",
    "linear",
    "nsa",
    "decayed-linear",
    "gqa",
    "mla",
)
# The seed article's table: (speed, memory) relative to standard attention at 4096 tokens.
SEED_CLAIMS = {"sliding-window": (1.8, 0.45), "linformer": (3.2, 0.30)}


def trained_worker(name: str, length: int, repeats: int, device_name: str) -> dict:
    """One training step of the small Transformer with ``name`` as its self-attention."""
    import torch
    import torch.nn.functional as F

    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.nn.attention import ATTENTION
    from attnlab.nn.model import build_model

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    device = torch.device(device_name)
    causal = "causal-self" in ATTENTION.get(name).meta.roles
    overrides = [
        f"data.max_len={length}",
        "model.d_model=128",
        "model.heads=4",
        "model.ff=256",
        "model.enc_layers=2",
        "model.dec_layers=2",
        f"model.self_attention={name}",
        f"model.decoder_self_attention={name if causal else 'scaled-dot'}",
        f"train.batch_tokens={2 * (length + 17)}",
    ] + ([f"model.linformer.max_len={length}"] if name == "linformer" else [])
    config = apply_overrides(load_preset("selective-copy-transformer"), overrides)
    vocab = 20
    model = build_model(config, vocab, vocab).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(t: int) -> None:
        src = torch.randint(4, vocab, (2, t), device=device)
        tgt = torch.randint(4, vocab, (2, 17), device=device)
        out = model(src, src != 0, tgt[:, :-1])
        loss = F.cross_entropy(out.logits.reshape(-1, vocab).float(), tgt[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()

    step(16)  # warm-up: thread pool, kernels, the optimiser's state
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        step(length)
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    timed = times[1:] if len(times) > 1 else times
    return {"ms": 1000 * min(timed), "mb": mb}


def trained_rows(args: argparse.Namespace) -> None:
    lengths = TRAINED_LENGTHS[:2] if args.quick else TRAINED_LENGTHS
    names = [v for v in TRAINED_VARIANTS if not args.variants or v in args.variants.split(",")]
    if "scaled-dot" not in names:
        names.insert(0, "scaled-dot")  # every ratio's denominator
    repeats = args.repeats or (2 if args.quick else 3)
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    print(
        "one training step, Transformer d_model 128, 4 heads, ff 256, 2+2 layers, batch 2 × T "
        f"source tokens (16-token targets), {args.device}, {threads} thread(s); ratios to "
        "scaled-dot at the same T (speed = its time / the variant's; memory = the variant's "
        "peak / its)"
    )
    rows: dict[int, dict[str, dict]] = {}
    for length in lengths:
        rows[length] = {}
        for name in names:
            args_ = [sys.executable, __file__, "--trained-worker", name, str(length)]
            args_ += [str(repeats), args.device]
            proc = subprocess.run(args_, capture_output=True, text=True)
            if proc.returncode != 0:
                why = (proc.stderr.strip().splitlines() or ["?"])[-1]
                print(f"  {name} T={length} failed: {why}", file=sys.stderr)
                continue
            rows[length][name] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"  {name:15s} T={length:5d} {rows[length][name]}", file=sys.stderr, flush=True)
    print("| T | variant | ms / step | peak MiB | speed vs scaled-dot | memory vs scaled-dot |")
    print("|---:|---|---:|---:|---:|---:|")
    for length, row in rows.items():
        base = row.get("scaled-dot")
        for name, cell in row.items():
            speed = memory = "—"
            if base is not None:
                speed = f"{base['ms'] / cell['ms']:.2f}×"
                memory = f"{100 * cell['mb'] / max(base['mb'], 0.1):.0f} %"
            print(
                f"| {length} | {name} | {cell['ms']:.1f} | {cell['mb']:.0f} | {speed} | {memory} |"
            )
    print(
        "\nthe seed article at 4096: "
        + "; ".join(
            f"{name} {speed}× speed, {100 * memory:.0f} % memory"
            for name, (speed, memory) in SEED_CLAIMS.items()
        )
    )


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
    parser.add_argument(
        "--trained",
        action="store_true",
        help="one training step of a small Transformer per variant, T = 512 ... 4096",
    )
    parser.add_argument("--device", default="cpu", help="--trained: cpu or cuda")
    parser.add_argument("--trained-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trained_worker:
        name, length, repeats, device = args.trained_worker
        print(json.dumps(trained_worker(name, int(length), int(repeats), device)))
        return
    if args.trained:
        trained_rows(args)
        return
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
