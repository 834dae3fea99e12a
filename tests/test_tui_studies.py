"""The lab's Studies tab: a study directory's table and curves, failed runs, and Setup's
"every variant × N seeds" that writes a valid study file and starts `attnlab study run`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from _tui_support import lab_config, ready, until
from test_study_table import CELLS, SEEDS, _finished_run, _score

from attnlab.study.spec import load_study
from attnlab.study.table import load_table
from attnlab.tui.app import make_app
from attnlab.tui.views.studies import StudiesView, find_studies

SIZE = (80, 24)


def _study(runs: Path) -> Path:
    rng = random.Random(5)
    directory = runs / "studies" / "fake"
    directory.mkdir(parents=True)
    record = {
        "name": "fake",
        "seeds": SEEDS,
        "split": "test",
        "checkpoint": "best",
        "metrics": ["exact_match", "bleu"],
        "baseline": "base",
        "cells": [{"name": n, "set": [], "baseline": "base"} for n in [*CELLS, "broken"]],
    }
    (directory / "study.json").write_text(json.dumps(record))
    for name, accuracy in CELLS.items():
        for seed in SEEDS:
            _finished_run(directory / f"{name}-s{seed}", _score(rng, accuracy))
    (directory / "outcomes.json").write_text(
        json.dumps({"broken-s1": {"state": "failed", "error": "no such corpus"}})
    )
    broken = directory / "broken-s1"
    broken.mkdir()
    (broken / "config.toml").write_text('name = "fake"\n')
    (broken / "events.jsonl").write_text(
        json.dumps({"type": "done", "time": 1.0, "step": 0, "reason": "error", "best": {}}) + "\n"
    )
    return directory


def test_find_studies_sees_only_folders_with_a_study_record(tmp_path: Path) -> None:
    directory = _study(tmp_path)
    (tmp_path / "plain-run").mkdir()
    assert find_studies(tmp_path) == [directory]


async def test_the_studies_tab_shows_the_table_and_failed_runs(tmp_path: Path) -> None:
    directory = _study(tmp_path / "runs")
    expected = load_table(directory)
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("6")
        view = app.query_one(StudiesView)
        await until(pilot, lambda: view.table is not None)
        from rich.console import Console

        console = Console(width=60, record=True)
        console.print(view.shown[0])
        shown = console.export_text()
        notes = view.shown[1].plain
        better = next(r for r in expected.rows if r.name == "better").metrics["exact_match"]
        assert f"{better.mean:.3f} ± {(better.high - better.low) / 2:.3f}" in shown
        assert "base ◆" in shown
        assert "broken-s1: no such corpus" in notes
        assert "Welch" in notes
        assert view.query_one("#study-curves").points > 0
        # score against cost: one vertical interval per scored cell, the mean in its middle
        cost_plot = view.query_one("#study-cost")
        from attnlab.study.render import cost_points

        points = cost_points(expected, "exact_match", "train_tokens_per_s")
        assert [name for name, *_ in points] == list(CELLS)
        assert [(label, list(xs), list(ys)) for label, xs, ys in cost_plot.series] == [
            (name, [x, x, x], [lo, mean, hi]) for name, x, lo, mean, hi in points
        ]
        assert cost_plot.points == 3 * len(CELLS) and "train tok/s" in cost_plot.title
        await pilot.press("c")
        assert view.cost_key == "train_peak_memory_mb" and "peak MiB" in cost_plot.title
        await pilot.press("n")
        assert view.highlighted_cell == "base"


async def test_setup_s_asks_first_then_writes_a_study_file_and_starts_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from textual.widgets import Input, Select, Static

    from attnlab.tui.screens.study_prompt import StudyPrompt

    started: list[tuple[Path, Path]] = []

    class FakeProc:
        def poll(self) -> int:
            return 0

    def fake_start(study_file: Path, out: Path, workers: int | None = None) -> FakeProc:
        started.append((study_file, out))
        return FakeProc()

    monkeypatch.setattr("attnlab.study.queue.start_study", fake_start)
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "S")
        await until(pilot, lambda: isinstance(app.screen, StudyPrompt))
        prompt = app.screen
        variants = prompt.slots["model.attention"].variants
        plan = str(prompt.query_one("#study-prompt-plan", Static).content)
        assert f"{len(variants)} variants × 3 seeds = [b]{len(variants) * 3} runs" in plan
        assert "time: unknown until one run has finished" in plan  # no run here to time
        assert prompt.query_one("#study-slot", Select).value == "model.attention"
        await pilot.press("escape")  # a stray S starts nothing
        await pilot.pause()
        assert not started and not isinstance(app.screen, StudyPrompt)
        await pilot.press("S")
        await until(pilot, lambda: isinstance(app.screen, StudyPrompt))
        seeds = app.screen.query_one("#study-seeds", Input)
        seeds.value = "0"
        await pilot.pause()
        assert app.screen.query_one("#study-start").disabled  # 0 seeds: said, not started
        assert "expected 1..50" in str(app.screen.query_one("#study-prompt-plan").content)
        seeds.value = "2"
        seeds.focus()
        await pilot.press("enter")
        await until(pilot, lambda: bool(started))
        study_file, out = started[0]
        assert out == tmp_path / "runs" / "studies"
        study = load_study(study_file)
        assert len(study.seeds) == 2
        assert [c.name for c in study.cells] == list(variants)
        assert study.baseline == "bahdanau"  # the Setup experiment's own variant
        assert app.query_one("#tabs").active == "studies"
        assert app.query_one(StudiesView).wanted == out / study_file.stem


def _studies_tab(app):
    """Pilot steps: the Studies tab with its first study's table loaded."""

    async def show(pilot) -> None:
        await ready(app, pilot)
        await pilot.press("6")
        view = app.query_one(StudiesView)
        await until(pilot, lambda: view.table is not None)
        await pilot.pause()

    return show


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_studies_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare, size):
    monkeypatch.chdir(tmp_path)
    _study(Path("runs"))
    app = make_app(Path("runs"), config=lab_config("reverse-bahdanau"))
    assert snap_compare(app, terminal_size=size, run_before=_studies_tab(app))


