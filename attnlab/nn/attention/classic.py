"""The classic attention family of RNN encoder-decoders (2014-2015).

All variants are single-head (H = 1): weights are [B, 1, Tq, Tk] and the context is a
weighted sum of the values, so ``out_dim == key_dim``. They are written for any Tq (the RNN
decoder calls them with Tq = 1 per step, or Tq = T when a whole teacher-forced sequence can
be attended at once; the Transformer uses bahdanau / luong-dot / luong-general /
luong-concat as cross-attention). ``heads`` and ``dropout`` are accepted for the common
constructor signature and ignored: these variants have one head and no attention dropout.

``ClassicAttention.forward`` is the family's one template (score -> restrict -> masked softmax
-> weighted sum); a variant is its ``score`` plus, for the windowed ones, ``restrict``. Only
``none`` (no scores at all) has a forward of its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    Attention,
    AttentionOutput,
    AttentionSpec,
    HParam,
    causal_mask,
    combine_masks,
    masked_softmax,
    register_attention,
)
from attnlab.nn.fast_tanh import tanh_

RNN_ONLY = frozenset({ROLE_RNN_CROSS})
RNN_AND_CROSS = frozenset({ROLE_RNN_CROSS, ROLE_CROSS})

WINDOW = HParam(
    "window", 10, "half-width D of the local window [p_t - D, p_t + D]", low=1, high=100_000
)
MAX_SRC_LEN = HParam(
    "max_src_len",
    256,
    "luong-location: number of source positions W_a scores (longer sources are cut)",
    low=1,
    high=100_000,
)


def _attend(
    scores: Tensor,
    values: Tensor,
    key_mask: Tensor,
    causal: bool,
    allowed: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """scores [B,Tq,Tk] -> (context [B,Tq,Dv], weights [B,1,Tq,Tk]) over allowed real keys."""
    tq, tk = scores.shape[-2:]
    if causal:
        pattern = causal_mask(tq, tk, scores.device)
        allowed = pattern if allowed is None else allowed & pattern
    mask = combine_masks(key_mask, allowed)  # [B,1,Tq|1,Tk]
    weights = masked_softmax(scores.unsqueeze(1), mask)  # [B,1,Tq,Tk]
    context = torch.bmm(weights.squeeze(1), values)  # [B,Tq,Dv]
    return context, weights


def _positions(query_pos: Tensor | None, batch: int, tq: int, device: torch.device) -> Tensor:
    """query_pos as [B|1, Tq] float; default 0..Tq-1 (the decoder steps of a full sequence)."""
    if query_pos is None:
        return torch.arange(tq, device=device, dtype=torch.float32).unsqueeze(0)
    pos = query_pos.to(device=device, dtype=torch.float32)
    if pos.dim() == 1:
        # [B] for one decoder step (Tq = 1), else [Tq] shared by the batch
        pos = pos.view(-1, 1) if tq == 1 else pos.unsqueeze(0)
    return pos


class ClassicAttention(Attention):
    """The family's template: ``forward`` = ``score`` -> ``restrict`` -> masked softmax ->
    weighted sum of the values. A variant defines ``score`` (how the query meets each key)
    and, if it looks at a window only, ``restrict``. Context width = key (value) width."""

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.out_dim = key_dim

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        """query [B,Tq,Dq], keys [B,Tk,Dk] (``precomputed``: this variant's ``precompute(keys)``
        or None) -> scores [B,Tq,Tk] before masking."""
        raise NotImplementedError

    def restrict(
        self, scores: Tensor, query: Tensor, key_mask: Tensor, query_pos: Tensor | None
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        """Hook of the windowed variants: (scores, allowed keys [Tq|B,Tq,Tk] or None, extras
        such as the window centre). The global variants see every real key."""
        return scores, None, {}

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
        scores = self.score(query, keys, precomputed)
        scores, allowed, extras = self.restrict(scores, query, key_mask, query_pos)
        context, weights = _attend(scores, values, key_mask, causal, allowed)
        return AttentionOutput(context, weights, extras)


def last_real_value(values: Tensor, key_mask: Tensor) -> Tensor:
    """values [B,Tk,D] at each row's last real key -> [B,D]; zeros for a row with no real key."""
    positions = torch.arange(1, key_mask.shape[1] + 1, device=key_mask.device)
    last = (positions * key_mask).argmax(-1)  # the last True; 0 for an all-False row
    picked = values[torch.arange(values.shape[0], device=values.device), last]
    return picked.masked_fill(~key_mask.any(-1, keepdim=True), 0.0)


