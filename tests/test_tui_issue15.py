"""The lab part of issue 15: Inspect's map export, the Heads and Compare screens, attention
entropy in Train and Runs. Every check waits on the lab's workers or messages (no sleeps) and
compares what the screen shows with the engine's own report for the same input."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import TINY_TRANSFORMER
from _tui_support import ready, tiny_config, until, workers_idle, write_run
from textual.widgets import Static

from attnlab.data.dataset import load_dataset
from attnlab.experiment import apply_overrides
from attnlab.nn.model import build_model, count_parameters
from attnlab.runs import load_checkpoint, save_checkpoint, write_config
from attnlab.tui.app import make_app
from attnlab.tui.follow import mean_entropy
from attnlab.tui.inspect_engine import InspectRequest, analyse
from attnlab.tui.screens.compare import CompareScreen, shown_maps
from attnlab.tui.screens.heads import HeadsScreen, importance_grid
from attnlab.tui.views.inspect import InspectReady, InspectView
from attnlab.tui.views.runs import RunsView
from attnlab.tui.views.train import TrainView
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.tui.widgets.plots import MetricPlot

SIZE = (100, 30)
TRANSFORMER = [
    *TINY_TRANSFORMER,
    "data.max_len=5",
]


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


async def show(app, pilot, run_dir: Path, index: int = 2) -> InspectView:
    """Inspect on ``run_dir``'s dev sample ``index`` (the analysis posted as the worker would)."""
    await ready(app, pilot)
    await pilot.press("3")
    inspect = app.query_one(InspectView)
    inspect.select_run(run_dir)
    await workers_idle(pilot)
    inspect.query_one("#insp-index").value = str(index)  # what the user typed before Decode
    inspect.post_message(InspectReady(analyse(InspectRequest(run_dir, "best", "dev", index))))
    await pilot.pause()
    inspect.query_one("#heatmap").focus()
    return inspect


# -- Inspect: method key and export ---------------------------------------------------------------


async def test_export_key_writes_the_shown_map_through_the_cli_renderer(tmp_path: Path) -> None:
    from attnlab.viz.export import export_heatmap

    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        inspect = await show(app, pilot, run_dir)
        await pilot.press("m")  # rollout: an attribution, shown ÷ its maximum
        await pilot.pause()
        assert inspect.current_kind == "rollout"
        assert "÷ its max" in str(inspect.query_one("#insp-diag", Static).content)
        matrix, rows, cols = inspect.current_matrix()
        assert matrix.max() == pytest.approx(1.0)
        await pilot.press("e")
        await workers_idle(pilot)
        await pilot.pause()
        svg, html = inspect.last_export
        assert svg == run_dir / "figures" / "dev2-rollout-l0-avg-hyp1.svg"
        assert html.suffix == ".html" and html.is_file()
        # The same renderer as `attnlab translate --export`: an independent call, same file.
        stem, title = inspect.export_target()
        reference = export_heatmap(matrix, rows, cols, title, tmp_path / "ref")
        assert svg.read_text() == reference[0].read_text()
        assert html.read_text() == reference[1].read_text()
        assert "rollout (target × source)" in svg.read_text().replace("&#160;", " ")


async def test_attribution_diagnostics_read_scores_as_unnormalised_rows(tmp_path: Path) -> None:
    """Rollout / norm scores are no distributions: the entropy shown is that of each row scaled
    to sum 1 (a loop here), not −Σ w ln w of the scores divided by their maximum."""
    import math

    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        inspect = await show(app, pilot, run_dir)
        for _ in range(4):  # rollout, relevancy, gradient, norm
            await pilot.press("m")
            await pilot.pause()
            assert inspect.current_normalisation == "unnormalised"
            matrix, _rows, cols = inspect.current_matrix()
            entropies = []
            for row in matrix.tolist():
                total = sum(row)
                if total > 0:
                    entropies.append(-sum(w / total * math.log(w / total) for w in row if w > 0))
            expected = sum(entropies) / len(entropies)
            diag = str(inspect.query_one("#insp-diag", Static).content)
            line = f"row entropy {expected:.2f} / uniform {math.log(len(cols)):.2f} nats"
            assert line in diag and "of each row scaled to sum 1" in diag, diag


