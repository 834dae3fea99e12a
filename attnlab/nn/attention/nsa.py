"""Native sparse attention: compressed, selected and sliding-window branches, gated.

Yuan et al. 2025 (arXiv:2502.11089), written plainly at lab scale (no custom kernels). With
weights (viewing) or one cached query, every branch is a masked [B,H,Tq,Tk] map, so the weights
shown are exact; without weights the branches run sparse (block means, the chosen blocks' keys
gathered per query, a banded window), O(T·(T/l + n·l + w)) — the same numbers (tested).
Block b holds the keys at absolute positions [b·l, (b+1)·l); query i sits at p_i = Tk − Tq + i
(bottom-right aligned, as the cache needs).
Per head h and query i:

- compressed: k̃_b = W_h · mean_{j∈b} k_j + c_h and ṽ_b = mean_{j∈b} v_j (means over the real
  keys of the block); a_i = softmax_b(q_i·k̃_b/√d_h) over the blocks i may see (causal: complete
  blocks, (b+1)·l − 1 ≤ p_i). ṽ has no map of its own, so the branch is token-linear in V: block
  b's weight a_ib spreads as a_ib / n_b over its n_b real keys, and the context is that map @ V.
- selected: the block holding p_i plus the top_blocks − 1 other visible blocks with the largest
  a_ib (ties: the lower block index), softmax of q_i·k_j/√d_h over their visible real keys.
- window: softmax of q_i·k_j/√d_h over the real keys with 0 ≤ p_i − j < w (self: |p_i − j| < w).
- gates: g = σ(W_g x_i + b_g) per branch and head, as in the paper; the map is
  (g_cmp·A_cmp + g_sel·A_sel + g_win·A_win) / 3, whose rows sum to the mean gate ≤ 1.

Extras: ``selected_blocks`` [B,H,Tq,nb] always; with weights also ``selected_cells``
(base.SELECTED_CELLS) [B,H,Tq,Tk], the cells the selected branch read (:func:`selected_cells`),
which the Transformer hands to the views beside the map.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn.attention.base import (
    NORM_SUB_STOCHASTIC,
    SELECTED_CELLS,
    AttentionOutput,
    AttentionSpec,
    HParam,
    causal_mask,
    masked_softmax,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.attention.positional import SELF_ROLES
from attnlab.nn.attention.sparse import banded_attention
from attnlab.nn.dropout import dropout
from attnlab.nn.packing import Layout

BRANCHES = 3  # compressed, selected, window


def block_means(x: Tensor, real: Tensor, block: int) -> tuple[Tensor, Tensor]:
    """Means over the real keys of each block: x [B,H,Tk,d], real [B,Tk] bool ->
    means [B,H,nb,d] (zero for a block without real keys) and counts [B,nb]."""
    bsz, heads, tk, dim = x.shape
    extra = -tk % block
    weights = F.pad(real.to(x.dtype), (0, extra)).view(bsz, 1, -1, block, 1)
    blocks = F.pad(x, (0, 0, 0, extra)).view(bsz, heads, -1, block, dim)
    counts = weights.sum(dim=(1, 3, 4))  # [B,nb]
    sums = (blocks * weights).sum(dim=3)
    # clamp: an empty block's mean is 0, finite, so no NaN can reach the gradients
    return sums / counts.clamp_min(1)[:, None, :, None], counts


def top_blocks_mask(score: Tensor, top: int) -> Tensor:
    """score [...,nb] (< 0: not a candidate) -> bool, True for the ``top`` highest candidates;
    a stable descending sort breaks ties towards the lower block index."""
    order = torch.sort(score, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(
        -1, order, torch.arange(score.shape[-1], device=score.device).expand_as(order)
    )
    return (rank < top) & (score >= 0)


def selected_cells(selected: Tensor, block: int, key_mask: Tensor, causal: bool, tk: int) -> Tensor:
    """selected [B,H,Tq,nb] blocks -> [B,H,Tq,Tk] bool: the keys of query i's selected blocks
    (block b: keys [b·l, min((b+1)·l, Tk))) that i may read: real and, causal, not after p_i.
    Exactly where the selected branch's softmax runs (``dense_weights``'s w_sel support)."""
    tq, dev = selected.shape[2], selected.device
    token_block = torch.arange(tk, device=dev) // block
    cells = selected[..., token_block] & key_mask[:, None, None, :]
    if causal:
        cells = cells & causal_mask(tq, tk, dev)
    return cells


@register_attention
class NativeSparseAttention(MultiHeadBase):
    """Compressed + selected + sliding-window branches, gated per head; Yuan et al. 2025."""

    spec = AttentionSpec(
        name="nsa",
        roles=SELF_ROLES,
        formula=(
            "o_i = ⅓ Σ_c σ(w_c·x_i) softmax(q_i K_cᵀ/√d_h) V_c, c ∈ {block means, "
            "top-n blocks, last w keys}"
        ),
        complexity=(
            "O(T·(T/l + n·l + w)·d) without weights (gathered blocks, banded window); "
            "O(Tq·Tk) maps with weights"
        ),
        known_for=(
            "Coarse block summaries pick the blocks each query reads in full, plus a local "
            "window; learned gates mix the three."
        ),
        paper="Yuan et al. 2025, Native Sparse Attention (arXiv:2502.11089)",
        hparams=(
            HParam("block", 8, "nsa: tokens per compressed / selected block l", 1, 4096),
            HParam(
                "top_blocks",
                4,
                "nsa: blocks n each query reads in full (its own block counts)",
                1,
                4096,
            ),
            HParam(
                "window", 16, "nsa: sliding window w (keys 0 ≤ i−j < w; self: |i−j| < w)", 1, 100000
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
        block: int = 8,
        top_blocks: int = 4,
        window: int = 16,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.block, self.top_blocks, self.window = block, top_blocks, window
        dh = self.head_dim
        # Compression of the block-mean key, per head; identity at start (k̃ = mean key).
        self.cmp_weight = nn.Parameter(torch.eye(dh).repeat(heads, 1, 1))  # [H,out,in]
        self.cmp_bias = nn.Parameter(torch.zeros(heads, dh))
        self.gate_proj = nn.Linear(query_dim, BRANCHES * heads)
        # The gates read the layer input x_i (not the rotated q) and the selection goes out as
        # an extra: forward_layout hands both around attend, whose signature is shared.
        self._gate_input: Tensor | None = None
        self._selected: Tensor | None = None

    def forward_layout(
        self,
        query: Tensor,
        q_layout: Layout,
        keys: Tensor,
        values: Tensor,
        k_layout: Layout,
        key_mask: Tensor,
        causal: bool,
        need_weights: bool = False,
        precomputed: Any = None,
    ) -> AttentionOutput:
        self._gate_input = q_layout.unpack(query)
        try:
            out = super().forward_layout(
                query, q_layout, keys, values, k_layout, key_mask, causal, need_weights, precomputed
            )
            assert self._selected is not None
            out.extras["selected_blocks"] = self._selected  # [B,H,Tq,nb] bool
            if need_weights and out.weights is not None:  # the views' marks; no cost otherwise
                tk = out.weights.shape[-1]
                cells = selected_cells(self._selected, self.block, key_mask, causal, tk)
                out.extras[SELECTED_CELLS] = cells
        finally:
            self._gate_input = self._selected = None
        return out

    def gates(self, x: Tensor) -> Tensor:
        """x [B,Tq,D] -> σ gates [B,H,Tq,3] (compressed, selected, window)."""
        bsz, tq, _ = x.shape
        logits = self.gate_proj(x).view(bsz, tq, self.heads, BRANCHES)
        return torch.sigmoid(logits).transpose(1, 2)

    def compressed(
        self, q: Tensor, k: Tensor, key_mask: Tensor, seen: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Queries over the block summaries. seen [Tq,nb]: blocks the query may summarise.
        -> block weights a [B,H,Tq,nb], real-key counts [B,nb]."""
        k_mean, counts = block_means(k, key_mask, self.block)
        k_cmp = torch.einsum("bhnd,hed->bhne", k_mean, self.cmp_weight) + self.cmp_bias[:, None]
        block_ok = seen & (counts > 0)[:, None, None, :]  # [B,1,Tq,nb]
        scores = q @ k_cmp.transpose(-1, -2) / math.sqrt(self.head_dim)
        return masked_softmax(scores, block_ok), counts

    def selection_scores(self, a_cmp: Tensor, counts: Tensor, pos: Tensor, causal: bool) -> Tensor:
        """[B,H,Tq,nb]: 2 for the query's own block (always read), its compressed weight for
        another visible block with real keys (causal: started at or before it), -1 otherwise."""
        index = torch.arange(a_cmp.shape[-1], device=a_cmp.device)
        own = index == pos[:, None] // self.block  # [Tq,nb]
        seen = index * self.block <= pos[:, None] if causal else torch.ones_like(own)
        candidate = seen & (counts > 0)[:, None, None, :]
        return torch.where(own, 2.0, torch.where(candidate, a_cmp.detach(), -1.0))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        if self._gate_input is None:
            raise RuntimeError("nsa: attend runs inside forward / forward_layout (gates need x)")
        tq, tk, dev = q.shape[2], k.shape[2], q.device
        pos = torch.arange(tq, device=dev) + (tk - tq)  # absolute query positions
        ends = torch.arange(1, -(-tk // self.block) + 1, device=dev) * self.block - 1  # [nb]
        complete = ends <= pos[:, None] if causal else torch.ones_like(ends <= pos[:, None])
        a_cmp, counts = self.compressed(q, k, key_mask, complete)
        score = self.selection_scores(a_cmp, counts, pos, causal)
        self._selected = top_blocks_mask(score, self.top_blocks)
        g = self.gates(self._gate_input)
        if need_weights or tq != tk or self.reference_mode:
            weights = self.dense_weights(q, k, key_mask, causal, a_cmp, counts, self._selected)
            mixed = (g[..., 0:1] * weights[0] + g[..., 1:2] * weights[1]) + g[..., 2:3] * weights[2]
            mixed = mixed / BRANCHES
            dropped = dropout(mixed, self.dropout_p, self.training)
            return dropped @ v, mixed if need_weights else None
        contexts = self.sparse_contexts(q, k, v, key_mask, causal, a_cmp, score)
        return sum(g[..., c : c + 1] * contexts[c] for c in range(BRANCHES)) / BRANCHES, None

    def dense_weights(
        self,
        q: Tensor,
        k: Tensor,
        key_mask: Tensor,
        causal: bool,
        a_cmp: Tensor,
        counts: Tensor,
        selected: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The three branches' token maps [B,H,Tq,Tk] (for viewing and one cached query)."""
        tq, tk, dev = q.shape[2], k.shape[2], q.device
        pos = torch.arange(tq, device=dev) + (tk - tq)
        token_block = torch.arange(tk, device=dev) // self.block
        # ṽ_b is the mean of the block's real values: a_ib spreads as a_ib / n_b on them
        w_cmp = (a_cmp / counts.clamp_min(1)[:, None, None, :])[..., token_block]
        w_cmp = w_cmp * key_mask[:, None, None, :]
        visible = key_mask[:, None, None, :]
        if causal:
            visible = visible & causal_mask(tq, tk, dev)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        w_sel = masked_softmax(scores, selected_cells(selected, self.block, key_mask, causal, tk))
        # window: the last w keys (self: the keys less than w away on either side)
        near = (pos[:, None] - torch.arange(tk, device=dev)).abs() < self.window
        w_win = masked_softmax(scores, visible & near)
        return w_cmp, w_sel, w_win

    def sparse_contexts(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_mask: Tensor,
        causal: bool,
        a_cmp: Tensor,
        score: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The three branches' contexts without any [Tq,Tk] map (Tq = Tk): O(T·(T/l + n·l + w)).
        Same numbers as ``dense_weights`` @ V (tested)."""
        bsz, heads, t, dh = q.shape
        size, p = self.block, self.dropout_p if self.training else 0.0
        v_mean, _ = block_means(v, key_mask, size)
        ctx_cmp = dropout(a_cmp, p, p > 0) @ v_mean
        # selected: gather the n chosen blocks' keys per query (ties as in top_blocks_mask)
        n = min(self.top_blocks, score.shape[-1])
        top_score, top = torch.sort(score, dim=-1, descending=True, stable=True)
        tokens = (top[..., :n, None] * size + torch.arange(size, device=q.device)).flatten(-2)
        ok = (top_score[..., :n, None] >= 0).expand(-1, -1, -1, -1, size).flatten(-2)
        ok = ok & (tokens < t)
        if causal:
            ok = ok & (tokens <= torch.arange(t, device=q.device)[:, None])
        tokens = tokens.clamp_max(t - 1)  # [B,H,T,n·l]
        real = key_mask[:, None, None, :].expand(-1, heads, t, -1).gather(-1, tokens)
        flat = tokens.view(bsz, heads, -1, 1).expand(-1, -1, -1, dh)
        k_sel = k.gather(2, flat).view(bsz, heads, t, n * size, dh)
        v_sel = v.gather(2, flat).view(bsz, heads, t, n * size, dh)
        scores = torch.einsum("bhtd,bhtjd->bhtj", q, k_sel) / math.sqrt(dh)
        a_sel = dropout(masked_softmax(scores, ok & real), p, p > 0)
        ctx_sel = torch.einsum("bhtj,bhtjd->bhtd", a_sel, v_sel)
        # window |i − j| < w is the banded pattern |i − j| ≤ w − 1
        ctx_win = banded_attention(q, k, v, key_mask[:, None], self.window - 1, causal, p)
        return ctx_cmp, ctx_sel, ctx_win
