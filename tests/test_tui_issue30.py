"""The lab's part of issue 30 (what a demanding new user still tripped over). Every check waits
on the lab's workers or messages (no sleeps) and compares the screen with an independent
reference: the engine's own report, hand-written metadata, or the run's events."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _tui_support import ready, tiny_config, until, workers_idle
from test_tui_issue15 import TRANSFORMER, saved_run, show
from textual.widgets import Select, Static

from attnlab.errors import AttnlabError
from attnlab.interpret.compare import incomparable_reason
from attnlab.interpret.reports import compare_report
from attnlab.runs import load_checkpoint
from attnlab.tui.app import make_app
from attnlab.tui.inspect_engine import InspectRequest, analyse
from attnlab.tui.screens.compare import CompareScreen

SIZE = (100, 30)
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def _meta(task: str, src: list[str], tgt: list[str]) -> dict:
    tok = {"kind": "whitespace"}
    return {
        "task": task,
        "src_vocab": SPECIALS + src,
        "tgt_vocab": SPECIALS + tgt,
        "src_tokenizer": tok,
        "tgt_tokenizer": tok,
    }


# -- 1: compare only comparable runs ----------------------------------------------------------


def test_incomparable_reason_names_task_vocabulary_and_tokenizer() -> None:
    digits = _meta("reverse", ["1", "2"], ["1", "2"])
    assert incomparable_reason(digits, _meta("reverse", ["1", "2"], ["1", "2"])) == ""
    assert incomparable_reason(digits, _meta("corpus", ["ein"], ["a"])) == (
        "different tasks: A is reverse, B is corpus"
    )
    assert incomparable_reason(digits, _meta("reverse", ["1", "2", "3"], ["1", "2"])) == (
        "their source vocabularies differ (6 vs 7 tokens)"
    )
    assert "target vocabularies differ (token 5: '2' vs '9')" in incomparable_reason(
        digits, _meta("reverse", ["1", "2"], ["1", "9"])
    )
    other = {**digits, "src_tokenizer": {"kind": "chars"}}
    assert incomparable_reason(digits, other) == "their source tokenizers differ"


async def test_compare_offers_only_runs_of_the_same_task_and_vocabularies(tmp_path: Path) -> None:
    run_a = saved_run(tmp_path, "tf-a", TRANSFORMER)
    saved_run(tmp_path, "tf-sort", [*TRANSFORMER, "data.task=sort"])  # another task
    saved_run(tmp_path, "tf-v12", [*TRANSFORMER, "data.vocab_size=12"])  # other vocabulary
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, run_a, index=1)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        await workers_idle(pilot)
        await pilot.pause()
        # only A's own kind of run is left, and there is none but A: refused, saying why
        assert screen.query_one("#cmp-run", Select).value is Select.NULL
        status = str(screen.query_one("#cmp-status", Static).content)
        assert "B must have A's task and vocabularies" in status, status
        assert "(and 1 more)" in status and screen.report is None
        assert {name for name, _ in screen._left_out} == {"tf-sort", "tf-v12"}
    # the engine refuses the same pair in one line naming why (the CLI's compare reuses it)
    a = load_checkpoint(run_a / "checkpoints" / "best")
    with pytest.raises(AttnlabError, match="different tasks: A is reverse, B is sort"):
        compare_report(a, load_checkpoint(tmp_path / "tf-sort"), "3 4 5", None, "raw", "cpu")


async def test_compare_decodes_with_inspects_search_and_says_which(tmp_path: Path) -> None:
    run_a = saved_run(tmp_path, "tf-a", TRANSFORMER)
    shutil.copytree(run_a, tmp_path / "tf-b")
    saved_run(tmp_path, "tf-sort", [*TRANSFORMER, "data.task=sort"])
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        inspect = await show(app, pilot, run_a, index=1)
        inspect.query_one("#insp-beam").value = "3"
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        screen = app.screen
        await workers_idle(pilot)
        await until(pilot, lambda: screen.report is not None)
        options = [value for _, value in screen.query_one("#cmp-run", Select)._options]
        assert str(tmp_path / "tf-b") in options and str(tmp_path / "tf-sort") not in options
        report = screen.report
        assert report["search"] == "beam 3"
        expected = analyse(InspectRequest(run_a, "best", "dev", 1, beam=3)).hypotheses[0].tokens
        assert report["a"]["hyp"] == expected
        status = str(screen.query_one("#cmp-status", Static).content)
        assert status.startswith("beam 3 search (as Inspect)") and "1 run left out" in status


# -- 2: unknown source tokens ------------------------------------------------------------------


def test_unknown_tokens_and_labels_against_the_vocabulary() -> None:
    from attnlab.data.oov import source_labels, unknown_tokens, unknown_warning
    from attnlab.data.vocab import Vocab

    vocab = Vocab(["ein", "mann", "5"])
    typed = ["ein", "xyzzyq", "mann", "xyzzyq", "<unk>", "hallo"]
    assert unknown_tokens(vocab, typed) == ["xyzzyq", "hallo"]  # distinct, first use first
    assert source_labels(vocab, typed) == ["ein", "<unk>", "mann", "<unk>", "<unk>", "<unk>"]
    # each label is what encode() gives the model: id 1 (<unk>) exactly where the label says so
    assert [t == "<unk>" for t in source_labels(vocab, typed)] == [
        i == 1 for i in vocab.encode(typed)
    ]
    assert unknown_warning(["hallo"]) == (
        "1 source token is not in the model's vocabulary and read as <unk>: hallo"
    )
    assert unknown_warning([]) == ""


async def test_inspect_warns_of_unknown_tokens_and_rechecks_on_another_run(
    tmp_path: Path,
) -> None:
    from attnlab.tui.widgets.heatmap import AttentionHeatmap

    run_30 = saved_run(tmp_path, "tf-30", TRANSFORMER)  # symbols 0..29
    run_12 = saved_run(tmp_path, "tf-12", [*TRANSFORMER, "data.vocab_size=12"])  # 0..11
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        inspect = await show(app, pilot, run_30, index=1)
        warning = inspect.query_one("#insp-warning", Static)
        assert not warning.display  # a dev sample: every token known
        inspect.query_one("#insp-text").value = "3 29 hallo 4"
        inspect.decode()
        await workers_idle(pilot)
        await until(pilot, lambda: inspect.result is not None and inspect.result.request.text)
        assert warning.display and "read as <unk>: hallo" in str(warning.content)
        heatmap = inspect.query_one(AttentionHeatmap)
        assert heatmap.col_labels == ["3", "29", "<unk>", "4"]
        # another run, the typed text kept: decoded again and its own unknown tokens named
        inspect.query_one("#insp-run", Select).value = str(run_12)
        await until(pilot, lambda: inspect.result.checkpoint_path.startswith(str(run_12)))
        await pilot.pause()
        assert "2 source tokens" in str(warning.content) and "29, hallo" in str(warning.content)
        assert heatmap.col_labels == ["3", "<unk>", "<unk>", "4"]


# -- 3: Multi30k samples readable in the Train tab ----------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


LONG_SRC = _words("zwei junge weiße männer sind im freien in der nähe vieler büsche und")
LONG_REF = _words("two young , white males are outside near many bushes and are looking")
LONG_HYP = _words("two young men are standing outside near some bushes looking at it .")


def _long_sample_events() -> list[dict]:
    from _tui_support import run_events

    events = [e for e in run_events(steps=20, eval_every=20, done=None) if e["type"] != "sample"]
    for index in range(3):
        events.append(
            {
                "type": "sample",
                "step": 20,
                "index": index,
                "src": list(LONG_SRC),
                "ref": list(LONG_REF),
                "hyp": list(LONG_HYP[: len(LONG_HYP) - index]),
                "attention": None,
            }
        )
    return events


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_train_samples_fit_the_panel_with_the_hypothesis_visible(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    from _tui_support import write_run
    from textual.widgets import DataTable

    from attnlab.tui.views.train import TrainView

    run_dir = write_run(tmp_path, "m30k", _long_sample_events())
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        table = app.query_one("#samples", DataTable)
        await until(pilot, lambda: table.row_count == 3)
        await pilot.pause()
        # nothing beyond the right edge: no column is scrolled off-screen
        assert table.virtual_size.width <= table.scrollable_content_region.width
        screen = app.export_screenshot().replace("&#160;", " ")
        lines = str(table.get_cell_at((0, 1))).split("\n")
        assert [line.split(" ")[0] for line in lines] == ["src", "ref", "hyp"]
        assert lines[2].startswith("hyp two young men") and len(lines[2]) >= 20
        assert "hyp two young men" in screen  # drawn, not only stored


# -- 4: Setup shows only the data fields the chosen task reads -----------------------------------


def _fields_touched(data_config) -> set[str]:
    """The data.* fields ``load_dataset`` really reads for this config (a recording copy)."""
    import dataclasses

    from attnlab.config import DataConfig
    from attnlab.data.dataset import load_dataset

    touched: set[str] = set()
    names = {f.name for f in dataclasses.fields(DataConfig)}

    class Recording(DataConfig):
        def __getattribute__(self, name: str):
            if name in names:
                touched.add(f"data.{name}")
            return object.__getattribute__(self, name)

    load_dataset(Recording(**dataclasses.asdict(data_config)))
    return touched


def test_fields_read_cover_what_loading_reads(tmp_path: Path) -> None:
    from test_tui_corpus_preview import write_corpus

    from attnlab.config import DataConfig
    from attnlab.data.task_registry import fields_read

    # shared by every task (not task-specific): the vocabulary options
    common = {"data.task", "data.shared_vocab", "data.min_freq", "data.max_vocab"}
    corpus = DataConfig(task="corpus", path=str(write_corpus(tmp_path / "c")))
    assert _fields_touched(corpus) - common <= set(fields_read("corpus"))
    toy = DataConfig(task="reverse", train_size=20, dev_size=4, test_size=4)
    assert _fields_touched(toy) - common <= set(fields_read("reverse"))
    assert "data.min_len" not in fields_read("corpus") and "data.path" not in fields_read("sort")


async def test_setup_with_a_corpus_hides_the_toy_fields(tmp_path: Path) -> None:
    from test_tui_corpus_preview import choose_corpus

    from attnlab.tui.views.setup import field_id

    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)

        def shown(key: str) -> bool:
            return app.query_one(f"#{field_id(key)}").parent.display

        toy = ("data.min_len", "data.max_len", "data.train_size")
        assert all(shown(key) for key in toy) and not shown("data.path")
        await choose_corpus(app, pilot)
        assert not any(shown(key) for key in toy) and shown("data.path")
        app.query_one(f"#{field_id('data.task')}", Select).value = "sort"
        await pilot.pause()
        assert all(shown(key) for key in toy) and not shown("data.path")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_setup_corpus_snapshot(tmp_path: Path, monkeypatch, snap_compare, size) -> None:
    from test_tui_corpus_preview import write_corpus

    from attnlab.tui.views.corpus_preview import CorpusPreview
    from attnlab.tui.views.setup import field_id

    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path / "corpus")

    async def run_before(pilot) -> None:
        app = pilot.app
        await ready(app, pilot)
        app.query_one(f"#{field_id('data.task')}", Select).value = "corpus"
        await pilot.pause()
        app.query_one(f"#{field_id('data.path')}").value = "corpus"
        await pilot.pause()
        preview = app.query_one(CorpusPreview)
        await until(pilot, lambda: preview.summary is not None and not preview.pending)
        await workers_idle(pilot)
        await pilot.pause()

    app = make_app(Path("runs"), config=tiny_config())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- 5: the Runs tab never cuts the status ----------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_runs_tab_shows_every_status_whole(tmp_path: Path, size) -> None:
    from _tui_support import run_events, write_run
    from textual.widgets import DataTable

    from attnlab.events import RunStatus

    write_run(tmp_path, "reverse-transformer-differential-a", run_events(done="interrupted"))
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        table = app.query_one("#runs-table", DataTable)
        await until(pilot, lambda: table.row_count == 1)
        await pilot.pause()
        assert table.get_row_at(0)[-1] == "interrupted"
        status = table.columns["status"]
        assert status.width >= max(len(s.value) for s in RunStatus)
        assert "interrupted" in app.export_screenshot().replace("&#160;", " ")


# -- 20: the Runs tab's e key is in the footer ----------------------------------------------


async def test_runs_footer_lists_e_where_it_switches_panels(tmp_path: Path) -> None:
    from _tui_support import write_run

    write_run(tmp_path, "r-a")
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        await pilot.pause()
        shown = {
            (key.key, key.description)
            for key in app.screen.query("FooterKey")
            if key.region.right <= 80 and key.region.width  # drawn on screen, not cut off
        }
        assert ("e", "Bars/entropy") in shown
        await pilot.resize_terminal(120, 40)  # wide: three panels, nothing to switch
        await pilot.pause()
        assert "e" not in app.screen.active_bindings or not app.screen.active_bindings["e"].enabled


# -- 7: Inspect opens on the last layer and labels every figure with its layer -----------------


async def test_inspect_defaults_to_the_last_layer_and_names_it(tmp_path: Path) -> None:
    from attnlab.attention_map import last_layer_head_mean
    from attnlab.tui.widgets.heatmap import AttentionHeatmap

    two = [*TRANSFORMER, "model.enc_layers=2", "model.dec_layers=2"]
    run_dir = saved_run(tmp_path, "tf2", two)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=SIZE) as pilot:
        inspect = await show(app, pilot, run_dir, index=1)
        hyp = inspect.result.hypotheses[0]
        assert hyp.maps["cross"].shape[0] == 2
        assert inspect.query_one("#insp-layer", Select).value == 1  # the last layer
        shown = inspect.query_one(AttentionHeatmap).weights
        # the drawn map is the last layer's head average, as the header's figure reads it
        expected = last_layer_head_mean(hyp.maps["cross"])
        assert shown.shape == expected.shape and abs(shown - expected).max() < 1e-6
        title = str(inspect.query_one("#insp-title", Static).content)
        assert "align acc. (layer 1/2)" in title
        diag = str(inspect.query_one("#insp-diag", Static).content)
        assert "layer 1/2, head avg" in diag.splitlines()[0]
        # a layer the user chose is kept by the next decode
        inspect.query_one("#insp-layer", Select).value = 0
        await pilot.pause()
        assert "layer 0/2" in str(inspect.query_one("#insp-diag", Static).content)
        inspect.show_hypothesis(0)
        await pilot.pause()
        assert inspect.query_one("#insp-layer", Select).value == 0


# -- 8: the corpus-missing error is re-checked on focus and on t ------------------------------


async def test_missing_corpus_error_is_rechecked_on_focus_and_on_t(
    tmp_path: Path, monkeypatch
) -> None:
    from test_tui_corpus_preview import choose_corpus, write_corpus
    from textual.widgets import Input

    from attnlab.tui.views.setup import SetupView, field_id

    requested = []
    monkeypatch.setattr(
        "attnlab.tui.views.train.TrainView.train",
        lambda self, config, queue=False: requested.append(config) or "started",
    )
    folder = tmp_path / "multi30k"
    app = make_app(tmp_path / "runs", config=tiny_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        preview = await choose_corpus(app, pilot)
        path = app.query_one(f"#{field_id('data.path')}", Input)
        path.value = str(folder)
        # (the empty path's error comes first: wait for the typed path's)
        await until(pilot, lambda: not preview.pending and str(folder) in (preview.error or ""))
        await workers_idle(pilot)
        assert "no such file or folder" in preview.error
        # the corpus appears (downloaded elsewhere); focusing the field reads it again
        write_corpus(folder)
        app.query_one(f"#{field_id('data.task')}").focus()
        await pilot.pause()
        path.focus()
        # Setup re-checks when the preview's result bubbles up to it, a message later
        await until(
            pilot, lambda: not preview.pending and preview.error is None and setup.error is None
        )
        assert preview.summary.splits["train"].pairs == 4 and setup.error is None
        assert not app.query_one("#train-button").disabled
        # missing again, then back: `t` re-reads and trains once it reads
        shutil.rmtree(folder)
        path.value = str(folder) + "/"
        await until(pilot, lambda: not preview.pending and preview.error is not None)
        write_corpus(folder)
        await pilot.press("escape", "t")  # leave the field: t is the Train key
        await until(pilot, lambda: len(requested) == 1)
        assert requested[0].data.path == str(folder) + "/" and preview.error is None


# -- 9: menus at 80 columns: one line per entry; the preset menu opens on the current preset ---


async def test_menus_keep_one_line_per_entry_and_open_on_the_current_preset(
    tmp_path: Path,
) -> None:
    from textual.widgets._select import SelectOverlay

    from attnlab.config import preset_names
    from attnlab.tui.views.setup import SetupView

    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await app.query_one(SetupView).load("long-copy-nsa")
        await pilot.pause()
        menu = app.query_one("#preset-select", Select)
        menu.focus()
        await pilot.press("enter")
        await pilot.pause()
        overlay = menu.query_one(SelectOverlay)
        names = preset_names()
        assert overlay.option_count == len(names) + 1  # the prompt, then every preset
        # one row per entry although "copy-transformer-linformer" is wider than the menu
        assert max(len(n) for n in names) > overlay.scrollable_content_region.width
        assert overlay.virtual_size.height == overlay.option_count
        prompt = overlay.get_option_at_index(overlay.highlighted).prompt
        assert str(prompt) == "long-copy-nsa"


# -- 18: the help screen's second column wraps under itself --------------------------------------


async def test_help_at_80_columns_wraps_descriptions_under_their_column(tmp_path: Path) -> None:
    from rich.text import Text
    from textual.geometry import Region

    from attnlab.tui.help import HELP_TEXT, HelpScreen

    sections = {"attnlab", "Everywhere", "Setup", "Train", "Inspect", "Runs", "Export", "Studies"}
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        text = app.screen.query_one("#help-text", Static)
        width, height = text.size
        assert width < 80  # narrower than the longest entries: they must wrap
        lines = [strip.text.rstrip() for strip in text.render_lines(Region(0, 0, width, height))]
    lines = [line for line in lines if line]
    # every line is a section heading, or indented: nothing wraps back to column 1
    stray = [ln for ln in lines if not ln.startswith("  ") and ln.split()[0] not in sections]
    assert stray == []
    # a key's description continues under the description column, not under the keys
    at = next(i for i, line in enumerate(lines) if line.startswith("  m           map method"))
    assert lines[at + 1].startswith(" " * 14) and lines[at + 1][14] != " "
    # and nothing is lost: the same words as the help text
    assert " ".join(lines).split() == Text.from_markup(HELP_TEXT).plain.split()


# -- 19: saving a TOML over an existing file asks first --------------------------------------


async def test_save_over_an_existing_toml_asks_first(tmp_path: Path, monkeypatch) -> None:
    from textual.widgets import Input

    from attnlab.config import dumps_toml
    from attnlab.tui.help import ConfirmScreen
    from attnlab.tui.views.setup import SetupView

    monkeypatch.chdir(tmp_path)
    target = tmp_path / "mine.toml"
    target.write_text("# keep me\n", encoding="utf-8")
    app = make_app(tmp_path / "runs", config=tiny_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        app.query_one("#preset-path", Input).value = "mine"
        await pilot.click("#preset-save")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert target.read_text(encoding="utf-8") == "# keep me\n"
        await pilot.click("#preset-save")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: target.read_text(encoding="utf-8") != "# keep me\n")
        assert target.read_text(encoding="utf-8") == dumps_toml(app.query_one(SetupView).config)
        # a new file is written at once, with no question
        app.query_one("#preset-path", Input).value = "fresh"
        await pilot.click("#preset-save")
        await until(pilot, lambda: (tmp_path / "fresh.toml").exists())
        assert not isinstance(app.screen, ConfirmScreen)


# -- 11 and 14: plot titles always shown; nice ticks; bounded metrics clamped ---------------------


def test_nice_ticks_are_evenly_spaced_on_a_1_2_5_step() -> None:
    import math

    from attnlab.tui.widgets.plots import clamp_limits, nice_ticks, tick_labels

    for low, high, most in [
        (0.0072797, 0.0072904, 5),
        (0.358, 0.842, 3),
        (0.9, 2.9, 4),
        (0, 100, 6),
    ]:
        ticks = nice_ticks(low, high, most)
        assert 1 <= len(ticks) <= most and all(low - 1e-12 <= t <= high + 1e-12 for t in ticks)
        gaps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:], strict=False)}
        assert len(gaps) <= 1  # evenly spaced
        if gaps:
            step = gaps.pop()
            mantissa = step / 10 ** math.floor(math.log10(step))
            assert round(mantissa, 9) in (1.0, 2.0, 5.0)
            # the finest such step: the next finer one would give more than `most` ticks
            finer = {1.0: 0.5, 2.0: 1.0, 5.0: 2.0}[round(mantissa, 9)] * step / mantissa
            assert math.floor(high / finer) - math.ceil(low / finer) + 1 > most
    assert tick_labels([0.00728, 0.007285, 0.00729]) == ["0.007280", "0.007285", "0.007290"]
    assert tick_labels([20.0, 40.0, 60.0]) == ["20", "40", "60"]
    assert clamp_limits((80.3, 103.2), (0.0, 100.0)) == (80.3, 100.0)
    assert clamp_limits((-0.2, 0.4), None) == (-0.2, 0.4)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_train_plots_keep_titles_and_bounded_axes(tmp_path: Path, size) -> None:
    from _tui_support import run_events, write_run
    from textual.geometry import Region

    from attnlab.tui.follow import ENTROPY_TITLE
    from attnlab.tui.views.train import TrainView
    from attnlab.tui.widgets.plots import MetricPlot, _Canvas, _Title

    events = run_events(steps=40, eval_every=20)
    for event in events:
        if event["type"] == "eval":
            event["bleu"] = event["chrf"] = 98.5  # the room above would pass 100
            event["attention_normalisation"] = {"cross": "softmax", "dec_self": "signed"}
    run_dir = write_run(tmp_path, "reverse-transformer-differential-a", events)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        entropy = app.query_one("#entropy-plot", MetricPlot)
        await until(pilot, lambda: entropy.points > 0)
        await pilot.pause()

        async def shown(plot: MetricPlot) -> None:  # below 30 rows one at a time: v to it
            for _ in range(3):
                if plot.display:
                    break
                await pilot.press("v")
            await pilot.pause()

        await shown(entropy)
        title = entropy.query_one(_Title)
        assert str(title.render()) == ENTROPY_TITLE and title.region.height == 1
        assert "dec self: signed, none" in [label for label, _, _ in entropy.series]
        metric = app.query_one("#metric-plot", MetricPlot)
        await shown(metric)
        canvas = metric.query_one(_Canvas)
        lines = [s.text for s in canvas.render_lines(Region(0, 0, *canvas.size))]
        labels = [line.split("┤")[0].strip() for line in lines if "┤" in line[:6]]
        numbers = [float(x) for x in labels if x]
        assert numbers and max(numbers) <= 100.0  # BLEU / chrF never above their range


# -- 12: the Train header never wraps mid-field; plots keep equal heights -----------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_train_header_breaks_between_fields_and_plots_align(tmp_path: Path, size) -> None:
    import re

    from _tui_support import run_events, write_run
    from textual.geometry import Region

    from attnlab.tui.views.train import TrainView
    from attnlab.tui.widgets.plots import MetricPlot, _Canvas

    events = run_events(steps=40, eval_every=20)
    for event in events:
        if event["type"] == "step":
            event["tokens_per_s"] = 8128.0
    run_dir = write_run(tmp_path, "reverse-transformer-differential-20261204-235414", events)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=size) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        train.poll()
        await until(pilot, lambda: app.query_one("#entropy-plot", MetricPlot).points > 0)
        await pilot.pause()
        await pilot.pause()
        status = app.query_one("#train-status")
        lines = [s.text.strip() for s in status.render_lines(Region(0, 0, *status.size))]
        lines = [line for line in lines if line]
        assert any("8,128 tok/s" in line for line in lines), lines
        # fields are whole on their line: no value ends a line whose unit starts the next
        assert not any(line.startswith(("tok/s", "/", "2.00e-03")) for line in lines), lines
        assert not any(re.search(r"(step|loss|BLEU|lr|8,128)$", line) for line in lines), lines
        heights = {
            plot.query_one(_Canvas).region.height
            for plot in app.query_one("#train-plots").query(MetricPlot)
            if plot.display
        }
        assert len(heights) == 1, heights


# -- 10: Inspect at 80x24: panels never run together; the header keeps the translation ----------


async def test_inspect_at_80x24_keeps_the_arrow_and_separates_panels(tmp_path: Path) -> None:
    from textual.geometry import Region

    from attnlab.tui.views.inspect import fit_pair

    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        inspect = await show(app, pilot, run_dir, index=1)
        inspect.query_one("#insp-text").value = " ".join(["7", "3", "12", "25", "9"] * 6)
        inspect.decode()
        await workers_idle(pilot)
        await until(pilot, lambda: inspect.result is not None and inspect.result.request.text)
        await pilot.pause()
        title = inspect.query_one("#insp-title", Static)
        first = title.render_lines(Region(0, 0, *title.size))[0].text.strip()
        hyp = " ".join(inspect.result.hypotheses[0].tokens)
        assert " → " in first and first.split(" → ")[1].startswith(hyp[:3]), first
        assert len(first) <= title.content_region.width
        diag, bars = inspect.query_one("#insp-diag"), inspect.query_one("#insp-bars-box")
        assert bars.region.x >= diag.region.right and bars.styles.border_left[0] != ""
    # each side keeps at least half the line unless the other is short
    src, hyp = fit_pair("s" * 60, "h" * 60, 43)
    assert len(src) == len(hyp) == 20 and src.endswith("…") and hyp.endswith("…")
    assert fit_pair("short", "h" * 60, 43) == ("short", "h" * 34 + "…")


# -- 15: Setup fields never drop keys typed in a burst ---------------------------------------------


async def test_setup_field_keeps_every_key_of_a_burst(tmp_path: Path) -> None:
    from textual import events

    from attnlab.tui.views.setup import SetupView, field_id

    app = make_app(tmp_path, config=tiny_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        field = app.query_one(f"#{field_id('data.max_len')}")
        field.focus()
        await pilot.pause()
        assert field.value == "8"
        # as the terminal driver posts them: all at once, nothing waited for in between
        burst = [("ctrl+a", "\x01"), ("ctrl+k", "\x0b"), ("3", "3"), ("0", "0"), ("0", "0")]
        for key, character in burst:
            app.post_message(events.Key(key, character))
        setup = app.query_one(SetupView)
        await until(pilot, lambda: setup.config.data.max_len == 300)
        await pilot.pause()
        assert field.value == "300"
        # home, then typed at the start; Ctrl+K after a move deletes only what follows
        for key, character in [("ctrl+a", "\x01"), ("1", "1"), ("ctrl+k", "\x0b")]:
            app.post_message(events.Key(key, character))
        await until(pilot, lambda: field.value == "1")


# -- 13: progress shows the acknowledged step; ETA only once timed, evaluations included --------


def test_follower_progress_and_eta_follow_the_trainer(tmp_path: Path) -> None:
    from _tui_support import write_events

    from attnlab.tui.follow import MIN_TIMED_STEPS, RunFollower

    config = {"train": {"max_steps": 200, "eval_every": 50}}
    start = {"type": "start", "step": 0, "name": "x", "max_steps": 200, "config": config}
    write_events(tmp_path, [start, {"type": "step", "step": 1, "loss": 3.0, "elapsed_s": 60.0}])
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.eta_s() is None  # one slow first step (warm-up) is not a rate
    # steps 1 -> 50: 49 steps in 4.9 s (0.1 s each), then an evaluation of 3.0 s
    write_events(
        tmp_path,
        [
            {"type": "step", "step": 50, "loss": 2.0, "elapsed_s": 64.9},
            {
                "type": "eval",
                "step": 50,
                "split": "dev",
                "loss": 1.0,
                "bleu": 1.0,
                "elapsed_s": 67.9,
            },
            {"type": "step", "step": 60, "loss": 2.0, "elapsed_s": 68.9},
        ],
    )
    follower.poll()
    assert MIN_TIMED_STEPS <= 60 - 1  # the window is long enough to give an ETA
    # by hand: training 59 steps in 68.9 - 60.0 - 3.0 (the eval) = 5.9 s -> 0.1 s a step;
    # 140 steps left -> 14.0 s, plus the evaluations at 100, 150 and 200 at 3.0 s each
    assert follower.eta_s() == pytest.approx(140 * 0.1 + 3 * 3.0)
    # paused at step 66: the trainer's acknowledged step, not the last logged one (60)
    write_events(tmp_path, [{"type": "control", "step": 66, "command": "pause"}])
    follower.poll()
    assert follower.state == "paused" and follower.step == 66
    assert follower.eta_s() == pytest.approx(134 * 0.1 + 3 * 3.0)
