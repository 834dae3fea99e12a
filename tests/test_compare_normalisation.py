"""Model comparison by the kind of each side's rows (attnlab.interpret.compare, the
``attnlab compare`` command and the lab's Compare screen).

JS references are float64 loops over distributions written out by hand (the sub-stochastic
rows with their ∅ outcome, the unnormalised rows scaled to sum 1); a signed side has no JS.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from _norm_variants import SIGNED, registered
from _tui_support import tiny_config, until
from click.testing import CliRunner
from test_tui_issue15 import SIZE, TRANSFORMER, saved_run, show
from textual.widgets import Static

from attnlab.cli import cli
from attnlab.interpret.compare import (
    JS_UNDEFINED,
    as_distribution,
    as_drawn,
    difference,
    js_defined,
    js_divergence,
    js_note,
    shared_scale,
)
from attnlab.tui.app import make_app
from attnlab.tui.screens.compare import CompareScreen
from attnlab.tui.widgets.heatmap import AttentionHeatmap

F64 = torch.float64


def _js(p: list[float], q: list[float]) -> float:
    """Jensen-Shannon divergence in bits of two explicit distributions (0 log 0 = 0)."""
    total = 0.0
    for pi, qi in zip(p, q, strict=True):
        mi = 0.5 * (pi + qi)
        if pi > 0:
            total += 0.5 * pi * math.log2(pi / mi)
        if qi > 0:
            total += 0.5 * qi * math.log2(qi / mi)
    return total


# -- engine: JS per kind -------------------------------------------------------------------------


def test_sub_stochastic_rows_count_their_unattended_mass() -> None:
    a = torch.tensor([[0.2, 0.3], [0.0, 0.0]], dtype=F64)  # ∅ = 0.5, 1.0
    b = torch.tensor([[0.5, 0.0], [0.1, 0.4]], dtype=F64)  # ∅ = 0.5, 0.5
    out = js_divergence(a, b, "sub-stochastic", "sub-stochastic")
    assert out.tolist() == pytest.approx(
        [_js([0.2, 0.3, 0.5], [0.5, 0.0, 0.5]), _js([0.0, 0.0, 1.0], [0.1, 0.4, 0.5])], abs=1e-12
    )
    # without ∅ the first row would read (0.4, 0.6) vs (1, 0): a different, larger value
    assert out[0] < _js([0.4, 0.6], [1.0, 0.0]) - 0.1
    assert js_note("sub-stochastic", "sub-stochastic") == "∅ counted"
    # the shared scale covers the ∅ column the heatmap draws (1.0 here), not only the weights
    assert shared_scale(as_drawn(a, "sub-stochastic"), as_drawn(b, "softmax")) == 1.0


def test_sub_stochastic_against_softmax_gives_the_softmax_side_zero_unattended() -> None:
    a = torch.tensor([[0.2, 0.3]], dtype=F64)
    b = torch.tensor([[0.4, 0.6]], dtype=F64)
    out = js_divergence(a, b, "sub-stochastic", "softmax")
    assert float(out[0]) == pytest.approx(_js([0.2, 0.3, 0.5], [0.4, 0.6, 0.0]), abs=1e-12)
    assert float(out[0]) > 0.0  # as plain rows both read (0.4, 0.6): JS would be 0


def test_unnormalised_rows_are_scaled_to_sum_one() -> None:
    a = torch.tensor([[0.9, 0.6], [0.3, 0.3]], dtype=F64)  # (0.6, 0.4), (0.5, 0.5)
    b = torch.tensor([[0.2, 0.2], [0.75, 0.25]], dtype=F64)  # (0.5, 0.5), (0.75, 0.25)
    out = js_divergence(a, b, "unnormalised", "unnormalised")
    assert out.tolist() == pytest.approx(
        [_js([0.6, 0.4], [0.5, 0.5]), _js([0.5, 0.5], [0.75, 0.25])], abs=1e-12
    )
    assert as_distribution(a, "unnormalised").sum(-1).tolist() == pytest.approx([1.0, 1.0])
    assert js_note("unnormalised", "softmax") == "rows scaled to sum 1"
    assert js_note("sub-stochastic", "unnormalised") == "∅ counted, rows scaled to sum 1"
    assert js_note("softmax", "sparse") == ""


def test_sparse_rows_with_exact_zeros_give_finite_js() -> None:
    a = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], dtype=F64)
    b = torch.tensor([[0.0, 0.25, 0.75], [0.0, 0.5, 0.5]], dtype=F64)
    out = js_divergence(a, b, "sparse", "sparse")
    assert torch.isfinite(out).all()
    # disjoint supports: 1 bit; m = (¼, ½, ¼): ½·(½ log2 2 + ½ log2 1) · 2 = ½
    assert out.tolist() == pytest.approx([1.0, 0.5], abs=1e-12)
    assert torch.equal(js_divergence(a, a, "sparse", "sparse"), torch.zeros(2, dtype=F64))


@pytest.mark.parametrize("kinds", [("signed", "softmax"), ("softmax", "signed"), ("signed",) * 2])
def test_signed_on_either_side_has_no_js_but_a_difference(kinds: tuple[str, str]) -> None:
    a = torch.tensor([[0.7, -0.9], [0.2, -0.2]], dtype=F64)
    b = torch.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=F64)
    assert not js_defined(*kinds) and js_note(*kinds) == JS_UNDEFINED
    with pytest.raises(ValueError, match="signed"):
        js_divergence(a, b, *kinds)
    assert difference(a, b).flatten().tolist() == pytest.approx([0.5, -1.7, -0.3, -0.7])
    # the shared scale is the larger max |w|: the negative -0.9 sets it, not max w = 0.8
    assert shared_scale(a, b) == pytest.approx(0.9)


# -- the CLI: attnlab compare with a signed run ------------------------------------------------


def _signed_runs(root: Path) -> tuple[Path, Path, Path]:
    """A signed run, a copy of it (same weights: same target tokens) and a softmax run."""
    signed = saved_run(root, "signed", [*TRANSFORMER, f"model.cross_attention={SIGNED}"])
    twin = root / "signed-b"
    shutil.copytree(signed, twin)
    return signed, twin, saved_run(root, "softmax", TRANSFORMER)


def test_cli_compare_signed_runs_json_and_text(tmp_path: Path) -> None:
    with registered():
        signed, twin, softmax = _signed_runs(tmp_path)
        runner = CliRunner()
        result = runner.invoke(cli, ["compare", str(signed), str(twin), "--index", "1", "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["normalisation"] == {"a": "signed", "b": "signed"}
        assert report["same_target"] and report["js"] is None
        assert report["js_note"] == JS_UNDEFINED
        weights = np.asarray(report["a"]["map"])
        assert (weights < 0).any()  # the signed test variant's rows sum to 0
        assert report["vmax"] == pytest.approx(np.abs(weights).max(), abs=1e-4)
        assert np.array_equal(np.asarray(report["difference"]), np.zeros_like(weights))

        text = runner.invoke(cli, ["compare", str(signed), str(twin), "--index", "1"])
        assert text.exit_code == 0, text.output
        assert JS_UNDEFINED in text.output and "JS —" in text.output
        assert "A − B" in text.output and "signed weights" in text.output  # diverging legends

        mixed = runner.invoke(cli, ["compare", str(signed), str(softmax), "--index", "1"])
        assert mixed.exit_code == 0, mixed.output
        assert "row normalisation: A: signed · B: softmax" in mixed.output
        assert "JS 0." not in mixed.output  # no JS value for a signed side, whatever the targets
        mixed_json = json.loads(
            runner.invoke(
                cli, ["compare", str(signed), str(softmax), "--index", "1", "--json"]
            ).output
        )
        assert mixed_json["normalisation"] == {"a": "signed", "b": "softmax"}
        assert mixed_json["js"] is None and mixed_json["js_note"] == JS_UNDEFINED


def test_cli_compare_softmax_runs_keep_js_without_a_kinds_header(tmp_path: Path) -> None:
    run = saved_run(tmp_path, "softmax", TRANSFORMER)
    result = CliRunner().invoke(cli, ["compare", str(run), str(run), "--index", "1"])
    assert result.exit_code == 0, result.output
    assert "row normalisation" not in result.output and "JS 0.000" in result.output


# -- the lab's Compare screen ------------------------------------------------------------------


async def test_compare_screen_with_a_signed_run_shows_no_js(tmp_path: Path) -> None:
    with registered():
        signed, _, _ = _signed_runs(tmp_path)
        shutil.rmtree(tmp_path / "softmax")  # B: the signed copy
        app = make_app(tmp_path, config=tiny_config())
        async with app.run_test(size=SIZE) as pilot:
            await show(app, pilot, signed, index=1)
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, CompareScreen))
            screen = app.screen
            await until(pilot, lambda: screen.report is not None, timeout=120)
            report = screen.report
            assert report["js"] is None and report["same_target"]
            status = str(screen.query_one("#cmp-status", Static).content)
            assert "rows: A signed, B signed" in status
            diff = screen.query_one("#cmp-diff", Static).content
            assert JS_UNDEFINED in diff.title and "JS —" in diff.title
            maps = [screen.query_one(f"#cmp-{k}", AttentionHeatmap) for k in ("a", "b")]
            top = max(float(np.abs(np.asarray(report[k]["map"])).max()) for k in ("a", "b"))
            for heatmap in maps:  # the diverging scale, one ±max |w| for both
                assert heatmap.normalisation == "signed"
                assert heatmap.vmax == pytest.approx(top)
