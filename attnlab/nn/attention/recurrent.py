"""Attention as a recurrence over positions: stick-breaking and decayed-linear.

Both variants read the keys in an order, and how far a key lies from the query (in that order)
shapes its weight; neither needs a position encoding.

- stick-breaking (Tan et al. 2024): each key, nearest first, takes a fraction β of what is left
  of a unit stick; the rest of the stick goes unattended (rows sum to at most 1).
- decayed-linear (a gated linear recurrence, Mamba-2 SSD / Gated DeltaNet family): linear
  attention whose running state decays by a data-dependent gate a_t ∈ (0, 1) at every step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.attention.base import (
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    ROLE_CAUSAL_SELF,
    ROLE_SELF,
    SCORES_LINEAR,
    AttentionSpec,
    HParam,
    causal_mask,
    register_attention,
)
from attnlab.nn.attention.kernel import _safe_divide
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.dropout import dropout

RECURRENT_ROLES = frozenset({ROLE_SELF, ROLE_CAUSAL_SELF})


def query_positions(tq: int, tk: int, device: torch.device) -> Tensor:
    """Absolute position of each query [Tq], bottom-right aligned (query i sits at Tk-Tq+i)."""
    return torch.arange(tq, device=device) + (tk - tq)


# -- stick-breaking -------------------------------------------------------------------------------


def distance_order(tq: int, tk: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The order in which query i's keys break the stick: nearest first, and of two keys at the
    same distance the earlier (left) one first. Returns (perm, rank), both [Tq,Tk]:
    perm[i, r] = the key ranked r, rank[i, j] = the rank of key j (perm's inverse)."""
    pos = query_positions(tq, tk, device)[:, None]
    keys = torch.arange(tk, device=device)[None, :]
    # Unique integer per key: distance d -> 2d (left or self), 2d + 1 (right).
    order_key = 2 * (keys - pos).abs() + (keys > pos).long()
    perm = order_key.argsort(dim=-1)
    return perm, perm.argsort(dim=-1)


def stick_breaking_weights(logits: Tensor, mask: Tensor) -> Tensor:
    """A_ij = β_ij ∏_{k before j in i's order} (1 − β_ik), β = σ(logits), in log space.

    logits [B,H,Tq,Tk]; mask [B,1|H,Tq|1,Tk] bool (True = the key takes part). A masked key
    has β = 0: it takes no weight and does not break the stick. The order is
    ``distance_order``; causally the keys after the query are masked, so the order reduces to
    the paper's (from the query backwards)."""
    tq, tk = logits.shape[-2:]
    mask = mask.expand_as(logits)
    log_beta = F.logsigmoid(logits).masked_fill(~mask, float("-inf"))
    log_rest = (-F.softplus(logits)).masked_fill(~mask, 0.0)  # log(1 − β)
    perm, rank = distance_order(tq, tk, logits.device)
    perm, rank = perm.expand_as(logits), rank.expand_as(logits)
    ordered = log_rest.gather(-1, perm)
    # Exclusive cumulative sum in the order: the stick left when key r's turn comes.
    before = F.pad(ordered.cumsum(-1)[..., :-1], (1, 0))
    return torch.exp(log_beta + before.gather(-1, rank))


