"""Sparse patterns: a sliding window (Longformer) and a dilated window (Sparse Transformer).

Without weights, both run banded: queries are cut into blocks of b, each block meets only
the b + 2w keys that can fall in its window, so time and memory grow as O(T·w) rather than
O(T²). With weights (viewing) or Tq ≠ Tk (one cached decoding step, already O(Tk)), they run
the explicit masked form, which gives the same numbers and the full [B,H,Tq,Tk] matrix.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.nn.attention.base import (
    SCORES_LINEAR,
    AttentionSpec,
    HParam,
    masked_softmax,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.attention.positional import SELF_ROLES, relative_distance
from attnlab.nn.dropout import dropout


def banded_attention(
    q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, window: int, causal: bool, dropout_p: float
) -> Tensor:
    """Softmax attention where query i sees keys |i - j| <= window (and j <= i if causal).

    q, k, v [B,G,T,dh] (G heads or head groups), key_mask [B,G|1,T] -> context [B,G,T,dh].
    """
    bsz, groups, length, dh = q.shape
    # No key lies more than length - 1 away: a wider window sees the same keys, and the
    # blocks (b + 2w keys each) would otherwise grow with w, not with T.
    w = min(window, max(length - 1, 0))
    block = max(w, 16)
    n_blocks = -(-length // block)
    extra = n_blocks * block - length
    span = block + 2 * w  # keys one block of queries can reach
    # Pad w keys on the left and w + extra on the right so every block has a full span.
    k_blocks = F.pad(k, (0, 0, w, w + extra)).unfold(2, span, block).transpose(-1, -2)
    v_blocks = F.pad(v, (0, 0, w, w + extra)).unfold(2, span, block).transpose(-1, -2)
    mask_blocks = F.pad(key_mask, (w, w + extra), value=False).unfold(2, span, block)
    q_blocks = F.pad(q, (0, 0, 0, extra)).view(bsz, groups, n_blocks, block, dh)
    scores = q_blocks @ k_blocks.transpose(-1, -2) / math.sqrt(dh)  # [B,G,n,b,b+2w]
    # Local query r sits at key offset r + w in its span: allowed offsets r..r+2w (r+w if causal).
    offset = (
        torch.arange(span, device=q.device)[None, :] - torch.arange(block, device=q.device)[:, None]
    )
    band = (offset >= 0) & (offset <= (w if causal else 2 * w))
    mask = band & mask_blocks[:, :, :, None, :]  # [B,G|1,n,b,span]
    weights = dropout(masked_softmax(scores, mask), dropout_p, dropout_p > 0)
    context = weights @ v_blocks  # [B,G,n,b,dh]
    return context.reshape(bsz, groups, n_blocks * block, dh)[:, :, :length]


def dilated_banded_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor,
    window: int,
    dilation: int,
    causal: bool,
    dropout_p: float,
) -> Tensor:
    """Query i sees keys j = i + d·r, |r| <= window: a sliding window inside each residue class
    of positions mod d. q, k, v [B,G,T,dh], key_mask [B,T] -> [B,G,T,dh]."""
    if dilation == 1:
        return banded_attention(q, k, v, key_mask[:, None], window, causal, dropout_p)
    bsz, groups, length, dh = q.shape
    d = dilation
    extra = -length % d
    sub = (length + extra) // d

    def by_residue(x: Tensor) -> Tensor:  # [B,G,T,dh] -> [B,G·d,T/d,dh], position r + d·a -> (r, a)
        x = F.pad(x, (0, 0, 0, extra)).view(bsz, groups, sub, d, dh).transpose(2, 3)
        return x.reshape(bsz, groups * d, sub, dh)

    mask = F.pad(key_mask, (0, extra), value=False).view(bsz, 1, sub, d).transpose(2, 3)
    mask = mask.expand(bsz, groups, d, sub).reshape(bsz, groups * d, sub)
    context = banded_attention(
        by_residue(q), by_residue(k), by_residue(v), mask, window, causal, dropout_p
    )
    context = (
        context.view(bsz, groups, d, sub, dh).transpose(2, 3).reshape(bsz, groups, sub * d, dh)
    )
    return context[:, :, :length]


@register_attention
class SlidingWindowAttention(MultiHeadBase):
    """score_ij = q_i·k_j / √d_h for |i − j| ≤ w, −∞ elsewhere; Beltagy et al. 2020 (Longformer)."""

    spec = AttentionSpec(
        name="sliding-window",
        score_memory=SCORES_LINEAR,
        constant_decode_state=True,
        roles=SELF_ROLES,
        formula="softmax over |i−j| ≤ w of q_i·k_j/√d_h (j ≤ i when causal)",
        complexity="O(T·w·d) time and memory (banded)",
        known_for="Local attention band for long inputs; receptive field grows w per layer.",
        paper="Beltagy, Peters & Cohan 2020 (Longformer)",
        hparams=(HParam("window", 16, "window half-width w (keys |i−j| ≤ w)", 1, 100000),),
    )

    def __init__(
        self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0, window: int = 16
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.window = window

    def dilations(self) -> list[int]:
        """Dilation of each head."""
        return [1] * self.heads

    def allowed(self, tq: int, tk: int, causal: bool, device: torch.device) -> Tensor:
        distance = relative_distance(tq, tk, device)  # j - i
        pattern = []
        for d in self.dilations():
            ok = (distance.abs() <= self.window * d) & (distance.remainder(d) == 0)
            pattern.append(ok & (distance <= 0) if causal else ok)
        return torch.stack(pattern)  # [H,Tq,Tk]

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        if need_weights or q.shape[2] != k.shape[2]:
            return super().attend(q, k, v, key_mask, causal, need_weights)
        dropout_p = self.dropout_p if self.training else 0.0
        dilations = torch.tensor(self.dilations())
        parts = []
        # Heads sharing a dilation run together: [B,G,T,dh] per group.
        for d in sorted(set(self.dilations())):
            index = torch.nonzero(dilations == d).flatten().tolist()
            sl = slice(index[0], index[-1] + 1)  # groups are contiguous by construction
            parts.append(
                dilated_banded_attention(
                    q[:, sl], k[:, sl], v[:, sl], key_mask, self.window, d, causal, dropout_p
                )
            )
        return torch.cat(parts, dim=1), None


@register_attention
class DilatedAttention(SlidingWindowAttention):
    """score_ij = q_i·k_j / √d_h for j = i + d·r, |r| ≤ w.

    Child et al. 2019 (Sparse Transformer, strided).
    """

    spec = AttentionSpec(
        name="dilated",
        score_memory=SCORES_LINEAR,
        constant_decode_state=True,
        roles=SELF_ROLES,
        formula="softmax over j = i + d·r, |r| ≤ w (half the heads d = 1: local + strided)",
        complexity="O(T·w·d) time and memory (banded per residue class)",
        known_for=(
            "Strided heads reach w·d tokens away at the cost of w; local heads fill the gaps."
        ),
        paper="Child et al. 2019 (Sparse Transformer); Beltagy et al. 2020",
        hparams=(
            HParam("window", 16, "window half-width w (keys |i−j| ≤ w)", 1, 100000),
            HParam("dilation", 2, "dilated: stride d between attended keys", 1, 1024),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        window: int = 16,
        dilation: int = 2,
    ):
        super().__init__(query_dim, key_dim, heads, dropout, window)
        self.dilation = dilation

    def dilations(self) -> list[int]:
        # As in the Sparse Transformer's factorised pattern, the first half of the heads stay
        # local (d = 1) and the rest are strided, so every residue class still mixes (given two
        # heads or more: one head is strided alone, as docs/models.md says).
        local = self.heads // 2
        return [1] * local + [self.dilation] * (self.heads - local)
