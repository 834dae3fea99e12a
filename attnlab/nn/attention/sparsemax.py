"""Sparse normalisers with exact zeros: sparsemax and α-entmax (α = 1.5 by default).

Both map scores z (one row per query) onto the probability simplex like softmax does, but
keys scoring far enough below the best one get exactly zero weight:

- sparsemax (Martins & Astudillo 2016, arXiv:1602.02068): the Euclidean projection of z onto
  the simplex, p = max(z − τ, 0) with τ such that Σ p = 1 (sort-based, exact);
- α-entmax (Peters, Niculae & Martins 2019, arXiv:1905.05702):
  p = max((α−1) z − τ, 0)^{1/(α−1)}, Σ p = 1. α → 1 is softmax, α = 2 is sparsemax;
  α = 1.5 has an exact sort-based algorithm (their Alg. 2), other α use bisection on τ.

The normalisers are masked and batched over any leading dims (last dim = keys): masked keys
get exactly zero, a row with every key masked gets zeros (no NaN, also in backward). The
backward is the closed-form Jacobian shared by the whole family: with s = p^{2−α} on the
support (0 off it), ∂p/∂z = diag(s) − s sᵀ / Σ s (sparsemax: s = the support's indicator;
entmax-1.5: s = √p).

The attention variants (``sparsemax``, ``entmax``) are ``MultiHeadBase`` subclasses: scaled
dot-product scores per head, the sparse normaliser instead of softmax. That one formulation
serves the RNN decoder (rnn-cross: the decoder state is the query, like ``multihead``) and
every Transformer role, and it gets the key/value cache of incremental decoding for free.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ALL_ROLES,
    NORM_SPARSE,
    AttentionSpec,
    HParam,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase, key_pattern_mask
from attnlab.nn.dropout import dropout

# -- the normalisers ---------------------------------------------------------------------------


def _shifted(scores: Tensor, mask: Tensor | None, scale: float) -> tuple[Tensor, Tensor]:
    """X = scale·z shifted so each row's best real key is 0; masked keys set to -2, below any
    threshold (τ >= max X − 1 for every α), so they fall outside the support. Returns (X, mask)
    with the mask expanded to X's shape. Computed in float32 at least (sorting half is lossy)."""
    work = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    x = work.detach() * scale
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    mask = mask.expand_as(x)
    top = x.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all-masked row: 0
    return (x - top).masked_fill(~mask, -2.0), mask


def _sparsemax_forward(x: Tensor) -> Tensor:
    """Projection of each row of x onto the simplex (Martins & Astudillo 2016, Alg. 1)."""
    xs = x.sort(dim=-1, descending=True).values
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    cums = xs.cumsum(-1)
    # The support is the k largest with 1 + k·x_(k) > Σ_{j<=k} x_(j); k = 1 always holds
    # (the clamp only keeps a NaN row, e.g. a diverged model, from an index error).
    size = (1 + k * xs > cums).sum(-1, keepdim=True).clamp_min(1)
    tau = (cums.gather(-1, size - 1) - 1) / size.to(x.dtype)
    return (x - tau).clamp_min(0)


def _entmax15_forward(x: Tensor) -> Tensor:
    """Exact 1.5-entmax of x = z/2 (Peters et al. 2019, Alg. 2): p = max(x − τ, 0)²."""
    xs = x.sort(dim=-1, descending=True).values
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    mean = xs.cumsum(-1) / k
    mean_sq = (xs * xs).cumsum(-1) / k
    # τ_k solves Σ_{j<=k} (x_(j) − τ)² = 1 for the k largest; the support is the largest k
    # whose τ_k stays below x_(k).
    delta = (1 - k * (mean_sq - mean * mean)) / k
    tau = mean - delta.clamp_min(0).sqrt()
    size = (tau <= xs).sum(-1, keepdim=True).clamp_min(1)
    return (x - tau.gather(-1, size - 1)).clamp_min(0).square()


def _entmax_bisect_forward(x: Tensor, mask: Tensor, alpha: float) -> Tensor:
    """α-entmax of x = (α−1)z by bisection on τ in [max − 1, max − (1/d)^{α−1}] (vectorised,
    a fixed number of halvings: the dtype's mantissa bits + 2), then renormalised."""
    power = 1.0 / (alpha - 1.0)
    d = mask.sum(-1, keepdim=True).clamp_min(1).to(x.dtype)
    lo = torch.full_like(d, -1.0)  # Σ p(lo) >= 1
    hi = -(d ** -(alpha - 1.0))  # Σ p(hi) <= 1
    mantissa_bits = round(-math.log2(torch.finfo(x.dtype).eps))  # 23 (float32), 52 (float64)
    for _ in range(mantissa_bits + 2):
        mid = (lo + hi) / 2
        above = (x - mid).clamp_min(0).pow(power).sum(-1, keepdim=True) >= 1
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    p = (x - lo).clamp_min(0).pow(power)
    return p / p.sum(-1, keepdim=True)


