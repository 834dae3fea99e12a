"""Model FLOPs of a Transformer training step, and this machine's float32 matmul FLOP/s.

One home for the counting used by gpu_check.py (MFU over the GPU's bf16 peak) and
throughput.py (fraction of this CPU's float32 matmul rate). How FLOPs are counted is written
in gpu_check.py's docstring: dense matmuls 6 x weights x tokens they process, attention
12 x layers x d x keys per query token; embeddings, biases and norms are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def model_flops(model: Any, src_lens: list[int], tgt_lens: list[int]) -> float:
    """Training FLOPs of one step of an attnlab Transformer over these sentences (see top)."""
    import torch

    n_src, n_tgt = sum(src_lens), sum(tgt_lens)
    dense = 0.0
    for name, module in model.named_modules():  # a tied output layer is still a module
        if not isinstance(module, torch.nn.Linear):
            continue
        on_source = name.startswith("encoder_layers.") or (
            ".cross_attn." in name and name.rsplit(".", 1)[-1] in ("k_proj", "v_proj")
        )
        dense += 6.0 * module.weight.numel() * (n_src if on_source else n_tgt)
    names = [name for name, _ in model.named_modules()]
    enc = sum(
        1 for n in names if n.startswith("encoder_layers.") and n.endswith("self_attn.attn.q_proj")
    )
    # the decoder's self-attentions: an encoder-decoder's decoder_layers, a decoder-only's layers
    dec = sum(
        1
        for n in names
        if not n.startswith("encoder_layers.") and n.endswith("self_attn.attn.q_proj")
    )
    d = model.get_submodule(next(n for n in names if n.endswith("q_proj"))).weight.shape[0]
    attention = 0.0
    for s, t in zip(src_lens, tgt_lens, strict=True):
        attention += 12.0 * enc * d * s * s  # encoder self: s queries x s keys
        attention += 12.0 * dec * d * t * t  # decoder self (the causal half counted whole)
        attention += 12.0 * dec * d * t * s  # cross: t queries x s keys
    return dense + attention


def flops_per_target_token(model: Any, examples: Sequence[Any]) -> float:
    """Mean training FLOPs per target token (``</s>`` included, what tokens/s counts) over
    ``examples``: model FLOPs add up sentence by sentence, so the mean over an epoch times the
    trainer's tokens/s is the achieved FLOP/s of its training loop."""
    from attnlab.data.batching import example_cost

    costs = [example_cost(e) for e in examples]
    src_lens = [s for s, _ in costs]
    tgt_lens = [t for _, t in costs]  # the decoder reads <s> y1..yn: n + 1 positions
    return model_flops(model, src_lens, tgt_lens) / max(sum(tgt_lens), 1)


def matmul_flops_per_s(
    n: int = 2048, repeats: int = 10, threads: int = 2, device: str = "cpu"
) -> float:
    """The best float32 FLOP/s of an n x n @ n x n matmul over ``repeats`` (2 n^3 FLOPs);
    on CUDA each timing waits for the kernel (TF32 stays as torch's default: off)."""
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device)
    b = torch.randn(n, n, generator=gen).to(device)
    out = torch.empty(n, n, device=device)

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    torch.mm(a, b, out=out)  # warm-up
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best
