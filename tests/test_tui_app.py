"""Pilot tests of the lab's screens (no real training here; see test_tui_e2e.py for that)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _tui_support import lab_config, mounted, ready, run_events, until, write_run
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Select

from attnlab.experiment import apply_overrides
from attnlab.nn.attention import ATTENTION, Attention, AttentionSpec, HParam
from attnlab.tui.app import make_app
from attnlab.tui.help import HelpScreen, QuitScreen
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.runs import RunsView
from attnlab.tui.views.setup import SetupView, field_id, hparam_id
from attnlab.tui.views.train import TrainView
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.tui.widgets.plots import MetricPlot

SIZE = (100, 30)


@pytest.fixture
def dummy_variant():
    spec = AttentionSpec(
        name="dummy-test-attention",
        roles=frozenset({"rnn-cross", "cross"}),
        formula="score(s, h) = 42",
        complexity="O(1)",
        known_for="existing only in a test",
        hparams=(HParam("dummy_knob", 3, "a test knob", low=1, high=5),),
    )

    class DummyAttention(Attention):
        """score = 42 (a variant that exists only in this test)."""

        def __init__(
            self,
            query_dim: int,
            key_dim: int,
            heads: int = 1,
            dropout: float = 0.0,
            dummy_knob: int = 3,
        ):
            super().__init__()
            self.out_dim = key_dim

    DummyAttention.spec = spec
    ATTENTION.add(spec.name, DummyAttention, spec)
    yield spec
    ATTENTION.remove(spec.name)


async def test_a_newly_registered_variant_appears_in_the_setup_menu(
    tmp_path: Path, dummy_variant
) -> None:
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        select = app.query_one(f"#{field_id('model.attention')}", Select)
        values = [value for _, value in select._options]
        assert dummy_variant.name in values
        assert "bahdanau" in values
        # Choosing it shows its formula and its hyper-parameter as an input with its range.
        select.value = dummy_variant.name
        await mounted(pilot, app, f"#{hparam_id('dummy_knob', dummy_variant.name)}")
        assert "score(s, h) = 42" in str(app.query_one("#variant-info").content)
        knob = app.query_one(f"#{hparam_id('dummy_knob', dummy_variant.name)}")
        assert knob.value == "3" and knob.placeholder == "[1, 5]"
        setup = app.query_one(SetupView)
        assert setup.error is None and setup.config.model.attn_params.get("dummy_knob", 3) == 3
        knob.value = "9"  # outside its registered range [1, 5]
        await pilot.pause()
        # A variant owns its hyper-parameters: the error names the qualified key.
        assert knob.has_class("invalid") and "model.dummy-test-attention.dummy_knob" in setup.error


async def test_invalid_input_is_marked_and_never_starts_a_run(tmp_path: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(
        "attnlab.launch.TrainingProcess.start", classmethod(lambda *a, **k: started.append(a))
    )
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        hidden = app.query_one(f"#{field_id('model.hidden')}")
        hidden.value = "lots"
        await pilot.pause()
        assert hidden.has_class("invalid")
        assert app.query_one("#train-button").disabled
        assert "model.hidden" in setup.error
        await pilot.press("escape", "t")  # the Train key
        await pilot.pause()
        await pilot.click("#train-button")
        await pilot.pause()
        # A cross-field error is marked too: min length above max length.
        hidden.value = "16"
        app.query_one(f"#{field_id('data.min_len')}").value = "50"
        await pilot.pause()
        assert app.query_one(f"#{field_id('data.min_len')}").has_class("invalid")
        assert "data.min_len" in setup.error
        await pilot.press("escape", "t")
        await pilot.pause()
    assert started == []
    assert not any(tmp_path.iterdir())


async def test_train_view_follows_a_run_and_updates_plots_samples_and_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "elsewhere"
    app = make_app(tmp_path, config=lab_config(), poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        events = run_events(steps=40, eval_every=20, done=None)
        write_run(tmp_path, "elsewhere", events[:4])  # start + 3 steps, no eval yet
        train.follow_run(run_dir)
        await pilot.pause()
        loss_plot = app.query_one("#loss-plot", MetricPlot)
        metric_plot = app.query_one("#metric-plot", MetricPlot)
        table = app.query_one("#samples", DataTable)
        assert loss_plot.points > 0 and metric_plot.points == 0 and table.row_count == 0
        # The trainer appends an eval and its samples: the next poll redraws.
        with open(run_dir / "events.jsonl", "a") as handle:
            import json

            for event in events[4:]:
                handle.write(json.dumps({"time": 0, **event}) + "\n")
        await until(pilot, lambda: table.row_count == 2)
        assert metric_plot.points == 3 * 2  # BLEU, chrF, exact at two evals
        assert "step 40/30" in str(app.query_one("#train-status").content)
        assert any("eval dev" in line for line in app.query_one("#event-log").lines)
        # Enter on a sample opens its attention in Inspect.
        table.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one("#tabs").active == "inspect"
        assert app.query_one(AttentionHeatmap).shape == (4, 4)


async def test_a_training_process_that_dies_leaves_the_app_usable(tmp_path: Path) -> None:
    def dying(preset: Path, runs_dir: Path, name: str) -> list[str]:
        return [
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('RuntimeError: CUDA out of memory\\n'); sys.exit(1)",
        ]

    app = make_app(tmp_path, config=lab_config(), command_factory=dying, poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "t")
        train = app.query_one(TrainView)
        await until(pilot, lambda: train.follower is not None and train.follower.state == "failed")
        status = str(app.query_one("#train-status").content)
        assert "failed" in status and "CUDA out of memory" in status
        assert any("exited with code 1" in line for line in app.query_one("#event-log").lines)
        # Still usable: switch tabs, edit Setup, and start again (it fails again, visibly).
        await pilot.press("1")
        assert app.query_one("#tabs").active == "setup"
        app.query_one(f"#{field_id('model.hidden')}").value = "24"
        await pilot.pause()
        assert app.query_one(SetupView).error is None
        await pilot.press("escape", "t")
        await until(
            pilot, lambda: train.follower.state == "failed" and train.process.poll() is not None
        )
        assert app.is_running


async def test_quitting_while_training_asks_stop_or_keep(tmp_path: Path) -> None:
    def sleeper(preset: Path, runs_dir: Path, name: str) -> list[str]:
        # Creates its run directory like the trainer, then waits to be told to stop.
        code = "import os, sys, time; os.makedirs(sys.argv[1], exist_ok=True); time.sleep(60)"
        return [sys.executable, "-c", code, str(runs_dir / name)]

    app = make_app(tmp_path, config=lab_config(), command_factory=sleeper, poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "t")
        await pilot.pause()
        train = app.query_one(TrainView)
        assert train.active
        await until(pilot, lambda: train.process.run_dir.is_dir())
        await pilot.press("p")
        assert (train.process.run_dir / "control").read_text() == "pause\n"
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")  # cancel: keep the app
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, QuitScreen)
        # A second run while one is active goes to the queue.
        await pilot.press("t")
        assert len(train.queue) == 1
        await pilot.press("ctrl+q")
        await pilot.pause()
        await pilot.press("s")  # stop & save: writes the stop word, then quits
        await pilot.pause()
        assert (train.process.run_dir / "control").read_text() == "stop\n"
        train.process.kill()


async def test_help_and_palette_commands(tmp_path: Path) -> None:
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for expected in (
            "Train",
            "Queue every variant",
            "Stop training",
            "Go to Inspect",
            "Toggle light/dark",
        ):
            assert expected in titles
        app.action_toggle_theme()
        assert app.theme == "textual-light"


async def test_runs_table_lists_runs_and_compares_marked_ones(tmp_path: Path) -> None:
    write_run(tmp_path, "run-a")
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        runs = app.query_one(RunsView)
        table = app.query_one("#runs-table", DataTable)
        assert table.row_count == 1
        # A run started elsewhere appears on the next refresh.
        write_run(tmp_path, "run-b", run_events(steps=20, eval_every=10))
        runs.refresh_runs()
        assert table.row_count == 2
        table.focus()
        await pilot.press("space")
        await pilot.press("down", "space")
        assert len(runs.marked) == 2
        assert app.query_one("#compare-curves", MetricPlot).points == 2 + 2  # two evals each


class HeatmapApp(App):
    def compose(self) -> ComposeResult:
        yield AttentionHeatmap(id="hm")


async def test_heatmap_cursor_reports_exact_weights_and_scrolls_large_matrices() -> None:
    app = HeatmapApp()
    moves = []
    async with app.run_test(size=(40, 12), message_hook=lambda m: moves.append(m)) as pilot:
        heatmap = app.query_one(AttentionHeatmap)
        rng = np.random.default_rng(0)
        weights = rng.dirichlet(np.ones(30), size=25)  # 25 target x 30 source: bigger than the view
        heatmap.set_matrix(weights, [f"t{i}" for i in range(25)], [f"s{j}" for j in range(30)])
        heatmap.focus()
        await pilot.pause()
        assert heatmap.shape == (25, 30)
        await pilot.press(*["down"] * 20, *["right"] * 25)
        await pilot.pause()
        assert heatmap.cursor == (20, 25)
        cells = [m.cell for m in moves if isinstance(m, AttentionHeatmap.CursorMoved)]
        assert cells[-1].weight == pytest.approx(weights[20, 25])
        assert (cells[-1].row_label, cells[-1].col_label) == ("t20", "s25")
        # The view scrolled so the cursor is visible.
        assert heatmap.scroll_offset.y > 0 and heatmap.scroll_offset.x > 0
        # Half-block packs two rows per line.
        heatmap.half_block = True
        await pilot.pause()
        assert heatmap.virtual_size.height == 13 and heatmap.virtual_size.width == 30


async def test_inspect_steps_through_decoding_rows(tmp_path: Path) -> None:
    from attnlab.tui.follow import Sample

    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        inspect = app.query_one(InspectView)
        sample = Sample(
            0,
            ["a", "b", "c"],
            ["c", "b", "a"],
            ["c", "b", "a"],
            [[0.1, 0.1, 0.8], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1]],
        )
        inspect.show_logged_sample(tmp_path, sample)
        await pilot.press("3")
        heatmap = app.query_one(AttentionHeatmap)
        assert heatmap.shape == (3, 3)
        await pilot.press("n")
        assert heatmap.shape == (1, 3)  # one decoding step shown
        assert "row 0: c" in str(app.query_one("#insp-bars").content)
        await pilot.press("n", "n")
        assert heatmap.shape == (3, 3) and heatmap.cursor[0] == 2
        await pilot.press("b")
        assert heatmap.shape == (2, 3)
        await pilot.press("a")
        assert heatmap.shape == (3, 3)
        assert "3×3" in str(app.query_one("#insp-diag").content)


async def test_transformer_has_one_attention_menu_per_role_and_presets_round_trip(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        app.query_one(f"#{field_id('model.arch')}", Select).value = "transformer"
        await pilot.pause()
        assert not app.query_one(f"#{field_id('model.attention')}").parent.display
        assert not app.query_one(f"#{field_id('model.hidden')}").parent.display
        roles = {
            "model.self_attention": "self",
            "model.decoder_self_attention": "causal-self",
            "model.cross_attention": "cross",
        }
        for key, role in roles.items():
            select = app.query_one(f"#{field_id(key)}", Select)
            assert select.parent.display
            offered = [value for _, value in select._options if value != ""]
            assert offered == [e.name for e in ATTENTION.entries() if role in e.meta.roles]
        # Only causal-capable variants are offered for decoder self-attention.
        decoder = [
            v
            for _, v in app.query_one(
                f"#{field_id('model.decoder_self_attention')}", Select
            )._options
        ]
        non_causal = [e.name for e in ATTENTION.entries() if "causal-self" not in e.meta.roles]
        assert not set(decoder) & set(non_causal)
        setup = app.query_one(SetupView)
        assert setup.error is None and setup.config.model.arch == "transformer"
        # Every variant with hyper-parameters: its inputs appear with its own registry defaults.
        wrong = {}  # variant -> (hyper-parameter, shown, its default)
        for windowed in [
            e for e in ATTENTION.entries() if "self" in e.meta.roles and e.meta.hparams
        ]:
            app.query_one(f"#{field_id('model.self_attention')}", Select).value = windowed.name
            # the form rebuilds its inputs, then the config, from the Select's Changed
            # message: wait for both
            await mounted(
                pilot,
                app,
                *(f"#{hparam_id(hp.name, windowed.name)}" for hp in windowed.meta.hparams),
            )
            await until(pilot, lambda n=windowed.name: setup.config.model.self_attention == n)
            for hp in windowed.meta.hparams:
                shown = app.query_one(f"#{hparam_id(hp.name, windowed.name)}").value
                typed = shown if isinstance(hp.default, str) else type(hp.default)(float(shown))
                if hp.validate(typed) != hp.default:
                    wrong[windowed.name] = (hp.name, shown, hp.default)
            assert setup.error is None and setup.config.model.self_attention == windowed.name
        assert not wrong, wrong
        # Save the experiment as a preset file, change a field, load it back.
        preset = tmp_path / "mine.toml"
        app.query_one("#preset-path").value = str(preset)
        await pilot.click("#preset-save")
        assert preset.is_file()
        d_model = app.query_one(f"#{field_id('model.d_model')}")
        original = d_model.value
        d_model.value = "64"
        await pilot.pause()
        assert setup.config.model.d_model == 64
        await pilot.click("#preset-load")
        await pilot.pause()
        assert setup.config.model.arch == "transformer"
        assert app.query_one(f"#{field_id('model.d_model')}").value == original
    if wrong:
        pytest.xfail(f"shared hyper-parameter defaults, issue 12 item 2: {wrong}")


async def test_queued_runs_train_one_after_another(tmp_path: Path) -> None:
    # A stand-in trainer: writes start + done events to its run directory and exits.
    code = (
        "import json, os, sys; d = sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
        "with open(os.path.join(d, 'events.jsonl'), 'w') as f:\n"
        "    f.write(json.dumps({'type': 'start', 'time': 0, 'step': 0, "
        "'name': os.path.basename(d)}) + '\\n')\n"
        "    f.write(json.dumps({'type': 'done', 'time': 0, 'step': 0, "
        "'reason': 'finished'}) + '\\n')\n"
    )

    def quick(preset: Path, runs_dir: Path, name: str) -> list[str]:
        return [sys.executable, "-c", code, str(runs_dir / name)]

    app = make_app(tmp_path, config=lab_config(), command_factory=quick, poll_seconds=0.05)
    finished = []
    async with app.run_test(
        size=SIZE,
        message_hook=lambda m: finished.append(m) if isinstance(m, TrainView.RunFinished) else None,
    ) as pilot:
        await ready(app, pilot)
        train = app.query_one(TrainView)
        app.query_one(SetupView).request_training(queue=True)
        app.query_one(SetupView).request_training(queue=True)
        await pilot.pause()
        assert len(train.queue) == 2 and train.process is None  # queued, nothing started yet
        await pilot.press("ctrl+t")  # a third: starts now, the queue follows
        await until(pilot, lambda: len({m.run_dir for m in finished}) == 3)
        assert train.queue == [] and all(m.state == "finished" for m in finished)


async def test_each_variant_shows_its_own_default_for_a_shared_name(tmp_path: Path) -> None:
    """A variant added in its own file reuses ``window``: Setup shows each variant's default
    (the registry's), and the experiment it builds uses it (sliding-window: 16, not
    local-m's 10)."""
    import _twin_variant as twin

    twin.register()
    try:
        app = make_app(tmp_path, config=lab_config())
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            setup = app.query_one(SetupView)
            attention = app.query_one(f"#{field_id('model.attention')}", Select)
            for name, default in ((twin.SPEC.name, twin.TWIN_DEFAULT), ("local-m", 10)):
                attention.value = name
                await mounted(pilot, app, f"#{hparam_id('window', name)}")
                assert app.query_one(f"#{hparam_id('window', name)}").value == str(default)
                assert (
                    setup.error is None and setup.config.model.params_for(name)["window"] == default
                )
            app.query_one(f"#{field_id('model.arch')}", Select).value = "transformer"
            await pilot.pause()
            app.query_one(f"#{field_id('model.self_attention')}", Select).value = "sliding-window"
            app.query_one(
                f"#{field_id('model.decoder_self_attention')}", Select
            ).value = twin.SPEC.name
            await mounted(
                pilot,
                app,
                f"#{hparam_id('window', 'sliding-window')}",
                f"#{hparam_id('window', twin.SPEC.name)}",
            )
            expected = ATTENTION.get("sliding-window").meta.hparam("window").default
            assert app.query_one(f"#{hparam_id('window', 'sliding-window')}").value == str(expected)
            assert app.query_one(f"#{hparam_id('window', twin.SPEC.name)}").value == "7"
            assert setup.error is None
            assert setup.config.model.params_for("sliding-window")["window"] == expected == 16
            assert setup.config.model.params_for(twin.SPEC.name)["window"] == 7
            # Editing one variant's value leaves the other's alone.
            app.query_one(f"#{hparam_id('window', twin.SPEC.name)}").value = "4"
            await until(pilot, lambda: setup.config.model.params_for(twin.SPEC.name)["window"] == 4)
            assert setup.config.model.params_for("sliding-window")["window"] == 16
    finally:
        twin.unregister()


async def test_a_new_architecture_gets_its_slot_menu_with_no_lab_edit(tmp_path: Path) -> None:
    from attnlab.nn.archs import ARCHITECTURES, ArchSpec, AttentionSlot

    spec = ArchSpec(
        "a test architecture with one attention slot",
        check=lambda config: None,
        slots=(AttentionSlot("model.cross_attention", "cross", "cross", "its attention", "attn"),),
    )
    ARCHITECTURES.add("dummy-test-arch", lambda config, s, t: None, spec)
    try:
        app = make_app(tmp_path, config=lab_config())
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            arch = app.query_one(f"#{field_id('model.arch')}", Select)
            assert "dummy-test-arch" in [value for _, value in arch._options]
            arch.value = "dummy-test-arch"
            await pilot.pause()
            slot = app.query_one(f"#{field_id('model.cross_attention')}", Select)
            assert slot.parent.display  # its slot's menu, offering the variants of its role
            offered = [value for _, value in slot._options]
            assert offered == [e.name for e in ATTENTION.entries() if "cross" in e.meta.roles]
            for other in (
                "model.attention",
                "model.hidden",
                "model.d_model",
                "model.self_attention",
            ):
                assert not app.query_one(f"#{field_id(other)}").parent.display
            slot.value = "performer"
            await pilot.pause()
            setup = app.query_one(SetupView)
            assert setup.error is None and setup.config.model.arch == "dummy-test-arch"
            assert "dummy-test-arch performer" in str(app.query_one("#setup-status").content)
            groups = [str(s.content) for s in app.query(".hparam-group")]
            assert groups == ["attn: performer"]
    finally:
        ARCHITECTURES.remove("dummy-test-arch")


@pytest.mark.parametrize("model", ["bahdanau", "transformer-differential"])
async def test_every_setup_side_control_can_be_reached_at_80x24(tmp_path: Path, model) -> None:
    # The side panel did not scroll: at 80x24 its preset Load / Save buttons (and with a
    # Transformer's longer formulas, the preset menu and file field) lay below the screen.
    overrides = {
        "bahdanau": (),
        "transformer-differential": (
            "model.arch=transformer",
            "model.self_attention=differential",
            "model.d_model=16",
            "model.heads=2",
        ),
    }[model]
    app = make_app(tmp_path, config=apply_overrides(lab_config("side"), list(overrides)))
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        footer = app.screen.size.height - 1
        side = ("#train-button", "#preset-select", "#preset-path", "#preset-load", "#preset-save")
        for wid in side:
            widget = app.query_one(wid)
            app.set_focus(widget)
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()  # focus scrolls it into view
            region = widget.region
            assert region.height > 0 and region.bottom <= footer, (wid, region)


async def test_the_cursor_line_shows_weight_and_position_whole_at_80x24(tmp_path: Path) -> None:
    # One row high, "(row 0, col 1)" (or, with long words, the weight itself) was cut off at
    # 80 columns; the line now wraps onto up to three rows.
    from rich.console import Console
    from rich.text import Text

    from attnlab.tui.follow import Sample

    run = write_run(tmp_path, "words")
    src = ["Donaudampfschifffahrtsgesellschaft", "Kapitän", "Mütze"]
    hyp = ["captain's-hat-of-the-danube-steamship-company", "cap"]
    weights = [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        app.query_one(InspectView).show_logged_sample(run, Sample(0, src, hyp, hyp, weights))
        await pilot.press("3", "right")
        await pilot.pause()
        cell = app.query_one("#insp-cell")
        text = Text.from_markup(str(cell.content))
        assert "weight 0.2000" in text.plain and text.plain.endswith("(row 0, col 1)")
        lines = text.wrap(Console(), cell.content_region.width)
        shown = app.query_one("#insp-cell-row").content_region  # what the row does not clip
        assert len(lines) == 3 and shown.height >= len(lines), (len(lines), shown)


async def test_runs_of_one_preset_are_told_apart_in_the_table_and_menus(tmp_path: Path) -> None:
    names = [f"reverse-rnn-bahdanau-20261204-2018{s:02d}" for s in (9, 13, 40)]
    for name in names:
        write_run(tmp_path, name)
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        runs = app.query_one(RunsView)
        runs.refresh_runs(force=True)
        await pilot.pause()
        table = app.query_one("#runs-table", DataTable)
        shown = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert len(set(shown)) == 3, shown
        await pilot.press("3")
        await pilot.pause()
        menu = app.query_one("#insp-run", Select)
        labels = [str(prompt) for prompt, _value in menu._options if _value != Select.BLANK]
        assert len(set(labels)) == 3, labels


async def test_loading_a_preset_file_that_is_not_utf8_is_a_notice_not_a_crash(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')  # saved as Latin-1: tomllib raised UnicodeDecodeError
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await app.query_one(SetupView).load(str(bad))
        await pilot.pause()
        assert app.is_running
        notices = [n.message for n in app._notifications]
        assert notices == [f"{bad}:1: invalid UTF-8 (byte 0xe9); save the file as UTF-8"]


async def test_the_inspect_hint_is_whole_at_80x24(tmp_path: Path) -> None:
    from rich.console import Console
    from rich.text import Text

    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        title = app.query_one("#insp-title")
        text = Text.from_markup(str(title.content))
        assert text.plain.endswith("Enter on a sample in Train.")
        lines = text.wrap(Console(), title.content_region.width)
        assert title.content_region.height >= len(lines) > 1  # wrapped, not cut with "…"


async def test_a_huge_loss_in_a_damaged_log_does_not_take_the_lab_down(tmp_path: Path) -> None:
    # plotext overflowed (OverflowError: cannot convert float infinity to integer) on a
    # finite but huge 1e308 loss while rendering, and the lab exited.
    events = run_events()
    events.insert(-1, {"type": "step", "time": 9.0, "step": 19, "loss": 1e308, "lr": 1e308})
    run = write_run(tmp_path, "huge", events)
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        app.query_one(TrainView).follow_run(run)
        await until(pilot, lambda: app.query_one("#loss-plot", MetricPlot).points > 0)
        await pilot.pause()
        assert app.is_running
        plot = app.query_one("#loss-plot", MetricPlot)
        logged = sum(1 for _label, _xs, ys in plot.series for y in ys if y is not None)
        assert plot.points == logged - 1  # every point but the 1e308 one


async def test_step_mode_scrolls_the_bars_to_the_rows_largest_weight(tmp_path: Path) -> None:
    """A 60-token source runs past the bar panel at 80×24: the attended token's bar is in
    the panel's visible window. Its lines are found from the panel's own rendered height (a
    title line, 60 bars of equal height, the uniform legend), whatever the wrapping."""
    from attnlab.tui.follow import Sample

    src = [f"s{j}" for j in range(60)]
    weights = np.full((2, 60), 0.1 / 59)
    weights[0, 50] = weights[1, 3] = 0.9
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        app.query_one(InspectView).show_logged_sample(
            tmp_path, Sample(0, src, ["x", "y"], ["x", "y"], weights.tolist())
        )
        await pilot.press("3")
        box = app.query_one("#insp-bars-box")
        for key, attended in (("n", 50), ("n", 3)):  # row 0 attends s50, row 1 s3
            await pilot.press(key)
            await pilot.pause()
            per_bar = (box.virtual_size.height - 2) // 60
            first = 1 + attended * per_bar
            top, height = box.scroll_offset.y, box.scrollable_content_region.height
            assert box.max_scroll_y > 0 and per_bar >= 1
            assert top <= first and first + per_bar <= top + height, (top, height, per_bar)
