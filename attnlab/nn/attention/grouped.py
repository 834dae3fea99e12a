"""Shared and compressed keys/values: gqa (grouped-query; kv_heads = 1 is MQA) and mla.

Both are about the decoder's key/value cache, which at generation time costs memory and
bandwidth per generated token:

- ``gqa`` (Ainslie et al. 2023; MQA: Shazeer 2019) keeps G = ``kv_heads`` key/value heads,
  each shared by a group of H/G query heads: the cache holds [B,2,G,T,d_h] instead of
  [B,2,H,T,d_h]. G = H is multi-head attention, G = 1 multi-query attention.
- ``mla`` (DeepSeek-V2) derives every head's key and value from one low-rank latent
  c = W_dkv x of width ``kv_rank`` plus ONE rotary key part shared by all heads (``rope_dim``
  wide, from x): the cache holds [B,T,kv_rank + rope_dim], the keys and values are up-projected
  from it when attended. The scores add the content part q_C·k_C and the decoupled rotary part
  q_R·k_R, scaled by 1/√(d_h + rope_dim) (the paper's concatenated query/key).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ALL_ROLES,
    ROLE_CROSS,
    AttentionSpec,
    HParam,
    register_attention,
)
from attnlab.nn.attention.multihead import (
    TRANSFORMER_ROLES,
    MultiHeadBase,
)
from attnlab.nn.packing import PADDED, Layout, split_heads
from attnlab.nn.positions import Rotary


@register_attention
class GroupedQueryAttention(MultiHeadBase):
    """Query head h reads key/value head g(h) = ⌊h / (H/G)⌋; Ainslie et al. 2023."""

    spec = AttentionSpec(
        name="gqa",
        roles=frozenset(ALL_ROLES),
        formula="softmax(Q_h K_g(h)ᵀ / √d_h) V_g(h), g(h) = ⌊h·G/H⌋, G = kv_heads key/value heads",
        complexity="O(Tq·Tk·d) like scaled-dot; K/V projections and cache G/H the size",
        known_for=(
            "Groups of query heads share one key/value head: a G/H-sized KV cache "
            "(kv_heads 1 = MQA, = heads = MHA)."
        ),
        paper="Ainslie et al. 2023, arXiv:2305.13245; MQA: Shazeer 2019, arXiv:1911.02150",
        hparams=(
            HParam(
                "kv_heads",
                2,
                "key/value heads, each shared by model.heads/kv_heads query heads; must divide "
                "model.heads (1 = multi-query, = heads = multi-head)",
                low=1,
                high=64,
            ),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        kv_heads: int = 2,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.check_hparams(heads, {"kv_heads": kv_heads})
        self.kv_heads = kv_heads
        self.k_proj = nn.Linear(key_dim, kv_heads * self.head_dim)
        self.v_proj = nn.Linear(key_dim, kv_heads * self.head_dim)

    @classmethod
    def check_hparams(cls, heads: int, values: dict[str, Any], **_: Any) -> None:
        kv_heads = values["kv_heads"]
        if kv_heads < 1 or heads % kv_heads:
            valid = ", ".join(str(g) for g in range(1, heads + 1) if heads % g == 0)
            raise AttnlabError(
                f"model.kv_heads (model.gqa.kv_heads)={kv_heads} must divide "
                f"model.heads={heads}; valid: {valid}"
            )


@register_attention
class MultiHeadLatentAttention(MultiHeadBase):
    """DeepSeek-V2's multi-head latent attention (keys and values from a shared latent)."""

    spec = AttentionSpec(
        name="mla",
        roles=TRANSFORMER_ROLES,
        formula=(
            "c = W_dkv x; k_h = [W_uk^h c ; RoPE(W_kr x)], v_h = W_uv^h c, "
            "q_h = [W_q^h x ; RoPE(W_qr^h x)]; softmax(q_h·k_hᵀ / √(d_h + d_R)) V_h"
        ),
        complexity="O(Tq·Tk·d) time; cache kv_rank + rope_dim per token and layer (MHA: 2·d)",
        known_for=(
            "Keys and values from one low-rank latent, the only thing cached: low rank over "
            "features (the K/V projection), where Linformer is low rank over length (positions)."
        ),
        paper="DeepSeek-AI 2024 (DeepSeek-V2), arXiv:2405.04434",
        hparams=(
            HParam(
                "kv_rank",
                64,
                "width of the latent c = W_dkv x that keys and values are up-projected from "
                "(and that the cache holds)",
                low=1,
                high=4096,
            ),
            HParam(
                "rope_dim",
                16,
                "width of the decoupled rotary query part per head and of the ONE rotary key "
                "part shared by all heads (even)",
                low=2,
                high=256,
            ),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        kv_rank: int = 64,
        rope_dim: int = 16,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.check_hparams(heads, {"kv_rank": kv_rank, "rope_dim": rope_dim})
        del self.k_proj, self.v_proj  # keys and values come from the latent
        self.kv_rank, self.rope_dim = kv_rank, rope_dim
        # The paper's matrices carry no bias (W_uk could be absorbed into W_q, W_uv into W_o).
        self.kv_down = nn.Linear(key_dim, kv_rank, bias=False)  # W^DKV
        self.k_up = nn.Linear(kv_rank, query_dim, bias=False)  # W^UK, all heads
        self.v_up = nn.Linear(kv_rank, query_dim, bias=False)  # W^UV, all heads
        self.q_rope = nn.Linear(query_dim, heads * rope_dim, bias=False)  # W^QR, per head
        self.k_rope = nn.Linear(key_dim, rope_dim, bias=False)  # W^KR, shared by every head
        # The decoupled rotary part: MLA's positions in self-attention (set_positions turns it
        # off in cross-attention, where target queries and source keys share no position axis).
        self.rope: Rotary | None = Rotary(rope_dim)

    @classmethod
    def check_hparams(cls, heads: int, values: dict[str, Any], **_: Any) -> None:
        if values["rope_dim"] % 2:
            raise AttnlabError(
                f"model.rope_dim (model.mla.rope_dim)={values['rope_dim']} must be even "
                "(rotary positions turn pairs of channels)"
            )

    def set_positions(self, role: str, rotary: bool) -> None:
        # Whatever model.positions says: the content part is never rotated (its keys come
        # straight from the cached latent), the decoupled part always is in self-attention.
        self.rope = None if role == ROLE_CROSS else Rotary(self.rope_dim)

    # -- the cache: latent and shared rotary key ----------------------------------------------

    def _latent(self, x: Tensor, layout: Layout, start: int = 0) -> Tensor:
        """x rows in ``layout`` at absolute positions start.. -> [B,T,kv_rank + rope_dim]:
        the latent c and the shared (rotated) key part k_R."""
        c = layout.project(x, self.kv_down)
        k_r = layout.project(x, self.k_rope)
        if self.rope is not None:
            k_r = self.rope(k_r, start)
        return torch.cat([c, k_r], dim=-1)

    def cache_entries(self, x: Tensor, start: int = 0) -> Tensor:
        return self._latent(x, PADDED, start)

    def empty_cache(self, batch: int, like: Tensor) -> Tensor:
        return like.new_zeros(batch, 0, self.kv_rank + self.rope_dim)

    def kv_from_cache(self, cache: Tensor) -> tuple[Tensor, Tensor]:
        """[B,T,r + d_R] -> k = [W_uk c ; k_R] [B,H,T,dh + d_R] and v = W_uv c [B,H,T,dh]."""
        c, k_r = cache.split([self.kv_rank, self.rope_dim], dim=-1)
        k_c = split_heads(self.k_up(c), self.heads)
        b, h, t, _ = k_c.shape
        k = torch.cat([k_c, k_r[:, None].expand(b, h, t, self.rope_dim)], dim=-1)
        return k, split_heads(self.v_up(c), self.heads)

    def head_values(self, values: Tensor) -> Tensor:
        return split_heads(self.v_up(self.kv_down(values)), self.heads)

    def _project(
        self,
        query: Tensor,
        q_layout: Layout,
        keys: Tensor,
        values: Tensor,
        k_layout: Layout,
        precomputed: object,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q = [q_C ; q_R] [B,H,Tq,dh + d_R], k likewise, v [B,H,Tk,dh]; the query's rotary
        part sits bottom-right aligned (query i at Tk - Tq + i), as the base rotates q."""
        if isinstance(precomputed, Tensor):
            k, v = self.kv_from_cache(precomputed)
        else:
            k, v = self.kv_from_cache(self._latent(keys, k_layout))
            if values is not keys:  # a distinct value input: its own latent
                v = self.kv_from_cache(self._latent(values, k_layout))[1]
        (q_c,) = q_layout.project_heads(query, (self.q_proj,), self.heads)
        (q_r,) = q_layout.project_heads(query, (self.q_rope,), self.heads)
        if self.rope is not None:
            q_r = self.rope(q_r, k.shape[2] - q_r.shape[2])
        return torch.cat([q_c, q_r], dim=-1), k, v
