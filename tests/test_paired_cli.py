"""``eval --hyps/--refs`` writes what was scored (sacrebleu's command gives the same BLEU) and
``compare --significance`` equals sacrebleu's paired tests on those files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli import cli


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from _tiny import TINY_OVERRIDES

    out = tmp_path_factory.mktemp("runs")
    sets = [
        a
        for item in (*TINY_OVERRIDES, "train.max_steps=30", "data.test_size=60")
        for a in ("--set", item)
    ]
    for name, seed in (("a", "1"), ("b", "2")):
        done = invoke(
            "train", "--out", str(out), "--run-name", name, "--quiet", "--seed", seed, *sets
        )
        assert done.exit_code == 0, done.output
    copy = invoke(
        "train",
        "--out",
        str(out),
        "--run-name",
        "copy",
        "--quiet",
        *sets,
        "--set",
        "data.task=copy",
    )
    assert copy.exit_code == 0, copy.output
    return out / "a", out / "b", out / "copy"


def _sacrebleu(*args: str) -> str:
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    return subprocess.run(
        [sys.executable, "-m", "sacrebleu", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    ).stdout


def test_eval_writes_hyps_and_refs_that_sacrebleu_scores_the_same(two_runs, tmp_path) -> None:
    run, _, _ = two_runs
    hyps, refs = tmp_path / "hyps.txt", tmp_path / "refs.txt"
    done = invoke(
        "eval", str(run), "--split", "test", "--json", "--hyps", str(hyps), "--refs", str(refs)
    )
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert len(hyps.read_text().splitlines()) == result["n"] == 60
    printed = _sacrebleu(str(refs), "-i", str(hyps), "-m", "bleu", "-b", "-w", "6")
    assert float(printed.strip()) == pytest.approx(result["bleu"], abs=1e-6)


def test_compare_significance_equals_sacrebleus_paired_tests(two_runs, tmp_path) -> None:
    a, b, _ = two_runs
    for run, name in ((a, "a"), (b, "b")):
        invoke(
            "eval",
            str(run),
            "--split",
            "test",
            "--hyps",
            str(tmp_path / f"{name}.txt"),
            "--refs",
            str(tmp_path / "refs.txt"),
        )
    done = invoke("compare", str(a), str(b), "--significance", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["split"] == "test" and report["n"] == 60
    tests = {(t["metric"], t["test"]): t for t in report["tests"]}
    ar = json.loads(
        _sacrebleu(
            str(tmp_path / "refs.txt"),
            "-i",
            str(tmp_path / "a.txt"),
            str(tmp_path / "b.txt"),
            "-m",
            "bleu",
            "chrf",
            "--paired-ar",
            "--paired-ar-n",
            "10000",
            "-f",
            "json",
        )
    )
    assert tests[("bleu", "approximate randomisation")]["p_value"] == pytest.approx(
        ar[1]["BLEU"]["p_value"], rel=1e-12
    )
    assert tests[("chrf", "approximate randomisation")]["p_value"] == pytest.approx(
        ar[1]["chrF2"]["p_value"], rel=1e-12
    )
    assert all(0 < t["p_value"] <= 1 for t in report["tests"])
    text = invoke("compare", str(a), str(b), "--significance")
    assert "exact McNemar" in text.output and "paired bootstrap" in text.output


def test_significance_refuses_runs_of_different_tasks_in_one_line(two_runs) -> None:
    a, _, copy = two_runs
    done = CliRunner().invoke(cli, ["compare", str(a), str(copy), "--significance"])
    assert done.exit_code == 2
    assert "different tasks" in done.output
    assert len(done.output.strip().splitlines()) == 1
    both = CliRunner().invoke(cli, ["compare", str(a), str(a), "5 3", "--significance"])
    assert both.exit_code == 2 and "no SENTENCE" in both.output
