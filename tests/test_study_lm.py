"""A study of language models: score files with an LM's loss, perplexity and bits per token
(no sentence pairs) are read, tabulated with their t intervals and compared over seeds with
Welch's test (scipy as the reference), and have no test over sentences; a damaged one is named."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from _tiny import finished_study_run as _finished_run

from attnlab.study.score import score_problem
from attnlab.study.table import load_table

scipy_stats = pytest.importorskip("scipy.stats")

SEEDS = [1, 2, 3]
CELLS = {"scaled-dot": 1.9, "alibi": 2.1}
METRICS = ["loss", "perplexity", "bits_per_token"]


def _lm_score(loss: float) -> dict:
    return {
        "version": 1,
        "run": "x",
        "checkpoint": "checkpoints/last",
        "step": 20,
        "split": "dev",
        "n": 8,
        "tokens": 256,
        "loss": loss,
        "ppl": math.exp(loss),
        "perplexity": math.exp(loss),
        "bits_per_token": loss / math.log(2),
        "bleu": None,  # an LM's eval has no sentence metrics (events carry them as null)
        "cost": {"parameters": 1000},
    }


@pytest.fixture
def lm_study(tmp_path: Path) -> Path:
    rng = random.Random(3)
    directory = tmp_path / "lm"
    directory.mkdir()
    record = {
        "name": "lm",
        "seeds": SEEDS,
        "split": "dev",
        "checkpoint": "last",
        "metrics": METRICS,
        "baseline": "scaled-dot",
        "cells": [{"name": n, "set": [], "baseline": "scaled-dot"} for n in CELLS],
    }
    (directory / "study.json").write_text(json.dumps(record))
    for name, centre in CELLS.items():
        for seed in SEEDS:
            score = _lm_score(centre + rng.uniform(-0.05, 0.05))
            _finished_run(directory / f"{name}-s{seed}", score)
    return directory


def _values(directory: Path, cell: str, key: str) -> list[float]:
    return [
        json.loads((directory / f"{cell}-s{s}" / "study-score.json").read_text())[key]
        for s in SEEDS
    ]


def test_an_lm_study_tabulates_its_losses_and_tests_them_over_seeds(lm_study: Path) -> None:
    rows = {row.name: row for row in load_table(lm_study).rows}
    for metric in METRICS:
        for cell in CELLS:
            values = _values(lm_study, cell, metric)
            got = rows[cell].metrics[metric]
            assert got.n == 3 and got.mean == pytest.approx(sum(values) / 3)
            low, high = scipy_stats.t.interval(
                0.95, 2, loc=sum(values) / 3, scale=scipy_stats.sem(values)
            )
            assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
        cell = rows["alibi"].metrics[metric]
        expected = scipy_stats.ttest_ind(
            _values(lm_study, "alibi", metric),
            _values(lm_study, "scaled-dot", metric),
            equal_var=False,
        ).pvalue
        assert cell.seeds_p_raw == pytest.approx(expected)
        assert cell.sentences_p_raw is None  # an LM keeps no sentence pairs to pair


@pytest.mark.parametrize(
    "key,value,reason",
    [("loss", float("nan"), "loss is nan"), ("bits_per_token", "x", "not a number"),
     ("n", -1, "not a count")],
)  # fmt: skip
def test_a_damaged_lm_score_is_named(lm_study: Path, key, value, reason) -> None:
    run = lm_study / "alibi-s2"
    score = json.loads((run / "study-score.json").read_text())
    score[key] = value
    (run / "study-score.json").write_text(json.dumps(score))
    assert reason in (score_problem(run) or "")
    rows = {row.name: row for row in load_table(lm_study).rows}
    assert rows["alibi"].metrics["loss"].n == 2
