"""KV-cache bytes per generated token: what a decoder's state grows by at each step.

Two figures, one home (``benchmarks/kv_cache.py`` and every run's ``cost`` record use them):

- ``kv_cache_bytes_per_token(model)``: the variant's own cost, per sentence, summed over the
  decoder's causal self-attentions. A multi-head variant keeps what its ``cache_entries``
  returns for one token (keys and values of every key/value head: 2·H_kv·d_h numbers; MLA's
  latent and shared rotary key: kv_rank + rope_dim), in the model's dtype. A variant whose
  decoder can keep a constant-size state (``AttentionSpec.constant_decode_state``: linear
  attention's running sums, a window of the last keys) costs 0 per token. A variant without
  a cache keeps its inputs (d_model numbers). An RNN's decoder state does not grow: 0.
- ``measured_state_growth(model, sources)``: the growth of the state ``model.step`` returns,
  measured over a few steps (what attnlab's decoder keeps: it caches every key, also for
  the constant-state variants, so that one search serves them all), and the cross-attention
  caches per source token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnlab.nn.attention.base import ROLE_CAUSAL_SELF
from attnlab.nn.seq2seq import PAD_ID

FIRST_WORD_ID = 4  # ids below are <pad>, <unk>, <s>, </s>


def decoder_self_attentions(model: torch.nn.Module) -> list[Any]:
    """The causal self-attention blocks (``AttentionBlock.role``), in module order."""
    return [m for m in model.modules() if getattr(m, "role", None) == ROLE_CAUSAL_SELF]


def kv_cache_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes the decoder's state grows by per generated token, per sentence (see module doc)."""
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    device = param.device if param is not None else torch.device("cpu")
    total = 0
    for block in decoder_self_attentions(model):
        attn = block.attn
        if attn.spec.constant_decode_state:
            continue
        if not getattr(block, "cacheable", False):  # the decoder keeps the inputs so far
            total += block.width * dtype.itemsize
            continue
        with torch.no_grad():
            one = attn.cache_entries(torch.zeros(1, 1, block.width, dtype=dtype, device=device))
        total += one.nbytes
    return total


def measured_state_growth(model: Any, sources: Sequence[Sequence[int]]) -> tuple[float, float]:
    """(decoder state bytes per generated token, cross-attention cache bytes per source token),
    per sentence, from the state ``model.step`` returns over 3 steps; raises when the growth
    is uneven (a state that is not a per-token cache)."""
    width = max(len(s) for s in sources)
    param = next(model.parameters())
    src = torch.tensor([list(s) + [PAD_ID] * (width - len(s)) for s in sources])
    src = src.to(param.device)
    src_mask = src != PAD_ID
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        sizes = [sum(t.nbytes for t in state.values())]
        tokens = torch.full((len(sources),), FIRST_WORD_ID, device=src.device)
        for _ in range(3):
            _, state, _ = model.step(tokens, state, enc)
            sizes.append(sum(t.nbytes for t in state.values()))
    growth = {b - a for a, b in zip(sizes, sizes[1:], strict=False)}
    if len(growth) != 1:
        raise ValueError(f"uneven decoder state growth {sizes}")
    cross = sum(t.nbytes for k, t in state.items() if k.startswith("cross_")) / src.numel()
    return growth.pop() / len(sources), cross
