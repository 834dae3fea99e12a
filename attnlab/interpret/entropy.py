"""Attention entropy per role × layer × head (Zhai et al. 2023 track its collapse).

H(row) = −Σ_k p_k ln p_k (nats) over one query's weights; averaged over the real query rows
of every sentence (target rows at padding and source rows at padding are left out).
"""

from __future__ import annotations

import torch
from torch import Tensor


def row_entropy(weights: Tensor) -> Tensor:
    """[..., Tk] -> [...] entropy in nats (0 ln 0 = 0)."""
    w = weights.to(torch.float64)
    return -torch.where(w > 0, w * torch.log(w.clamp_min(1e-300)), 0.0).sum(dim=-1)


def entropy_sums(maps: Tensor, query_mask: Tensor) -> tuple[Tensor, int]:
    """maps [B, L, H, Tq, Tk], query_mask [B, Tq] -> (Σ entropy [L, H], rows counted)."""
    entropy = row_entropy(maps)  # [B, L, H, Tq]
    mask = query_mask[:, None, None, :].to(entropy.dtype)
    return (entropy * mask).sum(dim=(0, 3)), int(query_mask.sum())
