"""Heatmap, plots and layout at 80x24 and 100x30: Pilot checks and SVG snapshots.

Snapshots are named by size (``*_80x24``, ``*_100x30``); refresh after an intended UI change
with ``pytest tests/test_tui_viz.py --snapshot-update`` and look at the diffs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from _tui_support import lab_config, workers_idle, write_run
from textual.widgets import Select, Static

from attnlab.tui.app import make_app
from attnlab.tui.follow import Sample
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.train import TrainView
from attnlab.tui.widgets.heatmap import AttentionHeatmap

RUN = "reverse-rnn-luong-general-20261129-101544"


def _big_sample() -> Sample:
    """A 20x19 map with multi-character tokens (the case the issue reports at 80x24)."""
    src = ["<s>", *(str(6 + 3 * k) for k in range(18))]  # 19 columns: <s> 6 9 12 … 57
    hyp = [str(57 - 3 * k) for k in range(19)]  # 19 tokens + </s> = 20 rows
    rng = np.random.default_rng(0)
    weights = rng.random((20, 19)) * 0.2
    for i in range(20):
        weights[i, (18 - i) % 19] += 2.0  # a clear reversed diagonal
    weights /= weights.sum(axis=1, keepdims=True)
    return Sample(0, src, src[::-1], hyp, weights.round(3).tolist())


@pytest.fixture
def lab(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs"), RUN)
    return make_app(Path("runs"), config=lab_config("reverse-bahdanau"))


async def _ready(pilot) -> None:
    await asyncio.wait_for(pilot.app.menus_ready.wait(), 60)
    await pilot.pause()


async def _show_big(pilot) -> None:
    await _ready(pilot)
    await pilot.press("3")
    # The hand-written run has no checkpoint: let Inspect's opening decode fail first, then
    # show the logged sample and drop the notice (it is not what these snapshots are about).
    await workers_idle(pilot)
    await pilot.pause()
    pilot.app.query_one(InspectView).show_logged_sample(Path("runs") / RUN, _big_sample())
    pilot.app.clear_notifications()
    await pilot.pause()
    pilot.app.query_one(AttentionHeatmap).focus()
    await pilot.pause()


async def test_big_map_at_80x24_reads_whole_tokens_and_steps_to_the_argmax(lab) -> None:
    async with lab.run_test(size=(80, 24)) as pilot:
        await _show_big(pilot)
        heatmap = pilot.app.query_one(AttentionHeatmap)
        view = pilot.app.query_one(InspectView)
        assert heatmap.shape == (20, 19)
        # every column visible without scrolling (2-character cells at 80 columns)
        visible = heatmap.scrollable_content_region.width - heatmap.label_width
        assert 19 * heatmap.cell_width <= visible
        # labels: whole tokens, each on one header row
        texts = sorted(p.text for p in heatmap._placements)
        assert texts == sorted(_big_sample().src)
        # RNN map: one layer, one head -> no layer/head selectors; role-labelled axes
        assert not pilot.app.query_one("#insp-layer-head").display
        diag = str(pilot.app.query_one("#insp-diag", Static).content)
        assert "(target × source)" in diag
        # stepping: the cursor goes to the arg-max of the new row; label width never changes
        width = heatmap.label_width
        weights = np.asarray(_big_sample().attention)
        for k in range(3):
            await pilot.press("n")
            await pilot.pause()
            assert heatmap.cursor == (k, int(np.argmax(weights[k])))
            assert heatmap.label_width == width
        assert view.step_row == 2


async def test_self_attention_is_labelled_by_role(lab) -> None:
    async with lab.run_test(size=(100, 30)) as pilot:
        await _ready(pilot)
        await pilot.press("3")
        view = pilot.app.query_one(InspectView)
        tokens = ["a", "bb", "ccc"]
        eye = np.eye(3)[None, None]
        view.maps = {"cross": np.repeat(eye, 2, axis=0), "enc_self": np.repeat(eye, 2, axis=0)}
        view.labels = {"cross": (tokens, tokens), "enc_self": (tokens, tokens)}
        view._configure_selectors()
        kind = pilot.app.query_one("#insp-kind", Select)
        kind.value = "enc_self"
        await pilot.pause()
        diag = str(pilot.app.query_one("#insp-diag", Static).content)
        assert "(source × source)" in diag
        assert pilot.app.query_one("#insp-layer").display  # two layers: choose one
        assert not pilot.app.query_one("#insp-head").display  # one head: nothing to choose


def test_inspect_big_map_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(80, 24), run_before=_show_big)


def test_inspect_big_map_100x30(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(100, 30), run_before=_show_big)


async def _runs_marked(pilot) -> None:
    await _ready(pilot)
    await pilot.press("4", "space")
    await pilot.pause()


def test_runs_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(80, 24), run_before=_runs_marked)


def test_runs_100x30(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(100, 30), run_before=_runs_marked)


async def _train_followed(pilot) -> None:
    await _ready(pilot)
    await pilot.press("2")
    pilot.app.query_one(TrainView).follow_run(Path("runs") / RUN)
    await pilot.pause()


def test_train_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(80, 24), run_before=_train_followed)


def test_setup_80x24(lab, snap_compare) -> None:
    assert snap_compare(lab, terminal_size=(80, 24), run_before=_ready)
