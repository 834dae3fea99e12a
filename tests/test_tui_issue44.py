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


# -- 2. Setup's Data section from the task registry ------------------------------------------


@pytest.fixture
def probe_task():
    """A task registered here with fields of its own (as a plug-in would): Setup must show
    exactly those, with no edit in the lab."""
    from attnlab.data.task_registry import TaskSpec
    from attnlab.data.tasks import TASKS

    reads = ("data.copy_tokens", "data.power_a", "data.train_size")
    TASKS.add("probe-task", TASKS.get("reverse").factory, TaskSpec("a probe", False, reads=reads))
    yield reads
    TASKS.remove("probe-task")


def _shown(app, key: str) -> bool:
    from attnlab.tui.views.setup import field_id

    found = app.query(f"#{field_id(key)}")
    return bool(found) and found.first().parent.display


async def test_a_new_task_gets_its_own_data_fields_with_their_ranges(
    tmp_path: Path, probe_task
) -> None:
    from textual.widgets import Label, Select

    from attnlab.config import RANGES
    from attnlab.tui.views.setup import SetupView, field_id

    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        assert not _shown(app, "data.copy_tokens")  # reverse does not read it
        app.query_one(f"#{field_id('data.task')}", Select).value = "probe-task"
        await pilot.pause()
        assert all(_shown(app, key) for key in probe_task)
        assert not any(_shown(app, k) for k in ("data.min_len", "data.vocab_size", "data.path"))
        row = app.query_one(f"#{field_id('data.power_a')}").parent
        low, high = RANGES["data.power_a"]
        assert [str(w.content) for w in row.query(Label)][1] == f"[{low:g}, {high:g}]"
        app.query_one(f"#{field_id('data.copy_tokens')}").value = "7"
        await pilot.pause()
        config = app.query_one(SetupView).validate_form()
        assert config is not None and config.data.copy_tokens == 7


async def test_corpus_and_toy_data_fields_are_set_from_setup(tmp_path: Path) -> None:
    from textual.widgets import Checkbox, Select

    from attnlab.config import CHOICES
    from attnlab.tui.views.setup import SetupView, field_id

    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        toy = {
            "data.vocab_size": "12",
            "data.dev_size": "40",
            "data.test_size": "41",
            "data.test_min_len": "7",
            "data.test_max_len": "9",
        }
        for key, value in toy.items():
            assert _shown(app, key), key
            app.query_one(f"#{field_id(key)}").value = value
        await pilot.pause()
        config = setup.validate_form()
        assert config is not None, setup.error
        assert (config.data.vocab_size, config.data.dev_size, config.data.test_size) == (12, 40, 41)
        assert (config.data.test_min_len, config.data.test_max_len) == (7, 9)
        app.query_one(f"#{field_id('data.task')}", Select).value = "corpus"
        await pilot.pause()
        corpus = (
            "data.tokenizer",
            "data.subword_vocab",
            "data.lowercase",
            "data.min_freq",
            "data.max_vocab",
            "data.columns",
            "data.src_lang",
            "data.tgt_lang",
            "data.dev_fraction",
            "data.test_fraction",
        )
        assert all(_shown(app, key) for key in corpus)
        assert not any(_shown(app, key) for key in toy)
        tokenizer = app.query_one(f"#{field_id('data.tokenizer')}", Select)
        assert [v for _, v in tokenizer._options] == list(CHOICES["data.tokenizer"])
        assert isinstance(app.query_one(f"#{field_id('data.lowercase')}"), Checkbox)
        fraction = app.query_one(f"#{field_id('data.dev_fraction')}")
        fraction.value = "0.7"  # outside [0, 0.5]
        await pilot.pause()
        assert fraction.has_class("invalid") and "data.dev_fraction" in (setup.error or "")


# -- 5. figures readable at 80×24 ------------------------------------------------------------


async def test_train_plots_take_turns_and_get_rows_at_80x24(tmp_path: Path) -> None:
    from _tui_support import write_run

    from attnlab.tui.views.train import TrainView
    from attnlab.tui.widgets.plots import MetricPlot

    run_dir = write_run(tmp_path, "reverse-rnn-bahdanau-20261207-101544")
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        await pilot.pause()
        plots = list(train.query(MetricPlot))
        shown = [p.id for p in plots if p.display]
        assert shown == ["loss-plot"]  # one at a time, full width
        canvas = plots[0].children[1]  # _Title, _Canvas, _Legend
        # the y axis has room for three labelled ticks (it had one or two rows of data)
        assert canvas.size.height >= 7 and canvas.size.width >= 70
        await pilot.press("v")
        assert [p.id for p in plots if p.display] == ["metric-plot"]
        await pilot.press("v", "v")  # entropy (this run logs it), then loss again
        assert [p.id for p in plots if p.display] == ["loss-plot"]


