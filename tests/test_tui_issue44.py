"""The lab part of issue 44: workers that never overlap on one model, Setup's study prompt,
study runs in the lab's menus, Setup's Data section from the task registry, the Train plots
and Studies table at 80×24, names told apart by their distinguishing part."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from _tiny import TINY_TRANSFORMER
from _tui_support import lab_config, ready, tiny_config, until, workers_idle
from textual.widgets import Input, Static

from attnlab.data.dataset import load_dataset
from attnlab.experiment import apply_overrides
from attnlab.nn.model import build_model, count_parameters
from attnlab.runs import save_checkpoint, write_config
from attnlab.tui.app import make_app
from attnlab.tui.jobs import Jobs, error_line
from attnlab.tui.views.inspect import InspectView

SIZE = (100, 30)
TRANSFORMER = [*TINY_TRANSFORMER, "data.max_len=5"]


def saved_run(root: Path, name: str, overrides: list[str], seed: int = 0) -> Path:
    """An untrained model saved as RUN/checkpoints/best with its config.toml (a listed run)."""
    config = apply_overrides(tiny_config(name), overrides)
    dataset = load_dataset(config.data)
    torch.manual_seed(seed)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    run_dir = root / name
    save_checkpoint(run_dir, "best", model, config, dataset.meta(), 0, {}, count_parameters(model))
    write_config(run_dir, config)
    return run_dir


class Overlap:
    """Wraps the engine's ``decode_batch``: counts how many run at once; the first is slow
    (so a second request comes while it runs, as `d` during the automatic decode did)."""

    def __init__(self, real) -> None:
        self.real, self.active, self.most, self.calls = real, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            first = self.calls == 1
        try:
            if first:
                time.sleep(0.6)
            return self.real(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


# -- 1. no two decodes at once ---------------------------------------------------------------


async def test_decode_while_the_first_decode_runs_waits_and_shows_the_newest(
    tmp_path: Path, monkeypatch
) -> None:
    import attnlab.decode.search as search

    overlap = Overlap(search.decode_batch)
    monkeypatch.setattr(search, "decode_batch", overlap)
    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    app = make_app(tmp_path, config=tiny_config())
    notes: list[tuple[str, str]] = []
    real_notify = app.notify
    monkeypatch.setattr(
        app, "notify", lambda m, *a, **k: (notes.append((m, k.get("severity"))), real_notify(m))
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")  # opens on sample 0 of the run: the first, slow decode
        inspect = app.query_one(InspectView)
        await until(pilot, lambda: overlap.calls == 1)
        inspect.query_one("#insp-index", Input).value = "2"
        inspect.query_one("#heatmap").focus()
        await pilot.press("d")  # while the first still runs
        await workers_idle(pilot)
        await pilot.pause()
        assert overlap.most == 1  # never two decodes in one model
        assert not [n for n in notes if n[1] == "error"], notes
        assert inspect.result is not None and inspect.result.request.index == 2
        assert "✗" not in str(inspect.query_one("#insp-title", Static).content)
        assert inspect.query_one("#heatmap").shape[0] > 0
    assert run_dir.is_dir()


def test_jobs_skip_a_superseded_request_and_answer_in_one_line() -> None:
    jobs = Jobs()
    first, second = jobs.issue(), jobs.issue()
    assert jobs.stale(first) and not jobs.stale(second) and not jobs.stale(None)
    assert jobs.run(first, lambda: 1).skipped  # superseded before it started: not run
    assert jobs.run(second, lambda: 2).value == 2

    def broken() -> None:
        torch.stack([torch.zeros(2), torch.zeros(3)])

    outcome = jobs.run(jobs.issue(), broken)
    assert outcome.value is None and "\n" not in outcome.error
    assert outcome.error.startswith("unexpected error (RuntimeError: stack expects")
    assert error_line(FileNotFoundError(2, "No such file or directory", "x.pt")) == (
        "x.pt: No such file or directory"
    )


# -- 3. S asks first -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_study_prompt_screen(tmp_path: Path, monkeypatch, snap_compare, size) -> None:
    from attnlab.tui.screens.study_prompt import StudyPrompt

    monkeypatch.chdir(tmp_path)
    app = make_app(Path("runs"), config=lab_config("reverse-bahdanau"))

    async def run_before(pilot) -> None:
        await ready(app, pilot)
        await pilot.press("escape", "S")
        await until(pilot, lambda: isinstance(app.screen, StudyPrompt))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


async def test_the_prompt_sweeps_the_slot_chosen_with_its_own_variants(
    tmp_path: Path, monkeypatch
) -> None:
    from textual.widgets import Select

    from attnlab.study.spec import load_study
    from attnlab.tui.screens.study_prompt import StudyPrompt

    started: list[Path] = []

    class Finished:  # what start_study returns, as the quit handler polls it
        def poll(self) -> int:
            return 0

    def fake_start(study_file: Path, out: Path, workers: int | None = None) -> Finished:
        started.append(study_file)
        return Finished()

    monkeypatch.setattr("attnlab.study.queue.start_study", fake_start)
    config = apply_overrides(lab_config(), TINY_TRANSFORMER)
    app = make_app(tmp_path / "runs", config=config)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "S")
        await until(pilot, lambda: isinstance(app.screen, StudyPrompt))
        prompt = app.screen
        spec = app.menus.arch_specs["transformer"]
        assert list(prompt.slots) == [s.key for s in spec.slots]  # every attention slot
        other = spec.slots[-1]
        prompt.query_one("#study-slot", Select).value = other.key
        await pilot.pause()
        variants = prompt.slots[other.key].variants
        assert variants == tuple(app._slot_variants(config, other))
        plan = str(prompt.query_one("#study-prompt-plan", Static).content)
        assert f"{len(variants)} variants × 3 seeds = [b]{len(variants) * 3} runs" in plan
        await pilot.click("#study-start")
        await until(pilot, lambda: bool(started))
    study = load_study(started[0])
    assert {c.name for c in study.cells} == set(variants)
    assert all(dict(c.values) == {other.key: c.name} for c in study.cells)


# -- 4. study runs in the lab ----------------------------------------------------------------


def _study_with_runs(runs: Path) -> Path:
    """runs/studies/st: cells a and b (in that order in study.json), seeds 1..2, three runs."""
    import json

    directory = runs / "studies" / "st"
    directory.mkdir(parents=True)
    record = {"name": "st", "seeds": [1, 2], "cells": [{"name": "b"}, {"name": "a"}]}
    (directory / "study.json").write_text(json.dumps(record))
    for name in ("a-s2", "b-s1", "a-s1"):
        saved_run(directory, name, [])
    return directory


def test_lab_runs_lists_study_runs_under_their_study_and_cell(tmp_path: Path) -> None:
    from attnlab.study.listing import lab_runs, lab_signature, listed_name

    top = saved_run(tmp_path, "top", [])
    _study_with_runs(tmp_path)
    runs = lab_runs(tmp_path)
    # the top-level run, then the study's by cell in the record's order (b before a), by seed
    assert [r.listed_name for r in runs] == ["top", "st/b-s1", "st/a-s1", "st/a-s2"]
    assert [(r.study, r.cell) for r in runs[1:]] == [("st", "b"), ("st", "a"), ("st", "a")]
    assert [listed_name(r.path) for r in runs] == [r.listed_name for r in runs]
    before = lab_signature(tmp_path)
    (runs[2].path / "events.jsonl").write_text("{}\n")  # a study run moves: the lab re-reads
    assert lab_signature(tmp_path) != before and top.is_dir()


async def test_inspect_runs_and_compare_offer_study_runs(tmp_path: Path) -> None:
    from textual.widgets import DataTable, Select

    from attnlab.tui.screens.compare import CompareScreen
    from attnlab.tui.views.runs import RunsView

    top = saved_run(tmp_path, "top", [])
    study = _study_with_runs(tmp_path)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        menu = app.query_one("#insp-run", Select)
        await until(pilot, lambda: len(menu._options) == 4)
        values = [str(v) for _, v in menu._options]
        assert values == [str(top), *(str(study / n) for n in ("b-s1", "a-s1", "a-s2"))]
        labels = [str(label) for label, _ in menu._options]
        assert labels[1:] == ["st/b-s1", "st/a-s1", "st/a-s2"]
        await workers_idle(pilot)
        inspect = app.query_one(InspectView)
        inspect.select_run(top)
        await workers_idle(pilot)
        inspect.query_one("#heatmap").focus()
        await pilot.press("c")  # was "no other run": the study's runs are B candidates
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.pause()
        b_menu = app.screen.query_one("#cmp-run", Select)
        assert {str(v) for _, v in b_menu._options} == {
            str(study / n) for n in ("a-s1", "a-s2", "b-s1")
        }
        await workers_idle(pilot)
        await pilot.press("escape")
        await pilot.press("4")
        table = app.query_one(RunsView).query_one(DataTable)
        await until(pilot, lambda: table.row_count == 4)
        names = [str(table.get_row_at(i)[1]) for i in range(4)]
        assert names == ["top", "st/b-s1", "st/a-s1", "st/a-s2"]
