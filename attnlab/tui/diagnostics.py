"""Attention diagnostics shown beside the Inspect heatmap (pure numpy, no textual, no torch).

They flag the classic failure signs of a soft alignment:
- rows close to uniform (mean row entropy near log S: the model is not attending),
- weight piling up on the end-of-sentence token (a "sink" instead of an alignment),
- for self-attention, how much each position attends to itself (diagonal dominance).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlab.attention_map import EOS_LABEL

EOS_LABELS = (EOS_LABEL, "<eos>")


@dataclass(frozen=True)
class Diagnostics:
    mean_entropy: float  # nats, mean over rows with any weight
    uniform_entropy: float  # log(S): the entropy of a uniform row
    eos_mass: float | None  # mean weight on an end-of-sentence column (None: no such column)
    diagonal: float | None  # mean weight on the diagonal (square matrices only)
    diagonal_argmax: float | None  # share of rows whose arg-max is the diagonal

    @property
    def entropy_ratio(self) -> float:
        return self.mean_entropy / self.uniform_entropy if self.uniform_entropy > 0 else 0.0

    def warnings(self) -> list[str]:
        """Plain-language flags for the classic failure signs."""
        out = []
        if self.uniform_entropy > 0 and self.entropy_ratio > 0.9:
            out.append("rows are nearly uniform: attention is not selecting source tokens")
        if self.eos_mass is not None and self.eos_mass > 0.5:
            out.append("most weight sits on </s>: attention is used as a sink")
        return out


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of a [T, S] matrix; 0 * log 0 counts as 0."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, -w * np.log(w), 0.0)
    return terms.sum(axis=-1)


def diagnose(weights: np.ndarray, col_labels: Sequence[str] = ()) -> Diagnostics:
    """Diagnostics of one attention matrix [T, S] (rows = queries, cols = keys)."""
    w = np.asarray(weights, dtype=np.float64)
    rows, cols = w.shape
    live = w.sum(axis=-1) > 0  # all-masked rows are all zeros; leave them out
    entropy = float(row_entropy(w[live]).mean()) if live.any() else 0.0
    uniform = float(np.log(cols)) if cols > 1 else 0.0
    eos_cols = [i for i, t in enumerate(col_labels) if t in EOS_LABELS]
    eos_mass = float(w[live][:, eos_cols].sum(axis=-1).mean()) if eos_cols and live.any() else None
    diagonal = diagonal_argmax = None
    if rows == cols and rows > 0:
        idx = np.arange(rows)
        diagonal = float(w[idx, idx].mean())
        diagonal_argmax = float((w.argmax(axis=-1) == idx).mean())
    return Diagnostics(entropy, uniform, eos_mass, diagonal, diagonal_argmax)


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
