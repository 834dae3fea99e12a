"""Corpus loaders against small files written here: folder, pair, TSV, gz, direction, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli.data import data as data_cli
from attnlab.config import DataConfig
from attnlab.data.corpus import split_off
from attnlab.data.dataset import load_dataset
from attnlab.errors import AttnlabError

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "multi30k"
needs_multi30k = pytest.mark.skipif(
    not MULTI30K.is_dir(), reason="../shared/corpora/multi30k is absent"
)

DE = ["ein hund läuft .", "zwei katzen schlafen .", "ein mann liest ein buch .", "die frau singt ."]
EN = ["a dog runs .", "two cats sleep .", "a man reads a book .", "the woman sings ."]


def write(path: Path, lines: list[str], gz: bool = False) -> Path:
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path


def make_folder(
    root: Path, test_name: str = "test", dev_name: str = "val", gz: bool = False
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 4), (dev_name, 2), (test_name, 3)):
        write(root / f"{split}.de", [f"{s} {split}" for s in DE[:n]], gz)
        write(root / f"{split}.en", [f"{s} {split}" for s in EN[:n]], gz)
    return root


def corpus(tmp_path: Path, **kw) -> DataConfig:
    return DataConfig(task="corpus", **kw)


def load(cfg: DataConfig, tmp_path: Path):
    return load_dataset(cfg, cache_dir=tmp_path / "cache")


def test_folder_with_val_and_flickr_test(tmp_path):
    folder = make_folder(tmp_path / "m", test_name="test_2016_flickr")
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert [len(ds.splits.train), len(ds.splits.dev), len(ds.splits.test)] == [4, 2, 3]
    first = ds.splits.test[0]
    assert first.src_text == "ein hund läuft . test_2016_flickr"
    assert first.tgt_text == "a dog runs . test_2016_flickr"
    assert first.src_tokens == ("ein", "hund", "läuft", ".", "test_2016_flickr")
    assert ds.stats["split_off"] == []
    assert ds.stats["sources"]["test"].endswith("test_2016_flickr.de + test_2016_flickr.en")


def test_direction_swap(tmp_path):
    folder = make_folder(tmp_path / "m")
    ds = load(DataConfig(task="corpus", path=str(folder), src_lang="en", tgt_lang="de"), tmp_path)
    assert ds.splits.train[1].src_text == "two cats sleep . train"
    assert ds.splits.train[1].tgt_text == "zwei katzen schlafen . train"


def test_gz_files_read_transparently(tmp_path):
    plain = load(
        DataConfig(task="corpus", path=str(make_folder(tmp_path / "a", dev_name="dev"))), tmp_path
    )
    zipped = load(
        DataConfig(task="corpus", path=str(make_folder(tmp_path / "b", dev_name="dev", gz=True))),
        tmp_path,
    )
    for split in ("train", "dev", "test"):
        assert [e.src_text for e in plain.splits.split(split)] == [
            e.src_text for e in zipped.splits.split(split)
        ]
        assert [e.tgt_tokens for e in plain.splits.split(split)] == [
            e.tgt_tokens for e in zipped.splits.split(split)
        ]


def test_folder_without_dev_and_test_splits_them_off(tmp_path):
    folder = tmp_path / "only"
    folder.mkdir()
    srcs = [f"satz {i % 40}" for i in range(200)]  # each source 5 times
    write(folder / "train.de", srcs)
    write(folder / "train.en", [f"sentence {i}" for i in range(200)])
    ds = load(
        DataConfig(task="corpus", path=str(folder), dev_fraction=0.1, test_fraction=0.1), tmp_path
    )
    assert sorted(ds.stats["split_off"]) == ["dev", "test"]
    train_sources = {e.src_text for e in ds.splits.train}
    assert not train_sources & {e.src_text for e in ds.splits.dev + ds.splits.test}
    assert len(ds.splits.train) + len(ds.splits.dev) + len(ds.splits.test) == 200
    assert len(ds.splits.dev) == 20 and len(ds.splits.test) == 20  # whole groups of 5


def test_pair_of_files(tmp_path):
    src = write(tmp_path / "corpus.de", [f"quelle {i}" for i in range(100)])
    tgt = write(tmp_path / "corpus.en", [f"target {i}" for i in range(100)])
    cfg = DataConfig(
        task="corpus",
        src_file=str(src),
        tgt_file=str(tgt),
        dev_fraction=0.1,
        test_fraction=0.2,
        seed=3,
    )
    ds = load(cfg, tmp_path)
    assert (len(ds.splits.train), len(ds.splits.dev), len(ds.splits.test)) == (70, 10, 20)
    for e in ds.splits.train + ds.splits.dev + ds.splits.test:
        assert e.src_text.split()[1] == e.tgt_text.split()[1]  # pairs stay aligned
    again = load(cfg, tmp_path)
    assert [e.src_text for e in again.splits.test] == [e.src_text for e in ds.splits.test]
    other = load(DataConfig(**{**cfg.__dict__, "seed": 4}), tmp_path)
    assert [e.src_text for e in other.splits.test] != [e.src_text for e in ds.splits.test]


def test_split_off_groups_identical_sources():
    pairs = [(f"s{i % 7}", f"t{i}") for i in range(70)]
    train, held = split_off(pairs, {"test": 0.2, "dev": 0.1}, seed=0)
    for name in ("test", "dev"):
        sources = {s for s, _ in held[name]}
        assert all(
            sum(1 for s, _ in pairs if s == src) == sum(1 for s, _ in held[name] if s == src)
            for src in sources
        )
        assert not sources & {s for s, _ in train}
    assert len(train) + len(held["test"]) + len(held["dev"]) == 70


def test_tsv_columns_and_extra_columns(tmp_path):
    rows = [f"id{i}\tziel {i}\tquelle {i}\textra" for i in range(50)]
    path = write(tmp_path / "pairs.tsv", rows)
    ds = load(
        DataConfig(
            task="corpus", path=str(path), columns="2,1", dev_fraction=0.1, test_fraction=0.1
        ),
        tmp_path,
    )
    e = ds.splits.train[0]
    assert e.src_text.startswith("quelle") and e.tgt_text.startswith("ziel")
    assert e.src_text.split()[1] == e.tgt_text.split()[1]
    assert len(ds.splits.train) == 40


def test_folder_of_tsv_files(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    for split, n in (("train", 6), ("dev", 2), ("test", 3)):
        write(folder / f"{split}.tsv", [f"q{i}\tt{i}" for i in range(n)])
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert (len(ds.splits.train), len(ds.splits.dev), len(ds.splits.test)) == (6, 2, 3)


def test_empty_lines_skipped_and_counted(tmp_path):
    folder = make_folder(tmp_path / "m")
    write(folder / "train.de", ["a", "", "b", "c", "   "])
    write(folder / "train.en", ["x", "y", "", "z", "w"])
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert [e.src_text for e in ds.splits.train] == ["a", "c"]
    assert ds.stats["empty_skipped"]["train"] == 3


def test_whitespace_is_normalised(tmp_path):
    folder = make_folder(tmp_path / "m")
    write(folder / "train.de", ["  ein   hund\t läuft  "])
    write(folder / "train.en", ["a dog\r"])
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert ds.splits.train[0].src_text == "ein hund läuft"
    assert ds.splits.train[0].tgt_text == "a dog"


def test_max_pairs_and_train_max_tokens(tmp_path):
    folder = make_folder(tmp_path / "m")
    ds = load(DataConfig(task="corpus", path=str(folder), max_pairs=2), tmp_path)
    assert (len(ds.splits.train), len(ds.splits.dev), len(ds.splits.test)) == (2, 2, 2)
    ds = load(DataConfig(task="corpus", path=str(folder), train_max_tokens=6), tmp_path)
    # "ein mann liest ein buch . train" has 7 tokens
    assert [len(e.src_tokens) for e in ds.splits.train] == [5, 5, 5]
    assert ds.stats["train_too_long_dropped"] == 1
    assert len(ds.splits.test) == 3  # only training pairs are filtered


def test_a_stray_huge_training_line_is_dropped_by_the_default_cap_and_reported(tmp_path):
    """One 100k-token line would ask for gigabytes in its batch; the default cap drops it."""
    folder = make_folder(tmp_path / "m")
    huge = " ".join(["wort"] * 100_000)
    write(folder / "train.de", [*(f"{s} train" for s in DE), huge])
    write(folder / "train.en", [*(f"{s} train" for s in EN), "a b c"])
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert DataConfig().train_max_tokens == 250
    assert len(ds.splits.train) == 4 and max(len(e.src_tokens) for e in ds.splits.train) == 7
    assert ds.stats["train_too_long_dropped"] == 1


# --- errors name the file and the line ---------------------------------------------------


def test_different_line_counts(tmp_path):
    folder = make_folder(tmp_path / "m")
    write(folder / "train.en", EN[:3])
    with pytest.raises(AttnlabError) as err:
        load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    message = str(err.value)
    assert f"{folder / 'train.de'}:4" in message and "train.en" in message and "3 lines" in message


def test_invalid_utf8(tmp_path):
    folder = make_folder(tmp_path / "m")
    (folder / "val.en").write_bytes(b"fine\nalso fine\nbroken \xff here\n")
    (folder / "val.de").write_bytes(b"a\nb\nc\n")
    with pytest.raises(AttnlabError, match=r"val\.en:3: invalid UTF-8"):
        load(DataConfig(task="corpus", path=str(folder)), tmp_path)


def test_invalid_utf8_in_gz(tmp_path):
    folder = make_folder(tmp_path / "m", gz=True)
    (folder / "train.de.gz").write_bytes(gzip.compress(b"ok\n\xc3\x28\nok\nok\n"))
    with pytest.raises(AttnlabError, match=r"train\.de\.gz:2: invalid UTF-8"):
        load(DataConfig(task="corpus", path=str(folder)), tmp_path)


def test_tsv_line_with_too_few_columns(tmp_path):
    path = write(tmp_path / "pairs.tsv", ["a\tb\tc", "d\te\tf", "only\ttwo"])
    with pytest.raises(
        AttnlabError, match=r"pairs\.tsv:3: expected at least 3 tab-separated columns .* found 2"
    ):
        load(DataConfig(task="corpus", path=str(path), columns="0,2"), tmp_path)


def test_empty_split(tmp_path):
    folder = make_folder(tmp_path / "m")
    write(folder / "val.de", ["", ""])
    write(folder / "val.en", ["x", ""])
    with pytest.raises(
        AttnlabError, match=r"val\.de \+ val\.en: the dev split is empty: .*2 empty lines skipped"
    ):
        load(DataConfig(task="corpus", path=str(folder)), tmp_path)


def test_empty_split_off(tmp_path):
    src = write(tmp_path / "c.de", ["a", "b"])
    tgt = write(tmp_path / "c.en", ["x", "y"])
    with pytest.raises(
        AttnlabError, match=r"c\.de \+ c\.en: the test split is empty: data\.test_fraction=0\.0"
    ):
        load(
            DataConfig(
                task="corpus",
                src_file=str(src),
                tgt_file=str(tgt),
                test_fraction=0.0,
                dev_fraction=0.5,
            ),
            tmp_path,
        )


def test_missing_language_lists_languages(tmp_path):
    folder = make_folder(tmp_path / "m")
    with pytest.raises(AttnlabError, match=r"no train\.fr .*languages here: de, en"):
        load(DataConfig(task="corpus", path=str(folder), src_lang="fr"), tmp_path)


def test_missing_path_and_bad_columns(tmp_path):
    with pytest.raises(AttnlabError, match="data.path=.*no such file or folder"):
        load(DataConfig(task="corpus", path=str(tmp_path / "nowhere")), tmp_path)
    with pytest.raises(AttnlabError, match="needs data.path"):
        load(DataConfig(task="corpus"), tmp_path)
    path = write(tmp_path / "p.tsv", ["a\tb"])
    with pytest.raises(AttnlabError, match="data.columns"):
        load(DataConfig(task="corpus", path=str(path), columns="1"), tmp_path)


@pytest.mark.parametrize(
    "setup, expected",
    [
        ("lines", "train.de:4"),
        ("utf8", "val.en:3: invalid UTF-8"),
        ("tsv", "pairs.tsv:2: expected at least 2"),
    ],
)
def test_cli_errors_exit_2_with_one_line(tmp_path, monkeypatch, setup, expected):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    folder = make_folder(tmp_path / "m")
    target = str(folder)
    if setup == "lines":
        write(folder / "train.en", EN[:3])
    elif setup == "utf8":
        (folder / "val.en").write_bytes(b"a\nb\n\xfe\n")
        (folder / "val.de").write_bytes(b"a\nb\nc\n")
    else:
        target = str(write(tmp_path / "pairs.tsv", ["a\tb", "no-tab"]))
    result = CliRunner().invoke(data_cli, ["stats", target])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.output


def test_cli_stats_json(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    folder = make_folder(tmp_path / "m")
    result = CliRunner().invoke(
        data_cli, ["stats", str(folder), "--json", "--set", "data.tokenizer=char"]
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    assert stats["splits"]["train"]["pairs"] == 4
    assert stats["tokenizer"]["src"] == "char"
    result = CliRunner().invoke(data_cli, ["stats", "revers"])
    assert result.exit_code == 2 and 'did you mean "reverse"' in result.output


# --- cache -------------------------------------------------------------------------------


def test_cache_hit_on_second_load_and_miss_after_edit(tmp_path):
    folder = make_folder(tmp_path / "m")
    cfg = DataConfig(task="corpus", path=str(folder), tokenizer="bpe", subword_vocab=60)
    first = load(cfg, tmp_path)
    second = load(cfg, tmp_path)
    assert (first.stats["cache"], second.stats["cache"]) == ("miss", "hit")
    assert [e.src_tokens for e in first.splits.train] == [e.src_tokens for e in second.splits.train]
    assert first.src_vocab.itos == second.src_vocab.itos
    # another setting or changed bytes -> another key
    assert (
        load(DataConfig(**{**cfg.__dict__, "lowercase": True}), tmp_path).stats["cache"] == "miss"
    )
    write(folder / "train.en", [s.upper() for s in EN])
    assert load(cfg, tmp_path).stats["cache"] == "miss"


def test_damaged_cache_entry_is_rebuilt(tmp_path):
    folder = make_folder(tmp_path / "m")
    cfg = DataConfig(task="corpus", path=str(folder))
    ds = load(cfg, tmp_path)
    Path(ds.stats["cache_file"]).write_text("{not json")
    again = load(cfg, tmp_path)
    assert again.stats["cache"] == "miss"
    assert [e.src_tokens for e in again.splits.train] == [e.src_tokens for e in ds.splits.train]


def test_default_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "envcache"))
    ds = load_dataset(DataConfig(task="corpus", path=str(make_folder(tmp_path / "m"))))
    assert Path(ds.stats["cache_file"]).is_relative_to(tmp_path / "envcache")


# --- Multi30k ----------------------------------------------------------------------------


@needs_multi30k
def test_multi30k_slice_loads(tmp_path):
    ds = load(
        DataConfig(
            task="corpus", path=str(MULTI30K), max_pairs=2000, tokenizer="word", lowercase=True
        ),
        tmp_path,
    )
    assert (len(ds.splits.train), len(ds.splits.dev), len(ds.splits.test)) == (2000, 1014, 1000)
    assert (
        ds.splits.test[0].src_text == "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
    )
    assert ds.splits.test[0].tgt_text == "A man in an orange hat starring at something."


@needs_multi30k
def test_multi30k_relative_to_repo_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # presets say ../shared/corpora/multi30k, relative to the repo
    ds = load_dataset(
        DataConfig(task="corpus", path="../shared/corpora/multi30k", max_pairs=100), tmp_path / "c"
    )
    assert len(ds.splits.train) == 100


@needs_multi30k
def test_multi30k_full_corpus_vocabularies_near_the_reference(tmp_path):
    # (Its preparation time, < 10 s, is measured by benchmarks/prepare_speed.py, not here.)
    ds = load(
        DataConfig(task="corpus", path=str(MULTI30K), tokenizer="word", lowercase=True, min_freq=2),
        tmp_path,
    )
    assert len(ds.splits.train) == 29000
    # near the spaCy-tokenised vocabularies of the reference (de 7853, en 5893 with min_freq 2)
    assert 7000 < len(ds.src_vocab) < 8700 and 5300 < len(ds.tgt_vocab) < 6500


@needs_multi30k
@pytest.mark.slow
def test_end_to_end_2k_pairs_translates_after_cache_is_deleted(tmp_path, monkeypatch):
    """Train a tiny model on a 2k-pair slice with BPE; the checkpoint alone translates."""
    import shutil

    import torch

    from attnlab.data.batching import make_batch
    from attnlab.data.example import Example
    from attnlab.evaluate import decode_best
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.runs import load_checkpoint
    from attnlab.train.trainer import Trainer

    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "cache"))
    config = apply_overrides(
        load_preset("multi30k-gru-bahdanau"),
        [
            f"data.path={MULTI30K}",
            "data.max_pairs=2000",
            "data.tokenizer=bpe",
            "data.subword_vocab=500",
            "model.emb=32",
            "model.hidden=48",
            "train.max_steps=30",
            "train.eval_every=30",
            "train.eval_sentences=40",
            "train.batch_size=64",
            "train.device=cpu",
        ],
    )
    summary = Trainer(config, tmp_path / "run", device="cpu", install_signals=False).run()
    assert summary["step"] == 30 and summary["reason"] == "finished"
    shutil.rmtree(tmp_path / "cache")  # translate must need nothing but the checkpoint

    loaded = load_checkpoint(Path(summary["best_checkpoint"]))
    text = "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
    tokens = loaded.dataset.tokenize_source(text)
    assert loaded.dataset.src_tokenizer.decode(tokens) == text.lower()
    batch = make_batch(
        [Example(tuple(tokens), ())], loaded.dataset.src_vocab, loaded.dataset.tgt_vocab
    )
    with torch.no_grad():
        hyp = decode_best(loaded.model, batch.src, batch.src_mask, loaded.config.decode, False)[0]
    output = loaded.dataset.detokenize_target(loaded.dataset.tgt_vocab.decode(hyp.tokens))
    assert isinstance(output, str) and "▁" not in output


def test_preview_reads_without_preparing(tmp_path):
    """The lab's corpus preview (the one preview there is) reads the files, prepares nothing."""
    from attnlab.tui.views.corpus_preview import summarise_corpus

    folder = make_folder(tmp_path / "m")
    preview = summarise_corpus(DataConfig(task="corpus", path=str(folder)), n=2)
    assert preview.first_pairs == [
        ("ein hund läuft . train", "a dog runs . train"),
        ("zwei katzen schlafen . train", "two cats sleep . train"),
    ]
    assert {k: s.pairs for k, s in preview.splits.items()} == {"train": 4, "dev": 2, "test": 3}
    assert not (tmp_path / "cache").exists()
    src = write(tmp_path / "c.de", [f"a {i}" for i in range(40)])
    tgt = write(tmp_path / "c.en", [f"x {i}" for i in range(40)])
    # No dev/test files: both are split off train (0.05 of 40 pairs each).
    alone = summarise_corpus(DataConfig(task="corpus", src_file=str(src), tgt_file=str(tgt)))
    assert {k: s.pairs for k, s in alone.splits.items()} == {"train": 36, "dev": 2, "test": 2}
    assert sorted(alone.split_off) == ["dev", "test"]


