"""Two models, one sentence: maps on one colour scale, A − B, Jensen-Shannon per row.

JS(p, q) = ½ KL(p ‖ m) + ½ KL(q ‖ m), m = ½ (p + q), in bits (log base 2, so 0 ≤ JS ≤ 1);
0 log 0 = 0 (a sparse map's exact zeros stay finite). Each side's rows become distributions by
their kind (``attnlab.attention_map`` NORM_*):

- softmax / sparse: as they are (renormalised to sum 1; an all-zero row reads as uniform);
- sub-stochastic: the row plus one more outcome, ∅, its unattended mass 1 − Σ w (the other side,
  when it is not sub-stochastic, gets a ∅ of 0 so both have S + 1 outcomes);
- unnormalised: the row scaled to sum 1;
- signed (on either side): no distribution, JS is undefined (:data:`JS_UNDEFINED`); A − B is
  still a meaningful map.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnlab.attention_map import (
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    UNATTENDED_LABEL,
    check_normalisation,
    unattended_mass,
)

JS_UNDEFINED = "JS undefined for signed weights (differential)"
JS_NOTES = {  # what a kind's rows became before JS (softmax and sparse: nothing to say)
    NORM_SUB_STOCHASTIC: f"{UNATTENDED_LABEL} counted",
    NORM_UNNORMALISED: "rows scaled to sum 1",
}


def _distribution(rows: Tensor) -> Tensor:
    rows = rows.to(torch.float64).clamp_min(0.0)
    total = rows.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(rows, 1.0 / max(rows.shape[-1], 1))
    return torch.where(total > 0, rows / total.clamp_min(1e-300), uniform)


def as_distribution(rows: Tensor, kind: str = NORM_SOFTMAX) -> Tensor:
    """Rows [..., S] of a map of ``kind`` as distributions: [..., S] (sub-stochastic:
    [..., S + 1], the last outcome ∅). A signed map has none: ValueError."""
    if check_normalisation(kind) == NORM_SIGNED:
        raise ValueError(JS_UNDEFINED)
    rows = rows.to(torch.float64).clamp_min(0.0)
    if kind == NORM_SUB_STOCHASTIC:  # the unattended mass is one more outcome
        rows = torch.cat([rows, unattended_mass(rows).unsqueeze(-1)], dim=-1)
    return _distribution(rows)


def js_defined(kind_a: str = NORM_SOFTMAX, kind_b: str = NORM_SOFTMAX) -> bool:
    return NORM_SIGNED not in (kind_a, kind_b)


def js_note(kind_a: str = NORM_SOFTMAX, kind_b: str = NORM_SOFTMAX) -> str:
    """One line on how the rows were compared: "" (two softmax / sparse sides), what the
    sides' rows became ("∅ counted", "rows scaled to sum 1"), or why there is no JS."""
    if not js_defined(kind_a, kind_b):
        return JS_UNDEFINED
    notes = dict.fromkeys(JS_NOTES[k] for k in (kind_a, kind_b) if k in JS_NOTES)
    return ", ".join(notes)


def _kl(p: Tensor, q: Tensor) -> Tensor:
    terms = torch.where(
        p > 0, p * (torch.log(p.clamp_min(1e-300)) - torch.log(q.clamp_min(1e-300))), 0.0
    )
    return terms.sum(dim=-1)


def _pad_to(p: Tensor, width: int) -> Tensor:
    """A zero-mass ∅ for the side that has none (its rows already sum to 1)."""
    extra = width - p.shape[-1]
    return torch.cat([p, p.new_zeros((*p.shape[:-1], extra))], dim=-1) if extra > 0 else p


def js_divergence(
    a: Tensor, b: Tensor, kind_a: str = NORM_SOFTMAX, kind_b: str = NORM_SOFTMAX
) -> Tensor:
    """Per-row Jensen-Shannon divergence in bits: [..., T, S] twice -> [..., T]; each side's
    rows read by its kind (module docstring). Signed on either side: ValueError(JS_UNDEFINED)."""
    p, q = as_distribution(a, kind_a), as_distribution(b, kind_b)
    width = max(p.shape[-1], q.shape[-1])
    p, q = _pad_to(p, width), _pad_to(q, width)
    m = 0.5 * (p + q)
    return (0.5 * _kl(p, m) + 0.5 * _kl(q, m)) / math.log(2.0)


def shared_scale(a: Tensor, b: Tensor) -> float:
    """One scale end for both maps, the larger max |w|, so colours compare: the top of a
    0 … vmax scale, or ±vmax of a signed map's diverging one (negative weights count too)."""
    return float(max(a.abs().max() if a.numel() else 0.0, b.abs().max() if b.numel() else 0.0))


def as_drawn(rows: Tensor, kind: str = NORM_SOFTMAX) -> Tensor:
    """The map as a heatmap draws it: a sub-stochastic map with its ∅ column (so a shared
    scale also covers the unattended mass), any other kind as it is."""
    if kind != NORM_SUB_STOCHASTIC:
        return rows
    rows = rows.to(torch.float64)
    return torch.cat([rows, unattended_mass(rows).unsqueeze(-1)], dim=-1)


def difference(a: Tensor, b: Tensor) -> Tensor:
    """A − B (same shape: the two models produced the same target tokens)."""
    if a.shape != b.shape:
        raise ValueError(f"maps differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    return a.to(torch.float64) - b.to(torch.float64)


def _vocab_text(side: str, a: list[str], b: list[str]) -> str:
    if len(a) != len(b):
        return f"their {side} vocabularies differ ({len(a)} vs {len(b)} tokens)"
    first = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    return f"their {side} vocabularies differ (token {first}: {a[first]!r} vs {b[first]!r})"


def incomparable_reason(meta_a: dict[str, Any], meta_b: dict[str, Any]) -> str:
    """Why two checkpoints cannot be compared on one sentence, from their dataset metadata
    (``meta.json``'s "dataset": task, vocabularies, tokenizers); "" when they can. Maps of
    models that read different source tokens, or write different target ones, have no
    common rows or columns: A − B and JS would compare unrelated things."""
    task_a, task_b = str(meta_a.get("task", "?")), str(meta_b.get("task", "?"))
    if task_a != task_b:
        return f"different tasks: A is {task_a}, B is {task_b}"
    for side in ("src", "tgt"):
        vocab_a, vocab_b = (
            list(meta_a.get(f"{side}_vocab", [])),
            list(meta_b.get(f"{side}_vocab", [])),
        )
        if vocab_a != vocab_b:
            return _vocab_text("source" if side == "src" else "target", vocab_a, vocab_b)
    for side in ("src", "tgt"):
        if meta_a.get(f"{side}_tokenizer") != meta_b.get(f"{side}_tokenizer"):
            which = "source" if side == "src" else "target"
            return f"their {which} tokenizers differ"
    return ""
