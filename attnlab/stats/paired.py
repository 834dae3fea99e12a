"""Two systems compared: over seeds (Welch) and paired over test sentences (sacrebleu's paired
bootstrap and approximate randomisation for BLEU/chrF, the exact McNemar test for exact match).

The BLEU/chrF tests call sacrebleu's own test functions (sacrebleu.significance, 2.x) with the
metric at its default settings (what ``attnlab eval`` scores and the ``sacrebleu`` command
uses), so a p-value here equals ``sacrebleu REF -i BASE SYS --paired-bs`` (or ``--paired-ar``)
with the same resample count and ``SACREBLEU_SEED``; tests/test_stats.py runs that command.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.stats.distributions import betainc, student_t_ppf, student_t_sf2
from attnlab.stats.intervals import check_confidence, check_values

TEXT_METRICS = ("bleu", "chrf")


@dataclass(frozen=True)
class Comparison:
    """``system`` against ``baseline`` on one metric."""

    metric: str
    baseline: float
    system: float
    difference: float  # system − baseline
    p_value: float
    method: str
    low: float | None = None  # the interval the method gives (see ``interval_of``)
    high: float | None = None
    n: int | None = None  # seeds (Welch) or sentences (paired tests)
    interval_of: str = ""  # "difference" (Welch) | "system" (sacrebleu's bootstrap mean ± CI)


def welch_test(
    system: Sequence[float], baseline: Sequence[float], confidence: float = 0.95
) -> Comparison:
    """Welch's unequal-variance t-test, two-sided: t = (x̄ − ȳ)/√(s²ₓ/nₓ + s²ᵧ/nᵧ), df by
    Welch–Satterthwaite; the interval is the difference's. Equal to scipy's
    ``ttest_ind(equal_var=False)``. Both samples without spread: p = 1 when the means are equal,
    else 0 (scipy: nan)."""
    check_confidence(confidence)
    xs, ys = check_values(system, "system"), check_values(baseline, "baseline")
    if len(xs) < 2 or len(ys) < 2:
        raise AttnlabError("welch_test: each side needs at least 2 values (seeds)")
    nx, ny = len(xs), len(ys)
    mx, my = math.fsum(xs) / nx, math.fsum(ys) / ny
    vx = math.fsum((x - mx) ** 2 for x in xs) / (nx - 1)
    vy = math.fsum((y - my) ** 2 for y in ys) / (ny - 1)
    diff = mx - my
    se2 = vx / nx + vy / ny
    method = "Welch's t-test over seeds"
    if se2 == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
        return Comparison("", my, mx, diff, p, method, diff, diff, nx + ny, "difference")
    se = math.sqrt(se2)
    df = se2**2 / ((vx / nx) ** 2 / (nx - 1) + (vy / ny) ** 2 / (ny - 1))
    p = student_t_sf2(diff / se, df)
    half = student_t_ppf((1.0 + confidence) / 2.0, df) * se
    return Comparison("", my, mx, diff, p, method, diff - half, diff + half, nx + ny, "difference")


def _check_texts(
    metric: str, baseline: Sequence[str], system: Sequence[str], refs: Sequence[str]
) -> None:
    if metric not in TEXT_METRICS:
        raise AttnlabError(f"metric {metric!r}: paired text tests take {', '.join(TEXT_METRICS)}")
    if not refs:
        raise AttnlabError("paired test: no sentences")
    if not len(baseline) == len(system) == len(refs):
        raise AttnlabError(
            f"paired test: {len(baseline)} baseline, {len(system)} system and {len(refs)} "
            "reference sentences; a paired test needs the same sentences on every side"
        )


def _metric(metric: str) -> Any:
    from sacrebleu.metrics import BLEU, CHRF

    return BLEU() if metric == "bleu" else CHRF()


def _sacrebleu_test(
    kind: str,
    metric: str,
    baseline: Sequence[str],
    system: Sequence[str],
    refs: Sequence[str],
    samples: int,
    seed: int,
) -> tuple[float, float, Any]:
    """(baseline score, system score, sacrebleu's Result) of one paired test."""
    from sacrebleu.significance import Result, _paired_ar_test, _paired_bs_test

    _check_texts(metric, baseline, system, refs)
    if samples < 1:
        raise AttnlabError(f"paired test: {samples} resamples; expected at least 1")
    scorer = _metric(metric)
    references = [list(refs)]
    base_stats = scorer._extract_corpus_statistics(list(baseline), references)
    base_score = scorer._aggregate_and_compute(base_stats).score
    test = _paired_bs_test if kind == "bs" else _paired_ar_test
    # As sacrebleu's PairedTest: seed 0 means "not fixed" there, so it is passed the same way.
    _, results = test(
        {metric: (base_stats, Result(base_score))},
        "system",
        list(system),
        references,
        {metric: scorer},
        samples,
        -1,
        seed if seed else None,
    )
    return float(base_score), float(results[metric].score), results[metric]


IDENTICAL_NOTE = "identical hypotheses: p = 1 (sacrebleu reports 1/(R + 1) there)"


def _identical(baseline: Sequence[str], system: Sequence[str]) -> bool:
    """Both systems wrote the same text for every sentence. Every resample then differs by
    exactly 0, and sacrebleu's count of resamples ``> |Δ|`` = 0 gives p = 1/(R + 1) < 0.05:
    it would call a system significantly different from itself. There is no evidence of a
    difference at all, so p = 1 (the one case where these tests leave sacrebleu's figure)."""
    return list(baseline) == list(system)


def paired_bootstrap(
    metric: str,
    baseline_hyps: Sequence[str],
    system_hyps: Sequence[str],
    refs: Sequence[str],
    resamples: int = 1000,
    seed: int = 12345,
) -> Comparison:
    """Paired bootstrap resampling (Koehn 2004) as sacrebleu's ``--paired-bs``: the same
    ``resamples`` index sets for both systems; p = (#{|Δ*| − mean|Δ*| > |Δ|} + 1)/(R + 1);
    the system's bootstrap mean ± the half-width of its 95 % percentile interval."""
    base, sys_score, result = _sacrebleu_test(
        "bs", metric, baseline_hyps, system_hyps, refs, resamples, seed
    )
    mean, half = float(result.mean), float(result.ci)
    method = f"paired bootstrap resampling, {resamples} resamples (sacrebleu --paired-bs)"
    identical = _identical(baseline_hyps, system_hyps)
    return Comparison(
        metric,
        base,
        sys_score,
        sys_score - base,
        1.0 if identical else float(result.p_value),
        f"{method}; {IDENTICAL_NOTE}" if identical else method,
        mean - half,
        mean + half,
        len(refs),
        "system",
    )


def paired_randomization(
    metric: str,
    baseline_hyps: Sequence[str],
    system_hyps: Sequence[str],
    refs: Sequence[str],
    trials: int = 10000,
    seed: int = 12345,
) -> Comparison:
    """Approximate randomisation (Riezler & Maxwell 2005) as sacrebleu's ``--paired-ar``: each
    trial swaps every sentence's two hypotheses with probability ½;
    p = (#{|Δ*| > |Δ|} + 1)/(trials + 1)."""
    base, sys_score, result = _sacrebleu_test(
        "ar", metric, baseline_hyps, system_hyps, refs, trials, seed
    )
    method = f"approximate randomisation, {trials} trials (sacrebleu --paired-ar)"
    identical = _identical(baseline_hyps, system_hyps)
    return Comparison(
        metric,
        base,
        sys_score,
        sys_score - base,
        1.0 if identical else float(result.p_value),
        f"{method}; {IDENTICAL_NOTE}" if identical else method,
        n=len(refs),
    )


def paired_exact_match(
    baseline_correct: Sequence[bool], system_correct: Sequence[bool]
) -> Comparison:
    """The exact McNemar test: b = sentences only the baseline gets right, c = only the system;
    p = min(1, 2·P(X ≤ min(b, c))), X ~ Binomial(b + c, ½) (= scipy's two-sided
    ``binomtest(c, b + c, 0.5)``); no discordant pair: p = 1."""
    if len(baseline_correct) != len(system_correct):
        raise AttnlabError(
            f"paired_exact_match: {len(baseline_correct)} baseline and {len(system_correct)} "
            "system sentences; a paired test needs the same sentences"
        )
    n = len(baseline_correct)
    if n == 0:
        raise AttnlabError("paired_exact_match: no sentences")
    b = sum(1 for x, y in zip(baseline_correct, system_correct, strict=True) if x and not y)
    c = sum(1 for x, y in zip(baseline_correct, system_correct, strict=True) if y and not x)
    discordant = b + c
    if discordant == 0:
        p = 1.0
    else:
        k = min(b, c)
        # P(X ≤ k) = I_{1/2}(n − k, k + 1) for X ~ Bin(n, 1/2)
        tail = 1.0 if k >= discordant else betainc(discordant - k, k + 1, 0.5)
        p = min(1.0, 2.0 * tail)
    base = sum(map(bool, baseline_correct)) / n
    sys_score = sum(map(bool, system_correct)) / n
    return Comparison(
        "exact_match",
        base,
        sys_score,
        sys_score - base,
        p,
        f"exact McNemar test ({b} vs {c} discordant sentences)",
        n=n,
    )
