"""SVG snapshots of the main screens at 100x30 (pytest-textual-snapshot).

Deterministic: fixed hand-written runs (no clocks in view), fixed sizes, no live training.
Refresh after an intended UI change with ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _tui_support import lab_config, write_run

from attnlab.tui.app import make_app
from attnlab.tui.follow import Sample
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.train import TrainView

SIZE = (100, 30)


@pytest.fixture
def lab(tmp_path: Path, monkeypatch):
    """The app on a fixed runs directory shown as ``runs`` (a relative path)."""
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs"), "reverse-rnn-bahdanau-a")
    return make_app(Path("runs"), config=lab_config("reverse-bahdanau"))


async def _ready(pilot) -> None:
    await asyncio.wait_for(pilot.app.menus_ready.wait(), 60)
    await pilot.pause()


def test_setup_screen(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=SIZE, run_before=_ready)


def test_train_screen(lab, snap_compare) -> None:
    async def follow(pilot) -> None:
        await _ready(pilot)
        await pilot.press("2")
        pilot.app.query_one(TrainView).follow_run(Path("runs/reverse-rnn-bahdanau-a"))
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SIZE, run_before=follow)


def test_inspect_screen(lab, snap_compare) -> None:
    async def show(pilot) -> None:
        await _ready(pilot)
        sample = Sample(
            0,
            ["3", "1", "4", "2", "5"],
            ["5", "2", "4", "1", "3"],
            ["5", "2", "4", "1", "3"],
            [
                [0.02, 0.03, 0.05, 0.1, 0.8],
                [0.05, 0.05, 0.1, 0.7, 0.1],
                [0.1, 0.1, 0.6, 0.1, 0.1],
                [0.1, 0.7, 0.1, 0.05, 0.05],
                [0.85, 0.05, 0.04, 0.03, 0.03],
            ],
        )
        pilot.app.query_one(InspectView).show_logged_sample(
            Path("runs/reverse-rnn-bahdanau-a"), sample
        )
        await pilot.press("3", "down", "right")
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SIZE, run_before=show)


def test_runs_screen(lab, snap_compare) -> None:
    async def runs(pilot) -> None:
        await _ready(pilot)
        await pilot.press("4", "space")
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SIZE, run_before=runs)


def test_help_screen_at_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(80, 24), run_before=_ready, press=["question_mark"])


# -- 80x24 (the smallest supported terminal); named *_lab_80x24 ------------------------------

SMALL = (80, 24)


def test_setup_screen_lab_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=SMALL, run_before=_ready)


def test_train_screen_lab_80x24(lab, snap_compare) -> None:
    async def follow(pilot) -> None:
        await _ready(pilot)
        await pilot.press("2")
        train = pilot.app.query_one(TrainView)
        train.follow_run(Path("runs/reverse-rnn-bahdanau-a"))
        train.queue.append(lab_config("queued"))  # the queue list under the progress bar
        train.poll()
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SMALL, run_before=follow)


def test_inspect_screen_lab_80x24(lab, snap_compare) -> None:
    async def show(pilot) -> None:
        await _ready(pilot)
        sample = Sample(
            0,
            ["3", "1", "4", "2"],
            ["2", "4", "1", "3"],
            ["2", "4", "1", "3"],
            [
                [0.05, 0.05, 0.1, 0.8],
                [0.05, 0.1, 0.75, 0.1],
                [0.1, 0.7, 0.1, 0.1],
                [0.85, 0.05, 0.05, 0.05],
            ],
        )
        pilot.app.query_one(InspectView).show_logged_sample(
            Path("runs/reverse-rnn-bahdanau-a"), sample
        )
        await pilot.press("3", "down")
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SMALL, run_before=show)


def test_export_screen_lab_80x24(lab, snap_compare) -> None:
    async def export(pilot) -> None:
        await _ready(pilot)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(lab, terminal_size=SMALL, run_before=export)


def test_export_screen_ctranslate2_lab_120x40(lab, snap_compare) -> None:
    """CTranslate2 picked: the weights menu shows, the default path is a directory."""

    async def export(pilot) -> None:
        await _ready(pilot)
        await pilot.press("5")
        await pilot.pause()
        pilot.app.query_one("#export-format").value = "ctranslate2"
        await pilot.pause()

    assert snap_compare(lab, terminal_size=(120, 40), run_before=export)
