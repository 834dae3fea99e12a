"""Dropout with a cheaper CPU mask, used by the Transformer's layers and attention weights.

torch's CPU random numbers come from one serial Mersenne twister: ``rand_like`` costs a 32-bit
draw per element and ``bernoulli_`` (what ``F.dropout`` and SDPA's math kernel use) more than
twice that; at p = 0.1 they took a fifth of a training step of ``reverse-transformer``. A
keep/drop decision needs far fewer bits: each 64-bit word here decides four elements by
comparing its 16-bit quarters with a threshold. The drop probability is therefore rounded to
a multiple of 2⁻¹⁶ (0.1 -> 0.1000061), and the kept values are scaled by 1 / (1 - that
probability), so the expectation is exactly the input's, as in inverted dropout.
The words come from numpy's SFC64, which fills them about twice as fast as torch's generator,
started for each mask from three words of torch's global generator: ``torch.manual_seed`` and
a checkpoint's RNG state still decide every mask, and concurrent threads share no state.
Elsewhere (CUDA, eval, p = 0) the layers are torch's own.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the resolution of the drop probability


def _dropped(p: float) -> int:
    """How many of the 2¹⁶ values of a quarter mean "drop" for probability ``p``."""
    return round(p * LEVELS)


def drop_probability(p: float) -> float:
    """The drop probability the CPU mask realises for ``p``: ``p`` rounded to 2⁻¹⁶."""
    return _dropped(p) / LEVELS


class _WordSource(threading.local):
    """A per-thread SFC64 bit generator, restarted from torch's generator for each mask."""

    def __init__(self) -> None:
        self.bits = np.random.SFC64(0)
        self.state = self.bits.state
        self.seed = np.array([0, 0, 0, 1], dtype=np.uint64)  # SFC64's a, b, c and counter 1
        self.seed_words = torch.from_numpy(self.seed[:3].view(np.int64))  # torch's view of a-c

    def words(self, count: int) -> np.ndarray:
        """``count`` uniform 64-bit words from an SFC64 state whose three words torch's global
        generator draws (the counter at 1); a random state needs no warm-up."""
        self.seed_words.random_(-(2**63), 2**63 - 1)
        self.state["state"]["state"] = self.seed
        self.bits.state = self.state
        return self.bits.random_raw(count)


_WORDS = _WordSource()


def keep_bits(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype) -> Tensor:
    """A CPU keep/drop mask of ``shape``: 1 with probability 1 - p', else 0, p' =
    ``drop_probability(p)``; independent elements, decided by torch's global generator."""
    n = math.prod(shape)
    words = _WORDS.words((n + 3) // 4)
    quarters = torch.from_numpy(words.view(np.int16)[:n]).view(shape)  # uniform on [-2¹⁵, 2¹⁵)
    # The comparison writes 1.0 / 0.0 straight into the float mask: a bool mask and its
    # conversion take four times as long on the CPU.
    mask = torch.empty(shape, dtype=dtype)
    return torch.ge(quarters, _dropped(p) - LEVELS // 2, out=mask)


def keep_scale(p: float) -> float:
    """1 / (1 - p'): what inverted dropout multiplies the kept values by."""
    return LEVELS / (LEVELS - _dropped(p))


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, dtype: torch.dtype) -> Tensor:
    """A CPU inverted-dropout mask of ``shape``: ``keep_bits`` times ``keep_scale(p)``."""
    return keep_bits(shape, p, dtype).mul_(keep_scale(p))


def cheap_mask_applies(x: Tensor, p: float, training: bool) -> bool:
    """CPU training with a drop probability that stays below 1 after rounding to 2⁻¹⁶."""
    return training and p > 0.0 and _dropped(p) < LEVELS and x.device.type == "cpu"


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``, with ``keep_mask`` on the CPU."""
    if not cheap_mask_applies(x, p, training):
        return F.dropout(x, p, training)
    return x * keep_mask(x.shape, p, x.dtype)


class Dropout(nn.Dropout):
    """nn.Dropout with ``keep_mask`` on the CPU in training; nn.Dropout elsewhere."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def residual(self, x: Tensor, y: Tensor) -> Tensor:
        """``x + self(y)``; on the CPU mask path one fused pass (addcmul) that also applies
        the scale, so the mask is used as drawn."""
        if not cheap_mask_applies(y, self.p, self.training):
            return x + self(y)
        return torch.addcmul(x, y, keep_bits(y.shape, self.p, y.dtype), value=keep_scale(self.p))


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
    bias = _additive_mask(attn_mask, is_causal, q.shape[-2], k.shape[-2], q.dtype, q.device)
    scores = q @ k.transpose(-1, -2)  # [B,H,Tq,Tk]
    # bias + scale·scores in one pass over the scores (the mask and the scale together).
    scores = scores.mul_(scale) if bias is None else torch.add(bias, scores, alpha=scale)
    weights = torch.softmax(scores, dim=-1)
    return (weights * keep_mask(weights.shape, dropout_p, weights.dtype)) @ v


def _additive_mask(
    attn_mask: Tensor | None,
    is_causal: bool,
    tq: int,
    tk: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor | None:
    """SDPA's masks as one additive bias (0 / -inf; a float mask as given), broadcastable to
    the scores; None without a mask."""
    bias = None
    if is_causal:  # top-left aligned, as SDPA's is_causal
        bias = torch.full((tq, tk), float("-inf"), dtype=dtype, device=device).triu_(1)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            blocked = torch.zeros(attn_mask.shape, dtype=dtype, device=device)
            attn_mask = blocked.masked_fill_(~attn_mask, float("-inf"))
        bias = attn_mask if bias is None else bias + attn_mask
    return bias
