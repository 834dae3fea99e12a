"""A study's table recomputed independently from its score files: t intervals (scipy), Welch
over seeds (scipy), Holm by hand, paired tests on the seed-paired pooled sentences; failed runs
visible; ``study show --json`` has every p-value under ``p_value``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from _tiny import finished_study_run as _finished_run
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.stats import paired_bootstrap, paired_randomization
from attnlab.study.table import load_table

scipy_stats = pytest.importorskip("scipy.stats")

SEEDS = [1, 2, 3]
CELLS = {"base": 0.5, "better": 0.8, "same": 0.5}
REFS = [f"{i} {i + 1} {i + 2}" for i in range(40)]


def _score(rng: random.Random, accuracy: float) -> dict:
    exact = [rng.random() < accuracy for _ in REFS]
    hyps = [ref if ok else ref.replace(" ", " 0 ", 1) for ref, ok in zip(REFS, exact, strict=True)]
    from attnlab.evaluate import bleu_by_length, text_scores

    texts = text_scores(hyps, REFS)
    costs = random.Random(str(rng.getstate()[1][:4]))  # leaves the scores' stream as it was
    return {
        "version": 1,
        "run": "x",
        "checkpoint": "checkpoints/best",
        "step": 10,
        "split": "test",
        "n": len(REFS),
        "loss": 1.0 - accuracy + rng.random() * 0.1,
        "bleu": texts["bleu"],
        "chrf": texts["chrf"],
        "exact_match": sum(exact) / len(REFS),
        "bleu_by_length": bleu_by_length([3] * len(REFS), hyps, REFS),
        "sentences": {"hyps": hyps, "refs": REFS, "exact": exact, "src_len": [3] * len(REFS)},
        "cost": {
            "parameters": 1000 + int(accuracy * 100),
            "train_tokens_per_s": costs.uniform(900, 1100),
            "train_peak_memory_mb": costs.uniform(300, 320),
            "decode_sentences_per_s": costs.uniform(40, 60),
            "kv_cache_bytes_per_token": 256,
        },
    }


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    rng = random.Random(5)
    directory = tmp_path / "fake"
    directory.mkdir()
    record = {
        "name": "fake",
        "seeds": SEEDS,
        "split": "test",
        "checkpoint": "best",
        "metrics": ["exact_match", "bleu", "loss"],
        "baseline": "base",
        "cells": [{"name": name, "set": [], "baseline": "base"} for name in [*CELLS, "broken"]],
    }
    (directory / "study.json").write_text(json.dumps(record))
    for name, accuracy in CELLS.items():
        for seed in SEEDS:
            _finished_run(directory / f"{name}-s{seed}", _score(rng, accuracy))
    broken = directory / "broken-s1"
    broken.mkdir()
    (broken / "config.toml").write_text('name = "fake"\n', encoding="utf-8")
    (broken / "events.jsonl").write_text(
        json.dumps({"type": "done", "time": 1.0, "step": 0, "reason": "error", "best": {}}) + "\n"
    )
    (directory / "outcomes.json").write_text(
        json.dumps({"broken-s1": {"state": "failed", "error": "data.path=x: no such file"}})
    )
    return directory


def _values(directory: Path, cell: str, key: str) -> list[float]:
    return [
        json.loads((directory / f"{cell}-s{s}" / "study-score.json").read_text())[key]
        for s in SEEDS
    ]


def test_intervals_and_tests_equal_independent_computations(study_dir: Path) -> None:
    table = load_table(study_dir)
    rows = {row.name: row for row in table.rows}
    for cell in CELLS:
        for metric in ("exact_match", "bleu", "loss"):
            values = _values(study_dir, cell, metric)
            got = rows[cell].metrics[metric]
            mean = sum(values) / len(values)
            sem = scipy_stats.sem(values)
            low, high = scipy_stats.t.interval(0.95, len(values) - 1, loc=mean, scale=sem)
            assert got.mean == pytest.approx(mean)
            assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    for metric in ("exact_match", "bleu", "loss"):
        base = _values(study_dir, "base", metric)
        raw = [
            scipy_stats.ttest_ind(_values(study_dir, cell, metric), base, equal_var=False).pvalue
            for cell in ("better", "same")
        ]
        # Holm over the two comparisons, by hand
        small, large = sorted(raw)
        adjusted = {small: min(1.0, 2 * small)}
        adjusted[large] = max(adjusted[small], min(1.0, large))
        for cell, p in zip(("better", "same"), raw, strict=True):
            got = rows[cell].metrics[metric]
            assert got.seeds_p_raw == pytest.approx(p)
            assert got.seeds_p_value == pytest.approx(adjusted[p])
            assert got.difference == pytest.approx(
                sum(_values(study_dir, cell, metric)) / 3 - sum(base) / 3
            )
    assert rows["base"].metrics["bleu"].difference is None  # the baseline is not compared


def test_costs_are_intervals_over_seeds_shown_beside_the_scores(study_dir: Path) -> None:
    from attnlab.study.metrics import COSTS

    rows = {row.name: row for row in load_table(study_dir).rows}
    for cell in CELLS:
        for key in COSTS:
            values = [c[key] for c in _values(study_dir, cell, "cost")]
            got = rows[cell].costs[key]
            assert got.mean == pytest.approx(sum(values) / 3) and got.n == 3
            if len(set(values)) > 1:
                sem = scipy_stats.sem(values)
                low, high = scipy_stats.t.interval(0.95, 2, loc=got.mean, scale=sem)
                assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    runner = CliRunner()
    md = runner.invoke(cli, ["study", "show", str(study_dir), "--markdown"]).output
    assert "| cell | params | train tok/s | peak MiB | decode sent/s | KV B/token |" in md
    assert "| better | 1080 ± 0 |" in md
    text = runner.invoke(cli, ["study", "show", str(study_dir)], env={"COLUMNS": "120"}).output
    assert "what each cell costs" in text and "KV B/token" in text
    data = json.loads(runner.invoke(cli, ["study", "show", str(study_dir), "--json"]).output)
    better = next(row for row in data["rows"] if row["name"] == "better")
    assert better["costs"]["kv_cache_bytes_per_token"]["mean"] == 256
    assert better["costs"]["train_tokens_per_s"]["values"] == [
        c["train_tokens_per_s"] for c in _values(study_dir, "better", "cost")
    ]


def test_sentence_tests_pool_seed_paired_sentences(study_dir: Path) -> None:
    table = load_table(study_dir)
    better = {row.name: row for row in table.rows}["better"]

    def pooled(cell: str, key: str) -> list:
        out: list = []
        for seed in SEEDS:
            score = json.loads((study_dir / f"{cell}-s{seed}" / "study-score.json").read_text())
            out += score["sentences"][key]
        return out

    base_exact, cell_exact = pooled("base", "exact"), pooled("better", "exact")
    b = sum(1 for x, y in zip(base_exact, cell_exact, strict=True) if x and not y)
    c = sum(1 for x, y in zip(base_exact, cell_exact, strict=True) if y and not x)
    assert better.metrics["exact_match"].sentences_p_raw == pytest.approx(
        scipy_stats.binomtest(c, b + c, 0.5).pvalue
    )
    assert better.metrics["exact_match"].sentences_n == 3 * len(REFS)
    expected = paired_bootstrap(
        "bleu", pooled("base", "hyps"), pooled("better", "hyps"), REFS * 3
    ).p_value
    assert better.metrics["bleu"].sentences_p_raw == pytest.approx(expected)
    assert better.metrics["loss"].sentences_p_raw is None  # no sentence-level test for loss


def test_approximate_randomisation_on_request_pools_the_same_sentences(study_dir: Path) -> None:
    assert all(
        c.randomization_p_raw is None
        for r in load_table(study_dir).rows
        for c in r.metrics.values()
    )  # off by default: seconds per comparison
    table = load_table(study_dir, randomization=True)
    rows = {row.name: row for row in table.rows}

    def pooled(cell: str) -> list[str]:
        out: list[str] = []
        for seed in SEEDS:
            score = json.loads((study_dir / f"{cell}-s{seed}" / "study-score.json").read_text())
            out += score["sentences"]["hyps"]
        return out

    # sacrebleu --paired-ar on the pooled files (test_stats checks this function against the
    # sacrebleu command itself), then Holm over the two comparisons by hand
    raw = {
        cell: paired_randomization("bleu", pooled("base"), pooled(cell), REFS * 3).p_value
        for cell in ("better", "same")
    }
    small, large = sorted(raw.values())
    adjusted = {small: min(1.0, 2 * small)}
    adjusted[large] = max(adjusted[small], min(1.0, large))
    for cell, p in raw.items():
        got = rows[cell].metrics["bleu"]
        assert got.randomization_p_raw == pytest.approx(p)
        assert got.randomization_p_value == pytest.approx(adjusted[p])
        assert rows[cell].metrics["exact_match"].randomization_p_raw is None  # BLEU/chrF only
    tests = {t["test"]: t for t in table.to_dict()["rows"][1]["metrics"]["bleu"]["tests"]}
    assert tests["paired_randomization"]["p_value"] == pytest.approx(adjusted[raw["better"]])
    assert "approximate randomisation" in " ".join(table.methods.values())
    md = CliRunner().invoke(cli, ["study", "show", str(study_dir), "--markdown", "--randomization"])
    assert md.exit_code == 0, md.output
    assert "p (sentences, approx. randomisation, Holm)" in md.output


def test_failed_runs_are_listed_with_their_error(study_dir: Path) -> None:
    table = load_table(study_dir)
    assert table.failures == [
        {"run": "broken-s1", "status": "error", "error": "data.path=x: no such file"}
    ]
    broken = {row.name: row for row in table.rows}["broken"]
    assert broken.runs == [] and len(broken.missing) == 3


def test_show_prints_the_table_markdown_and_json(study_dir: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["study", "show", str(study_dir)])
    assert text.exit_code == 0, text.output
    assert "base (baseline)" in text.output and "broken-s1" in text.output
    assert "Welch" in text.output and "Holm" in text.output
    md = runner.invoke(cli, ["study", "show", str(study_dir), "--markdown"])
    assert "| better | 3/3 |" in md.output
    data = json.loads(runner.invoke(cli, ["study", "show", str(study_dir), "--json"]).output)
    better = next(row for row in data["rows"] if row["name"] == "better")
    assert better["metrics"]["bleu"]["p_value"] == better["metrics"]["bleu"]["seeds_p_value"]
    assert "p_value" in better["metrics"]["exact_match"]
    # Every test behind a Δ is listed with its own p_value, as the table object holds it.
    row = {r.name: r for r in load_table(study_dir).rows}["better"]
    for metric, paired in (("bleu", "paired_bootstrap"), ("exact_match", "paired_exact_match")):
        tests = {t["test"]: t for t in better["metrics"][metric]["tests"]}
        assert set(tests) == {"welch", paired}
        cell = row.metrics[metric]
        assert tests["welch"]["p_value"] == pytest.approx(cell.seeds_p_value)
        assert tests["welch"]["p_raw"] == pytest.approx(cell.seeds_p_raw)
        assert tests[paired]["p_value"] == pytest.approx(cell.sentences_p_value)
        assert tests[paired]["n"] == 3 * len(REFS)
        assert all(0 < t["p_value"] <= 1 and t["method"] for t in tests.values())
    assert [t["test"] for t in better["metrics"]["loss"]["tests"]] == ["welch"]
    base = next(row for row in data["rows"] if row["name"] == "base")
    assert base["metrics"]["bleu"]["tests"] == []  # the baseline is not tested against itself
    bad = runner.invoke(cli, ["study", "show", str(study_dir / "nope")])
    assert bad.exit_code == 2 and "no such study directory" in bad.output


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda s: "{not json", "invalid JSON"),
        (lambda s: json.dumps({**s, "bleu": float("nan")}), "bleu is nan"),
        (lambda s: json.dumps({**s, "n": -3}), "n is -3"),
    ],
    ids=["corrupt", "nan", "negative-n"],
)
def test_an_unusable_score_file_is_named_with_its_reason(study_dir: Path, damage, reason) -> None:
    """Issue #43 item 7: such a seed used to vanish from the table without a word."""
    path = study_dir / "better-s2" / "study-score.json"
    path.write_text(damage(json.loads(path.read_text())), encoding="utf-8")
    runner = CliRunner()
    text = runner.invoke(cli, ["study", "show", str(study_dir)], terminal_width=200)
    assert text.exit_code == 0, text.output
    notes = [line for line in text.output.splitlines() if str(path) in line]
    assert len(notes) == 1 and reason in notes[0] and "a rerun" in notes[0], text.output
    data = json.loads(runner.invoke(cli, ["study", "show", str(study_dir), "--json"]).output)
    assert len(data["score_problems"]) == 1
    problem = data["score_problems"][0]
    assert problem["run"] == "better-s2" and problem["file"] == str(path)
    assert reason in problem["reason"]
    assert any(str(path) in note and "a rerun" in note for note in data["notes"])
    better = next(row for row in data["rows"] if row["name"] == "better")
    assert better["metrics"]["bleu"]["n"] == 2  # the damaged seed is not counted


