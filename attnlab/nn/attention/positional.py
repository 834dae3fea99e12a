"""Position-aware scores: Shaw-style relative positions and ALiBi.

Positions follow the causal convention of ``causal_mask``: with Tq queries over Tk keys,
query i sits at absolute position Tk - Tq + i, so a decoder calling with Tq = 1 and its whole
key/value cache gets the same scores as the full pass.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.nn.attention.base import (
    ROLE_CAUSAL_SELF,
    ROLE_SELF,
    AttentionSpec,
    HParam,
    masked_softmax,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase, key_pattern_mask
from attnlab.nn.dropout import dropout

SELF_ROLES = frozenset({ROLE_SELF, ROLE_CAUSAL_SELF})


def relative_distance(tq: int, tk: int, device: torch.device | None = None) -> Tensor:
    """[Tq,Tk] long: j - i with query i at absolute position tk - tq + i."""
    query_pos = torch.arange(tq, device=device).unsqueeze(1) + (tk - tq)
    return torch.arange(tk, device=device).unsqueeze(0) - query_pos


@register_attention
class RelativeAttention(MultiHeadBase):
    """e_ij = q_i·(k_j + a^K_clip(j-i)) / √d_h, z_i = Σ_j α_ij (v_j + a^V_clip(j-i)).

    Shaw et al. 2018.
    """

    spec = AttentionSpec(
        name="relative",
        roles=SELF_ROLES,
        formula=(
            "e_ij = q_i·(k_j + a^K_{clip(j−i,k)})/√d_h;  z_i = Σ α_ij (v_j + a^V_{clip(j−i,k)})"
        ),
        complexity="O(T²·d) time, O(T²) memory",
        known_for="Learned embeddings of clipped relative distance; no absolute positions needed.",
        paper="Shaw, Uszkoreit & Vaswani 2018",
        hparams=(
            HParam(
                "max_relative",
                16,
                "relative: clipping distance k (2k+1 distance embeddings)",
                1,
                1024,
            ),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        max_relative: int = 16,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.max_relative = max_relative
        # Shared across heads, as in the paper.
        self.rel_keys = nn.Embedding(2 * max_relative + 1, self.head_dim)
        self.rel_values = nn.Embedding(2 * max_relative + 1, self.head_dim)
        nn.init.normal_(self.rel_keys.weight, std=self.head_dim**-0.5)
        nn.init.normal_(self.rel_values.weight, std=self.head_dim**-0.5)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        b, h, tq, _ = q.shape
        tk = k.shape[2]
        bucket = relative_distance(tq, tk, q.device).clamp(-self.max_relative, self.max_relative)
        bucket = (bucket + self.max_relative).expand(b, h, tq, tk)  # [B,H,Tq,Tk]
        # q_i·a^K_r for every bucket r, then pick r = clip(j - i): [B,H,Tq,2k+1] -> [B,H,Tq,Tk]
        rel_scores = torch.gather(q @ self.rel_keys.weight.t(), -1, bucket)
        scores = (q @ k.transpose(-1, -2) + rel_scores) / math.sqrt(self.head_dim)
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        weights = masked_softmax(scores, mask)
        dropped = dropout(weights, self.dropout_p, self.training)
        # Σ_j α_ij a^V_clip(j-i): add each weight into its distance bucket, then mix a^V.
        # The weights' dtype: float32 under autocast (softmax), while q is bf16 there.
        per_bucket = torch.zeros(
            b, h, tq, 2 * self.max_relative + 1, dtype=dropped.dtype, device=q.device
        )
        per_bucket.scatter_add_(-1, bucket, dropped)
        context = dropped @ v + per_bucket @ self.rel_values.weight
        return context, weights


def _power_of_two_slopes(n: int) -> list[float]:
    """2^(-8h/n), h = 1..n: the paper's geometric sequence, exact for n a power of two."""
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def alibi_slopes(heads: int) -> Tensor:
    """Per-head slopes by the authors' reference rule (``get_slopes`` in
    ofirpress/attention_with_linear_biases), which other implementations follow: for H a power
    of two, 2^(-8h/H); otherwise the slopes of P = 2^floor(log2 H) heads, then the first H - P
    of every other slope of 2P heads (interleaved between the first ones), not 2^(-8h/H)."""
    closest = 2 ** (heads.bit_length() - 1)  # largest power of two <= heads
    slopes = _power_of_two_slopes(closest)
    slopes += _power_of_two_slopes(2 * closest)[0::2][: heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


@register_attention
class AlibiAttention(MultiHeadBase):
    """score_ij = q_i·k_j / √d_h − m_h·|i − j|; Press, Smith & Lewis 2022 (ALiBi).

    Slopes follow the authors' reference code (see ``alibi_slopes``): for H not a power of two
    that is the slopes of 2^⌊log₂H⌋ heads followed by every other slope of twice as many heads,
    not the paper's 2^(−8h/H).
    """

    uses_sdpa = True
    spec = AttentionSpec(
        name="alibi",
        roles=SELF_ROLES,
        formula=(
            "softmax(q·k/√d_h − m_h·|i−j|), m_h = 2^(−8h/H) for H = 2^k, "
            "else the authors' reference rule (interleaved)"
        ),
        complexity="O(T²·d) time, O(T²) memory; fused SDPA with a bias without weights",
        known_for="A fixed linear distance penalty per head; extrapolates to longer inputs.",
        paper="Press, Smith & Lewis 2022",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.register_buffer("slopes", alibi_slopes(heads), persistent=False)

    def bias(self, tq: int, tk: int, causal: bool, device: torch.device) -> Tensor:
        # Causal rows only see j <= i, where |i - j| = i - j; encoder rows use the symmetric form.
        distance = relative_distance(tq, tk, device).abs().to(self.slopes.dtype)
        return -self.slopes[:, None, None] * distance  # [H,Tq,Tk]