@register_attention
class StickBreakingAttention(MultiHeadBase):
    """A_ij = β_ij ∏_{j<k<i} (1 − β_ik), β_ij = σ(q_i·k_j/√d_h); Tan et al. 2024.

    Roles: causal-self (the paper's), and self, whose rows order the keys by distance from the
    query (the left one first on a tie). Not cross: target and source share no order.
    ``attend_current`` = 1 lets the query's own position break the stick first (∏ over
    j<k≤i); the default 0 is the paper's formula (keys strictly before the query).
    """

    spec = AttentionSpec(
        name="stick-breaking",
        roles=RECURRENT_ROLES,
        formula=(
            "A_ij = β_ij ∏_{j<k<i} (1 − β_ik), β_ij = σ(q_i·k_j/√d_h); nearest key breaks first"
        ),
        complexity="O(Tq·Tk·d) time, O(Tq·Tk) memory (log-space cumulative sums)",
        known_for=(
            "Each key, nearest first, takes a share of what is left: recency without positions."
        ),
        paper="Tan et al. 2024, arXiv:2410.17980",
        hparams=(
            HParam(
                "attend_current",
                0,
                "stick-breaking: 1 = the query's own position takes part (breaks the stick "
                "first); 0 = the paper's formula, keys strictly before it",
                0,
                1,
            ),
        ),
        normalisation=NORM_SUB_STOCHASTIC,
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        attend_current: int = 0,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.attend_current = bool(attend_current)

    def allowed(self, tq: int, tk: int, causal: bool, device: torch.device) -> Tensor | None:
        pos = query_positions(tq, tk, device)[:, None]
        keys = torch.arange(tk, device=device)[None, :]
        allowed = keys <= pos if causal else torch.ones(tq, tk, dtype=torch.bool, device=device)
        return allowed if self.attend_current else allowed & (keys != pos)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        allowed = self.allowed(tq, tk, causal, q.device)
        mask = key_mask[:, None, None, :] & allowed
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        weights = stick_breaking_weights(logits, mask)
        dropped = dropout(weights, self.dropout_p, self.training)
        return dropped @ v, weights if need_weights else None


# -- decayed-linear -------------------------------------------------------------------------------


def feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1 > 0, the ``linear`` variant's feature map."""
    return F.elu(x) + 1.0


def decayed_weights(
    phi_q: Tensor, phi_k: Tensor, log_decay: Tensor, key_mask: Tensor, causal: bool
) -> Tensor:
    """The implied matrix [B,H,Tq,Tk] (quadratic; viewing, references and non-causal rows).

    Causal: A_ij ∝ φ(q_i)·φ(k_j) ∏_{j<k≤p_i} a_k (p_i = the query's position).
    Non-causal: the product runs over the gates between them on either side,
    ∏_{min(p_i,j)<k≤max(p_i,j)} a_k = exp(−|L_{p_i} − L_j|), L = cumsum log a.
    Rows are normalised to sum to 1 over the visible keys (zero rows stay zero)."""
    tq, tk = phi_q.shape[2], phi_k.shape[2]
    phi_k = phi_k.masked_fill(~key_mask[:, None, :, None], 0.0)
    cum = log_decay.cumsum(-1)  # L_j [B,H,Tk]
    pos = query_positions(tq, tk, phi_q.device)
    gap = cum[..., pos, None] - cum[..., None, :]  # L_{p_i} − L_j [B,H,Tq,Tk]
    if causal:
        visible = causal_mask(tq, tk, phi_q.device)
        decay = torch.exp(gap.masked_fill(~visible, float("-inf")))
    else:
        decay = torch.exp(-gap.abs())
    scores = (phi_q @ phi_k.transpose(-1, -2)) * decay
    return _safe_divide(scores, scores.sum(-1))


def chunked_decayed_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, log_decay: Tensor, chunk: int
) -> Tensor:
    """Causal decayed linear attention (Tq = Tk), chunk by chunk, fully vectorised.

    y_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i with S_i = a_i S_{i−1} + φ(k_i) v_iᵀ, z_i likewise with
    φ(k_i). The normaliser rides along as an extra column of ones in v. Inside a chunk: the
    explicit C×C decayed block; across chunks: each chunk's state contribution, decayed to the
    start of every later chunk by an n×n matrix of chunk-gap decays (the SSD form).
    Padded keys must already have φ(k) = 0, v = 0 and log a = 0."""
    bsz, heads, length, m = phi_q.shape
    c = min(chunk, length)
    n = -(-length // c)
    extra = n * c - length
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # [B,H,T,dv+1]
    dv1 = v1.shape[-1]
    q = F.pad(phi_q, (0, 0, 0, extra)).view(bsz, heads, n, c, m)
    k = F.pad(phi_k, (0, 0, 0, extra)).view(bsz, heads, n, c, m)
    vv = F.pad(v1, (0, 0, 0, extra)).view(bsz, heads, n, c, dv1)
    la = F.pad(log_decay, (0, extra)).view(bsz, heads, n, c)
    local = la.cumsum(-1)  # L_i − L_{chunk start − 1}  [B,H,n,C]
    # Inside a chunk: exp(L_i − L_j) for j ≤ i.
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    gap = (local[..., :, None] - local[..., None, :]).masked_fill(~lower, float("-inf"))
    intra = (q @ k.transpose(-1, -2)) * torch.exp(gap)
    out = intra @ vv
    # Each chunk's contribution to the state at its own end: Σ_j exp(L_end − L_j) φ(k_j) v_jᵀ.
    total = local[..., -1]  # [B,H,n]
    to_end = torch.exp(total[..., None] - local)  # [B,H,n,C]
    contrib = (k * to_end[..., None]).transpose(-1, -2) @ vv  # [B,H,n,m,dv+1]
    # State at the start of chunk c: Σ_{c'<c} exp(G_{c−1} − G_{c'}) contrib_{c'}, G = cumsum.
    ends = total.cumsum(-1)  # G_c
    starts = F.pad(ends[..., :-1], (1, 0))  # G_{c−1}
    earlier = torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-1)
    chunk_gap = (starts[..., :, None] - ends[..., None, :]).masked_fill(~earlier, float("-inf"))
    state = torch.einsum("bhcd,bhdme->bhcme", torch.exp(chunk_gap), contrib)
    out = out + torch.exp(local)[..., None] * (q @ state)
    out = out.reshape(bsz, heads, n * c, dv1)[:, :, :length]
    return _safe_divide(out[..., :-1], out[..., -1])


