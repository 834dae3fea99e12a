"""Two models, one sentence: maps on one colour scale, A − B, Jensen-Shannon per row.

JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = ½ (p + q), in bits (log base 2, so 0 ≤ JS ≤ 1);
0 log 0 = 0. Rows are renormalised to sum 1 first (an all-zero row is compared as uniform).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _distribution(rows: Tensor) -> Tensor:
    rows = rows.to(torch.float64).clamp_min(0.0)
    total = rows.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(rows, 1.0 / max(rows.shape[-1], 1))
    return torch.where(total > 0, rows / total.clamp_min(1e-300), uniform)


def _kl(p: Tensor, q: Tensor) -> Tensor:
    terms = torch.where(
        p > 0, p * (torch.log(p.clamp_min(1e-300)) - torch.log(q.clamp_min(1e-300))), 0.0
    )
    return terms.sum(dim=-1)


def js_divergence(a: Tensor, b: Tensor) -> Tensor:
    """Per-row Jensen-Shannon divergence in bits: [..., T, S] twice -> [..., T]."""
    p, q = _distribution(a), _distribution(b)
    m = 0.5 * (p + q)
    return (0.5 * _kl(p, m) + 0.5 * _kl(q, m)) / math.log(2.0)


def shared_scale(a: Tensor, b: Tensor) -> float:
    """One vmax for both maps (the larger maximum), so colours compare."""
    return float(max(a.max() if a.numel() else 0.0, b.max() if b.numel() else 0.0))


def difference(a: Tensor, b: Tensor) -> Tensor:
    """A − B (same shape: the two models produced the same target tokens)."""
    if a.shape != b.shape:
        raise ValueError(f"maps differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    return a.to(torch.float64) - b.to(torch.float64)
