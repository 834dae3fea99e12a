"""The lab's Export tab: the safetensors bundle or a CTranslate2 model directory, the weights
menu only for CTranslate2, and a refusal as one line (no directory written)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
import torch
from _tiny import TINY_TRANSFORMER, tiny_config
from _tui_support import until, workers_idle, write_run

from attnlab.config import DecodeConfig
from attnlab.data.dataset import load_dataset
from attnlab.decode.search import decode_sorted
from attnlab.nn.model import build_model, count_parameters
from attnlab.runs import save_checkpoint
from attnlab.tui.app import make_app
from attnlab.tui.views.export import CTRANSLATE2, ExportView

needs_ct2 = pytest.mark.skipif(
    importlib.util.find_spec("ctranslate2") is None, reason="ctranslate2 is not installed"
)


def saved_run(root: Path, name: str, *overrides: str) -> tuple[Path, object, object]:
    """A run directory with an (untrained) best checkpoint; (run, model, dataset)."""
    config = tiny_config(name, *overrides)
    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab)).eval()
    run = write_run(root, name)  # config.toml and events.jsonl: the lab lists it
    save_checkpoint(run, "best", model, config, dataset.meta(), 3, {}, count_parameters(model))
    return run, model, dataset


async def open_export(pilot, run: Path) -> ExportView:
    await asyncio.wait_for(pilot.app.menus_ready.wait(), 60)
    await pilot.press("5")
    view = pilot.app.query_one(ExportView)
    view.refresh_runs()
    await pilot.pause()
    pilot.app.query_one("#export-run").value = str(run)
    await pilot.pause()
    return view


async def pick_ctranslate2(pilot, weights: str = "float32") -> None:
    pilot.app.query_one("#export-format").value = CTRANSLATE2
    await pilot.pause()
    pilot.app.query_one("#export-weights").value = weights
    await pilot.pause()


def test_the_weights_menu_and_the_default_directory_follow_the_format(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, _, _ = saved_run(Path("runs"), "tf", *TINY_TRANSFORMER)

    async def scenario() -> None:
        app = make_app(Path("runs"))
        async with app.run_test(size=(100, 30)) as pilot:
            await open_export(pilot, run)
            path = app.query_one("#export-path")
            assert not app.query_one("#export-weights-field").display
            assert path.value == str(Path("exports") / "tf-best.safetensors")
            await pick_ctranslate2(pilot)
            assert app.query_one("#export-weights-field").display
            assert path.value == str(Path("exports") / "tf-best-ct2")
            app.query_one("#export-format").value = "safetensors"
            await pilot.pause()
            assert not app.query_one("#export-weights-field").display
            assert path.value == str(Path("exports") / "tf-best.safetensors")

    asyncio.run(scenario())


@needs_ct2
@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_a_transformer_exports_to_ctranslate2_and_decodes_as_attnlab(
    tmp_path, monkeypatch, weights
):
    from attnlab.exporters.ctranslate2 import load_ct2_model, translate_tokens

    monkeypatch.chdir(tmp_path)
    run, model, dataset = saved_run(Path("runs"), "tf", *TINY_TRANSFORMER)
    out = tmp_path / "ct2"

    async def scenario() -> ExportView:
        app = make_app(Path("runs"))
        async with app.run_test(size=(100, 30)) as pilot:
            view = await open_export(pilot, run)
            await pick_ctranslate2(pilot, weights)
            app.query_one("#export-path").value = str(out)
            await pilot.click("#export-go")
            await until(pilot, lambda: view.last_export is not None, timeout=120)
            await workers_idle(pilot)
            return view

    view = asyncio.run(scenario())
    assert (out / "model.bin").is_file() and (out / "attnlab.json").is_file()
    assert view.command.startswith(f"attnlab translate --engine ctranslate2 {out}")
    if weights == "float32":  # the directory decodes what attnlab decodes
        test = dataset.splits.test
        sources = [dataset.src_vocab.encode(e.src_tokens) for e in test]
        ours = decode_sorted(model, sources, DecodeConfig())
        theirs = translate_tokens(load_ct2_model(out, "float32"), [e.src_tokens for e in test])
        itos = dataset.tgt_vocab.itos
        assert [[itos[i] for i in n[0].tokens] for n in ours] == [t.tokens for t in theirs]


@needs_ct2
def test_an_rnn_run_is_refused_in_one_line_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, _, _ = saved_run(Path("runs"), "rnn")
    out = tmp_path / "ct2"

    async def scenario() -> str:
        app = make_app(Path("runs"))
        async with app.run_test(size=(100, 30)) as pilot:
            view = await open_export(pilot, run)
            await pick_ctranslate2(pilot)
            app.query_one("#export-path").value = str(out)
            await pilot.click("#export-go")
            result = app.query_one("#export-result")
            await until(pilot, lambda: "✗" in str(result.content), timeout=60)
            assert view.last_export is None
            return str(result.content)

    message = asyncio.run(scenario())
    assert "✗ model.arch=rnn: CTranslate2 export takes Transformer" in message
    assert "\n" not in message
    assert not out.exists()


def test_overwriting_a_file_of_the_run_itself_is_refused_even_when_confirmed(tmp_path, monkeypatch):
    """#43 item 1's audit: the Export tab's "Overwrite (y)" on the run's own weights replaced
    them with the export (the engine's --force path)."""
    monkeypatch.chdir(tmp_path)
    run, _, _ = saved_run(Path("runs"), "tf", *TINY_TRANSFORMER)
    weights = run / "checkpoints" / "best" / "model.safetensors"
    before = weights.read_bytes()

    async def scenario() -> str:
        app = make_app(Path("runs"))
        async with app.run_test(size=(100, 30)) as pilot:
            view = await open_export(pilot, run)
            app.query_one("#export-path").value = str(weights)
            await pilot.click("#export-go")
            await pilot.pause()
            await pilot.press("y")  # the user confirms the overwrite
            result = app.query_one("#export-result")
            await until(pilot, lambda: "✗" in str(result.content), timeout=60)
            await workers_idle(pilot)
            assert view.last_export is None
            return str(result.content)

    message = asyncio.run(scenario())
    assert "is a file of the run or study directory" in message
    assert weights.read_bytes() == before