def test_identical_sources_say_why_train_is_empty(tmp_path):
    tsv = tmp_path / "same.tsv"
    tsv.write_text("same line\tgleich\n" * 300)
    with pytest.raises(AttnlabError) as err:
        load(DataConfig(task="corpus", path=str(tsv)), tmp_path)
    message = str(err.value)
    assert "the train split is empty" in message and "0 empty lines" not in message
    assert "300 pairs have only 1 distinct source" in message


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_corpus_file_that_is_not_a_regular_file_is_one_error_not_a_hang(tmp_path, kind):
    import os

    src = write(tmp_path / "c.de", ["a", "b", "c", "d"])
    tgt = tmp_path / "c.en"
    if kind == "fifo":
        os.mkfifo(tgt)  # no writer: open() without O_NONBLOCK would wait forever
    elif kind == "device":
        tgt.symlink_to("/dev/zero")  # endless: read whole, it ends in MemoryError
    else:
        tgt.mkdir()
    names = {"fifo": "a FIFO", "device": "a character device", "folder": "a folder"}
    with pytest.raises(AttnlabError, match=rf"c\.en: is {names[kind]}, not a regular file"):
        load(DataConfig(task="corpus", src_file=str(src), tgt_file=str(tgt)), tmp_path)


def test_a_corpus_line_past_the_limit_is_one_error_naming_it(tmp_path, monkeypatch):
    import attnlab.data.corpus as corpus_module

    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 64)
    src = write(tmp_path / "c.de", ["a", "b" * 64, "c" * 65, "d"])  # 64 bytes + "\n" fits
    tgt = write(tmp_path / "c.en", ["a", "b", "c", "d"])
    with pytest.raises(AttnlabError, match=r"c\.de:3: line longer than 64 bytes"):
        load(DataConfig(task="corpus", src_file=str(src), tgt_file=str(tgt)), tmp_path)
    gz = write(tmp_path / "g.de", ["a", "b" * 100], gz=True)  # bounded inside .gz too
    with pytest.raises(AttnlabError, match=r"g\.de\.gz:2: line longer than 64 bytes"):
        corpus_module.read_raw_lines(gz)


