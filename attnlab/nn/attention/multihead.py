"""The multi-head family: scaled-dot, multihead (RNN decoder), additive, gated.

``MultiHeadBase`` holds what every modern variant shares: query/key/value projections split
into H heads, an output projection, optional rotary positions, and a key/value cache
interface: each class decides what its cache holds (``cache_entries`` / ``empty_cache``,
batch first, time at dim -2) and how keys and values come back from it (``kv_from_cache``);
by default the stacked projected keys and values [B,2,H_kv,T,dh]. A variant overrides
``scores`` (how a query meets a key), ``bias`` (position terms added to the scores),
``allowed`` (a sparsity pattern) or the whole ``attend`` step; which of them it overrides
decides, once per class, whether the fused SDPA kernel may compute it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    ROLE_SELF,
    SCORES_FEATURES,
    Attention,
    AttentionOutput,
    AttentionSpec,
    causal_mask,
    masked_softmax,
    register_attention,
)
from attnlab.nn.dropout import attention_with_dropout, dropout
from attnlab.nn.packing import PADDED, Layout, split_heads
from attnlab.nn.positions import Rotary

TRANSFORMER_ROLES = frozenset({ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS})


def key_pattern_mask(key_mask: Tensor, allowed: Tensor | None) -> Tensor:
    """key_mask [B,Tk] & pattern [Tq,Tk] or per-head [H,Tq,Tk] -> [B,1|H,Tq|1,Tk] bool."""
    mask = key_mask[:, None, None, :]
    if allowed is None:
        return mask
    if allowed.dim() == 2:
        allowed = allowed[None]
    return mask & allowed[None]


# The hooks that define how a class attends; which of them a class overrides decides (once, per
# class) whether torch's fused kernel computes its attention.
SCORE_HOOKS = ("scores", "attend")
PATTERN_HOOKS = ("bias", "allowed")


def _overrides(cls: type, hook: str) -> bool:
    return getattr(cls, hook) is not getattr(MultiHeadBase, hook)


class MultiHeadBase(Attention):
    """Shared machinery of the multi-head variants (not registered itself).

    Fast paths are decided once per class, in ``__init_subclass__``, from the hooks it
    overrides, never at a call site (so an override cannot be skipped by one path):

    - ``uses_sdpa``: ``scores`` and ``attend`` are the base's, so the attention is
      softmax(q·kᵀ/√d_h + bias) over the allowed keys, which F.scaled_dot_product_attention
      computes (with the class's ``bias`` / ``allowed`` as its mask) when weights are not needed;
    - ``plain``: ``uses_sdpa`` and no ``bias`` / ``allowed`` of its own either: plain (causal)
      softmax attention, for which a packed batch calls the kernel with the mask its layout
      already holds (``is_causal``, or the cached key-padding bias).

    ``forward`` is ``forward_layout`` on the padded layout; the Transformer's padding-free pass
    calls ``forward_layout`` with packed rows (attnlab.nn.packing). One code path either way.
    """

    supports_rotary: ClassVar[bool] = True
    uses_sdpa: ClassVar[bool] = False  # derived per class, see __init_subclass__
    plain: ClassVar[bool] = False  # derived per class, see __init_subclass__
    # True: always the explicit path (the reference of the fused kernel); see attnlab.nn.reference
    reference_mode: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {h for h in (*SCORE_HOOKS, *PATTERN_HOOKS) if _overrides(cls, h)}
        cls.uses_sdpa = not own & set(SCORE_HOOKS)
        cls.plain = not own

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__()
        if heads < 1 or query_dim % heads:
            raise AttnlabError(
                f"{self.spec.name}: width {query_dim} (model.d_model / model.hidden) "
                f"must be divisible by model.heads={heads}"
            )
        self.heads = heads
        self.head_dim = query_dim // heads
        # Key/value heads: = heads here; grouped-query attention shares each among a group.
        self.kv_heads = heads
        self.out_dim = query_dim
        self.dropout_p = dropout
        self.q_proj = nn.Linear(query_dim, query_dim)
        self.k_proj = nn.Linear(key_dim, query_dim)
        self.v_proj = nn.Linear(key_dim, query_dim)
        self.out_proj = nn.Linear(query_dim, query_dim)
        # Set by the Transformer for self-attention when model.positions = rotary.
        self.rotary: Rotary | None = None

    @classmethod
    def check_hparams(
        cls, heads: int, values: dict[str, Any], head_dim: int = 0, rotary: bool = False
    ) -> None:
        """Refuse hyper-parameter values (every one of ``spec.hparams``, defaults filled in)
        that do not fit ``heads`` / ``head_dim`` (0 = not known yet) / rotary positions:
        one-line AttnlabError naming the key. Called by the constructor and, before anything
        is built, by the Transformer's config check."""

    # -- projections and the key/value cache ------------------------------------------------

    def set_positions(self, role: str, rotary: bool) -> None:
        """Told by the Transformer where this module sits: ``rotary`` (model.positions = rotary)
        rotates q and k of self-attention; cross-attention has no shared position axis."""
        if rotary and role != ROLE_CROSS and self.supports_rotary:
            self.rotary = Rotary(self.head_dim)

    def set_depth(self, layer: int) -> None:
        """Told by the Transformer which layer of its stack this module is in (1-based); for
        a variant whose formula depends on depth (differential's λ_init). Default: no-op."""

    def project_kv(self, keys: Tensor, values: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """keys/values [B,Tk,Dk] (padded) at absolute positions start.. -> k, v [B,H_kv,Tk,dh]."""
        k = split_heads(self.k_proj(keys), self.kv_heads)
        if self.rotary is not None:
            k = self.rotary(k, start)
        return k, split_heads(self.v_proj(values), self.kv_heads)

    def cache_entries(self, x: Tensor, start: int = 0) -> Tensor:
        """What the cache keeps of the keys (= values) x [B,T,Dk] at absolute positions
        start..: a batch-first tensor with time at dim -2 (beam search reorders dim 0, the
        decoder appends along dim -2). Here the projected keys and values, [B,2,H_kv,T,dh]."""
        return torch.stack(self.project_kv(x, x, start), dim=1)

    def empty_cache(self, batch: int, like: Tensor) -> Tensor:
        """A cache of no position yet (``like`` gives dtype and device)."""
        return like.new_zeros(batch, 2, self.kv_heads, 0, self.head_dim)

    def kv_from_cache(self, cache: Tensor) -> tuple[Tensor, Tensor]:
        """k, v [B,H_kv,T,dh] (as ``_project`` would give them) from ``cache_entries``'s form."""
        k, v = cache.unbind(1)
        return k, v

    def precompute(self, keys: Tensor) -> Tensor:
        """The cache of the encoder's keys (= values), computed once per source batch."""
        return self.cache_entries(keys, 0)

    def head_values(self, values: Tensor) -> Tensor:
        """values [B,Tk,Dk] -> what each query head sums, [B,H,Tk,dv] (attribution)."""
        v = split_heads(self.v_proj(values), self.kv_heads)
        return v.repeat_interleave(self.heads // self.kv_heads, dim=1)

    def forward(
        self,
        query: Tensor,
        keys: Tensor,
        values: Tensor,
        key_mask: Tensor,
        *,
        causal: bool = False,
        need_weights: bool = False,
        query_pos: Tensor | None = None,
        precomputed: Any = None,
    ) -> AttentionOutput:
        return self.forward_layout(
            query, PADDED, keys, values, PADDED, key_mask, causal, need_weights, precomputed
        )

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
        """``forward`` on activations in any layout (attnlab.nn.packing): query rows in
        ``q_layout``, keys / values rows in ``k_layout`` (``keys is values is query`` for
        self-attention); the context comes back in ``q_layout``. Projections and the output
        run on the layout's rows; scores and softmax always see the padded [B,H,T,dh] heads."""
        q, k, v = self._project(query, q_layout, keys, values, k_layout, precomputed)
        tq, tk = q.shape[2], k.shape[2]
        if self.rotary is not None:
            q = self.rotary(q, tk - tq)  # bottom-right aligned: query i sits at tk - tq + i
        context, weights = self._attend_fast(q, k, v, key_mask, causal, need_weights, k_layout)
        if type(self).gate is not MultiHeadBase.gate:
            context = self.gate(q_layout.unpack(query), context)
        return AttentionOutput(self.out_proj(q_layout.merge_heads(context)), weights)

    def _project(
        self,
        query: Tensor,
        q_layout: Layout,
        keys: Tensor,
        values: Tensor,
        k_layout: Layout,
        precomputed: Any,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q [B,H,T,dh], k, v [B,H_kv,T,dh]; k, v from ``precomputed`` (a cache, the form
        ``cache_entries`` gives) when given."""
        heads, kv_heads = self.heads, self.kv_heads
        if precomputed is not None:
            k, v = self.kv_from_cache(precomputed)
            (q,) = q_layout.project_heads(query, (self.q_proj,), heads)
            return q, k, v
        if keys is query and values is query and kv_heads == heads:  # one QKV product (packed)
            q, k, v = q_layout.project_heads(query, (self.q_proj, self.k_proj, self.v_proj), heads)
        else:
            (q,) = q_layout.project_heads(query, (self.q_proj,), heads)
            if values is keys:
                k, v = k_layout.project_heads(keys, (self.k_proj, self.v_proj), kv_heads)
            else:
                (k,) = k_layout.project_heads(keys, (self.k_proj,), kv_heads)
                (v,) = k_layout.project_heads(values, (self.v_proj,), kv_heads)
        if self.rotary is not None:
            k = self.rotary(k, 0)
        return q, k, v

    def _attend_fast(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_mask: Tensor,
        causal: bool,
        need_weights: bool,
        k_layout: Layout,
    ) -> tuple[Tensor, Tensor | None]:
        """``attend``, or for plain softmax attention the fused kernel with the mask the keys'
        layout already has (a packed batch: is_causal, or its cached key-padding bias)."""
        if self.plain and not need_weights and not self.reference_mode:
            shortcut = k_layout.sdpa_shortcut(key_mask, causal, q.shape[2], k.shape[2], q.dtype)
            if shortcut is not None:
                is_causal, attn_mask = shortcut
                dropout_p = self.dropout_p if self.training else 0.0
                context = attention_with_dropout(
                    q,
                    k,
                    v,
                    attn_mask=attn_mask,
                    is_causal=is_causal,
                    dropout_p=dropout_p,
                    enable_gqa=k.shape[1] != q.shape[1],
                )
                return context, None
        return self.attend(q, k, v, key_mask, causal, need_weights)

    # -- hooks ----------------------------------------------------------------------------

    def gate(self, query: Tensor, context: Tensor) -> Tensor:
        return context

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        """q [B,H,Tq,d], k [B,H,Tk,d] -> [B,H,Tq,Tk] (d = q's width, as SDPA scales it)"""
        return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])

    def bias(self, tq: int, tk: int, causal: bool, device: torch.device) -> Tensor | None:
        """Additive score terms that depend on positions only, [H,Tq,Tk] (None = none)."""
        return None

    def allowed(self, tq: int, tk: int, causal: bool, device: torch.device) -> Tensor | None:
        """Which keys each query may see: [Tq,Tk] or per head [H,Tq,Tk] (None = all)."""
        return causal_mask(tq, tk, device) if causal else None

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Softmax attention per head -> context [B,H,Tq,dv], weights [B,H,Tq,Tk] | None."""
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        bias = self.bias(tq, tk, causal, q.device)
        shared = k.shape[1] != q.shape[1]  # fewer key/value heads than query heads (GQA)
        if self.uses_sdpa and not need_weights and not self.reference_mode:
            dropout_p = self.dropout_p if self.training else 0.0
            return sdpa(q, k, v, mask, bias, dropout_p, enable_gqa=shared), None
        if shared:  # explicit: each query head reads its group's keys and values
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = self.scores(q, k)
        if bias is not None:
            scores = scores + bias
        weights = masked_softmax(scores, mask)
        return dropout(weights, self.dropout_p, self.training) @ v, weights


def sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor,
    bias: Tensor | None,
    dropout_p: float,
    enable_gqa: bool = False,
    scale: float | None = None,
) -> Tensor:
    """F.scaled_dot_product_attention with a bool mask (+ float bias); rows with no key -> 0.
    ``enable_gqa``: k, v hold fewer heads than q, each shared by a group of query heads;
    ``scale``: the score scale (None = 1/√d of q)."""
    has_key = mask.any(dim=-1, keepdim=True)  # [B,1|H,Tq|1,1]
    # A row with every key masked would be NaN in SDPA: let it see everything, zero it after.
    mask = mask | ~has_key
    attn_mask: Tensor = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))
    context = attention_with_dropout(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, enable_gqa=enable_gqa, scale=scale
    )
    return context * has_key.to(context.dtype)


@register_attention
class ScaledDotAttention(MultiHeadBase):
    """score(q, k) = q·k / √d_h per head; Vaswani et al. 2017, "Attention Is All You Need"."""

    spec = AttentionSpec(
        name="scaled-dot",
        roles=frozenset({ROLE_RNN_CROSS, ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS}),
        formula="softmax(Q_h K_hᵀ / √d_h) V_h per head, concat, W_o",
        complexity="O(Tq·Tk·d) time, O(Tq·Tk) memory (explicit); fused SDPA without weights",
        known_for="The Transformer's attention; fast fused kernel when weights are not needed.",
        paper="Vaswani et al. 2017",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)


@register_attention
class MultiHeadRNNAttention(ScaledDotAttention):
    """score_h(s, h) = (W_q^h s)·(W_k^h h) / √d_h; Vaswani et al. 2017, as RNN-decoder attention."""

    spec = AttentionSpec(
        name="multihead",
        roles=frozenset({ROLE_RNN_CROSS}),
        formula="c = W_o concat_h(softmax(q_h K_hᵀ/√d_h) V_h), q = decoder state",
        complexity="O(S·d) per decoding step",
        known_for="Multi-head scaled-dot attention from an RNN decoder state (H heads).",
        paper="Vaswani et al. 2017",
    )


@register_attention
class AdditiveMultiHeadAttention(MultiHeadBase):
    """score_h(q, k) = v_hᵀ tanh(W_q^h q + W_k^h k); Bahdanau et al. 2015, per head."""

    spec = AttentionSpec(
        name="additive",
        score_memory=SCORES_FEATURES,
        roles=TRANSFORMER_ROLES,
        formula="score_h = v_hᵀ tanh(W_q^h q + W_k^h k), softmax per head",
        complexity="O(Tq·Tk·d) time and memory",
        known_for="Bahdanau's additive scores inside multi-head attention.",
        paper="Bahdanau et al. 2015",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.v = nn.Parameter(torch.empty(heads, self.head_dim))
        nn.init.normal_(self.v, std=self.head_dim**-0.5)

    def scores(self, q: Tensor, k: Tensor) -> Tensor:
        # [B,H,Tq,1,dh] + [B,H,1,Tk,dh] -> tanh -> · v_h -> [B,H,Tq,Tk]
        hidden = torch.tanh(q.unsqueeze(3) + k.unsqueeze(2))
        return torch.einsum("bhqkd,hd->bhqk", hidden, self.v)


@register_attention
class GatedAttention(MultiHeadBase):
    """o_h = σ(W_g^h x) ⊙ softmax(q·k/√d_h) V_h; sigmoid output gate per head (Qiu et al. 2025)."""

    spec = AttentionSpec(
        name="gated",
        roles=TRANSFORMER_ROLES,
        formula="o_h = σ(W_g^h x) ⊙ softmax(Q_h K_hᵀ/√d_h) V_h",
        complexity="O(Tq·Tk·d), like scaled-dot",
        known_for=(
            "A query-dependent sigmoid gate lets a head switch itself off (no attention sink)."
        ),
        paper="Qiu et al. 2025, Gated Attention for LLMs",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.gate_proj = nn.Linear(query_dim, query_dim)

    def gate(self, query: Tensor, context: Tensor) -> Tensor:
        return torch.sigmoid(split_heads(self.gate_proj(query), self.heads)) * context
