"""Multiple comparisons."""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnlab.errors import AttnlabError


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in input order: with p_(1) ≤ … ≤ p_(m) sorted,
    p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)). Rejecting p̃ < α controls the
    family-wise error rate at α."""
    ps = [float(p) for p in p_values]
    if any(not (0.0 <= p <= 1.0) or math.isnan(p) for p in ps):
        raise AttnlabError("holm: p-values must lie in [0, 1]")
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