@register_attention
class NoAttention(ClassicAttention):
    """c_t = c (fixed): the encoder's final state fed at every step. Cho et al. 2014.

    The bottleneck baseline: no alignment at all. The RNN model passes the encoder summary
    as ``precomputed`` (it sets ``uses_encoder_summary``); without one, the last real key
    stands in, and a sentence with no real key gets a zero context (the base contract).
    The weights are all zeros (``exposes_weights=False``): they carry no meaning.
    """

    spec = AttentionSpec(
        name="none",
        roles=RNN_ONLY,
        formula="c_t = c = h_final (no attention)",
        complexity="O(d) per step",
        known_for="the fixed-vector bottleneck baseline; degrades on long sentences",
        paper="Cho et al. 2014 (arXiv 1406.1078)",
        query_timing="previous",
        exposes_weights=False,
    )
    uses_encoder_summary: ClassVar[bool] = True

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
        batch, tq = query.shape[:2]
        if isinstance(precomputed, Tensor):
            summary = precomputed  # [B,D]
        else:
            summary = last_real_value(values, key_mask)
        context = summary.unsqueeze(1).expand(batch, tq, summary.shape[-1])
        weights = values.new_zeros(batch, 1, tq, keys.shape[1])
        return AttentionOutput(context, weights)


@register_attention
class BahdanauAttention(ClassicAttention):
    """score(s_{t-1}, h_j) = vᵀ tanh(W s_{t-1} + U h_j). Bahdanau, Cho & Bengio 2015."""

    spec = AttentionSpec(
        name="bahdanau",
        roles=RNN_AND_CROSS,
        formula="score(s_{t-1}, h_j) = vᵀ tanh(W s_{t-1} + U h_j)",
        complexity="O(Tq·Tk·d)",
        known_for="additive attention; the previous decoder state is the query",
        paper="Bahdanau, Cho & Bengio 2015 (arXiv 1409.0473)",
        query_timing="previous",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.query_proj = nn.Linear(query_dim, query_dim, bias=False)  # W
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # U
        self.energy = nn.Linear(query_dim, 1, bias=False)  # v

    def precompute(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # U h: [B,Tk,A], once per source batch

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        return self.score_step(query, self.precompute(keys) if precomputed is None else precomputed)

    def score_step(self, query: Tensor, projected_keys: Tensor) -> Tensor:
        """vᵀ tanh(W s + U h) from U h (``precompute``): query [B,Tq,Dq], projected_keys
        [B,Tk,A] -> [B,Tq,Tk]. The decoder's fast paths call it too (one home for the math;
        attnlab.nn.rnn_fused's backward differentiates it by hand, with ``step_weights``)."""
        w_query, w_energy = self.step_weights()
        projected_query = F.linear(query, w_query)  # [B,Tq,A]
        # [B,Tq,1,A] + [B,1,Tk,A] -> [B,Tq,Tk,A] -> [B,Tq,Tk]
        # In place on the sum's fresh storage (autograd allows it: the sum saves nothing).
        energy = tanh_(projected_query.unsqueeze(2) + projected_keys.unsqueeze(1))
        return F.linear(energy, w_energy).squeeze(-1)

    def step_weights(self) -> tuple[Tensor, Tensor]:
        """(W [A,Dq], v [1,A]): the parameters ``score_step`` applies to the query."""
        return self.query_proj.weight, self.energy.weight


@register_attention
class LuongDotAttention(ClassicAttention):
    """score(s_t, h_j) = s_tᵀ h_j. Luong, Pham & Manning 2015."""

    spec = AttentionSpec(
        name="luong-dot",
        roles=RNN_AND_CROSS,
        formula="score(s_t, h_j) = s_tᵀ h_j",
        complexity="O(Tq·Tk·d)",
        known_for="parameter-free global attention; needs decoder width = encoder width",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        if query_dim != key_dim:
            raise AttnlabError(
                f'attention "luong-dot" scores s_tᵀh_j, so the decoder state ({query_dim}) must be '
                f"as wide as the encoder states ({key_dim}); set model.bidirectional=false "
                "or use luong-general"
            )

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        return torch.bmm(query, keys.transpose(1, 2))  # [B,Tq,Tk]


class _GeneralScore(ClassicAttention):
    """Shared by luong-general and the local variants: score(s_t, h_j) = s_tᵀ W_a h_j."""

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # W_a

    def precompute(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # W_a h: [B,Tk,Dq]

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        projected_keys = self.precompute(keys) if precomputed is None else precomputed
        return torch.bmm(query, projected_keys.transpose(1, 2))  # [B,Tq,Tk]


@register_attention
class LuongGeneralAttention(_GeneralScore):
    """score(s_t, h_j) = s_tᵀ W_a h_j. Luong, Pham & Manning 2015."""

    spec = AttentionSpec(
        name="luong-general",
        roles=RNN_AND_CROSS,
        formula="score(s_t, h_j) = s_tᵀ W_a h_j",
        complexity="O(Tq·Tk·d)",
        known_for="bilinear global attention; the best global score in Luong et al.",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
    )


@register_attention
class LuongConcatAttention(ClassicAttention):
    """score(s_t, h_j) = v_aᵀ tanh(W_a [s_t; h_j]). Luong, Pham & Manning 2015."""

    spec = AttentionSpec(
        name="luong-concat",
        roles=RNN_AND_CROSS,
        formula="score(s_t, h_j) = v_aᵀ tanh(W_a [s_t; h_j])",
        complexity="O(Tq·Tk·d)",
        known_for="additive score with the current decoder state as query",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
    )

    def __init__(self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.concat_proj = nn.Linear(query_dim + key_dim, query_dim, bias=False)  # W_a
        self.energy = nn.Linear(query_dim, 1, bias=False)  # v_a

    def precompute(self, keys: Tensor) -> Tensor:
        # W_a [s; h] = W_s s + W_h h: the key half is done once per source batch.
        return keys @ self.concat_proj.weight[:, self.query_dim :].t()  # [B,Tk,A]

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        projected_keys = self.precompute(keys) if precomputed is None else precomputed
        projected_query = query @ self.concat_proj.weight[:, : self.query_dim].t()  # [B,Tq,A]
        # In place on the sum's fresh storage (autograd allows it: the sum saves nothing).
        energy = tanh_(projected_query.unsqueeze(2) + projected_keys.unsqueeze(1))
        return self.energy(energy).squeeze(-1)  # [B,Tq,Tk]


@register_attention
class LuongLocationAttention(ClassicAttention):
    """a_t = softmax(W_a s_t) over source positions. Luong, Pham & Manning 2015.

    The weights depend on the decoder state only, not on the keys: W_a maps the state to
    ``max_src_len`` position scores; positions past the real length (or past max_src_len)
    get zero weight.
    """

    spec = AttentionSpec(
        name="luong-location",
        roles=RNN_ONLY,
        formula="a_t = softmax(W_a s_t)",
        complexity="O(Tq·max_src_len·d)",
        known_for="location-only scores: where to look, not what to look for",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
        hparams=(MAX_SRC_LEN,),
        max_length_param="max_src_len",
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        max_src_len: int = 256,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.max_src_len = max_src_len
        self.location = nn.Linear(query_dim, max_src_len, bias=False)  # W_a

    def score(self, query: Tensor, keys: Tensor, precomputed: Any) -> Tensor:
        """Position scores W_a s_t for the first Tk positions; zeros past max_src_len."""
        tk = keys.shape[1]
        scores = self.location(query)  # [B,Tq,max_src_len]
        if tk <= self.max_src_len:
            return scores[..., :tk]
        return torch.cat([scores, scores.new_zeros(*scores.shape[:-1], tk - self.max_src_len)], -1)

    def restrict(
        self, scores: Tensor, query: Tensor, key_mask: Tensor, query_pos: Tensor | None
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        tk = scores.shape[-1]
        if tk <= self.max_src_len:
            return scores, None, {}
        allowed = torch.arange(tk, device=scores.device) < self.max_src_len  # [Tk]
        return scores, allowed.expand(scores.shape[1], tk), {}


def _local_window(centre: Tensor, tk: int, window: int) -> tuple[Tensor, Tensor]:
    """centre [B|1,Tq] -> (offsets j - p_t [B|1,Tq,Tk], in-window mask |j - p_t| <= D)."""
    positions = torch.arange(tk, device=centre.device, dtype=centre.dtype)
    offsets = positions.view(1, 1, tk) - centre.unsqueeze(-1)
    return offsets, offsets.abs() <= window


@register_attention
class LocalMonotonicAttention(_GeneralScore):
    """a_t(j) = softmax_{|j-p_t|<=D}(s_tᵀ W_a h_j), p_t = t (local-m). Luong et al. 2015.

    p_t is the decoder step (``query_pos``), clamped to the last real source position so a
    target longer than its source still sees the end of the source.
    """

    spec = AttentionSpec(
        name="local-m",
        roles=RNN_ONLY,
        formula="a_t(j) = softmax_{|j-t|≤D}(s_tᵀ W_a h_j), p_t = t",
        complexity="O(Tq·Tk·d)",
        known_for="monotonic local window; suits copy-like alignments",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
        hparams=(WINDOW,),
    )

    def __init__(
        self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0, window: int = 10
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.window = window

    def restrict(
        self, scores: Tensor, query: Tensor, key_mask: Tensor, query_pos: Tensor | None
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        batch, tq = query.shape[:2]
        last = (key_mask.sum(-1, keepdim=True) - 1).clamp(min=0).float()  # [B,1]
        centre = torch.minimum(_positions(query_pos, batch, tq, query.device), last)  # [B,Tq]
        _, in_window = _local_window(centre, scores.shape[-1], self.window)
        return scores, in_window, {"position": centre}


@register_attention
class LocalPredictiveAttention(_GeneralScore):
    """a_t(j) ∝ exp(s_tᵀ W_a h_j) · exp(-(j-p_t)²/(2σ²)) on |j-p_t|<=D. Luong et al. 2015.

    p_t = S · sigmoid(v_pᵀ tanh(W_p s_t)), S the real source length, σ = D/2. Luong et al.
    multiply the window's softmax by the Gaussian; we renormalise the product so the row
    sums to 1 like every other variant (equivalently: the Gaussian's log enters the scores).
    """

    spec = AttentionSpec(
        name="local-p",
        roles=RNN_ONLY,
        formula="a_t(j) ∝ exp(s_tᵀW_a h_j − (j−p_t)²/(2σ²)), p_t = S·σ(v_pᵀ tanh(W_p s_t))",
        complexity="O(Tq·Tk·d)",
        known_for="predicts where to look, then a Gaussian window around it",
        paper="Luong, Pham & Manning 2015 (arXiv 1508.04025)",
        hparams=(WINDOW,),
    )

    def __init__(
        self, query_dim: int, key_dim: int, heads: int = 1, dropout: float = 0.0, window: int = 10
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.window = window
        self.position_proj = nn.Linear(query_dim, query_dim, bias=False)  # W_p
        self.position_score = nn.Linear(query_dim, 1, bias=False)  # v_p

    def restrict(
        self, scores: Tensor, query: Tensor, key_mask: Tensor, query_pos: Tensor | None
    ) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
        source_len = key_mask.sum(-1, keepdim=True).to(query.dtype)  # S: [B,1]
        gate = torch.sigmoid(self.position_score(torch.tanh(self.position_proj(query))))
        centre = source_len * gate.squeeze(-1)  # p_t: [B,Tq]
        offsets, in_window = _local_window(centre, scores.shape[-1], self.window)
        sigma = self.window / 2.0
        return scores - offsets.pow(2) / (2.0 * sigma**2), in_window, {"position": centre}