async def test_a_broken_study_clears_the_previous_studys_table_and_plot(tmp_path: Path) -> None:
    """Issue #43 item 9: the error showed above the previous study's plot."""
    import os

    good = _study(tmp_path / "runs")
    broken = tmp_path / "runs" / "studies" / "broken"
    broken.mkdir()
    (broken / "study.json").write_text(json.dumps({"name": "broken", "cells": "none"}))
    os.utime(broken / "study.json", (1, 1))  # older: the good study is shown first
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("6")
        view = app.query_one(StudiesView)
        await until(pilot, lambda: view.table is not None and view.current == good)
        plot = view.query_one("#study-curves")
        assert plot.series
        view.show_study(broken)
        await until(pilot, lambda: view.table is None)
        await pilot.pause()
        assert plot.series == []
        shown = str(view.query_one("#study-table").render())
        assert "not a study record" in shown
        assert str(view.query_one("#study-notes").render()) == ""


async def test_the_studies_tab_notes_an_unusable_score_file(tmp_path: Path) -> None:
    directory = _study(tmp_path / "runs")
    path = directory / "better-s1" / "study-score.json"
    path.write_text("{broken", encoding="utf-8")
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await _studies_tab(app)(pilot)
        notes = app.query_one(StudiesView).shown[1].plain
        assert f"{path}: invalid JSON" in notes and "a rerun" in notes


def _tuned_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from test_study_tune import FakeChildren, _file

    from attnlab.study import task as task_module
    from attnlab.study.runner import run_study

    monkeypatch.setattr(task_module, "_run_child", FakeChildren())
    _, directory = run_study(load_study(_file(tmp_path)), tmp_path / "runs" / "studies", workers=1)
    monkeypatch.undo()
    return directory


async def test_the_studies_tab_shows_the_chosen_setting_and_the_tuning_curve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tuned_study(tmp_path, monkeypatch)
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await _studies_tab(app)(pilot)
        view = app.query_one(StudiesView)
        from rich.console import Console

        def text(renderable) -> str:
            console = Console(width=100, record=True)
            console.print(renderable)
            return console.export_text()

        shown = text(view.shown[0])
        assert "lr=1e-3" in shown and "lr=1e-2 ◂" in shown  # the chosen setting per cell
        assert view.query_one("#study-tune").display
        first = text(view.tune_shown)
        assert "bahdanau: tuning on dev" in first and "lr=1e-4" in first
        await pilot.press("n", "n")
        assert view.highlighted_cell == "none"
        second = text(view.tune_shown)
        assert "none: tuning on dev" in second and "widen the grid" in second


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_tuned_study_screen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snap_compare, size):
    _tuned_study(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    app = make_app(Path("runs"), config=lab_config("reverse-bahdanau"))
    assert snap_compare(app, terminal_size=size, run_before=_studies_tab(app))
