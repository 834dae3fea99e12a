"""Dropout with a cheaper CPU mask, used by the Transformer's layers and attention weights.

torch's CPU random numbers come from one serial Mersenne twister: ``rand_like`` costs a 32-bit
draw per element and ``bernoulli_`` (what ``F.dropout`` and SDPA's math kernel use) more than
twice that; at p = 0.1 they took a fifth of a training step of ``reverse-transformer``. A
keep/drop decision needs far fewer bits: each 64-bit draw here decides four elements by
comparing its 16-bit quarters with a threshold. The drop probability is therefore rounded to
a multiple of 2⁻¹⁶ (0.1 -> 0.1000061), and the kept values are scaled by 1 / (1 - that
probability), so the expectation is exactly the input's, as in inverted dropout.
Elsewhere (CUDA, eval, p = 0) the layers are torch's own.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the resolution of the drop probability


def drop_probability(p: float) -> float:
    """The drop probability the CPU mask realises for ``p``: ``p`` rounded to 2⁻¹⁶."""
    return round(p * LEVELS) / LEVELS


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype) -> Tensor:
    """A CPU inverted-dropout mask of ``shape``: 1 / (1 - p') with probability 1 - p', else 0,
    p' = ``drop_probability(p)``; independent elements from torch's global generator."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    quarters = words.view(torch.int16)[:n].view(shape)  # uniform on [-2¹⁵, 2¹⁵)
    dropped = round(p * LEVELS)  # how many of the 2¹⁶ values mean "drop"
    keep = quarters >= dropped - LEVELS // 2
    return keep.to(dtype).mul_(LEVELS / (LEVELS - dropped))


def cheap_mask_applies(x: Tensor, p: float, training: bool) -> bool:
    """CPU training with a drop probability that stays below 1 after rounding to 2⁻¹⁶."""
    return training and p > 0.0 and round(p * LEVELS) < LEVELS and x.device.type == "cpu"


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``, with ``keep_mask`` on the CPU."""
    if not cheap_mask_applies(x, p, training):
        return F.dropout(x, p, training)
    return x * keep_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """nn.Dropout with ``keep_mask`` on the CPU in training; nn.Dropout elsewhere."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def attention_with_dropout(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    enable_gqa: bool = False,
    scale: float | None = None,
) -> Tensor:
    """``F.scaled_dot_product_attention`` with these arguments; on the CPU with dropout the
    same math as its math kernel, the weights dropped with ``keep_mask``. (Without dropout, or
    on an accelerator, SDPA's fused kernels run as they are.)"""
    if not cheap_mask_applies(q, dropout_p, True):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p,
            enable_gqa=enable_gqa, scale=scale,
        )  # fmt: skip
    if enable_gqa and k.shape[1] != q.shape[1]:  # each query head reads its group's keys
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-1, -2)).mul_(scale)  # [B,H,Tq,Tk]
    if is_causal:
        tq, tk = scores.shape[-2:]
        future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu_(1)
        scores = scores.masked_fill(future, float("-inf"))
    if attn_mask is not None:
        scores = (
            scores.masked_fill(~attn_mask, float("-inf"))
            if attn_mask.dtype == torch.bool
            else scores + attn_mask
        )
    weights = torch.softmax(scores, dim=-1)
    return (weights * keep_mask(weights.shape, dropout_p, weights.dtype)) @ v