def test_a_rerun_scores_a_run_whose_score_file_is_unusable(tmp_path: Path, monkeypatch) -> None:
    """The note's promise: execute scores such a run again (it never trusts the file)."""
    from attnlab.study import task as task_module

    run = tmp_path / "study" / "a-s1"
    rng = random.Random(1)
    _finished_run(run, _score(rng, 0.5))
    (run / "study-score.json").write_text("{broken", encoding="utf-8")
    calls = []

    def fake_child(argv, env, children):
        calls.append(argv)
        (run / "study-score.json").write_text(json.dumps(_score(rng, 0.5)), encoding="utf-8")
        return 0, ""

    monkeypatch.setattr(task_module, "_run_child", fake_child)
    spec = task_module.RunTask(str(tmp_path / "study"), "a-s1", "a", 1, "p", (), "test", "best")
    outcome = task_module.execute(spec)
    assert outcome.state == "scored" and not outcome.trained
    assert len(calls) == 1 and "attnlab.study.score" in calls[0]


def _two_seed_study(tmp_path: Path, bleus: dict[str, list[float]]) -> Path:
    rng = random.Random(3)
    directory = tmp_path / "few"
    directory.mkdir()
    seeds = [1, 2]
    record = {
        "name": "few",
        "seeds": seeds,
        "split": "test",
        "checkpoint": "best",
        "metrics": ["bleu", "exact_match"],
        "baseline": "base",
        "cells": [{"name": n, "set": [], "baseline": "base"} for n in bleus],
    }
    (directory / "study.json").write_text(json.dumps(record))
    for name, values in bleus.items():
        for seed, bleu in zip(seeds, values, strict=True):
            _finished_run(directory / f"{name}-s{seed}", {**_score(rng, 0.5), "bleu": bleu})
    return directory