def test_reading_keeps_lines_endings_and_bom_as_before(tmp_path):
    from attnlab.data.corpus import read_raw_lines

    path = tmp_path / "x.txt"
    path.write_bytes("\ufeffone\r\ntwo\n\nthree".encode())
    assert read_raw_lines(path) == ["one", "two", "", "three"]
    path.write_bytes(b"")
    assert read_raw_lines(path) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: {**p, "pairs": {**p["pairs"], "train": p["pairs"]["train"][:-1]}},  # zip()
        lambda p: {**p, "tokens": {**p["tokens"], "dev": {"src": [], "tgt": []}}},
        lambda p: {**p, "meta": {**p["meta"], "src_vocab": 7}},
        lambda p: [[[[[[]]]]]] * 3,
    ],
)
def test_a_valid_json_but_inconsistent_cache_is_prepared_again(tmp_path, damage):
    folder = make_folder(tmp_path / "m")
    cfg = DataConfig(task="corpus", path=str(folder))
    ds = load(cfg, tmp_path)
    cache = Path(ds.stats["cache_file"])
    cache.write_text(json.dumps(damage(json.loads(cache.read_text()))))
    again = load(cfg, tmp_path)
    assert again.stats["cache"] in ("miss", "damaged (prepared again)")
    assert [e.src_tokens for e in again.splits.train] == [e.src_tokens for e in ds.splits.train]
    assert load(cfg, tmp_path).stats["cache"] == "hit"  # rewritten whole