async def test_export_without_a_map_says_so(tmp_path: Path) -> None:
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        inspect = app.query_one(InspectView)
        inspect.query_one("#heatmap").focus()
        await pilot.press("e")
        await pilot.pause()
        assert inspect.last_export == []
        assert not list(tmp_path.rglob("*.svg"))


# -- Heads -----------------------------------------------------------------------------------------


def _heads_reference(run_dir: Path) -> dict:
    from attnlab.interpret.reports import heads_report, scoring_dataset

    loaded = load_checkpoint(run_dir / "checkpoints" / "best")
    return heads_report(loaded, scoring_dataset(loaded, loaded.config), "dev", 50, "cpu")


async def test_heads_screen_shows_the_report_of_the_engine(tmp_path: Path) -> None:
    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    expected = _heads_reference(run_dir)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_dir)
        await pilot.press("H")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HeadsScreen)
        await workers_idle(pilot)
        await pilot.pause()
        assert screen.finished
        matrix, rows, cols = importance_grid(expected["importance"])
        grid = screen.query_one("#heads-grid", AttentionHeatmap)
        assert np.allclose(grid.weights, matrix) and grid.row_labels == rows
        assert rows == ["enc L0", "dec L0", "cross L0"] and cols == ["h0", "h1"]
        assert screen.curve == expected["curve"] and len(screen.curve) == 3 * 2 + 1
        plot = screen.query_one("#heads-curve", MetricPlot)
        assert plot.series[0][1] == list(range(7)) and plot.points == 7
        assert "done: 7 points" in str(screen.query_one("#heads-status", Static).content)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen.query_one(InspectView), InspectView)


async def test_heads_curve_stops_on_c_between_points(tmp_path: Path, monkeypatch) -> None:
    """``c`` while the first point is computed: the worker stops before the second one."""
    import attnlab.evaluate as evaluate

    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    first_point = threading.Event()
    release = threading.Event()
    real = evaluate.evaluate_split

    def gated(*args, **kwargs):
        first_point.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_split", gated)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_dir)
        await pilot.press("H")
        await until(pilot, first_point.is_set)  # the worker is inside point 1
        await pilot.press("c")
        release.set()
        await workers_idle(pilot)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HeadsScreen) and screen.finished
        assert [p["masked"] for p in screen.curve] == [0]
        assert "stopped after 1 points" in str(screen.query_one("#heads-status", Static).content)


async def test_heads_of_a_model_without_heads_is_one_line(tmp_path: Path) -> None:
    run_dir = saved_run(tmp_path, "rnn", ["data.max_len=5"])
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_dir)
        await pilot.press("H")
        await workers_idle(pilot)
        await pilot.pause()
        status = str(app.screen.query_one("#heads-status", Static).content)
        assert "no multi-head attention" in status and app.screen.curve == []


# -- Compare ---------------------------------------------------------------------------------------


async def test_compare_screen_same_run_twice_has_zero_difference(tmp_path: Path) -> None:
    from attnlab.interpret.reports import compare_report, scoring_dataset

    run_a = saved_run(tmp_path, "tf-a", TRANSFORMER)
    run_b = tmp_path / "tf-b"
    shutil.copytree(run_a, run_b)  # the same weights: same target tokens, A − B = 0, JS = 0
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_a, index=1)
        await pilot.press("c")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        await workers_idle(pilot)
        await pilot.pause()
        report = screen.report
        assert report is not None and Path(report["b"]["checkpoint"]).parent.parent == run_b
        a = load_checkpoint(run_a / "checkpoints" / "best")
        example = list(scoring_dataset(a, a.config).splits.split("dev"))[1]
        expected = compare_report(a, load_checkpoint(run_b), "", example, "raw", "cpu")
        assert report["js"] == expected["js"] and all(x == 0.0 for x in report["js"])
        assert report["same_target"] and all(v == 0.0 for row in report["difference"] for v in row)
        left, right = (
            screen.query_one("#cmp-a", AttentionHeatmap),
            screen.query_one("#cmp-b", AttentionHeatmap),
        )
        assert np.array_equal(left.weights, right.weights)
        assert np.allclose(left.weights, np.asarray(expected["a"]["map"]))
        status = str(screen.query_one("#cmp-status", Static).content)
        assert "weights 0..1" in status and "AER" in status  # reverse has gold alignments
        assert "A − B" in screen.query_one("#cmp-diff", Static).content.title  # the diverging table


