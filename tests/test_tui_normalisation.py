"""Lab side of issue 14's normalisations: Inspect draws each kind of map as documented.

Signed maps get the diverging scale (legend ``−v … +v signed``), sub-stochastic maps an ``∅``
column of unattended mass, sparse maps ``·`` for exact zeros; the diagnostics read the kind
(entropy with ∅ as an outcome, "—" for signed) and so do the Train view's entropy curves.
Softmax maps are unchanged (tests/test_tui_snapshots.py keeps its snapshots).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _norm_variants import SPARSE, SUB, registered
from _tiny import TINY_TRANSFORMER
from _tui_support import lab_config, ready, workers_idle, write_run
from test_tui_inspect_engine import saved_run
from textual.widgets import Static

from attnlab.events import Event
from attnlab.tui.app import make_app
from attnlab.tui.diagnostics import diagnose, row_entropy
from attnlab.tui.follow import Curves, RunFollower, Sample
from attnlab.tui.inspect_engine import InspectRequest, analyse
from attnlab.tui.views.inspect import InspectReady, InspectView
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.viz.diverging import NEGATIVE, POSITIVE, ZERO

RUN = "reverse-transformer-test-20261129-101544"
SRC = ["3", "1", "4"]
HYP = ["4", "1"]


def _h(*p: float) -> float:
    return -sum(x * math.log(x) for x in p if x > 0)


# -- diagnostics (numpy; float64 references by hand) --------------------------------------------


def test_row_entropy_and_diagnostics_per_kind() -> None:
    sub = np.array([[0.2, 0.3, 0.0], [0.0, 0.0, 0.0]])
    assert row_entropy(sub, "sub-stochastic").tolist() == pytest.approx([_h(0.2, 0.3, 0.5), 0.0])
    d = diagnose(sub, ["a", "b", "</s>"], "sub-stochastic")
    # a row that attended to nothing is a real row (entropy 0, all unattended)
    assert d.mean_entropy == pytest.approx(_h(0.2, 0.3, 0.5) / 2)
    assert d.uniform_entropy == pytest.approx(math.log(4))  # 3 keys + ∅
    assert d.unattended == pytest.approx((0.5 + 1.0) / 2)
    sparse = np.array([[0.0, 0.25, 0.75]])
    d = diagnose(sparse, (), "sparse")
    assert d.mean_entropy == pytest.approx(_h(0.25, 0.75)) and d.zeros == 1 and d.size == 3
    signed = np.array([[0.7, -0.2, 0.5], [0.1, -0.1, 0.0]])
    d = diagnose(signed, (), "signed")
    assert d.mean_entropy is None and d.negatives == 2 and d.entropy_ratio == 0.0
    assert np.isnan(row_entropy(signed, "signed")).all()
    assert d.warnings() == []  # no "nearly uniform" claim from an undefined entropy


def test_train_view_entropy_curves_read_the_kind() -> None:
    curves = Curves()
    curves.entropy_kind = {"cross": "signed", "dec_self": "sub-stochastic"}
    assert curves.entropy_label("dec_self") == "dec self (∅ counted)"
    assert curves.entropy_label("enc_self") == "enc self"
    assert curves.no_entropy() == ["cross"]


def test_follower_reads_the_kinds_from_eval_and_sample_events(tmp_path: Path) -> None:
    follower = RunFollower(tmp_path)
    eval_line = {
        "type": "eval",
        "step": 10,
        "split": "dev",
        "attention_entropy": {"enc_self": [[0.5]]},
        "attention_normalisation": {"cross": "signed", "enc_self": "sparse"},
    }
    sample_line = {
        "type": "sample",
        "step": 10,
        "index": 0,
        "src": SRC,
        "ref": HYP,
        "hyp": HYP,
        "attention": [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0]],
        "normalisation": "sparse",
    }
    follower.apply([Event.from_json(eval_line), Event.from_json(sample_line)])
    assert follower.curves.entropy_kind == {"cross": "signed", "enc_self": "sparse"}
    assert follower.curves.no_entropy() == ["cross"]
    assert follower.samples[0].normalisation == "sparse"
    older = dict(sample_line)
    del older["normalisation"]
    follower.apply([Event.from_json({**older, "step": 20})])
    assert follower.samples[0].normalisation == "softmax"


# -- Inspect (Pilot) ---------------------------------------------------------------------------


@pytest.fixture
def lab(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs"), RUN)
    return make_app(Path("runs"), config=lab_config("reverse-bahdanau"))


async def _show(pilot, sample: Sample) -> tuple[InspectView, AttentionHeatmap]:
    await ready(pilot.app, pilot)
    await pilot.press("3")
    # The hand-written run has no checkpoint: let Inspect's opening attempt end first.
    await workers_idle(pilot)
    await pilot.pause()
    view = pilot.app.query_one(InspectView)
    view.show_logged_sample(Path("runs") / RUN, sample)
    await pilot.pause()
    return view, pilot.app.query_one(AttentionHeatmap)


def _text(app, wid: str) -> str:
    return str(app.query_one(wid, Static).render())


def _backgrounds(heatmap: AttentionHeatmap, row: int) -> list[tuple[int, int, int] | None]:
    """Each cell's background of matrix row ``row`` (None: no colour)."""
    strip = heatmap._row_strip(row, heatmap.rich_style.__class__())
    out = []
    for segment in strip:
        bg = segment.style.bgcolor if segment.style is not None else None
        out.append(tuple(bg.triplet) if bg is not None else None)
    return out


