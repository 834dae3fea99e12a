"""Attention diagnostics shown beside the Inspect heatmap (pure numpy, no textual, no torch).

They flag the classic failure signs of a soft alignment:
- rows close to uniform (mean row entropy near log S: the model is not attending),
- weight piling up on the end-of-sentence token (a "sink" instead of an alignment),
- for self-attention, how much each position attends to itself (diagonal dominance).

Entropy reads how the map's rows are normalised (attnlab.attention_map): a sub-stochastic
row's unattended mass (1 − row sum) is one more outcome, so its entropy is that of a
distribution over the keys and "nothing" (uniform: log(S + 1)); a sparse row's exact zeros add
nothing (0 · log 0 = 0); a signed row has no entropy (None, shown as "—").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlab.attention_map import (
    EOS_LABEL,
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    unattended_mass,
)

EOS_LABELS = (EOS_LABEL, "<eos>")


@dataclass(frozen=True)
class Diagnostics:
    mean_entropy: float | None  # nats, mean over rows with any weight (None: signed weights)
    uniform_entropy: float  # log(S) (log(S + 1) sub-stochastic): a uniform row's entropy
    eos_mass: float | None  # mean weight on an end-of-sentence column (None: no such column)
    diagonal: float | None  # mean weight on the diagonal (square matrices only)
    diagonal_argmax: float | None  # share of rows whose arg-max is the diagonal
    normalisation: str = NORM_SOFTMAX
    unattended: float | None = None  # sub-stochastic: mean 1 − row sum over the rows
    zeros: int = 0  # weights exactly 0
    negatives: int = 0  # weights below 0 (signed maps)
    size: int = 0  # weights in the matrix

    @property
    def entropy_ratio(self) -> float:
        if self.mean_entropy is None or self.uniform_entropy <= 0:
            return 0.0
        return self.mean_entropy / self.uniform_entropy

    def warnings(self) -> list[str]:
        """Plain-language flags for the classic failure signs."""
        out = []
        if self.mean_entropy is not None and self.uniform_entropy > 0 and self.entropy_ratio > 0.9:
            out.append("rows are nearly uniform: attention is not selecting source tokens")
        if self.eos_mass is not None and self.eos_mass > 0.5:
            out.append("most weight sits on </s>: attention is used as a sink")
        return out


def row_entropy(weights: np.ndarray, normalisation: str = NORM_SOFTMAX) -> np.ndarray:
    """Entropy (nats) of each row of a [T, S] matrix; 0 * log 0 counts as 0.

    Sub-stochastic rows count their unattended mass as one more outcome; unnormalised rows are
    scaled to sum 1 first; signed rows have no entropy (NaN)."""
    w = np.asarray(weights, dtype=np.float64)
    if normalisation == NORM_SIGNED:
        return np.full(w.shape[:-1], np.nan)
    if normalisation == NORM_SUB_STOCHASTIC:
        w = np.concatenate([w, unattended_mass(w)[..., None]], axis=-1)
    elif normalisation == NORM_UNNORMALISED:  # the entropy of the row scaled to sum 1
        total = w.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)
    w = np.clip(w, 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, -w * np.log(w), 0.0)
    return terms.sum(axis=-1)


def entropy_note(normalisation: str) -> str:
    """How the entropy line reads for a kind ("" for softmax and sparse)."""
    if normalisation == NORM_SUB_STOCHASTIC:
        return "∅ counted as an outcome"
    if normalisation == NORM_SIGNED:
        return "undefined for signed weights"
    if normalisation == NORM_UNNORMALISED:
        return "of each row scaled to sum 1"
    return ""


def diagnose(
    weights: np.ndarray, col_labels: Sequence[str] = (), normalisation: str = NORM_SOFTMAX
) -> Diagnostics:
    """Diagnostics of one attention matrix [T, S] (rows = queries, cols = keys)."""
    w = np.asarray(weights, dtype=np.float64)
    rows, cols = w.shape
    # all-masked rows are all zeros; leave them out (a signed row may sum to 0: any non-zero).
    # A sub-stochastic row of zeros is a row that attended to nothing: it counts.
    live = np.abs(w).sum(axis=-1) > 0
    if normalisation == NORM_SUB_STOCHASTIC:
        live = np.ones(rows, dtype=bool)
    entropy: float | None = None
    if normalisation != NORM_SIGNED:
        entropy = float(row_entropy(w[live], normalisation).mean()) if live.any() else 0.0
    outcomes = cols + 1 if normalisation == NORM_SUB_STOCHASTIC else cols
    uniform = float(np.log(outcomes)) if outcomes > 1 else 0.0
    unattended = None
    if normalisation == NORM_SUB_STOCHASTIC and live.any():
        unattended = float(unattended_mass(w[live]).mean())
    eos_cols = [i for i, t in enumerate(col_labels) if t in EOS_LABELS]
    eos_mass = float(w[live][:, eos_cols].sum(axis=-1).mean()) if eos_cols and live.any() else None
    diagonal = diagonal_argmax = None
    if rows == cols and rows > 0:
        idx = np.arange(rows)
        diagonal = float(w[idx, idx].mean())
        diagonal_argmax = float((w.argmax(axis=-1) == idx).mean())
    return Diagnostics(
        entropy,
        uniform,
        eos_mass,
        diagonal,
        diagonal_argmax,
        normalisation,
        unattended,
        int((w == 0).sum()),
        int((w < 0).sum()),
        int(w.size),
    )


def alignment_accuracy(weights: np.ndarray, gold: Sequence[int]) -> float | None:
    """Share of target tokens whose arg-max attention is the gold source position.

    ``gold[t]`` is the source index target token t copies; rows beyond ``len(gold)`` (the
    ``</s>`` row, extra hypothesis tokens) are not scored.
    """
    w = np.asarray(weights)
    n = min(len(gold), w.shape[0])
    if n == 0:
        return None
    hits = w[:n].argmax(axis=-1) == np.asarray(gold[:n])
    return float(hits.mean())
