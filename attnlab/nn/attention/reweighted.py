"""Softmax reweighted or replaced: differential, sigmoid, sinks, qk-norm.

All four keep the multi-head projections, the key/value cache and rotary positions of
``MultiHeadBase`` and change only what happens between the scores and the weighted sum:

- ``differential``: the difference of two softmax maps (signed weights, rows sum to 1 − λ);
- ``sigmoid``: an element-wise sigmoid instead of the softmax (rows are not normalised);
- ``sinks``: a softmax over the keys plus one virtual key of zero value (rows sum to < 1);
- ``qk-norm``: a softmax over cosine similarities times a learned per-head scale.

Each returns the TRUE weights: the per-head context before any output processing equals
``weights @ values``. Without weights, differential, sinks and qk-norm run on the fused
softmax kernel (two maps stacked as heads; the sink as an extra zero key; the scale folded into
q); sigmoid has no fused form and always runs its explicit (vectorised) path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ALL_ROLES,
    NORM_SIGNED,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    AttentionSpec,
    HParam,
    masked_softmax,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase, key_pattern_mask, sdpa
from attnlab.nn.dropout import attention_with_dropout, dropout
from attnlab.nn.positions import Rotary

REWEIGHTED_ROLES = frozenset(ALL_ROLES)


@dataclass(frozen=True)
class AutoOrNumber(HParam):
    """A hyper-parameter that is "auto" or a number in [low, high]."""

    def validate(self, value: Any, key: str = "") -> Any:
        key = key or f"model.{self.name}"
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise AttnlabError(f'{key} must be "auto" or a number, got {value!r}') from None
        if not math.isfinite(number):
            raise AttnlabError(f'{key}={value} must be a finite number or "auto"')
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            raise AttnlabError(f"{key}={number} is out of range [{self.low}, {self.high}]")
        return number


# -- differential ------------------------------------------------------------------------------


def _check_half_heads(head_dim: int, rotary: bool) -> None:
    if head_dim % 2:
        raise AttnlabError(
            "differential: a head splits its query/key in two halves, so "
            f"model.d_model/model.heads must be even, got {head_dim}"
        )
    if rotary and (head_dim // 2) % 2:
        raise AttnlabError(
            "differential with model.positions=rotary rotates each half-head on its own: "
            f"model.d_model/model.heads must be divisible by 4, got {head_dim}"
        )


class HalfRotary(Rotary):
    """Rotary positions applied to each half of a head separately (differential's two maps)."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        _check_half_heads(head_dim, rotary=True)
        super().__init__(head_dim // 2, base)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        first, second = x.chunk(2, dim=-1)
        return torch.cat([super().forward(first, start), super().forward(second, start)], -1)


LAMBDA_INIT = AutoOrNumber(
    "lambda_init",
    "auto",
    "differential: λ_init, the constant in λ and the output scale 1 − λ_init; "
    '"auto" = the paper\'s depth rule 0.8 − 0.6·e^(−0.3(l−1)), l = the layer '
    "(1-based, per Transformer stack; 0.2 in layer 1), or a number for every layer",
    0.0,
    0.95,
)


def lambda_init_for_layer(layer: int) -> float:
    """The paper's λ_init of layer ``layer`` (1-based): 0.8 − 0.6·exp(−0.3·(layer − 1))."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


@register_attention
class DifferentialAttention(MultiHeadBase):
    """A = softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d) per head; Ye et al. 2024.

    ``model.heads`` keeps its meaning: H differential heads of width d_h = d_model / H. Each
    head splits its query and key into two halves of d = d_h / 2 (the two maps) and keeps the
    full-width value, which is exactly the paper's head (query/key width d, value width 2d);
    the paper states it as "half as many heads of double width" relative to a softmax baseline
    with the same d_model.
    """

    spec = AttentionSpec(
        name="differential",
        roles=REWEIGHTED_ROLES,
        formula=(
            "A = softmax(Q₁K₁ᵀ/√d) − λ softmax(Q₂K₂ᵀ/√d), "
            "o_h = (1−λ_init) RMSNorm(A V), λ = e^(λq1·λk1) − e^(λq2·λk2) + λ_init"
        ),
        complexity="O(Tq·Tk·d) time, two softmax maps per head; fused SDPA without weights",
        known_for="Subtracting a second map cancels common-mode attention noise (signed map).",
        paper="Ye et al. 2024, Differential Transformer, arXiv:2410.05258",
        hparams=(LAMBDA_INIT,),
        normalisation=NORM_SIGNED,
    )

    @classmethod
    def check_hparams(
        cls, heads: int, values: dict[str, Any], head_dim: int = 0, rotary: bool = False
    ) -> None:
        if head_dim:
            _check_half_heads(head_dim, rotary)

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        lambda_init: float | str = "auto",
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.check_hparams(heads, {"lambda_init": lambda_init}, head_dim=self.head_dim)
        self.lambda_init_setting = LAMBDA_INIT.validate(lambda_init)
        self.set_depth(1)  # the Transformer tells each module its layer (set_depth)
        half = self.head_dim // 2
        # The paper's re-parameterisation; one λ per layer, shared by its heads (as in the paper).
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(half) * 0.1) for _ in range(4)
        )
        # Per-head RMSNorm over d_h (one gain shared by the heads, as the paper's sub-layer norm).
        self.norm_weight = nn.Parameter(torch.ones(self.head_dim))
        self.norm_eps = 1e-5

    def set_depth(self, layer: int) -> None:
        # λ_init depends on the layer (Ye et al. 2024, §2.1): 0.8 − 0.6·exp(−0.3·(l − 1)).
        if self.lambda_init_setting == "auto":
            self.lambda_init = lambda_init_for_layer(layer)
        else:
            self.lambda_init = float(self.lambda_init_setting)

    def lam(self) -> Tensor:
        """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init (a 0-d tensor)."""
        return (
            torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))
            - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
            + self.lambda_init
        )

    def set_positions(self, role: str, rotary: bool) -> None:
        # Rotate each half as its own head of width d_h/2 (as the paper's code does), so each
        # map sees the full frequency range and stays a function of relative position.
        super().set_positions(role, rotary)
        if self.rotary is not None:
            self.rotary = HalfRotary(self.head_dim)

    def _halves(self, x: Tensor) -> tuple[Tensor, Tensor]:
        half = self.head_dim // 2
        return x[..., :half], x[..., half:]

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        (q1, q2), (k1, k2) = self._halves(q), self._halves(k)
        lam = self.lam().to(q.dtype)
        dropout_p = self.dropout_p if self.training else 0.0
        heads = self.heads
        if not need_weights and not self.reference_mode:
            # Both maps in one fused call: the halves stacked as 2H heads of width d_h/2.
            both = sdpa(
                torch.cat([q1, q2], 1),
                torch.cat([k1, k2], 1),
                torch.cat([v, v], 1),
                mask,
                None,
                dropout_p,
            )
            return both[:, :heads] - lam * both[:, heads:], None
        scale = 1.0 / math.sqrt(self.head_dim // 2)
        first = masked_softmax(q1 @ k1.transpose(-1, -2) * scale, mask)
        second = masked_softmax(q2 @ k2.transpose(-1, -2) * scale, mask)
        weights = first - lam * second  # masked keys: 0 − λ·0 = exactly 0
        return dropout(weights, dropout_p, self.training) @ v, weights

    def gate(self, query: Tensor, context: Tensor) -> Tensor:
        """The paper's per-head normalisation (eq. 3): (1 − λ_init)·RMSNorm(head)."""
        rms = torch.rsqrt(context.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        return context * rms * self.norm_weight * (1.0 - self.lambda_init)


# -- sigmoid -----------------------------------------------------------------------------------


@register_attention
class SigmoidAttention(MultiHeadBase):
    """A_ij = σ(q_i·k_j/√d + b), b = −log n_i; Ramapuram et al. 2024.

    n_i is the number of keys row i may see (real and causally visible), so one cached query
    over its cache gets the same b as the full pass's row. Rows are not normalised: each weight
    is in (0, 1), a row sums to anything in (0, n_i) — more than 1 when several scores are
    large — so the map is neither stochastic nor sub-stochastic (see ``spec.normalisation``).
    """

    spec = AttentionSpec(
        name="sigmoid",
        roles=REWEIGHTED_ROLES,
        formula="A_ij = σ(q_i·k_j/√d_h + b), b = −log n_i (n_i = keys row i sees); no softmax",
        complexity="O(Tq·Tk·d) time and memory (no fused kernel)",
        known_for="Each weight on its own: no competition between keys, rows need not sum to 1.",
        paper="Ramapuram et al. 2024, Theory, Analysis and Best Practices for Sigmoid "
        "Self-Attention, arXiv:2409.04431",
        hparams=(
            AutoOrNumber(
                "bias",
                "auto",
                'sigmoid: score bias b; "auto" = −log n (n = keys the row sees), or a number',
                -100.0,
                100.0,
            ),
        ),
        # Rows are >= 0 but may sum to more than 1: neither stochastic nor sub-stochastic.
        normalisation=NORM_UNNORMALISED,
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        bias: str | float = "auto",
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.score_bias = AutoOrNumber("bias", "auto", "", -100.0, 100.0).validate(bias)

    def row_bias(self, mask: Tensor) -> Tensor | float:
        """b per row: −log(visible keys) for "auto" (a row with none: any value, masked)."""
        if self.score_bias != "auto":
            return float(self.score_bias)
        visible = mask.sum(-1, keepdim=True).clamp_min(1)
        return -torch.log(visible.to(torch.get_default_dtype()))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        bias = self.row_bias(mask)
        if isinstance(bias, Tensor):
            bias = bias.to(q.dtype)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + bias
        weights = torch.sigmoid(scores).masked_fill(~mask, 0.0)
        context = dropout(weights, self.dropout_p, self.training) @ v
        return context, (weights if need_weights else None)


# -- sinks -------------------------------------------------------------------------------------


@register_attention
class SinkAttention(MultiHeadBase):
    """w_j = exp(s_j) / (exp(z_h) + Σ_k exp(s_k)): a virtual key of logit z_h and zero value.

    Xiao et al. 2023 (attention sinks, learned sink logits as in recent open models) and
    Evan Miller's softmax-off-by-one ("softmax1", z = 0). The weight the sink took,
    1 − Σ_j w_j, is the row's unattended mass; a row with no visible key gives it all.
    """

    spec = AttentionSpec(
        name="sinks",
        roles=REWEIGHTED_ROLES,
        formula="w_j = exp(s_j) / (exp(z_h) + Σ_k exp(s_k)), s = q·k/√d_h; sink value 0",
        complexity="O(Tq·Tk·d), like scaled-dot; fused SDPA (one extra zero key) without weights",
        known_for="A head may attend to nothing: the sink takes the rest of the row.",
        paper="Xiao et al. 2023, arXiv:2309.17453; Miller 2023, softmax1",
        hparams=(
            HParam(
                "sink",
                "learned",
                'sinks: the sink logit z_h: "learned" per head, or "zero" (softmax-off-by-one)',
                choices=("learned", "zero"),
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
        sink: str = "learned",
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.sink = sink
        logits = torch.zeros(heads)
        if sink == "learned":
            self.sink_logit = nn.Parameter(logits)
        else:
            self.register_buffer("sink_logit", logits, persistent=False)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        dropout_p = self.dropout_p if self.training else 0.0
        sink = self.sink_logit.to(q.dtype)[None, :, None, None]  # [1,H,1,1]
        if not need_weights and not self.reference_mode:
            # The sink as one more key: a zero key (score 0) with bias z_h and a zero value.
            zero = q.new_zeros(q.shape[0], self.heads, 1, q.shape[-1])
            mask = mask.expand(-1, self.heads, tq, -1)
            bias = torch.cat(
                [
                    torch.zeros_like(mask, dtype=q.dtype).masked_fill(~mask, float("-inf")),
                    sink.expand(mask.shape[0], self.heads, tq, 1),
                ],
                dim=-1,
            )
            context = attention_with_dropout(
                q,
                torch.cat([k, zero], 2),
                torch.cat([v, zero], 2),
                attn_mask=bias,
                dropout_p=dropout_p,
            )
            return context, None
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        # softmax over [scores, z_h] (its max subtraction includes the sink), sink column cut.
        with_sink = torch.cat([scores, sink.expand(*scores.shape[:-1], 1)], dim=-1)
        sink_mask = torch.cat(
            [mask.expand(*scores.shape), mask.new_ones(*scores.shape[:-1], 1)], -1
        )
        weights = masked_softmax(with_sink, sink_mask)[..., :tk]
        return dropout(weights, dropout_p, self.training) @ v, weights


# -- qk-norm -----------------------------------------------------------------------------------


@register_attention
class QKNormAttention(MultiHeadBase):
    """softmax(g_h · q̂·k̂) with q̂, k̂ ℓ2-normalised per head; Henry et al. 2020 (QKNorm)."""

    spec = AttentionSpec(
        name="qk-norm",
        roles=REWEIGHTED_ROLES,
        formula="softmax(g_h · (q/‖q‖)·(k/‖k‖)), g_h a learned scale per head",
        complexity="O(Tq·Tk·d), like scaled-dot; fused SDPA without weights",
        known_for="Cosine scores with a learned temperature: logits bounded by ±g, no blow-up.",
        paper="Henry et al. 2020, Query-Key Normalization for Transformers, arXiv:2010.04245",
        hparams=(
            HParam(
                "scale_init",
                10.0,
                "qk-norm: initial scale g (paper: log2(L² − L), L = a long training length; "
                "≈ 8.6 at L = 20, 10.6 at L = 40)",
                0.1,
                100.0,
            ),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        scale_init: float = 10.0,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.scale = nn.Parameter(torch.full((heads,), float(scale_init)))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        # g folded into the normalised query: scores = (g q̂)·k̂, no further 1/√d.
        q = F.normalize(q, dim=-1) * self.scale.to(q.dtype)[None, :, None, None]
        k = F.normalize(k, dim=-1)
        dropout_p = self.dropout_p if self.training else 0.0
        if not need_weights and not self.reference_mode:
            return sdpa(q, k, v, mask, None, dropout_p, scale=1.0), None
        weights = masked_softmax(q @ k.transpose(-1, -2), mask)
        return dropout(weights, dropout_p, self.training) @ v, weights
