"""attnlab.stats against its references: scipy for the t distribution, Welch's test and the
binomial test; the sacrebleu command itself for the paired BLEU/chrF tests; hand computation
for Holm."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.errors import AttnlabError
from attnlab.stats import (
    betainc,
    bootstrap_seed_interval,
    holm,
    paired_bootstrap,
    paired_exact_match,
    paired_randomization,
    seed_interval,
    student_t_ppf,
    welch_test,
)

scipy_stats = pytest.importorskip("scipy.stats")
scipy_special = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 29, 120, 1000])
def test_t_quantiles_equal_scipys(df: int) -> None:
    for q in (0.5, 0.55, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995, 0.025, 0.001):
        assert student_t_ppf(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-10, abs=1e-12)


def test_incomplete_beta_equals_scipys() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a, b, x = rng.uniform(0.1, 60), rng.uniform(0.1, 60), rng.random()
        assert betainc(a, b, x) == pytest.approx(scipy_special.betainc(a, b, x), abs=1e-12)


@pytest.mark.parametrize(
    "values", [[0.91, 0.95, 0.88], [1.0, 0.0], [12.5, 13.1, 11.9, 12.2, 14.0], [3.0] * 4]
)
def test_seed_interval_is_scipys_t_interval(values: list[float]) -> None:
    got = seed_interval(values)
    n = len(values)
    mean = float(np.mean(values))
    sem = float(np.std(values, ddof=1)) / math.sqrt(n)
    assert got.mean == pytest.approx(mean)
    assert got.n == n
    if sem == 0:
        assert got.low == got.high == pytest.approx(mean)
    else:
        low, high = scipy_stats.t.interval(0.95, n - 1, loc=mean, scale=sem)
        assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    assert "Student t" in got.method


def test_one_seed_has_no_interval() -> None:
    got = seed_interval([0.5])
    assert got.mean == 0.5 and math.isnan(got.low) and math.isnan(got.high)


def test_bootstrap_seed_interval_equals_a_hand_loop_with_the_same_generator() -> None:
    values = [0.2, 0.5, 0.45, 0.9, 0.61]
    got = bootstrap_seed_interval(values, resamples=2000, seed=3)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, len(values), size=(2000, len(values)))
    means = [sum(values[i] for i in row) / len(values) for row in idx]
    assert got.low == pytest.approx(float(np.percentile(means, 2.5)))
    assert got.high == pytest.approx(float(np.percentile(means, 97.5)))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([0.91, 0.95, 0.88, 0.97, 0.9], [0.81, 0.85, 0.9, 0.79, 0.84]),
        ([1, 2, 4, 7.5], [0.3, 0.2, 0.9]),
        ([10.0, 10.1], [10.0, 30.0, 50.0]),
    ],
)
def test_welch_equals_scipys_ttest_ind_unequal_var(a: list[float], b: list[float]) -> None:
    got = welch_test(a, b)
    ref = scipy_stats.ttest_ind(a, b, equal_var=False)
    assert got.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    ci = ref.confidence_interval(0.95)
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.difference == pytest.approx(np.mean(a) - np.mean(b))


def test_welch_without_spread_is_decided_by_the_means() -> None:
    assert welch_test([1.0, 1.0], [1.0, 1.0]).p_value == 1.0
    assert welch_test([1.0, 1.0], [0.0, 0.0]).p_value == 0.0


def test_exact_mcnemar_equals_scipys_binomial_test() -> None:
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randint(1, 400)
        base = [rng.random() < 0.5 for _ in range(n)]
        system = [rng.random() < rng.uniform(0.3, 0.8) for _ in range(n)]
        b = sum(1 for x, y in zip(base, system, strict=True) if x and not y)
        c = sum(1 for x, y in zip(base, system, strict=True) if y and not x)
        got = paired_exact_match(base, system)
        ref = scipy_stats.binomtest(c, b + c, 0.5).pvalue if b + c else 1.0
        assert got.p_value == pytest.approx(ref, rel=1e-9, abs=1e-15)
        assert got.difference == pytest.approx((sum(system) - sum(base)) / n)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04, 0.2 -> 4·0.01, max(0.04, 3·0.03), max(0.09, 2·0.04), max(.., 0.2)
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
    assert holm([0.02]) == [0.02]


def test_bad_input_is_one_line() -> None:
    with pytest.raises(AttnlabError, match="same sentences"):
        paired_exact_match([True], [True, False])
    with pytest.raises(AttnlabError, match="paired text tests take bleu, chrf"):
        paired_bootstrap("ter", ["a"], ["a"], ["a"])
    with pytest.raises(AttnlabError, match="same sentences"):
        paired_randomization("bleu", ["a"], ["a", "b"], ["a"])
    with pytest.raises(AttnlabError, match="confidence"):
        seed_interval([1.0, 2.0], confidence=95)
    with pytest.raises(AttnlabError, match="at least 2"):
        welch_test([1.0], [1.0, 2.0])


# -- the sacrebleu command itself ----------------------------------------------------------


@pytest.fixture(scope="module")
def systems(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[str]]]:
    rng = random.Random(3)
    words = ["a", "man", "in", "red", "shirt", "is", "riding", "bike", "down", "the", "street"]
    refs, base, system = [], [], []
    for _ in range(80):
        ref = [rng.choice(words) for _ in range(rng.randint(3, 14))]

        def noisy(p: float, ref: list[str] = ref) -> str:
            return " ".join(w if rng.random() > p else rng.choice(words) for w in ref)

        refs.append(" ".join(ref))
        base.append(noisy(0.45))
        system.append(noisy(0.35))
    folder = tmp_path_factory.mktemp("sacrebleu")
    for name, lines in (("ref", refs), ("base", base), ("sys", system)):
        (folder / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, [refs, base, system]


def _sacrebleu(folder: Path, *args: str) -> str:
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(folder / "ref.txt"),
            "-i",
            str(folder / "base.txt"),
            str(folder / "sys.txt"),
            "-m",
            "bleu",
            "chrf",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    return done.stdout


def test_paired_randomization_equals_the_sacrebleu_command(systems) -> None:
    folder, (refs, base, system) = systems
    printed = json.loads(_sacrebleu(folder, "--paired-ar", "--paired-ar-n", "3000", "-f", "json"))
    row = printed[1]
    for metric, key in (("bleu", "BLEU"), ("chrf", "chrF2")):
        got = paired_randomization(metric, base, system, refs, trials=3000, seed=12345)
        assert got.p_value == pytest.approx(row[key]["p_value"], rel=1e-12)
        assert got.system == pytest.approx(row[key]["score"], rel=1e-12)
        assert got.baseline == pytest.approx(printed[0][key]["score"], rel=1e-12)


def test_paired_bootstrap_equals_the_sacrebleu_command(systems) -> None:
    folder, (refs, base, system) = systems
    # sacrebleu 2.6's JSON writer fails on its own float32 bootstrap means: read its table,
    # "45.3 (45.4 ± 6.7)" over "(p = 0.0080)*", at the precision it prints.
    text = _sacrebleu(folder, "--paired-bs", "--paired-bs-n", "1000", "-f", "text")
    scores = re.findall(r"([\d.]+) \(([\d.]+) ± ([\d.]+)\)", text.split("sys.txt", 1)[1])
    p_values = re.findall(r"\(p = ([\d.]+)\)", text)
    assert len(scores) >= 2 and len(p_values) == 2, text
    for (metric, (score, mean, half)), p in zip(
        (("bleu", scores[0]), ("chrf", scores[1])), p_values, strict=True
    ):
        got = paired_bootstrap(metric, base, system, refs, resamples=1000, seed=12345)
        assert f"{got.p_value:.4f}" == p
        assert f"{got.system:.1f}" == score
        assert f"{(got.low + got.high) / 2:.1f}" == mean
        assert f"{(got.high - got.low) / 2:.1f}" == half


def test_identical_systems_are_not_called_different(systems) -> None:
    """The one departure from sacrebleu: a system against itself. Every resample differs by
    exactly 0 and sacrebleu's p = (#{> 0} + 1)/(R + 1) = 1/(R + 1) (its command marks that
    significant); there is no difference at all, so p = 1. The scores and the bootstrap
    interval stay sacrebleu's."""
    folder, (refs, base, _) = systems
    same = list(base)
    boot = paired_bootstrap("bleu", base, same, refs, resamples=200, seed=12345)
    ar = paired_randomization("chrf", base, same, refs, trials=200, seed=12345)
    assert boot.p_value == 1.0 and ar.p_value == 1.0
    assert boot.difference == 0.0 and "identical" in boot.method and "identical" in ar.method
    assert boot.low is not None and boot.low <= boot.system <= boot.high
    # what sacrebleu itself says for the same two files: 1/(R + 1), marked significant
    (folder / "same.txt").write_text("\n".join(same) + "\n", encoding="utf-8")
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(folder / "ref.txt"),
            "-i",
            str(folder / "base.txt"),
            str(folder / "same.txt"),
            "-m",
            "chrf",
            "--paired-ar",
            "--paired-ar-n",
            "200",
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "SACREBLEU_SEED": "12345"},
        check=True,
        timeout=300,
    ).stdout
    assert json.loads(printed)[1]["chrF2"]["p_value"] == pytest.approx(1 / 201)
    # one sentence apart is an ordinary test again, equal to sacrebleu's
    other = [*same[:-1], same[-1] + " street"]
    assert paired_randomization("chrf", base, other, refs, trials=200).p_value < 1.0
