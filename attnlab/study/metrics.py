"""The metrics a study can tabulate, in one table: label, digits, direction and range.

Everything that ranks or bounds a metric (the tuned selection, the out-of-range mark, a failed
tuning run's worst score) reads its direction and range here, so a new metric is one row.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Metric(NamedTuple):
    label: str
    digits: int
    higher_is_better: bool = True
    low: float = -math.inf  # the range a value can take (an interval outside it is marked)
    high: float = math.inf


METRICS: dict[str, Metric] = {
    "exact_match": Metric("exact match", 3, True, 0.0, 1.0),
    "bleu": Metric("BLEU", 1, True, 0.0, 100.0),
    "chrf": Metric("chrF", 1, True, 0.0, 100.0),
    "loss": Metric("loss", 3, False, 0.0),
    "alignment_accuracy": Metric("align. acc.", 3, True, 0.0, 1.0),
    "aer": Metric("AER", 3, False, 0.0, 1.0),
    # a language model's (data.task = "lm")
    "perplexity": Metric("perplexity", 2, False, 1.0),
    "bits_per_token": Metric("bits/token", 3, False, 0.0),
}
DEFAULT_METRICS = ("exact_match", "bleu", "chrf")
# What a run costs (the score file's "cost", attnlab.evaluate.COST_KEYS), shown beside the
# scores; every study table has them (no --metrics choice).
COSTS: dict[str, Metric] = {
    "parameters": Metric("params", 0, False, 0.0),
    "train_tokens_per_s": Metric("train tok/s", 0, True, 0.0),
    "train_peak_memory_mb": Metric("peak MiB", 0, False, 0.0),
    "decode_sentences_per_s": Metric("decode sent/s", 1, True, 0.0),
    "kv_cache_bytes_per_token": Metric("KV B/token", 0, False, 0.0),
}


def metric(name: str) -> Metric:
    return METRICS.get(name) or COSTS.get(name) or Metric(name, 3)


def worst(name: str) -> float:
    """The worst value the metric can take (a failed tuning run's score); ±inf when the
    metric is unbounded on that side."""
    m = metric(name)
    return m.low if m.higher_is_better else m.high


def sort_key(name: str, value: float) -> float:
    """Smaller is better for every metric (negated when higher is better)."""
    return -value if metric(name).higher_is_better else value


def range_text(name: str) -> str:
    m = metric(name)

    def bound(x: float) -> str:
        return "∞" if math.isinf(x) else f"{x:g}"

    return f"[{'−' + bound(-m.low) if m.low < 0 else bound(m.low)}, {bound(m.high)}]"


def leaves_range(name: str, low: float | None, high: float | None) -> bool:
    """True when an interval reaches outside the values the metric can take."""
    m = metric(name)
    return (low is not None and low < m.low) or (high is not None and high > m.high)