async def test_compare_method_menu_rescales_both_maps_together(tmp_path: Path) -> None:
    run_a = saved_run(tmp_path, "tf-a", TRANSFORMER)
    saved_run(tmp_path, "tf-b", TRANSFORMER, seed=1)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_a, index=1)
        await pilot.press("c")
        await pilot.pause()
        screen = app.screen
        await workers_idle(pilot)
        await pilot.pause()
        screen.query_one("#cmp-method").value = "norm"
        await pilot.pause()
        await workers_idle(pilot)
        await pilot.pause()
        report = screen.report
        assert (
            report["method"] == "norm"
            and Path(report["b"]["checkpoint"]).parent.parent.name == "tf-b"
        )
        a, b, scale = shown_maps(report)
        top = max(np.max(report["a"]["map"]), np.max(report["b"]["map"]))  # maps: 4 decimals
        assert scale == pytest.approx(top, abs=1e-4) and scale != 1.0
        assert max(a.max(), b.max()) == pytest.approx(1.0, abs=1e-3)
        assert np.allclose(screen.query_one("#cmp-a", AttentionHeatmap).weights, a)
        assert np.allclose(screen.query_one("#cmp-b", AttentionHeatmap).weights, b)


# -- entropy in Train and Runs ------------------------------------------------------------------


async def test_train_plots_and_runs_overlays_attention_entropy(tmp_path: Path) -> None:
    from _tui_support import run_events

    events = run_events()
    expected = [
        mean_entropy(e["attention_entropy"]["cross"]) for e in events if e["type"] == "eval"
    ]
    run_dir = write_run(tmp_path, "r-a", events)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        await pilot.pause()
        plot = train.query_one("#entropy-plot", MetricPlot)
        assert plot.display and [s[0] for s in plot.series] == ["cross"]
        assert list(plot.series[0][2]) == expected and plot.points == len(expected)
        await pilot.press("4")
        await pilot.pause()
        runs = app.query_one(RunsView)
        overlay = runs.query_one("#compare-entropy", MetricPlot)
        assert not overlay.display  # nothing marked yet
        await pilot.press("space")
        await pilot.pause()
        assert overlay.display and list(overlay.series[0][2]) == expected


def test_mean_entropy_ignores_missing_values() -> None:
    assert mean_entropy([[1.0, 2.0], [None, 3.0]]) == pytest.approx(2.0)
    assert np.isnan(mean_entropy([])) and np.isnan(mean_entropy(None))


# -- snapshots of the new screens (80x24, the smallest supported, and 100x30) -------------------


@pytest.fixture
def two_runs(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    root = Path("runs")
    saved_run(root, "tf-a", TRANSFORMER)
    saved_run(root, "tf-b", TRANSFORMER)  # same weights: the same target, so A − B is drawn
    return root


def _opened(key: str):
    async def run_before(pilot) -> None:
        app = pilot.app
        await show(app, pilot, Path("runs/tf-a"), index=1)
        await pilot.press(key)
        await pilot.pause()
        await workers_idle(pilot)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (100, 30)], ids=["80x24", "100x30"])
def test_heads_screen_snapshot(two_runs, snap_compare, size) -> None:
    app = make_app(two_runs, config=tiny_config())
    assert snap_compare(app, terminal_size=size, run_before=_opened("H"))


@pytest.mark.parametrize("size", [(80, 24), (100, 30)], ids=["80x24", "100x30"])
def test_compare_screen_snapshot(two_runs, snap_compare, size) -> None:
    app = make_app(two_runs, config=tiny_config())
    assert snap_compare(app, terminal_size=size, run_before=_opened("c"))


async def test_runs_at_80_columns_switches_bars_and_entropy_with_e(tmp_path: Path) -> None:
    from attnlab.tui.widgets.plots import BarsPlot

    write_run(tmp_path, "r-a")
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("4", "space")
        await pilot.pause()
        runs = app.query_one(RunsView)
        bars, entropy = (
            runs.query_one("#compare-bars", BarsPlot),
            runs.query_one("#compare-entropy"),
        )
        assert bars.display and not entropy.display  # two panels fit: the bars, as before
        await pilot.press("e")
        await pilot.pause()
        assert entropy.display and not bars.display and entropy.points == 2
        await pilot.press("e")
        await pilot.pause()
        assert bars.display and not entropy.display
