"""One attention abstraction for both eras.

Every variant is soft addressing over (query, keys, values):
score -> mask -> normalise -> weighted sum. All variants share one call signature::

    attn(query[B,Tq,Dq], keys[B,Tk,Dk], values[B,Tk,Dk], key_mask[B,Tk],
         causal=False, need_weights=False, query_pos=None, precomputed=None)
        -> AttentionOutput(context[B,Tq,out_dim], weights[B,H,Tq,Tk] | None)

``key_mask`` is True for real keys and False for padding. Padded keys get exactly zero
weight; a query row whose keys are all masked gets a zero context and zero weights, never NaN.
``causal`` uses bottom-right alignment: query i (absolute position Tk - Tq + i) may see keys
j <= Tk - Tq + i, which is what incremental decoding with a key/value cache needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from attnlab.attention_map import (  # noqa: F401  (re-exported for the variants)
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    NORMALISATIONS,
)
from attnlab.errors import AttnlabError
from attnlab.registry import Registry

# Roles a variant can play. "rnn-cross": the RNN decoder's attention over encoder states
# (Tq = 1 per step); the other three are Transformer roles.
ROLE_RNN_CROSS = "rnn-cross"
ROLE_SELF = "self"
ROLE_CAUSAL_SELF = "causal-self"
ROLE_CROSS = "cross"
ALL_ROLES = (ROLE_RNN_CROSS, ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS)

# How a variant's weight rows are normalised: what tests, diagnostics, the coverage penalty and
# the views may assume of them.
# The words live on the ground floor (attnlab.attention_map), so maps and views read them
# without torch; re-exported here for the variants.


@dataclass(frozen=True)
class HParam:
    """A variant's hyper-parameter; its name is also a ``model.<name>`` config key."""

    name: str
    default: int | float | bool | str
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def validate(self, value: Any, key: str = "") -> Any:
        """Coerce ``value`` to the default's type and check its range; raise AttnlabError
        naming ``key`` (default ``model.<name>``)."""
        key = key or f"model.{self.name}"
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise AttnlabError(f"{key} must be true or false, got {value!r}")
            return value
        try:
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            coerced = kind(value)
        except (TypeError, ValueError):
            raise AttnlabError(f"{key} must be {kind.__name__}, got {value!r}") from None
        if isinstance(coerced, float) and not math.isfinite(coerced):
            raise AttnlabError(f"{key}={value} must be a finite number")
        if self.choices and coerced not in self.choices:
            raise AttnlabError(f"{key}={coerced!r} is not valid; valid: {', '.join(self.choices)}")
        if (
            self.low is not None
            and coerced < self.low
            or (self.high is not None and coerced > self.high)
        ):
            raise AttnlabError(f"{key}={coerced} is out of range [{self.low}, {self.high}]")
        return coerced


# What one attention call holds for the backward pass, per sequence and head (score_memory):
SCORES_QUADRATIC = "quadratic"  # a Tq × Tk matrix of scores / weights
SCORES_FEATURES = "features"  # Tq × Tk × d_h (additive: tanh(W q + W k) of every pair)
SCORES_LINEAR = "linear"  # linear in length (a window, a projection, kernel sums)
SCORE_MEMORY_CELLS = (SCORES_QUADRATIC, SCORES_FEATURES, SCORES_LINEAR)
# The most one attention call of a training batch may hold in scores (docs/data.md): a
# configuration over it is refused at config time rather than swapping or being killed.
ATTENTION_MEMORY_LIMIT_GIB = 4.0