@register_attention
class DecayedLinearAttention(MultiHeadBase):
    """Linear attention with a data-dependent decay per head and step:
    S_i = a_i S_{i−1} + φ(k_i) v_iᵀ, z_i = a_i z_{i−1} + φ(k_i), y_i = φ(q_i)ᵀS_i / φ(q_i)ᵀz_i,
    a_i = σ(w_h·k_i + b_h). A gated linear recurrence as in Mamba-2's SSD (Dao & Gu 2024) and
    Gated DeltaNet (Yang et al. 2024), with the ``linear`` variant's φ = elu + 1.

    Roles: causal-self (chunked, see ``chunked_decayed_attention``), and self with the gates
    between query and key on either side, exp(−|L_i − L_j|) (the O(T²) implied matrix). Not
    cross: the decay needs one order. Dropout is not applied (as for ``linear``)."""

    supports_rotary = False  # the decay is the position signal; it reads the projected key
    spec = AttentionSpec(
        name="decayed-linear",
        score_memory=SCORES_LINEAR,
        constant_decode_state=True,
        roles=RECURRENT_ROLES,
        formula=(
            "S_i = a_i S_{i−1} + φ(k_i)v_iᵀ, y_i = φ(q_i)ᵀS_i / φ(q_i)ᵀz_i, "
            "a_i = σ(w_h·k_i + b_h), φ = elu + 1"
        ),
        complexity="O(T·C·d + T·d²) time (chunked, C = chunk), O(T·C + T/C·d²) memory",
        known_for="Linear attention that forgets: a learned gate decays the running state.",
        paper="Dao & Gu 2024, arXiv:2405.21060; Yang et al. 2024, arXiv:2412.06464",
        hparams=(
            HParam(
                "chunk",
                64,
                "decayed-linear: chunk length of the causal computation (speed/memory only)",
                1,
                65536,
            ),
        ),
        normalisation=NORM_SOFTMAX,
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        chunk: int = 64,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.chunk = chunk
        # Decay gate per head, read from the projected key (so the k/v cache holds its input).
        self.decay_weight = nn.Parameter(torch.randn(heads, self.head_dim) * 0.02)
        # σ(3) ≈ 0.95: the state starts with a memory of ~20 steps.
        self.decay_bias = nn.Parameter(torch.full((heads,), 3.0))

    def log_decay(self, k: Tensor, key_mask: Tensor) -> Tensor:
        """log a [B,H,Tk]; padded keys get a = 1 (log 0): they neither add nor forget."""
        logits = torch.einsum("bhtd,hd->bht", k, self.decay_weight.to(k.dtype))
        logits = logits + self.decay_bias.to(k.dtype)[None, :, None]
        return F.logsigmoid(logits).masked_fill(~key_mask[:, None, :], 0.0)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        phi_q, log_decay = feature_map(q), self.log_decay(k, key_mask)
        padded = ~key_mask[:, None, :, None]
        # masked_fill, not a product: a padded φ(k) could be inf, and inf·0 = NaN.
        phi_k = feature_map(k).masked_fill(padded, 0.0)
        weights = None
        if causal and tq == tk:
            context = chunked_decayed_attention(
                phi_q, phi_k, v.masked_fill(padded, 0.0), log_decay, self.chunk
            )
            if need_weights:
                weights = decayed_weights(phi_q, phi_k, log_decay, key_mask, causal)
        else:
            # A cached decoding step (one query over the cache) or non-causal rows: the
            # implied matrix, O(Tq·Tk); Tq = 1 when decoding.
            weights = decayed_weights(phi_q, phi_k, log_decay, key_mask, causal)
            context = weights @ v
            weights = weights if need_weights else None
        return context, weights