async def test_train_plots_stay_side_by_side_at_120x40(tmp_path: Path) -> None:
    from _tui_support import write_run

    from attnlab.tui.views.train import TrainView
    from attnlab.tui.widgets.plots import MetricPlot

    run_dir = write_run(tmp_path, "reverse-rnn-bahdanau-20261207-101544")
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        await pilot.pause()
        shown = [p.id for p in train.query(MetricPlot) if p.display]
        assert shown == ["loss-plot", "metric-plot", "entropy-plot"]
        assert not train.check_action("next_plot", ())


def test_the_studies_table_shows_whole_intervals_a_page_of_metrics_at_a_time(
    monkeypatch,
) -> None:
    from rich.console import Console

    from attnlab.tui.views.studies import metric_pages, table_renderable

    class Table:  # the fields table_renderable reads (attnlab.study.table.StudyTable)
        name, split, checkpoint, tune = "st", "test", "best", None

    columns = ["cell", "n", "exact match", "BLEU", "chrF", "loss"]
    body = [
        ["base (baseline)", "3/3", "0.508 ± 0.235", "26.2 ± 8.3", "71.0 ± 6.6", "0.568 ± 0.084"],
        ["a-long-cell-name-x", "2/3", "0.808 ± 0.036\n+0.300†", "43.1 ± 3.4", "88.3 ± 9.8", "1"],
    ]
    monkeypatch.setattr("attnlab.study.render.stacked_rows", lambda table: (columns, body))
    width = 60  # the Studies body at 80 columns
    pages = metric_pages(columns, body, 2, width)
    assert len(pages) > 1 and [i for p in pages for i in p] == list(range(2, 6))
    seen = ""
    for page in range(len(pages)):
        console = Console(width=width, record=True)
        console.print(table_renderable(Table(), None, width, page))
        text = console.export_text()
        assert "2/3" in text and "3/3" in text  # n is never cut
        assert max(len(line) for line in text.splitlines()) <= width
        seen += text
    for cells in body:  # every figure whole on some page
        for cell in cells[2:]:
            assert all(line in seen for line in cell.split("\n")), cell


# -- 7. names told apart -----------------------------------------------------------------------


async def test_runs_of_one_configuration_are_told_apart_and_named_in_full_at_the_cursor(
    tmp_path: Path,
) -> None:
    from _tui_support import write_run
    from textual.widgets import DataTable

    from attnlab.tui.views.runs import RunsView

    names = [
        "multi30k-transformer-scaled-dot-20261207-101530",
        "multi30k-transformer-scaled-dot-20261207-101544",
        "multi30k-transformer-performer-20261207-101601",
    ]
    for name in names:
        write_run(tmp_path, name)
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        view = app.query_one(RunsView)
        table = view.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 3)
        shown = [str(table.get_row_at(i)[1]) for i in range(3)]
        assert len(set(shown)) == 3
        for label, name in zip(shown, [r.listed_name for r in view.runs], strict=True):
            assert label == name or (label.startswith("…") and label[-4:] == name[-4:])
        assert any("performer" in label for label in shown)
        table.focus()
        table.move_cursor(row=1)
        await pilot.pause()
        status = str(view.query_one("#runs-status", Static).content)
        current = view._current()
        assert shown[1] != current.listed_name and f"▸ {current.listed_name}" in status
        await pilot.press("3")
        inspect = app.query_one(InspectView)
        line = inspect.query_one("#insp-run-name", Static)
        chosen = str(inspect.query_one("#insp-run").value)
        assert line.display and Path(chosen).name in str(line.content)


# -- 14. the small ones ------------------------------------------------------------------------


def test_a_run_stopped_early_says_how_far_it_got_not_eta_zero(tmp_path: Path) -> None:
    from _tui_support import run_events, write_run

    from attnlab.tui.follow import RunFollower
    from attnlab.tui.views.train import eta_text

    events = run_events(steps=5, eval_every=20, done="stopped")
    events[0]["config"]["train"]["max_steps"] = 500  # stopped at step 5 of 500: 1 %
    follower = RunFollower(write_run(tmp_path, "stopped-run", events))
    follower.poll()
    assert follower.finished and (follower.step, follower.max_steps) == (5, 500)
    assert eta_text(follower, time.time()) == "stopped at 1 %"
    finished = RunFollower(write_run(tmp_path, "finished-run"))
    finished.poll()
    assert eta_text(finished, time.time()) == "ETA 0:00"


def test_a_minus_b_prints_x100_like_the_a_and_b_maps() -> None:
    from rich.console import Console

    from attnlab.viz.diverging import render_diverging

    console = Console(width=80, record=True)
    console.print(render_diverging([[0.25, -0.104]], ["t"], ["x", "y"]))
    text = console.export_text()
    assert "+25.0" in text and "-10.4" in text and "×100" in text
    assert "±25.0" in text  # the scale in the same unit
