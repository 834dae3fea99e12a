"""Every attention variant, in one registry (``ATTENTION``) shared by both eras.

Importing this package registers the built-in variants. A new variant is one class with a
``spec`` plus ``@register_attention``; it then appears in ``attnlab variants``, the TUI menus,
config validation and the parametrised tests.
"""

from attnlab.nn.attention.base import (  # noqa: I001  (variant import order = menu order)
    ALL_ROLES,
    ATTENTION,
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    NORMALISATIONS,
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    ROLE_SELF,
    Attention,
    AttentionOutput,
    AttentionSpec,
    HParam,
    build_attention,
    causal_mask,
    combine_masks,
    masked_softmax,
    register_attention,
)

# Built-in variants (import order = menu order).
from attnlab.nn.attention import classic  # noqa: E402,F401  none, bahdanau, luong-*, local-m/p
from attnlab.nn.attention import multihead  # noqa: E402,F401  scaled-dot, multihead, additive, gated
from attnlab.nn.attention import positional  # noqa: E402,F401  relative, alibi
from attnlab.nn.attention import sparse  # noqa: E402,F401  sliding-window, dilated
from attnlab.nn.attention import kernel  # noqa: E402,F401  linformer, performer, linear
from attnlab.nn.attention import grouped  # noqa: E402,F401  gqa, mla
from attnlab.nn.attention import reweighted  # noqa: E402,F401  differential, sigmoid, sinks, qk-norm
from attnlab.nn.attention import recurrent  # noqa: E402,F401  stick-breaking, decayed-linear
from attnlab.nn.attention import nsa  # noqa: E402,F401  nsa
from attnlab.nn.attention import sparsemax  # noqa: E402,F401  sparsemax, entmax

__all__ = [
    "ALL_ROLES",
    "ATTENTION",
    "NORM_SIGNED",
    "NORM_SOFTMAX",
    "NORM_SPARSE",
    "NORM_SUB_STOCHASTIC",
    "NORM_UNNORMALISED",
    "NORMALISATIONS",
    "ROLE_CAUSAL_SELF",
    "ROLE_CROSS",
    "ROLE_RNN_CROSS",
    "ROLE_SELF",
    "Attention",
    "AttentionOutput",
    "AttentionSpec",
    "HParam",
    "build_attention",
    "causal_mask",
    "combine_masks",
    "masked_softmax",
    "register_attention",
]
