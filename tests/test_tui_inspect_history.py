"""Inspect's history mode: stepping through the cross-attention stored at each evaluation.

The history is written with ``attnlab.runs.history.write_history_frame`` (a stand-in of its
fixed API until that module is on this branch) and the screen is compared with the maps and
scores written: every check waits on the lab's worker or state, no sleeps.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from _tui_support import lab_config, ready, until, write_run
from textual.widgets import Static

from attnlab.errors import AttnlabError
from attnlab.tui.app import make_app
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.inspect_history import layer_text, score_text, slider
from attnlab.tui.widgets.heatmap import AttentionHeatmap

SOURCES = [["3", "1", "4"], ["2", "5"]]
STEPS = [10, 20, 30]
SCORES = [
    {"bleu": 10.0, "exact_match": 0.25},
    {"bleu": 20.0, "exact_match": 0.5},
    {"bleu": 30.5, "exact_match": 0.75},
]


def _maps(k: int) -> list[np.ndarray]:
    """Known maps per step k: distinct rows that sum to 1 (values exact in float16)."""
    first = np.full((3, 3), 0.25, dtype=np.float32)
    first[np.arange(3), (np.arange(3) + k) % 3] = 0.5
    second = np.array([[0.75, 0.25], [0.25, 0.75]], dtype=np.float32)
    return [first, second if k % 2 else second[::-1].copy()]


def _stand_in() -> types.ModuleType:
    """The history API as fixed in the task (in memory), for branches without the module."""
    module = types.ModuleType("attnlab.runs.history")
    store: dict[Path, dict] = {}

    @dataclass(frozen=True)
    class HistoryFrame:
        step: int
        scores: dict
        hyps: list
        maps: list

    @dataclass(frozen=True)
    class AttentionHistory:
        run_dir: Path
        layer: int | None
        head: str
        sources: list
        steps: list
        scores: list

        def frame(self, step: int) -> HistoryFrame:
            return store[self.run_dir.resolve()]["frames"][step]

    def write_history_frame(
        run_dir, *, step, scores, sources, hyps, maps, layer, keep, head="mean"
    ):
        entry = store.setdefault(
            Path(run_dir).resolve(), {"frames": {}, "layer": layer, "head": head}
        )
        entry["sources"] = sources
        entry["frames"][step] = HistoryFrame(
            step, dict(scores), hyps, [np.asarray(m) for m in maps]
        )

    def read_history(run_dir):
        entry = store.get(Path(run_dir).resolve())
        if entry is None:
            return None
        if entry.get("broken"):
            raise AttnlabError(f"error: {run_dir}/attention_history/index.json is not valid JSON")
        steps = sorted(entry["frames"])
        return AttentionHistory(
            Path(run_dir),
            entry["layer"],
            entry["head"],
            entry["sources"],
            steps,
            [entry["frames"][s].scores for s in steps],
        )

    module.write_history_frame = write_history_frame
    module.read_history = read_history
    module.store = store
    return module


@pytest.fixture
def history_api(monkeypatch):
    try:
        import attnlab.runs.history as module
    except ImportError:
        module = _stand_in()
        monkeypatch.setitem(sys.modules, "attnlab.runs.history", module)
    return module


@pytest.fixture
def runs(tmp_path: Path, monkeypatch, history_api) -> Path:
    monkeypatch.chdir(tmp_path)
    root = Path("runs")
    with_history = write_run(root, "reverse-rnn-bahdanau-a")
    for k, step in enumerate(STEPS):
        history_api.write_history_frame(
            with_history,
            step=step,
            scores=SCORES[k],
            sources=SOURCES,
            hyps=[["4", "1", "3"], ["5", "2"]],
            maps=_maps(k),
            layer=None,
            keep=10,
        )
    return root


def test_slider_marks_the_step() -> None:
    assert slider(0, 3) == "●──○──○"
    assert slider(2, 3) == "○──○──●"
    assert slider(0, 1) == "●"
    assert slider(99, 100).endswith("●") and slider(99, 100).count("○") == 14


def test_header_texts() -> None:
    assert score_text({"bleu": 12.34, "exact_match": 0.4}) == " · dev BLEU 12.3 · exact 40%"
    assert score_text({}) == ""
    assert layer_text(None, "mean") == "RNN attention"
    assert layer_text(-1, "mean") == "last layer, mean of heads"
    assert layer_text(3, "mean") == "last layer (3), mean of heads"


async def _open(app, pilot) -> InspectView:
    await ready(app, pilot)
    await pilot.press("3")
    view = app.query_one(InspectView)
    await until(pilot, lambda: view.display and view._shown_run() is not None)
    app.query_one(AttentionHeatmap).focus()
    await pilot.pause()
    return view


def _title(app) -> str:
    return str(app.query_one("#insp-title", Static).render())


async def test_history_mode_steps_through_the_stored_maps(runs: Path) -> None:
    app = make_app(runs, config=lab_config("reverse-bahdanau"))
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _open(app, pilot)
        await pilot.press("y")
        await until(pilot, lambda: view.in_history)
        await pilot.press("left_curly_bracket")  # the first stored step
        heatmap = app.query_one(AttentionHeatmap)
        np.testing.assert_array_equal(heatmap.weights, _maps(0)[0])
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert "step 30/30" in _title(app)
        assert "dev BLEU 30.5" in _title(app) and "exact 75%" in _title(app)
        assert "○──○──●" in _title(app)
        np.testing.assert_array_equal(heatmap.weights, _maps(2)[0])
        await pilot.press("right_square_bracket")  # at the last: stays, no wrap
        assert "step 30/30" in _title(app)
        await pilot.press("left_square_bracket")
        assert "step 20/30" in _title(app) and "dev BLEU 20.0" in _title(app)
        np.testing.assert_array_equal(heatmap.weights, _maps(1)[0])
        await pilot.press("left_square_bracket", "left_square_bracket", "left_square_bracket")
        assert "step 10/30" in _title(app)  # at the first: stays
        await pilot.press("j")  # the second stored sentence
        np.testing.assert_array_equal(heatmap.weights, _maps(0)[1])
        assert "sentence 2/2" in _title(app)
        await pilot.press("y")  # leave
        assert not view.in_history
        assert "history" not in _title(app)


async def test_run_without_history_says_how_to_enable_it(
    tmp_path: Path, monkeypatch, history_api
) -> None:
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs"), "reverse-rnn-bahdanau-b")
    app = make_app(Path("runs"), config=lab_config("reverse-bahdanau"))
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _open(app, pilot)
        await pilot.press("y")
        await until(
            pilot,
            lambda: any("train.attention_history" in str(n.message) for n in app._notifications),
        )
        assert not view.in_history
        await pilot.press("right_square_bracket")  # nothing to step: a notice, no crash
        assert app.is_running


async def test_unreadable_history_is_one_notice(runs: Path, history_api) -> None:
    if hasattr(history_api, "store"):
        for entry in history_api.store.values():
            entry["broken"] = True
    else:  # the real module: a damaged index on disk
        index = runs / "reverse-rnn-bahdanau-a" / "attention_history" / "index.json"
        index.write_text("{", encoding="utf-8")
    app = make_app(runs, config=lab_config("reverse-bahdanau"))
    async with app.run_test(size=(120, 40)) as pilot:
        view = await _open(app, pilot)
        await pilot.press("y")
        await until(
            pilot,
            lambda: any(n.title == "History" and n.severity == "error" for n in app._notifications),
        )
        assert not view.in_history and app.is_running


def _history_snapshot(runs: Path, snap_compare, size: tuple[int, int]) -> bool:
    async def show(pilot) -> None:
        view = await _open(pilot.app, pilot)
        await pilot.press("y")
        await until(pilot, lambda: view.in_history)
        await pilot.press("left_square_bracket")  # step 20 of 10, 20, 30
        await pilot.pause()

    return snap_compare(
        make_app(runs, config=lab_config("reverse-bahdanau")), terminal_size=size, run_before=show
    )


def test_history_mode_snapshot_80x24(runs: Path, snap_compare) -> None:
    assert _history_snapshot(runs, snap_compare, (80, 24))


def test_history_mode_snapshot_120x40(runs: Path, snap_compare) -> None:
    assert _history_snapshot(runs, snap_compare, (120, 40))
