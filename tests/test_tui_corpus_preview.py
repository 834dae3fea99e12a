"""Setup's live corpus preview (Pilot): first pairs, statistics, errors, 80x24."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _tui_support import lab_config, ready, workers_idle
from _tui_support import until as until_shared
from textual.widgets import Input, Select

from attnlab.config import DataConfig
from attnlab.tui.app import make_app
from attnlab.tui.views.corpus_preview import CorpusPreview, summarise_corpus
from attnlab.tui.views.setup import SetupView, field_id

GERMAN = {
    "train": [
        "ein Hund läuft",
        "zwei Katzen schlafen hier",
        "",
        "ein Mann",
        "eine Frau liest ein Buch",
    ],
    "dev": ["ein Kind", "der Hund"],
    "test": ["die Katze"],
}
ENGLISH = {
    "train": ["a dog runs", "two cats sleep here", "", "a man", "a woman reads a book"],
    "dev": ["a child", "the dog"],
    "test": ["the cat"],
}


def write_corpus(folder: Path) -> Path:
    """train/dev/test .de/.en; one empty train line (skipped), so 4 train pairs."""
    folder.mkdir()
    for split in GERMAN:
        (folder / f"{split}.de").write_text("\n".join(GERMAN[split]) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(ENGLISH[split]) + "\n", encoding="utf-8")
    return folder


async def until(pilot, condition, timeout: float = 30.0) -> None:
    """Like the shared ``until``, then let the preview's worker finish.

    (It waits out its debounce.)
    """
    await until_shared(pilot, condition, timeout)
    await workers_idle(pilot)
    await pilot.pause()


async def choose_corpus(app, pilot) -> CorpusPreview:
    app.query_one(f"#{field_id('data.task')}", Select).value = "corpus"
    await pilot.pause()
    preview = app.query_one(CorpusPreview)
    assert preview.display
    return preview


def test_summary_counts_and_lengths_match_the_files(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    summary = summarise_corpus(DataConfig(task="corpus", path=str(folder)), n=2)
    assert summary.first_pairs == [
        ("ein Hund läuft", "a dog runs"),
        ("zwei Katzen schlafen hier", "two cats sleep here"),
    ]
    assert {k: s.pairs for k, s in summary.splits.items()} == {"train": 4, "dev": 2, "test": 1}
    assert summary.empty_skipped == 1
    train = summary.splits["train"]
    # Hand-counted words of the 4 non-empty train pairs: de 3,4,2,5 / en 3,4,2,5.
    assert (train.src_mean, train.src_max, train.tgt_mean, train.tgt_max) == (3.5, 5, 3.5, 5)
    # de types: ein Hund läuft zwei Katzen schlafen hier Mann eine Frau liest Buch = 12
    # en types: a dog runs two cats sleep here man woman reads book = 11
    assert (summary.src_types, summary.tgt_types) == (12, 11)
    swapped = summarise_corpus(
        DataConfig(task="corpus", path=str(folder), src_lang="en", tgt_lang="de"), n=1
    )
    assert swapped.first_pairs == [("a dog runs", "ein Hund läuft")]


def test_a_single_tsv_shows_what_is_split_off(tmp_path: Path) -> None:
    tsv = tmp_path / "pairs.tsv"
    # 40 distinct sources, columns 2 -> 0 chosen, one extra column ignored.
    tsv.write_text(
        "".join(f"target {i}\tignored\tsource {i}\n" for i in range(40)), encoding="utf-8"
    )
    summary = summarise_corpus(DataConfig(task="corpus", path=str(tsv), columns="2,0"), n=1)
    assert summary.first_pairs == [("source 0", "target 0")]
    # dev_fraction = test_fraction = 0.05 of 40 pairs: 2 each, 36 left to train.
    assert {k: s.pairs for k, s in summary.splits.items()} == {"train": 36, "dev": 2, "test": 2}
    assert sorted(summary.split_off) == ["dev", "test"]


def test_the_preview_never_imports_torch(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    code = (
        "import sys\n"
        "from attnlab.config import DataConfig\n"
        "from attnlab.tui.views.corpus_preview import summarise_corpus\n"
        f"summarise_corpus(DataConfig(task='corpus', path={str(folder)!r}))\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_typing_a_corpus_path_shows_the_first_pairs_and_counts(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        preview = await choose_corpus(app, pilot)
        await pilot.click(f"#{field_id('data.path')}")
        await pilot.press(*str(folder))
        await until(pilot, lambda: preview.summary is not None and not preview.pending)
        text = str(preview.content)
        assert "ein Hund läuft → a dog runs" in text
        assert "train 4 · dev 2 · test 1" in text
        assert "· 1 empty" in text
        assert "src 3.5/5" in text
        assert setup.error is None
        assert not app.query_one("#train-button").disabled
        # Swapping the languages (Data fields of the corpus task) refreshes the preview.
        app.query_one(f"#{field_id('data.src_lang')}").value = "en"
        app.query_one(f"#{field_id('data.tgt_lang')}").value = "de"
        await until(pilot, lambda: "a dog runs → ein Hund läuft" in str(preview.content))


async def test_a_missing_path_shows_one_line_and_never_starts_a_run(
    tmp_path: Path, monkeypatch
) -> None:
    started = []
    monkeypatch.setattr(
        "attnlab.launch.TrainingProcess.start", classmethod(lambda *a, **k: started.append(a))
    )
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        setup = app.query_one(SetupView)
        preview = await choose_corpus(app, pilot)
        # While the corpus is being read, Train already waits.
        assert app.query_one("#train-button").disabled
        app.query_one(f"#{field_id('data.path')}", Input).value = str(tmp_path / "nowhere")
        await until(pilot, lambda: not preview.pending)
        assert preview.error == f"data.path={tmp_path / 'nowhere'}: no such file or folder"
        text = str(preview.content)
        assert "no such file or folder" in text and "\n" not in text and "Traceback" not in text
        assert app.query_one(f"#{field_id('data.path')}").has_class("invalid")
        assert setup.error == preview.error
        assert app.query_one("#train-button").disabled
        await pilot.press("escape", "t")
        await pilot.click("#train-button")
        await pilot.pause()
    assert started == []
    assert not (tmp_path / "runs").exists()


async def test_back_to_a_toy_task_hides_the_preview_and_allows_train(tmp_path: Path) -> None:
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        preview = await choose_corpus(app, pilot)
        await until(pilot, lambda: not preview.pending)
        assert "needs data.path" in (preview.error or "")
        app.query_one(f"#{field_id('data.task')}", Select).value = "reverse"
        await pilot.pause()
        assert not preview.display
        assert app.query_one(SetupView).error is None
        assert not app.query_one("#train-button").disabled


async def test_setup_with_a_preview_fits_80x24(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path / "corpus")
    app = make_app(tmp_path / "runs", config=lab_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await ready(app, pilot)
        preview = await choose_corpus(app, pilot)
        app.query_one(f"#{field_id('data.path')}", Input).value = str(folder)
        await until(pilot, lambda: preview.summary is not None and not preview.pending)
        # Small screens show 3 example pairs: title + 3 pairs + 3 statistics lines.
        assert str(preview.content).count("→") == 3
        assert preview.region.height == 7
        assert preview.region.right <= 80
        assert not app.query_one("#train-button").disabled