@dataclass(frozen=True)
class AttentionSpec:
    """Registry metadata shown by ``attnlab variants`` and the TUI's side panel."""

    name: str
    roles: frozenset[str]
    formula: str  # one line of math, e.g. "score(s, h) = vᵀ tanh(W s + U h)"
    complexity: str  # e.g. "O(Tq·Tk·d)"
    known_for: str  # one short sentence for the side panel
    paper: str = ""
    hparams: tuple[HParam, ...] = ()
    # RNN decoders: Bahdanau-style variants read the previous decoder state ("previous"),
    # Luong-style variants the current one ("current").
    query_timing: str = "current"
    exposes_weights: bool = True
    # A variant that sees at most N source positions names the hyper-parameter holding N
    # (e.g. linformer's "max_len"); architectures refuse data longer than it at config time.
    max_length_param: str = ""
    # How the weight rows are normalised (one of NORMALISATIONS).
    normalisation: str = NORM_SOFTMAX
    # A decoder built for the variant keeps a state that does not grow with the tokens
    # generated (linear attention's running sums, a sliding window's last w keys), so its
    # KV cache costs 0 bytes per generated token (attnlab.nn.kv_cache). attnlab's own decoder
    # still caches every key: one search path for all variants.
    constant_decode_state: bool = False
    # How the memory of one attention call grows with the lengths (check_memory): SCORES_*
    score_memory: str = "quadratic"

    def __post_init__(self) -> None:
        if self.score_memory not in SCORE_MEMORY_CELLS:
            raise ValueError(f"{self.name}: score_memory {self.score_memory!r}")
        if self.normalisation not in NORMALISATIONS:
            raise ValueError(
                f"{self.name}: normalisation {self.normalisation!r} is not one of {NORMALISATIONS}"
            )

    def hparam(self, name: str) -> HParam | None:
        return next((h for h in self.hparams if h.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {h.name: h.default for h in self.hparams}

    def score_bytes(self, rows: int, heads: int, head_dim: int, tq: int, tk: int) -> int:
        """float32 bytes of the scores one call over ``rows`` sequences keeps (score_memory);
        0 for a variant linear in length."""
        if self.score_memory == SCORES_LINEAR:
            return 0
        features = head_dim if self.score_memory == SCORES_FEATURES else 1
        return rows * heads * tq * tk * features * 4

    def check_memory(
        self, rows: int, heads: int, head_dim: int, tq: int, tk: int, where: str
    ) -> None:
        """Refuse, in one line, a call whose scores exceed ATTENTION_MEMORY_LIMIT_GIB."""
        need = self.score_bytes(rows, heads, head_dim, tq, tk)
        if need <= ATTENTION_MEMORY_LIMIT_GIB * 2**30:
            return
        shape = f"{rows} × {heads} heads × {tq} × {tk}" + (
            f" × {head_dim}" if self.score_memory == SCORES_FEATURES else ""
        )
        raise AttnlabError(
            f"{where}: {self.name} attention would keep {need / 2**30:.1f} GiB of scores per "
            f"layer ({shape} × 4 bytes), over the {ATTENTION_MEMORY_LIMIT_GIB:g} GiB limit; "
            "shorten data.max_len, lower train.batch_tokens (or train.batch_size), or use a "
            "variant linear in length (sliding-window, dilated, linformer, performer, linear, "
            "decayed-linear)"
        )

    def check_length(self, params: dict[str, Any], longest: int, where: str) -> None:
        """Refuse sources longer than ``max_length_param`` allows. ``params`` are the explicit
        ones (flat or qualified keys, as in ``ModelConfig.attn_params``); ``where`` names the
        data limit (``data.max_len=40``). One-line AttnlabError naming the key to raise."""
        hp = self.hparam(self.max_length_param) if self.max_length_param else None
        if hp is None:
            return
        qualified = f"{self.name}.{hp.name}"
        key = qualified if qualified in params or hp.name not in params else hp.name
        limit = params.get(key, hp.default)
        if longest > limit:
            raise AttnlabError(
                f"model.{key}={limit} is shorter than the longest source ({where}); "
                f'"{self.name}" would not see positions past it: raise model.{key}'
            )


# The extras key of a block-sparse variant's per-cell selection (nsa): [B, H, Tq, Tk] bool, True
# where the query read the key because its block was selected. Filled only with need_weights;
# the Transformer carries it to ``ModelOutput.selected`` beside the weights.
SELECTED_CELLS = "selected_cells"


@dataclass
class AttentionOutput:
    context: Tensor  # [B, Tq, out_dim]
    weights: Tensor | None = None  # [B, H, Tq, Tk], rows sum to 1 over unmasked keys
    extras: dict[str, Tensor] = field(default_factory=dict)  # e.g. local-p's predicted p_t


class Attention(nn.Module):
    """Base class of every variant. Subclasses set ``spec`` and implement ``forward``.

    Constructor contract: ``Variant(query_dim, key_dim, heads=1, dropout=0.0, **hparams)``
    where ``hparams`` are exactly the names in ``spec.hparams`` (defaults filled in by
    ``build_attention``). ``out_dim`` is the width of the returned context: ``key_dim`` for
    the classic RNN family (a weighted sum of encoder states), ``query_dim`` for variants
    with their own output projection (the multi-head family).
    """

    spec: ClassVar[AttentionSpec]
    out_dim: int

    def precompute(self, keys: Tensor) -> Any:
        """Work that depends on keys only (e.g. Bahdanau's U·h), done once per source batch."""
        return None

    def forward(  # pragma: no cover - interface
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
        raise NotImplementedError


ATTENTION: Registry[type[Attention]] = Registry("attention")
ATTENTION.enable_plugins("attnlab.attention")


def register_attention(cls: type[Attention]) -> type[Attention]:
    """Class decorator: register a variant under ``cls.spec.name``."""
    ATTENTION.add(cls.spec.name, cls, cls.spec)
    return cls


def build_attention(
    name: str,
    query_dim: int,
    key_dim: int,
    *,
    role: str,
    heads: int = 1,
    dropout: float = 0.0,
    hparams: dict[str, Any] | None = None,
) -> Attention:
    """Instantiate a registered variant for ``role``; unset hyper-parameters take defaults."""
    entry = ATTENTION.get(name)
    spec: AttentionSpec = entry.meta
    if role not in spec.roles:
        raise AttnlabError(
            f'attention "{name}" cannot be used for {role} attention; '
            f"it supports: {', '.join(sorted(spec.roles))}"
        )
    values = spec.defaults()
    for key, value in (hparams or {}).items():
        if key in values:
            values[key] = spec.hparam(key).validate(value)  # type: ignore[union-attr]
    return entry.factory(query_dim, key_dim, heads=heads, dropout=dropout, **values)


# -- shared helpers ---------------------------------------------------------------------------


def causal_mask(tq: int, tk: int, device: torch.device | None = None) -> Tensor:
    """[Tq, Tk] bool, True where query i may see key j (bottom-right aligned)."""
    q = torch.arange(tq, device=device).unsqueeze(1) + (tk - tq)
    k = torch.arange(tk, device=device).unsqueeze(0)
    return k <= q


def combine_masks(key_mask: Tensor, allowed: Tensor | None) -> Tensor:
    """key_mask [B,Tk] and an optional [Tq,Tk] / [B,Tq,Tk] pattern -> [B,1,Tq|1,Tk] bool."""
    mask = key_mask[:, None, None, :]
    if allowed is not None:
        if allowed.dim() == 2:
            allowed = allowed[None, None]
        elif allowed.dim() == 3:
            allowed = allowed[:, None]
        mask = mask & allowed
    return mask


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim where ``mask`` is True; all-masked rows give zeros, not NaN."""
    scores = scores.masked_fill(~mask, float("-inf"))
    if not torch.is_grad_enabled():
        # Decoding: an all-masked row's NaNs become zeros after the fact (3 ops, not 8).
        # Training keeps the version below, whose backward has no NaN to propagate.
        return torch.softmax(scores, dim=-1).nan_to_num_(0.0)
    # A row of all -inf would give NaN; replace it by zeros after the softmax.
    any_key = mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1)
    return weights.masked_fill(~mask, 0.0) * any_key
