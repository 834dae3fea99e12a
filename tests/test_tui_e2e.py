"""The lab's main flow with a real child training process (slow: it trains a tiny model).

Setup menu -> train a few steps -> plot and samples update -> stop saves a checkpoint ->
Inspect shows a (target x source) heatmap for a sample -> Export writes a bundle that
``attnlab translate`` loads.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from _tui_support import lab_config
from _tui_support import until as until_shared
from textual.widgets import DataTable, Select

from attnlab.experiment import apply_overrides
from attnlab.tui.app import make_app
from attnlab.tui.views.export import ExportView
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.setup import field_id
from attnlab.tui.views.train import TrainView
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.tui.widgets.plots import MetricPlot


async def until(pilot, condition, timeout: float = 120.0) -> None:
    await until_shared(pilot, condition, timeout, step=0.1)


@pytest.mark.slow
async def test_choose_train_stop_inspect_export(tmp_path: Path) -> None:
    # Long enough that it is still running when we stop it after the first eval.
    config = apply_overrides(lab_config(), ["train.max_steps=5000", "train.eval_every=10"])
    app = make_app(tmp_path / "runs", config=config, poll_seconds=0.1)
    async with app.run_test(size=(100, 30)) as pilot:
        await asyncio.wait_for(app.menus_ready.wait(), 60)
        # Choose a variant from the attention menu (keyboard: open it, type to search, Enter).
        select = app.query_one(f"#{field_id('model.attention')}", Select)
        select.focus()
        await pilot.press("enter", *"luong-general", "enter")
        await pilot.pause()
        assert select.value == "luong-general"
        await pilot.press("ctrl+t")  # Train, from anywhere (t works when no field has focus)
        train = app.query_one(TrainView)
        assert train.process is not None and train.process.config.model.attention == "luong-general"
        table = app.query_one("#samples", DataTable)
        await until(
            pilot,
            lambda: table.row_count > 0 and app.query_one("#metric-plot", MetricPlot).points > 0,
        )
        assert app.query_one("#loss-plot", MetricPlot).points > 0
        await pilot.press("x")  # stop: the trainer saves a checkpoint and exits
        await until(pilot, lambda: train.follower.finished and train.process.poll() is not None)
        assert train.follower.state == "stopped"
        run_dir = train.process.run_dir
        assert (run_dir / "checkpoints" / "last" / "meta.json").is_file()

        # Inspect: sample 0 of the dev split with the saved model.
        inspect = app.query_one(InspectView)
        app.open_in_inspect(run_dir)
        await until(pilot, lambda: inspect.result is not None)
        result = inspect.result
        hyp = result.hypotheses[0]
        rows = len(hyp.tokens) + 1  # one row per target token + the step that emits </s>
        assert app.query_one(AttentionHeatmap).shape == (rows, len(result.src))
        assert result.alignment_accuracy is not None  # reverse has gold alignments

        # Export, then translate with the bundle in a separate process.
        await pilot.press("5")
        export = app.query_one(ExportView)
        bundle = tmp_path / "bundle.safetensors"
        app.query_one("#export-path").value = str(bundle)
        await pilot.click("#export-go")
        await until(pilot, lambda: export.last_export is not None)
        assert bundle.is_file()
        # the command sits on its own unwrapped line (#export-command), with a Copy button
        assert f"attnlab translate {bundle}" in str(app.query_one("#export-command").content)
        copied: list[str] = []
        app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
        await pilot.click("#export-copy")
        assert copied == [export.command] and copied[0].startswith(f"attnlab translate {bundle}")
    done = subprocess.run(
        [sys.executable, "-m", "attnlab", "translate", str(bundle), " ".join(result.src)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # The bundle translates exactly as the lab's own (greedy) decoding of the saved model did.
    assert done.stdout.strip() == " ".join(hyp.tokens)
