"""The lab's state follows what the user chose (issue 13 items 1-5, 12).

Run identity (one naming rule for the CLI and the lab), progress from the first step, the
export path and overwrite question, Inspect's run choice, the visible training queue, focus.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from _tui_support import T0, lab_config, ready, run_events, until, write_events, write_run
from textual.widgets import Input, OptionList, Select, Static, Tabs

from attnlab.config import load_toml
from attnlab.experiment import apply_overrides
from attnlab.launch import run_name_for as lab_run_name
from attnlab.naming import experiment_name, run_name_for
from attnlab.tui.app import make_app
from attnlab.tui.follow import RunFollower, Sample
from attnlab.tui.help import HELP_TEXT, ConfirmScreen
from attnlab.tui.views.inspect import InspectView
from attnlab.tui.views.setup import SetupView, field_id
from attnlab.tui.views.train import TrainView
from attnlab.tui.widgets.heatmap import AttentionHeatmap

SIZE = (100, 30)
ONE_COMPONENT = re.compile(r"^[A-Za-z0-9._-]+$")


# -- 2. run identity ------------------------------------------------------------------------


def _transformer(*overrides: str):
    return apply_overrides(lab_config(), ["data.task=copy", "model.arch=transformer", *overrides])


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), "reverse-rnn-bahdanau"),
        (("model.attention=luong-general",), "reverse-rnn-luong-general"),
        (("data.task=copy", "model.arch=transformer"), "copy-transformer-scaled-dot"),
        # linformer cannot be causal: the engine builds scaled-dot for the decoder self-attention
        (
            ("data.task=copy", "model.arch=transformer", "model.self_attention=linformer"),
            "copy-transformer-linformer_scaled-dot_scaled-dot",
        ),
        # performer can: "" means performer in the decoder too
        (
            (
                "data.task=copy",
                "model.arch=transformer",
                "model.self_attention=performer",
                "model.cross_attention=linformer",
            ),
            "copy-transformer-performer_performer_linformer",
        ),
        (
            (
                "data.task=copy",
                "model.arch=transformer",
                "model.self_attention=relative",
                "model.decoder_self_attention=alibi",
                "model.cross_attention=gated",
            ),
            "copy-transformer-relative_alibi_gated",
        ),
    ],
)
def test_run_names_describe_every_attention_role(overrides, expected) -> None:
    config = apply_overrides(lab_config("a-stale-preset-name"), list(overrides))
    assert experiment_name(config) == expected
    now = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    name = run_name_for(config, now)
    assert name == f"{expected}-20260102-030405" and ONE_COMPONENT.match(name)


def test_cli_and_lab_name_runs_by_the_same_rule(tmp_path: Path) -> None:
    from attnlab.nn.transformer import decoder_self_attention_name

    config = _transformer("model.self_attention=linformer")
    assert decoder_self_attention_name(config.model) == "scaled-dot"  # the rule the name follows
    assert lab_run_name(config, tmp_path, now=0) == run_name_for(config, 0)


def test_cli_train_names_the_run_by_the_shared_rule(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    from attnlab import cli

    seen = {}

    class Stop(Exception):
        pass

    def fake_new_run_dir(out, name, what="run name"):  # (out, name, what) since fix-rundir
        seen["name"] = name
        raise Stop

    monkeypatch.setattr("attnlab.runs.new_run_dir", fake_new_run_dir)
    result = CliRunner().invoke(
        cli.cli,
        [
            "train",
            "--preset",
            "reverse-bahdanau",
            "--set",
            "model.attention=luong-general",
            "--out",
            str(tmp_path),
        ],
    )
    assert isinstance(result.exception, Stop)
    assert re.fullmatch(r"reverse-rnn-luong-general-\d{8}-\d{6}", seen["name"])


def test_run_names_obey_the_run_name_rule_with_room_for_a_suffix(tmp_path: Path) -> None:
    import dataclasses

    from attnlab.config import NAME_MAX, check_name

    config = lab_config()
    long = config.replace(data=dataclasses.replace(config.data, task="t/ä " * 60))
    name = lab_run_name(long, tmp_path, now=0)
    assert check_name(name, "name") == name and len(name) <= NAME_MAX - 8  # "-NN" still fits
    assert name.startswith("t-") and "/" not in name and " " not in name
    (tmp_path / name).mkdir()
    assert check_name(lab_run_name(long, tmp_path, now=0), "name").endswith("-2")


async def test_setup_names_a_changed_experiment_and_save_writes_it(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path / "runs", config=lab_config("reverse-bahdanau"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        assert setup.validate_form().name == "reverse-bahdanau"  # unchanged: the preset's name
        app.query_one(f"#{field_id('model.attention')}", Select).value = "luong-general"
        await pilot.pause()
        config = setup.validate_form()
        assert config.name == "reverse-rnn-luong-general"
        assert "luong-general" in config.description and "bahdanau" not in config.description
        app.query_one("#preset-path", Input).value = "saved.toml"
        await pilot.click("#preset-save")
        await pilot.pause()
        saved = load_toml(tmp_path / "saved.toml")
        assert saved["name"] == "reverse-rnn-luong-general"
        assert saved["description"] == config.description


async def test_save_preset_never_writes_over_a_runs_config_even_when_confirmed(
    tmp_path: Path, monkeypatch
) -> None:
    """#43 item 1's audit: Setup's "save preset" wrote ``runs/r/config.toml`` over the run's
    own config once the user confirmed "exists. Overwrite?" (and truncated it in place)."""
    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "runs", "r")
    before = (run / "config.toml").read_bytes()
    app = make_app(tmp_path / "runs", config=lab_config("reverse-bahdanau"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        app.query_one("#preset-path", Input).value = "runs/r/config"
        await pilot.click("#preset-save")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: any(n.title == "Cannot save preset" for n in app._notifications))
        notice = next(n for n in app._notifications if n.title == "Cannot save preset")
        assert "is a file of the run or study directory" in str(notice.message)
    assert (run / "config.toml").read_bytes() == before


async def test_train_header_names_the_run_not_the_preset(tmp_path: Path) -> None:
    run = write_run(tmp_path, "reverse-rnn-luong-general-20260101-000000")  # start event: "tiny"
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        app.query_one(TrainView).follow_run(run)
        await pilot.pause()
        status = str(app.query_one("#train-status", Static).content)
        assert status.startswith("[b]reverse-rnn-luong-general-20260101-000000[/]")


def test_runs_model_column_lists_every_role(tmp_path: Path) -> None:
    from attnlab.runs import summarize_run

    config = _transformer("model.self_attention=linformer")
    run = tmp_path / "r"
    write_run(tmp_path, "r")
    from attnlab.config import dumps_toml

    (run / "config.toml").write_text(dumps_toml(config), encoding="utf-8")
    # The trainer records the roles it built (dec-self resolved) in its start event.
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    events[0]["roles"] = {
        "arch": "transformer",
        "enc_self": "linformer",
        "dec_self": "scaled-dot",
        "cross": "scaled-dot",
    }
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    assert summarize_run(run).attention == "linformer/scaled-dot/scaled-dot"


# -- 5. progress ----------------------------------------------------------------------------


def test_elapsed_ticks_from_the_start_and_the_final_step_comes_from_done(tmp_path: Path) -> None:
    start = {"type": "start", "step": 0, "name": "x", "max_steps": 100}
    write_events(tmp_path, [start])  # written at T0
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.live_elapsed_s(T0 + 7.0) == pytest.approx(7.0)  # no step event yet
    assert follower.eta_s(T0 + 7.0) is None
    # One step logged (its time is T0 too): nothing timed yet (start-up is no rate), no ETA.
    write_events(tmp_path, [{"type": "step", "step": 2, "loss": 1.0, "elapsed_s": 2.0}])
    follower.poll()
    assert follower.eta_s() is None
    # Ten more steps in 10.0 s: 88 steps left at 1.0 s each (timed from the first step event).
    write_events(tmp_path, [{"type": "step", "step": 12, "loss": 1.0, "elapsed_s": 12.0}])
    follower.poll()
    assert follower.eta_s() == pytest.approx(88.0)
    assert follower.eta_s(T0 + 3.0) == pytest.approx(85.0)  # counts down between events
    assert follower.live_elapsed_s(T0 + 3.0) == pytest.approx(15.0)
    write_events(
        tmp_path,
        [
            {"type": "checkpoint", "step": 39, "tag": "last", "path": "p"},
            {"type": "done", "step": 39, "reason": "stopped", "elapsed_s": 40.0},
        ],
    )
    follower.poll()
    assert follower.step == 39 and follower.state == "stopped"
    assert follower.live_elapsed_s(T0 + 999) == 40.0


def test_cli_progress_bar_moves_per_step_with_a_step_rate_eta() -> None:
    from attnlab.cli.train import TrainProgress, _summary_table

    clock = iter([100.0, 110.0])  # started at 100; the step event arrives at 110
    progress = TrainProgress(1000, 0, quiet=False, clock=lambda: next(clock))
    progress.on_event({"type": "step", "step": 50, "loss": 2.0, "tokens_per_s": 900.0})
    task = progress.progress.tasks[0]
    assert task.completed == 50
    assert task.fields["eta"] == "0:03:10"  # 950 steps at 0.2 s each
    progress.on_event({"type": "done", "step": 73, "reason": "interrupted"})
    assert task.completed == 73
    stops = []
    progress.progress.stop = lambda: stops.append(1)
    progress.stop()
    progress.stop()
    assert stops == [1]  # the bar is drawn for the last time once
    from rich.console import Console

    console = Console(record=True, width=80)
    console.print(
        _summary_table(
            {
                "run_dir": "r",
                "reason": "interrupted",
                "step": 73,
                "params": 1,
                "device": "cpu",
                "wall_s": 1.0,
                "best": {},
            }
        )
    )
    text = console.export_text()
    assert "None" not in text and re.search(r"best step\s+│ –", text)
    assert re.search(r"device\s+│ cpu\s+│", text)  # one process: no count
    console = Console(record=True, width=80)
    ddp = {"run_dir": "r", "reason": "finished", "step": 1, "params": 1, "wall_s": 1.0}
    console.print(_summary_table({**ddp, "device": "cpu (1 thread)", "world_size": 2, "best": {}}))
    assert re.search(r"device\s+│ cpu \(1 thread\) × 2 processes", console.export_text())


# -- 1. export ------------------------------------------------------------------------------


def _fake_export(monkeypatch, written: list, forced: list | None = None) -> None:
    from attnlab.errors import AttnlabError

    def export_checkpoint(
        run_dir: Path, out: Path, which: str = "best", force: bool = False
    ) -> Path:
        if out.exists() and not force:  # as the real exporter (fix-ckpt): never silently
            raise AttnlabError(f"{out}: already exists; pass --force to replace it")
        if forced is not None:
            forced.append(force)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"{run_dir.name}:{which}")
        written.append((run_dir.name, out))
        return out

    monkeypatch.setattr("attnlab.runs.export_checkpoint", export_checkpoint)


async def test_export_path_follows_the_run_and_overwriting_asks(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    written: list = []
    forced: list = []
    _fake_export(monkeypatch, written, forced)
    write_run(Path("runs"), "reverse-rnn-bahdanau-a")
    write_run(Path("runs"), "copy-transformer-scaled-dot-b")
    app = make_app(Path("runs"), config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("5")
        run, path = app.query_one("#export-run", Select), app.query_one("#export-path", Input)
        go = app.query_one("#export-go")

        async def click_go() -> None:
            # A Button ignores clicks during its short "-active" press effect: a second click
            # that soon after the first (a fast fake export) was dropped now and then.
            await until(pilot, lambda: not go.has_class("-active"))
            await pilot.click("#export-go")

        # Newest first: b; no "(no runs)" blank entry while runs exist.
        assert run.value == "runs/copy-transformer-scaled-dot-b"
        assert [str(o[0]) for o in run._options] == [
            "copy-transformer-scaled-dot-b",
            "reverse-rnn-bahdanau-a",
        ]
        assert path.value == "exports/copy-transformer-scaled-dot-b-best.safetensors"
        run.value = "runs/reverse-rnn-bahdanau-a"
        await pilot.pause()
        assert path.value == "exports/reverse-rnn-bahdanau-a-best.safetensors"
        app.query_one("#export-which", Select).value = "last"
        await pilot.pause()
        assert path.value == "exports/reverse-rnn-bahdanau-a-last.safetensors"

        await click_go()
        await until(pilot, lambda: len(written) == 1)
        assert written[0] == (
            "reverse-rnn-bahdanau-a",
            Path("exports/reverse-rnn-bahdanau-a-last.safetensors"),
        )
        # Again: the file exists, so it asks; "n" keeps the file.
        await click_go()
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await pilot.pause()
        assert len(written) == 1 and not isinstance(app.screen, ConfirmScreen)
        await click_go()
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: len(written) == 2)
        assert forced == [False, True]  # only the confirmed overwrite replaces the file

        # A path the user typed is theirs: choosing another run keeps it.
        path.value = "mine.safetensors"
        run.value = "runs/copy-transformer-scaled-dot-b"
        await pilot.pause()
        assert path.value == "mine.safetensors"


# -- 3. inspect -----------------------------------------------------------------------------


def _with_checkpoint(run_dir: Path) -> Path:
    (run_dir / "checkpoints" / "last").mkdir(parents=True)
    (run_dir / "checkpoints" / "last" / "meta.json").write_text("{}")
    return run_dir


async def test_inspect_decodes_nothing_until_shown_and_never_warns_without_runs(
    tmp_path: Path, monkeypatch
) -> None:
    calls: list = []
    monkeypatch.setattr(
        InspectView, "run_analysis", lambda self, request, *_: calls.append(request)
    )
    empty = make_app(tmp_path / "none", config=lab_config())
    notes: list = []
    monkeypatch.setattr(empty, "notify", lambda message, *a, **k: notes.append(message))
    async with empty.run_test(size=SIZE) as pilot:
        await ready(empty, pilot)
        await pilot.press("3")
        await pilot.pause(0.3)
        assert notes == [] and calls == []  # the menus' first values are no request to decode
    _with_checkpoint(write_run(tmp_path / "runs", "reverse-rnn-bahdanau-a"))
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.pause(0.3)
        assert calls == []  # Setup is showing: no model is loaded behind it
        await pilot.press("3")
        await until(pilot, lambda: len(calls) == 1)
        assert calls[0].run_dir.name == "reverse-rnn-bahdanau-a"


async def test_inspect_prefers_a_run_with_a_checkpoint_and_is_calm_without_one(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    older = _with_checkpoint(write_run(Path("runs"), "older"))
    newest = write_run(Path("runs"), "newest", run_events(done=None))  # training, no checkpoint yet
    (older / "events.jsonl").touch()
    import os

    os.utime(older / "events.jsonl", (1e9, 1e9))  # 2001: "newest" is the newest run
    requests = []
    monkeypatch.setattr(
        InspectView, "run_analysis", lambda self, request, *_: requests.append(request)
    )
    app = make_app(Path("runs"), config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        run = app.query_one("#insp-run", Select)
        assert run.value == str(older) and requests[-1].run_dir == older
        assert [str(o[0]) for o in run._options] == ["newest", "older"]  # no "(no runs)"
        # An error for one run ...
        from attnlab.tui.views.inspect import InspectFailed

        app.query_one(InspectView).post_message(InspectFailed("boom: broken checkpoint"))
        await pilot.pause()
        assert "boom" in str(app.query_one("#insp-title", Static).content)
        # ... is gone once another run is chosen; a run without a checkpoint says so calmly.
        run.value = str(newest)
        await pilot.pause()
        title = str(app.query_one("#insp-title", Static).content)
        assert "boom" not in title and "no checkpoint yet" in title and "$error" not in title
        assert len(requests) == 1  # nothing to load: no worker started


async def test_a_train_sample_shows_its_run_in_the_run_menu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    first = _with_checkpoint(write_run(Path("runs"), "first"))
    second = write_run(Path("runs"), "second")
    monkeypatch.setattr(InspectView, "run_analysis", lambda self, request, *_: None)
    app = make_app(Path("runs"), config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        assert app.query_one("#insp-run", Select).value == str(first)
        sample = Sample(0, ["1", "2"], ["2", "1"], ["2", "1"], [[0.1, 0.9], [0.8, 0.2]])
        app.query_one(InspectView).show_logged_sample(second, sample)
        await pilot.pause()
        assert app.query_one("#insp-run", Select).value == str(second)
        assert app.query_one(AttentionHeatmap).shape == (2, 2)


async def test_esc_in_an_inspect_field_gives_the_keys_back(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_run(Path("runs"), "r")
    app = make_app(Path("runs"), config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        app.query_one("#insp-index", Input).focus()
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.focused is app.query_one(AttentionHeatmap)
        keys = {b.binding.key for b in app.screen.active_bindings.values()}
        assert {"d", "n", "b", "a", "h"} <= keys


# -- 4. queue -------------------------------------------------------------------------------


async def test_the_queue_is_listed_and_entries_can_be_removed(tmp_path: Path) -> None:
    def sleeper(preset: Path, runs_dir: Path, name: str) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    app = make_app(tmp_path, config=lab_config(), command_factory=sleeper, poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        train = app.query_one(TrainView)
        assert not app.query_one("#train-queue-row").display
        await pilot.press("t")  # starts
        setup = app.query_one(SetupView)
        app.query_one(f"#{field_id('model.attention')}", Select).value = "luong-general"
        await pilot.pause()
        setup.request_training(queue=True)
        app.query_one(f"#{field_id('model.attention')}", Select).value = "luong-concat"
        await pilot.pause()
        setup.request_training(queue=True)
        await pilot.pause()
        listing = app.query_one("#train-queue", OptionList)
        assert app.query_one("#train-queue-row").display
        assert [
            str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)
        ] == [
            "1. reverse-rnn-luong-general  (30 steps)",
            "2. reverse-rnn-luong-concat  (30 steps)",
        ]
        await pilot.press("2")
        listing.focus()
        listing.highlighted = 0
        await pilot.pause()
        assert "delete" in {b.binding.key for b in app.screen.active_bindings.values()}
        await pilot.press("delete")
        await pilot.pause()
        assert [c.model.attention for c in train.queue] == ["luong-concat"]
        assert listing.option_count == 1
        train.process.kill()


# -- 12. look and feel ----------------------------------------------------------------------


async def test_tab_stays_in_the_tab_body_and_help_matches_the_footer(tmp_path: Path) -> None:
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        for _ in range(30):
            await pilot.press("tab")
            assert not isinstance(app.focused, Tabs)
    assert "d decodes" in HELP_TEXT and "Enter to decode" not in HELP_TEXT


async def test_setup_fields_of_the_other_architecture_are_hidden_when_mounted(
    tmp_path: Path, monkeypatch
) -> None:
    # Without the follow-up pass that applies the groups, the rows must already be hidden.
    monkeypatch.setattr(SetupView, "_apply_groups", lambda self: None)
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        rows = list(app.query(".group-transformer"))
        assert rows and not any(row.display for row in rows)
        assert all(row.display for row in app.query(".group-rnn"))


async def test_hyper_parameters_are_grouped_by_variant_with_range_and_default(
    tmp_path: Path,
) -> None:
    config = _transformer("model.self_attention=performer", "model.cross_attention=linformer")
    app = make_app(tmp_path, config=config)
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        groups = [str(s.content) for s in app.query(".hparam-group")]
        assert groups == ["enc self + dec self: performer", "cross: linformer"]
        hints = [str(label.content) for label in app.query("#hparams .field-hint")]
        from attnlab.nn.attention import ATTENTION

        expected = []
        for name in ("performer", "linformer"):
            for hp in ATTENTION.get(name).meta.hparams:
                expected.append(
                    f"default {hp.default:g}"
                    if isinstance(hp.default, float)
                    else f"default {hp.default}"
                )
        assert [h.split(" · ")[1] for h in hints] == expected


def test_progress_bar_and_follower_show_the_run_mean_not_the_window(tmp_path) -> None:
    """#44: one speed per run. A step event's mean (all tokens / all stepping seconds) is what
    the CLI bar and the lab's follower show; a log from before the field shows the window's."""
    from attnlab.cli.train import TrainProgress
    from attnlab.tui.follow import RunFollower

    progress = TrainProgress(1000, 0, quiet=False, clock=lambda: 100.0)
    step = {"type": "step", "step": 5, "tokens_per_s": 5115.0, "mean_tokens_per_s": 673.0}
    progress.on_event(step)
    assert progress.progress.tasks[0].fields["tps"] == "673"
    progress.on_event({"type": "step", "step": 6, "tokens_per_s": 900.0})  # an old log
    assert progress.progress.tasks[0].fields["tps"] == "900"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text(json.dumps(step) + "\n")
    follower = RunFollower(run_dir)
    follower.poll()
    assert follower.tokens_per_s == 673.0
