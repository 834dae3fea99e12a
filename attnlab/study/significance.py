"""Two runs on one test set, paired: ``attnlab compare RUN_A RUN_B --significance``.

Both checkpoints decode the same split (each with its own stored search, as ``attnlab eval``);
A is the baseline. BLEU and chrF get sacrebleu's paired bootstrap and approximate
randomisation, exact match the exact McNemar test (attnlab.stats). Every test's p-value is
under ``p_value``.
"""

from __future__ import annotations

from typing import Any

from attnlab.errors import AttnlabError
from attnlab.study.score import split_scores

BOOTSTRAP_RESAMPLES = 1000
RANDOMIZATION_TRIALS = 10000
SEED = 12345


def paired_report(
    a: Any,
    b: Any,
    split: str = "test",
    device: Any = "cpu",
    resamples: int = BOOTSTRAP_RESAMPLES,
    trials: int = RANDOMIZATION_TRIALS,
    seed: int = SEED,
) -> dict[str, Any]:
    """The paired tests of B against A (two LoadedModel) on ``split``."""
    from attnlab.interpret.compare import incomparable_reason
    from attnlab.stats import (
        METHODS,
        paired_bootstrap,
        paired_exact_match,
        paired_randomization,
    )

    reason = incomparable_reason(a.dataset_meta, b.dataset_meta)
    if reason:
        raise AttnlabError(f"--significance: {a.path} and {b.path} cannot be compared: {reason}")
    score_a, score_b = split_scores(a, split, device), split_scores(b, split, device)
    sent_a, sent_b = score_a["sentences"], score_b["sentences"]
    if sent_a["refs"] != sent_b["refs"]:
        raise AttnlabError(
            f"--significance: the two runs' {split} sets differ (their data settings differ); "
            "a paired test needs the same sentences"
        )
    refs = sent_a["refs"]
    if not refs:
        raise AttnlabError(f"--significance: the {split} split is empty")
    tests = []
    for metric in ("bleu", "chrf"):
        for name, comparison in (
            (
                "paired bootstrap",
                paired_bootstrap(
                    metric, sent_a["hyps"], sent_b["hyps"], refs, resamples=resamples, seed=seed
                ),
            ),
            (
                "approximate randomisation",
                paired_randomization(
                    metric, sent_a["hyps"], sent_b["hyps"], refs, trials=trials, seed=seed
                ),
            ),
        ):
            tests.append(_row(metric, name, comparison))
    tests.append(
        _row("exact_match", "exact McNemar", paired_exact_match(sent_a["exact"], sent_b["exact"]))
    )
    return {
        "split": split,
        "n": len(refs),
        "seed": seed,
        "a": _side(a, score_a),
        "b": _side(b, score_b),
        "tests": tests,
        "methods": {
            key: METHODS[key]
            for key in ("paired_bootstrap", "paired_randomization", "paired_exact_match")
        },
    }


def _side(loaded: Any, score: dict[str, Any]) -> dict[str, Any]:
    return {
        "checkpoint": str(loaded.path),
        "step": loaded.step,
        **{key: score[key] for key in ("bleu", "chrf", "exact_match")},
        "bleu_signature": score.get("bleu_signature", ""),
    }


def _row(metric: str, test: str, comparison: Any) -> dict[str, Any]:
    return {
        "metric": metric,
        "test": test,
        "method": comparison.method,
        "a": comparison.baseline,
        "b": comparison.system,
        "difference": comparison.difference,
        "p_value": comparison.p_value,
        "b_low": comparison.low,
        "b_high": comparison.high,
    }