async def test_signed_map_gets_the_diverging_scale_and_no_entropy(lab) -> None:
    weights = [[0.5, -0.25, 0.0], [0.1, 0.2, -0.1], [0.0, 0.3, 0.2]]
    async with lab.run_test(size=(100, 30)) as pilot:
        view, heatmap = await _show(pilot, Sample(0, SRC, HYP, HYP, weights, "signed"))
        assert heatmap.normalisation == "signed" and heatmap.vmax == 0.5
        heatmap.cursor = (2, 2)  # the cursor off row 0: its cells are plain colour
        await pilot.pause()
        half_blue = tuple(round(z + (n - z) * 0.5) for z, n in zip(ZERO, NEGATIVE, strict=True))
        assert _backgrounds(heatmap, 0) == [POSITIVE, half_blue, ZERO]
        scale = _text(pilot.app, "#insp-scale")
        assert scale.startswith("−0.50") and scale.endswith("+0.50 signed")
        diag = _text(pilot.app, "#insp-diag")
        assert "row entropy — (undefined for signed weights)" in diag
        assert "signed weights: 2 of 9 negative" in diag


async def test_sub_stochastic_map_shows_the_unattended_column(lab) -> None:
    weights = [[0.2, 0.3, 0.1], [0.0, 0.5, 0.5], [0.1, 0.0, 0.0]]
    async with lab.run_test(size=(100, 30)) as pilot:
        view, heatmap = await _show(pilot, Sample(0, SRC, HYP, HYP, weights, "sub-stochastic"))
        assert heatmap.shape == (3, 4)
        assert heatmap.col_labels == [*SRC, "∅"]
        assert heatmap.weights[:, -1] == pytest.approx([0.4, 0.0, 0.9])
        heatmap.cursor = (2, 3)
        await pilot.pause()
        cell = _text(pilot.app, "#insp-cell")
        assert "weight 0.9000" in cell and "unattended mass" in cell
        diag = _text(pilot.app, "#insp-diag")
        assert "∅ counted as an outcome" in diag
        assert "unattended mass (∅) 43% per row on average" in diag  # (0.4 + 0 + 0.9) / 3
        expected = (_h(0.2, 0.3, 0.1, 0.4) + _h(0.5, 0.5) + _h(0.1, 0.9)) / 3
        assert f"row entropy {expected:.2f} / uniform {math.log(4):.2f} nats" in diag
        assert _text(pilot.app, "#insp-scale").startswith("0 ")  # the usual 0..1 scale


async def test_sparse_map_marks_its_exact_zeros(lab) -> None:
    weights = [[0.0, 0.4, 0.6], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    async with lab.run_test(size=(100, 30)) as pilot:
        view, heatmap = await _show(pilot, Sample(0, SRC, HYP, HYP, weights, "sparse"))
        heatmap.cursor = (0, 1)
        await pilot.pause()
        assert _backgrounds(heatmap, 1)[1:] == [None, None]
        assert [s.text.strip() for s in heatmap._row_strip(1, heatmap.rich_style)][1:] == [
            "·",
            "·",
        ]
        diag = _text(pilot.app, "#insp-diag")
        assert "exact zeros 5 of 9 weights (56%)" in diag
        # the same matrix as softmax: zeros take the lowest colour, no dots
        view.show_logged_sample(Path("runs") / RUN, Sample(0, SRC, HYP, HYP, weights))
        await pilot.pause()
        assert None not in _backgrounds(heatmap, 1)
        assert "exact zeros" not in _text(pilot.app, "#insp-diag")


async def test_inspect_reads_each_role_of_a_decoded_run(tmp_path: Path) -> None:
    overrides = [
        *TINY_TRANSFORMER,
        "data.max_len=5",
        f"model.self_attention={SPARSE}",
        f"model.cross_attention={SUB}",
    ]
    with registered():
        result = analyse(InspectRequest(saved_run(tmp_path, overrides), "best", "dev", 2))
        assert result.normalisations == {
            "enc_self": "sparse",
            "dec_self": "sparse",
            "cross": "sub-stochastic",
        }
        app = make_app(tmp_path, config=lab_config())
        async with app.run_test(size=(100, 30)) as pilot:
            await ready(app, pilot)
            await pilot.press("3")
            view = app.query_one(InspectView)
            view.post_message(InspectReady(result))
            await pilot.pause()
            view.query_one("#insp-kind").value = "cross"
            await pilot.pause()
            heatmap = app.query_one(AttentionHeatmap)
            cross = result.hypotheses[0].maps["cross"]
            assert heatmap.shape == (cross.shape[2], cross.shape[3] + 1)
            assert heatmap.col_labels[-1] == "∅"
            view.query_one("#insp-kind").value = "enc_self"
            await pilot.pause()
            assert heatmap.normalisation == "sparse"
            assert "exact zeros" in _text(app, "#insp-diag")