class _EntmaxFunction(torch.autograd.Function):
    """p = α-entmax(z) over the real keys; backward ∂p/∂z = diag(s) − s sᵀ/Σs, s = p^{2−α}."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, scores: Tensor, mask: Tensor | None, alpha: float
    ) -> Tensor:
        x, mask = _shifted(scores, mask, alpha - 1.0)
        if alpha == 2.0:
            p = _sparsemax_forward(x)
        elif alpha == 1.5:
            p = _entmax15_forward(x)
        else:
            p = _entmax_bisect_forward(x, mask, alpha)
        # Exact zeros at masked keys, and for a row without any real key.
        p = p.masked_fill(~mask, 0.0) * mask.any(-1, keepdim=True)
        p = p.to(scores.dtype)
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (p,) = ctx.saved_tensors
        support = p > 0
        if ctx.alpha == 2.0:
            s = support.to(p.dtype)
        else:
            s = torch.where(support, p, torch.zeros_like(p)).pow(2.0 - ctx.alpha) * support
        total = s.sum(-1, keepdim=True)
        gs = (grad * s).sum(-1, keepdim=True)
        # An all-masked row has Σs = 0 and no gradient at all.
        mean = gs / torch.where(total > 0, total, torch.ones_like(total))
        return s * (grad - mean), None, None


def entmax(scores: Tensor, mask: Tensor | None = None, alpha: float = 1.5) -> Tensor:
    """α-entmax over the last dim (1 < α <= 2) where ``mask`` (bool, broadcastable) is True.

    α = 2: sparsemax (sort, exact); α = 1.5: the exact sort-based algorithm; otherwise
    bisection. Rows >= 0 sum to 1 over the real keys; masked keys and rows with no real key
    get exactly 0."""
    if not 1.0 < alpha <= 2.0:
        raise ValueError(f"entmax needs 1 < alpha <= 2, got {alpha}")
    return _EntmaxFunction.apply(scores, mask, float(alpha))


def sparsemax(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """Sparsemax over the last dim: the Euclidean projection of the real keys' scores onto
    the probability simplex (masked keys and key-less rows get exactly 0)."""
    return entmax(scores, mask, alpha=2.0)


def entmax15(scores: Tensor, mask: Tensor | None = None) -> Tensor:
    """1.5-entmax over the last dim (Peters et al. 2019's exact sort-based algorithm)."""
    return entmax(scores, mask, alpha=1.5)


# -- the attention variants --------------------------------------------------------------------


class _SparseAttention(MultiHeadBase):
    """Scaled dot-product attention per head with ``normalise`` in place of softmax."""

    alpha: float = 2.0

    def normalise(self, scores: Tensor, mask: Tensor) -> Tensor:
        return entmax(scores, mask, self.alpha)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        scores = self.scores(q, k)
        bias = self.bias(tq, tk, causal, q.device)
        if bias is not None:
            scores = scores + bias
        weights = self.normalise(scores, mask)
        dropped = dropout(weights, self.dropout_p, self.training)
        return dropped @ v, weights


@register_attention
class SparsemaxAttention(_SparseAttention):
    """sparsemax(q·k/√d_h) per head; Martins & Astudillo 2016 (arXiv:1602.02068).

    Scaled dot-product scores per head (so one class serves the RNN decoder, where the query
    is the decoder state, and every Transformer role), normalised by the Euclidean
    projection onto the simplex: the weights are exactly 0 for keys scoring more than
    1 below the best (at most), and the context is that sparse mixture of values."""

    spec = AttentionSpec(
        name="sparsemax",
        roles=frozenset(ALL_ROLES),
        formula="sparsemax(Q_h K_hᵀ/√d_h) V_h per head; sparsemax(z) = argmin_{p∈Δ} ‖p − z‖²",
        complexity="O(Tq·Tk·(d + log Tk)): a sort per row; no fused kernel",
        known_for="Softmax's sparse twin: a projection onto the simplex gives exact zeros.",
        paper="Martins & Astudillo 2016 (arXiv 1602.02068)",
        normalisation=NORM_SPARSE,
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)


ALPHA = HParam(
    "alpha",
    1.5,
    "entmax: α in p = [(α−1)z − τ]₊^{1/(α−1)}; 1.5 exact (sort), 2 = sparsemax, else bisection; "
    "→ 1 approaches softmax (denser), larger is sparser",
    low=1.01,
    high=2.0,
)


@register_attention
class EntmaxAttention(_SparseAttention):
    """α-entmax(q·k/√d_h) per head; Peters, Niculae & Martins 2019 (arXiv:1905.05702).

    Like ``sparsemax`` (scaled dot-product scores per head, every role) with the α-entmax
    normaliser: α = 1.5 by default (exact sort-based algorithm), α = 2 is sparsemax, other
    α in (1, 2] by bisection. Smaller α is denser (α → 1 approaches softmax)."""

    spec = AttentionSpec(
        name="entmax",
        roles=frozenset(ALL_ROLES),
        formula="entmax_α(Q_h K_hᵀ/√d_h) V_h; entmax_α(z) = [(α−1)z − τ]₊^{1/(α−1)}, Σ = 1",
        complexity="O(Tq·Tk·(d + log Tk)) (α = 1.5, 2: sort); bisection: O(Tq·Tk·iterations)",
        known_for="Between softmax and sparsemax: sparse maps that keep a smooth, dense core.",
        paper="Peters, Niculae & Martins 2019 (arXiv 1905.05702)",
        hparams=(ALPHA,),
        normalisation=NORM_SPARSE,
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        alpha: float = 1.5,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        if not 1.0 < alpha <= 2.0:
            raise AttnlabError(f"model.alpha={alpha} is out of range: entmax needs 1 < alpha <= 2")
        self.alpha = float(alpha)
