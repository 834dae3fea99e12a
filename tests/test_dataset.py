"""Dataset: vocabularies, meta round trip without data or cache, stats."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from attnlab.config import DataConfig
from attnlab.data.batching import padding_fraction, plan_batches
from attnlab.data.dataset import Dataset, load_dataset, vocab_and_tokenizers_from_meta
from attnlab.data.stats import dataset_stats, length_histogram, render_stats
from attnlab.data.vocab import UNK_ID
from attnlab.errors import AttnlabError

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "multi30k"


def write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture
def folder(tmp_path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    write(root / "train.de", ["der hund läuft", "der hund schläft", "die katze läuft", "ein vogel"])
    write(root / "train.en", ["the dog runs", "the dog sleeps", "the cat runs", "a bird"])
    write(root / "dev.de", ["der vogel läuft", "die maus"])
    write(root / "dev.en", ["the bird runs", "the mouse"])
    write(root / "test.de", ["ein hund"])
    write(root / "test.en", ["a dog"])
    return root


def test_vocab_min_freq_and_max_vocab(folder, tmp_path):
    ds = load_dataset(DataConfig(task="corpus", path=str(folder), min_freq=2), tmp_path / "c")
    # de counts: der 2, hund 2, läuft 2, the rest 1
    assert ds.src_vocab.itos[4:] == ["der", "hund", "läuft"]
    ds = load_dataset(DataConfig(task="corpus", path=str(folder), max_vocab=2), tmp_path / "c")
    assert ds.tgt_vocab.itos[4:] == ["the", "dog"]


def test_shared_vocab(folder, tmp_path):
    ds = load_dataset(
        DataConfig(task="corpus", path=str(folder), shared_vocab=True), tmp_path / "c"
    )
    assert ds.src_vocab is ds.tgt_vocab or ds.src_vocab.itos == ds.tgt_vocab.itos
    assert {"hund", "dog"} <= set(ds.src_vocab.itos)


def test_shared_bpe_is_one_tokenizer(folder, tmp_path):
    ds = load_dataset(
        DataConfig(
            task="corpus", path=str(folder), tokenizer="bpe", subword_vocab=50, shared_vocab=True
        ),
        tmp_path / "c",
    )
    assert ds.meta()["src_tokenizer"] == ds.meta()["tgt_tokenizer"]
    assert ds.src_vocab.itos == ds.tgt_vocab.itos


@pytest.mark.parametrize("tokenizer", ["word", "bpe", "unigram"])
def test_meta_rebuilds_vocab_and_tokenizer_after_cache_is_deleted(folder, tmp_path, tokenizer):
    cache = tmp_path / "cache"
    ds = load_dataset(
        DataConfig(
            task="corpus", path=str(folder), tokenizer=tokenizer, subword_vocab=50, lowercase=True
        ),
        cache,
    )
    meta = json.loads(json.dumps(ds.meta()))  # as stored in checkpoint metadata
    shutil.rmtree(cache)
    shutil.rmtree(folder)
    back = Dataset.from_meta(meta)
    assert back.src_vocab.itos == ds.src_vocab.itos and back.tgt_vocab.itos == ds.tgt_vocab.itos
    assert back.name == "corpus" and not back.has_alignment
    for e in ds.splits.train + ds.splits.dev + ds.splits.test:
        tokens = back.tokenize_source(e.src_text)
        assert tokens == list(e.src_tokens)
        assert back.src_vocab.encode(tokens) == ds.src_vocab.encode(e.src_tokens)
        assert back.detokenize_target(e.tgt_tokens) == ds.detokenize_target(e.tgt_tokens)
    for e in ds.splits.train:  # every character seen in training: exact round trip
        assert back.detokenize_target(e.tgt_tokens) == e.tgt_text.lower()


def test_meta_errors_are_user_errors():
    with pytest.raises(AttnlabError, match="src_vocab"):
        vocab_and_tokenizers_from_meta({})
    with pytest.raises(AttnlabError, match="invalid"):
        vocab_and_tokenizers_from_meta(
            {
                "src_vocab": ["a"],
                "tgt_vocab": ["a"],
                "src_tokenizer": {"type": "word"},
                "tgt_tokenizer": {"type": "word"},
            }
        )


def test_stats_against_hand_counts(folder, tmp_path):
    write(
        folder / "train.de",
        ["der hund läuft", "", "der hund schläft", "die katze läuft", "ein vogel"],
    )
    write(folder / "train.en", ["the dog runs", "x", "the dog sleeps", "the cat runs", "a bird"])
    ds = load_dataset(DataConfig(task="corpus", path=str(folder)), tmp_path / "c")
    stats = dataset_stats(ds, batch_size=2)
    json.dumps(stats)  # plain JSON
    assert stats["splits"]["train"]["pairs"] == 4
    assert stats["splits"]["train"]["src_tokens"] == 11
    assert stats["splits"]["train"]["src_len"] == {"min": 2, "mean": 2.75, "max": 3, "p95": 3}
    assert stats["empty_skipped"]["train"] == 1
    # dev source tokens: der vogel läuft | die maus -> "maus" is the only unknown of 5
    assert stats["splits"]["dev"]["oov_src"] == pytest.approx(1 / 5)
    # dev target: the bird runs | the mouse -> "mouse" unknown of 5
    assert stats["splits"]["dev"]["oov_tgt"] == pytest.approx(1 / 5)
    plan = plan_batches(ds.splits.train, 2, 0, shuffle=True, seed=0, bucket=True)
    assert stats["batching"]["padding_fraction"] == pytest.approx(
        padding_fraction(ds.splits.train, plan), abs=1e-4
    )
    assert stats["batching"]["batches_per_epoch"] == 2
    assert stats["tokenizer"] == {"src": "whitespace", "tgt": "whitespace"}


def test_oov_matches_vocab_encoding(folder, tmp_path):
    ds = load_dataset(DataConfig(task="corpus", path=str(folder), min_freq=2), tmp_path / "c")
    stats = dataset_stats(ds)
    ids = [i for e in ds.splits.test for i in ds.src_vocab.encode(e.src_tokens)]
    assert stats["splits"]["test"]["oov_src"] == pytest.approx(
        ids.count(UNK_ID) / len(ids), abs=1e-5
    )


def test_length_histogram_counts_every_sentence():
    rows = length_histogram([1, 2, 3, 25], [4, 30], bins=10)
    assert rows[0] == {"bucket": "1-3", "src": 3, "tgt": 0}
    assert sum(r["src"] for r in rows) == 4 and sum(r["tgt"] for r in rows) == 2


def test_render_stats_shows_sizes(folder, tmp_path):
    ds = load_dataset(DataConfig(task="corpus", path=str(folder)), tmp_path / "c")
    console = Console(record=True, width=100)
    console.print(render_stats(dataset_stats(ds)))
    text = console.export_text()
    assert "train" in text and "whitespace" in text and "padding" in text and "histogram" in text


def test_toy_stats_render():
    ds = load_dataset(DataConfig(task="reverse", train_size=200, dev_size=20, test_size=20))
    stats = dataset_stats(ds, batch_tokens=300)
    assert stats["splits"]["dev"]["oov_src"] == 0.0
    console = Console(record=True, width=100)
    console.print(render_stats(stats))
    assert "reverse" in console.export_text()
