"""SCAN as a corpus: hand-written files here, and SCAN's own splits from ../shared when present."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli.data import data as data_cli
from attnlab.config import DataConfig
from attnlab.data.corpus import cache_key, read_source
from attnlab.data.dataset import load_dataset
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, load_preset

SCAN = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "scan"
needs_scan = pytest.mark.skipif(not SCAN.is_dir(), reason="../shared/corpora/scan is absent")
PRESETS = [
    "scan-simple-gru-bahdanau",
    "scan-length-gru-bahdanau",
    "scan-simple-transformer",
    "scan-length-transformer",
]

# (command, actions) pairs written out by hand from SCAN's grammar
PAIRS = [
    ("jump", "I_JUMP"),
    ("walk left", "I_TURN_LEFT I_WALK"),
    ("run twice", "I_RUN I_RUN"),
    ("look thrice", "I_LOOK I_LOOK I_LOOK"),
    ("turn right", "I_TURN_RIGHT"),
    ("jump opposite left", "I_TURN_LEFT I_TURN_LEFT I_JUMP"),
    ("walk and run", "I_WALK I_RUN"),
    ("walk after run", "I_RUN I_WALK"),
    ("run around left", "I_TURN_LEFT I_RUN I_TURN_LEFT I_RUN I_TURN_LEFT I_RUN I_TURN_LEFT I_RUN"),
    ("look right twice", "I_TURN_RIGHT I_LOOK I_TURN_RIGHT I_LOOK"),
    ("jump left and walk", "I_TURN_LEFT I_JUMP I_WALK"),
    ("turn left twice", "I_TURN_LEFT I_TURN_LEFT"),
    ("run", "I_RUN"),
    ("walk", "I_WALK"),
    ("look", "I_LOOK"),
    ("jump twice", "I_JUMP I_JUMP"),
    ("walk thrice", "I_WALK I_WALK I_WALK"),
    ("run right", "I_TURN_RIGHT I_RUN"),
    ("look left", "I_TURN_LEFT I_LOOK"),
    ("jump right", "I_TURN_RIGHT I_JUMP"),
]


def scan_lines(pairs: list[tuple[str, str]]) -> list[str]:
    # SCAN's own spacing varies ("OUT:  LTURN" in its README); the reader must not care
    return [f"IN: {src}  OUT: {tgt} " for src, tgt in pairs]


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def load(tmp_path: Path, **kw):
    return load_dataset(DataConfig(task="corpus", **kw), cache_dir=tmp_path / "cache")


def texts(examples) -> list[tuple[str, str]]:
    return [(e.src_text, e.tgt_text) for e in examples]


def test_a_file_reads_commands_as_source_and_actions_as_target(tmp_path):
    path = write(tmp_path / "mine.txt", scan_lines(PAIRS))  # detected by content, not name
    sides = read_source(DataConfig(task="corpus", path=str(path)))
    assert sides["train"] is not None
    assert sides["train"].pairs == PAIRS
    assert sides["dev"] is None and sides["test"] is None


def test_dev_and_test_are_held_out_by_seed_and_disjoint_from_train(tmp_path):
    path = write(tmp_path / "tasks_all.txt", scan_lines(PAIRS))
    kw = {"path": str(path), "dev_fraction": 0.2, "test_fraction": 0.2}
    a = load(tmp_path, seed=1, **kw)
    again = load(tmp_path / "again", seed=1, **kw)
    other = load(tmp_path / "other", seed=2, **kw)
    train, dev, test = (texts(s) for s in (a.splits.train, a.splits.dev, a.splits.test))
    assert (len(train), len(dev), len(test)) == (12, 4, 4)
    assert sorted(train + dev + test) == sorted(PAIRS)  # nothing lost, nothing duplicated
    assert not {s for s, _ in dev} & {s for s, _ in train}
    assert not {s for s, _ in test} & {s for s, _ in train}
    assert texts(again.splits.dev) == dev and texts(again.splits.test) == test
    assert texts(other.splits.dev) != dev  # another seed, another hold-out
    # commands and actions: separate vocabularies
    assert a.src_vocab.to_list() != a.tgt_vocab.to_list()


def test_a_folder_laid_out_as_scan_keeps_its_test_set(tmp_path):
    folder = tmp_path / "length_split"
    write(folder / "tasks_train_length.txt", scan_lines(PAIRS[:16]))
    write(folder / "tasks_test_length.txt", scan_lines(PAIRS[16:]))
    ds = load(tmp_path, path=str(folder), dev_fraction=0.25)
    assert texts(ds.splits.test) == PAIRS[16:]
    assert sorted(texts(ds.splits.train) + texts(ds.splits.dev)) == sorted(PAIRS[:16])
    assert len(ds.splits.dev) == 4
    assert ds.splits.stats["sources"]["test"].endswith("tasks_test_length.txt")


def test_malformed_line_names_file_and_line(tmp_path):
    lines = scan_lines(PAIRS[:3])
    for bad, problem in (
        ("IN: jump I_JUMP", "no 'OUT:'"),
        ("IN: jump OUT:", "no actions after 'OUT:'"),
        ("IN: OUT: I_JUMP", "no command words"),
        ("jump OUT: I_JUMP", "line does not start with 'IN:'"),
        ("IN: jump OUT: I_JUMP OUT: I_JUMP", "more than one 'OUT:'"),
    ):
        path = write(tmp_path / "tasks_train_x.txt", [*lines, "", bad])
        with pytest.raises(AttnlabError) as err:
            read_source(DataConfig(task="corpus", path=str(path)))
        assert str(err.value).startswith(f"{path}:5: {problem}")


def test_two_train_files_in_one_folder_is_an_error(tmp_path):
    write(tmp_path / "tasks_train_a.txt", scan_lines(PAIRS))
    write(tmp_path / "tasks_train_b.txt", scan_lines(PAIRS))
    with pytest.raises(AttnlabError, match="more than one SCAN train file"):
        read_source(DataConfig(task="corpus", path=str(tmp_path)))


def test_a_file_neither_named_nor_shaped_like_scan_is_refused(tmp_path):
    path = write(tmp_path / "notes.txt", ["jump I_JUMP"])
    with pytest.raises(AttnlabError, match=r"data.path=.*SCAN file"):
        read_source(DataConfig(task="corpus", path=str(path)))


def test_the_cache_key_includes_the_format(tmp_path):
    path = write(tmp_path / "a.txt", scan_lines(PAIRS))
    cfg = DataConfig(task="corpus", path=str(path))
    assert cache_key(cfg, [path], ["scan"]) != cache_key(cfg, [path], ["tsv"])


def test_data_stats_reads_a_scan_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "simple_split"
    write(folder / "tasks_train_simple.txt", scan_lines(PAIRS[:16]))
    write(folder / "tasks_test_simple.txt", scan_lines(PAIRS[16:]))
    result = CliRunner().invoke(data_cli, ["stats", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    assert '"test"' in result.output and "tasks_test_simple.txt" in result.output


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_and_admit_48_actions(name):
    config = load_preset(name)
    assert config.name == name and config.description.strip()
    assert config.data.task == "corpus" and config.data.tokenizer == "word"
    assert config.data.path.startswith("../shared/corpora/scan/")
    assert config.train.metric == "exact_match"
    # budget = ceil(ratio * |X|) + const steps, </s> included; SCAN commands have 1-9 words
    for words in (1, 9):
        assert -(-config.decode.max_len_ratio * words // 1) + config.decode.max_len_const >= 50


# --- SCAN's own files (../shared/corpora/scan) -------------------------------------------


@needs_scan
@pytest.mark.parametrize(
    ("split", "n_train", "n_test"), [("simple", 16_728, 4_182), ("length", 16_990, 3_920)]
)
def test_real_splits_have_sources_line_counts(split, n_train, n_test):
    folder = SCAN / f"{split}_split"
    sides = read_source(DataConfig(task="corpus", path=str(folder)))
    assert sides["train"] is not None and sides["test"] is not None and sides["dev"] is None
    assert len(sides["train"].pairs) == n_train
    assert len(sides["test"].pairs) == n_test
    raw = (folder / f"tasks_test_{split}.txt").read_text(encoding="utf-8").splitlines()
    first_src, first_tgt = raw[0].split(" OUT: ")
    assert sides["test"].pairs[0] == (first_src.removeprefix("IN: ").strip(), first_tgt.strip())


@needs_scan
def test_real_length_split_target_lengths(tmp_path):
    ds = load(tmp_path, path=str(SCAN / "length_split"), tokenizer="word")
    test_lengths = [len(e.tgt_tokens) for e in ds.splits.test]
    train_lengths = [len(e.tgt_tokens) for e in [*ds.splits.train, *ds.splits.dev]]
    assert (min(test_lengths), max(test_lengths)) == (24, 48)
    assert max(train_lengths) <= 22
    assert len(ds.splits.train) + len(ds.splits.dev) == 16_990


@needs_scan
def test_preset_path_resolves_from_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # presets name ../shared/..., relative to the repository root
    config = apply_overrides(load_preset("scan-simple-gru-bahdanau"), ["data.max_pairs=50"])
    ds = load_dataset(config.data, cache_dir=tmp_path / "cache")
    assert len(ds.splits.test) == 50
