"""Inspect's attribution maps (issue 15): the engine adds rollout / relevancy / gradient / norm
beside the raw maps, and the "m" key cycles them in the lab."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _tiny import TINY_TRANSFORMER
from _tui_support import ready
from test_tui_inspect_engine import saved_run

from attnlab.tui.app import make_app
from attnlab.tui.inspect_engine import METHOD_KINDS, InspectRequest, analyse
from attnlab.tui.views.inspect import InspectReady, InspectView
from attnlab.tui.widgets.heatmap import AttentionHeatmap

TRANSFORMER = [
    *TINY_TRANSFORMER,
    "data.max_len=5",
]


def test_engine_adds_method_maps_shaped_like_cross(tmp_path: Path) -> None:
    result = analyse(InspectRequest(saved_run(tmp_path, TRANSFORMER), "best", "dev", 2))
    hyp = result.hypotheses[0]
    for method in METHOD_KINDS:
        assert hyp.maps[method].shape == (1, 1, *hyp.maps["cross"].shape[2:])
        assert hyp.labels[method] == hyp.labels["cross"]
    assert np.isfinite(hyp.maps["gradient"]).all() and (hyp.maps["gradient"] >= 0).all()


async def test_m_cycles_raw_rollout_relevancy_gradient_norm(tmp_path: Path) -> None:
    from _tui_support import tiny_config

    run_dir = saved_run(tmp_path, TRANSFORMER)
    result = analyse(InspectRequest(run_dir, "best", "dev", 2))
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        inspect = app.query_one(InspectView)
        inspect.post_message(InspectReady(result))
        await pilot.pause()
        inspect.query_one("#insp-kind").value = "cross"
        await pilot.pause()
        seen = []
        for _ in range(5):
            inspect.focus()
            await pilot.press("m")
            await pilot.pause()
            seen.append(inspect.current_kind)
        assert seen == ["rollout", "relevancy", "gradient", "norm", "cross"]
        shape = app.query_one(AttentionHeatmap).shape
        assert shape == result.hypotheses[0].maps["cross"].shape[2:]
