"""How every attention figure names the layer and head it shows (translate, compare, eval)."""

from __future__ import annotations

from typing import Any


def map_where(
    method: str, layer: int, n_layers: int, head: int | None = None, n_heads: int = 1
) -> str:
    """Which layer and head a cross-attention figure shows, as every title says it:
    ``layer 1/2, head average`` (0-based layer of n), or ``all layers and heads``."""
    if method in ("rollout", "relevancy"):
        return "all layers and heads"
    # norm sums the heads inside the norm (‖Σ_h α_h f_h(x)‖), gradient averages them
    every = "heads summed in ‖·‖" if method == "norm" else "head average"
    which = every if head is None else f"head {head}/{n_heads}"
    return f"layer {layer}/{n_layers}, {which}"


def cross_layers(config: Any) -> int:
    """How many cross-attention layers a model has (an RNN decoder has one attention)."""
    from attnlab.nn.archs import cross_layer_count

    return cross_layer_count(config)