def test_few_seeds_are_noted_and_an_interval_outside_the_range_is_marked(tmp_path: Path) -> None:
    """Issue #44 item 8: 2 seeds of 69.7 ± 71.8 BLEU spans [−2, 141]; equal seeds ± 0."""
    directory = _two_seed_study(tmp_path, {"base": [50.0, 50.0], "wide": [18.9, 120.5 - 20]})
    wide = [18.9, 100.5]
    interval = scipy_stats.t.interval(
        0.95, 1, loc=sum(wide) / 2, scale=scipy_stats.sem(wide)
    )  # the reference: scipy's t interval over the two seeds
    assert interval[0] < 0  # the interval leaves BLEU's [0, 100]
    runner = CliRunner()
    data = json.loads(runner.invoke(cli, ["study", "show", str(directory), "--json"]).output)
    rows = {row["name"]: row for row in data["rows"]}
    assert rows["wide"]["metrics"]["bleu"]["out_of_range"] is True
    assert rows["wide"]["metrics"]["bleu"]["low"] == pytest.approx(interval[0])
    assert rows["wide"]["metrics"]["bleu"]["range"] == [0.0, 100.0]
    assert rows["base"]["metrics"]["bleu"]["out_of_range"] is False  # ± 0 stays in range
    few = [note for note in data["notes"] if note.startswith("n < 3")]
    assert len(few) == 1 and "base, wide" in few[0]
    assert any("‡" in note and "wide BLEU [0, 100]" in note for note in data["notes"])
    text = runner.invoke(cli, ["study", "show", str(directory)], terminal_width=200).output
    assert "‡" in text and "note: n < 3" in text
    md = runner.invoke(cli, ["study", "show", str(directory), "--markdown"]).output
    assert "Note: n < 3" in md


def test_three_seeds_in_range_give_no_note(study_dir: Path) -> None:
    table = load_table(study_dir)
    assert table.notes == []
    assert not any(m.out_of_range for row in table.rows for m in row.metrics.values())


def test_a_run_interrupted_before_it_saved_is_not_listed_as_failed(study_dir: Path) -> None:
    """Issue #43 item 10: killed by Ctrl+C while starting, its run reads as "error"."""
    (study_dir / "outcomes.json").write_text(
        json.dumps({"broken-s1": {"state": "interrupted", "error": "interrupted; rerun"}})
    )
    table = load_table(study_dir)
    assert table.failures == []
    broken = {row.name: row for row in table.rows}["broken"]
    assert "broken-s1 (error)" in broken.missing