def test_a_deeply_nested_cache_is_prepared_again(tmp_path):
    folder = make_folder(tmp_path / "m")
    cfg = DataConfig(task="corpus", path=str(folder))
    cache = Path(load(cfg, tmp_path).stats["cache_file"])
    cache.write_text("[" * 100_000 + "]" * 100_000)  # RecursionError in json
    assert load(cfg, tmp_path).stats["cache"] == "miss"


def test_cache_files_get_the_umasks_mode(tmp_path):
    import os

    folder = make_folder(tmp_path / "m")
    old = os.umask(0o022)
    try:
        cache = Path(
            load(DataConfig(task="corpus", path=str(folder)), tmp_path).stats["cache_file"]
        )
    finally:
        os.umask(old)
    assert cache.stat().st_mode & 0o777 == 0o644  # 0o666 & ~0o022, like every file we write


def test_dev_and_test_pairs_over_eval_max_tokens_are_skipped_and_counted(tmp_path):
    """A 100,000-token dev line stalled the final evaluation: the cap skips it, counted."""
    from attnlab.data.stats import dataset_stats, stats_notes

    folder = make_folder(tmp_path / "m")
    huge = " ".join(["wort"] * 100_000)
    write(folder / "val.de", [f"{s} val" for s in DE[:2]] + [huge])
    write(folder / "val.en", [f"{s} val" for s in EN[:2]] + ["a b"])
    ds = load(DataConfig(task="corpus", path=str(folder)), tmp_path)
    assert DataConfig().eval_max_tokens == 1000
    assert [len(e.src_tokens) for e in ds.splits.dev] == [5, 5]  # "ein hund läuft . val"
    assert (ds.stats["dev_too_long_dropped"], ds.stats["test_too_long_dropped"]) == (1, 0)
    assert "dev pairs skipped as longer than data.eval_max_tokens: 1" in stats_notes(
        dataset_stats(ds)
    )
    # 0 = no cap: every dev pair kept
    whole = load(DataConfig(task="corpus", path=str(folder), eval_max_tokens=0), tmp_path)
    assert len(whole.splits.dev) == 3
    # a cap that leaves a split empty says so
    with pytest.raises(AttnlabError, match=r"dev split is empty: all 3 .*eval_max_tokens=3"):
        load(DataConfig(task="corpus", path=str(folder), eval_max_tokens=3), tmp_path)


def test_translate_input_is_cut_to_the_cap_with_a_count():
    from attnlab.decode.source_cap import cap_sources, cut_warning

    sources = [["a"] * 5, ["b"] * 2, [], ["c"] * 3]
    capped, cut = cap_sources(sources, 3)
    assert capped == [["a"] * 3, ["b"] * 2, [], ["c"] * 3] and cut == 1
    assert cap_sources(sources, 0) == (sources, 0)
    assert cut_warning(1, 4, 3) == (
        "warning: 1 of 4 input lines cut to their first 3 tokens (data.eval_max_tokens of the run)"
    )
    assert cut_warning(0, 4, 3) is None
