"""Statistics for comparisons: intervals over seeds, significance tests, multiple comparisons.

numpy and sacrebleu only (no scipy: that is the tests' reference). Every function names its
method (``METHODS``); docs/statistics.md gives the formulas and the references each is tested
against.
"""

from attnlab.stats.distributions import betainc, student_t_cdf, student_t_ppf
from attnlab.stats.intervals import Interval, bootstrap_seed_interval, seed_interval
from attnlab.stats.multiple import holm
from attnlab.stats.paired import (
    Comparison,
    paired_bootstrap,
    paired_exact_match,
    paired_randomization,
    welch_test,
)

METHODS: dict[str, str] = {
    "seed_interval": "Student t interval over seeds",
    "bootstrap_seed_interval": "percentile bootstrap over seeds",
    "welch": "Welch's unequal-variance t-test, two-sided",
    "paired_bootstrap": "paired bootstrap resampling as sacrebleu --paired-bs",
    "paired_randomization": "approximate randomisation as sacrebleu --paired-ar",
    "paired_exact_match": "exact McNemar test (two-sided binomial on discordant pairs)",
    "holm": "Holm–Bonferroni step-down adjustment",
}


def format_p(p: float | None) -> str:
    """``<0.001``, ``0.042``, or ``—`` when there is no test."""
    if p is None:
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


__all__ = [
    "METHODS",
    "Comparison",
    "Interval",
    "betainc",
    "bootstrap_seed_interval",
    "format_p",
    "holm",
    "paired_bootstrap",
    "paired_exact_match",
    "paired_randomization",
    "seed_interval",
    "student_t_cdf",
    "student_t_ppf",
    "welch_test",
]
