"""A mean and its confidence interval over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from attnlab.errors import AttnlabError
from attnlab.stats.distributions import student_t_ppf


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # nan when it is not defined (one value)
    high: float
    n: int
    confidence: float
    method: str


def check_values(values: Sequence[float], what: str = "values") -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise AttnlabError(f"{what}: no values (an interval needs at least one)")
    if not all(math.isfinite(v) for v in out):
        raise AttnlabError(f"{what}: a value is not finite")
    return out


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise AttnlabError(f"confidence={confidence}: expected a level between 0 and 1, e.g. 0.95")


def seed_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student t interval: mean ± t_{(1+c)/2, n−1} · s/√n, s the sample standard deviation
    (ddof = 1). One value: low = high = nan (no spread can be estimated)."""
    check_confidence(confidence)
    xs = check_values(values)
    n = len(xs)
    mean = math.fsum(xs) / n
    method = f"Student t interval over seeds ({confidence:.0%})"
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1, confidence, method)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = student_t_ppf((1.0 + confidence) / 2.0, n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, confidence, method)


def bootstrap_seed_interval(
    values: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 10000,
    seed: int = 12345,
) -> Interval:
    """Percentile bootstrap: the means of ``resamples`` resamples (with replacement, numpy's
    default_rng(seed)) and their (1−c)/2 and (1+c)/2 percentiles (numpy's linear rule)."""
    import numpy as np

    check_confidence(confidence)
    xs = np.asarray(check_values(values), dtype=np.float64)
    if resamples < 1:
        raise AttnlabError(f"resamples={resamples}: expected at least 1")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(xs), size=(resamples, len(xs)))
    means = xs[idx].mean(axis=1)
    low, high = np.percentile(means, [50 * (1 - confidence), 50 * (1 + confidence)])
    return Interval(
        float(xs.mean()),
        float(low),
        float(high),
        len(xs),
        confidence,
        f"percentile bootstrap over seeds ({confidence:.0%}, {resamples} resamples)",
    )
