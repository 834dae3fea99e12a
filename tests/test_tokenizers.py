"""Tokenizers: exact round trips, serialisation, lowercasing, unknown characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.data.corpus import read_lines
from attnlab.data.tokenizers import (
    SPACE_MARK,
    WordTokenizer,
    make_tokenizer,
    tokenizer_from_dict,
)
from attnlab.errors import AttnlabError

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "multi30k"
needs_multi30k = pytest.mark.skipif(
    not MULTI30K.is_dir(), reason="../shared/corpora/multi30k is absent"
)

SAMPLE = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "A man in an orange hat starring at something.",
    'She said "hello" (twice), didn\'t she?',
    "Prices: 2.50 euros; 100% sure!",
]


@pytest.fixture(scope="module")
def multi30k_lines() -> dict[str, list[str]]:
    if not MULTI30K.is_dir():
        pytest.skip("../shared/corpora/multi30k is absent")
    # the loader's view of the text: whitespace-normalised lines
    return {lang: read_lines(MULTI30K / f"train.{lang}")[:200] for lang in ("de", "en")}


@pytest.fixture(scope="module")
def trained(multi30k_lines):
    texts = multi30k_lines["de"] + multi30k_lines["en"]
    return {
        name: make_tokenizer(name, train_texts=texts, vocab_size=300) for name in ("bpe", "unigram")
    }


@pytest.mark.parametrize("name", ["whitespace", "char", "word"])
def test_rule_based_round_trip_on_multi30k(multi30k_lines, name):
    tok = make_tokenizer(name)
    for lines in multi30k_lines.values():
        for line in lines:
            assert tok.decode(tok.encode(line)) == line


@pytest.mark.parametrize("name", ["bpe", "unigram"])
def test_subword_round_trip_on_multi30k(multi30k_lines, trained, name):
    tok = trained[name]
    pieces = 0
    for lines in multi30k_lines.values():
        for line in lines:
            tokens = tok.encode(line)
            pieces += len(tokens)
            assert tok.decode(tokens) == line
    words = sum(len(line.split()) for lines in multi30k_lines.values() for line in lines)
    assert pieces > words  # a 300-piece vocabulary really splits words


def test_subword_round_trip_with_odd_spacing(trained):
    # characters seen in training; spacing the loader would have normalised
    for tok in trained.values():
        for text in ["Zwei  Männer ,laufen. ", "Ende mit Punkt .", SAMPLE[0], SAMPLE[1]]:
            assert tok.decode(tok.encode(text)) == text


def test_char_round_trip_keeps_every_character():
    tok = make_tokenizer("char")
    text = "  a  b\tç  "
    assert tok.encode("a b") == ["a", SPACE_MARK, "b"]
    assert tok.decode(tok.encode(text)) == text


def test_word_tokenizer_splits_punctuation():
    tok = WordTokenizer()
    assert tok.encode(SAMPLE[2]) == [
        "She",
        "said",
        '"',
        "hello",
        '"',
        "(",
        "twice",
        ")",
        ",",
        "didn't",
        "she",
        "?",
    ]
    assert tok.encode(SAMPLE[3]) == ["Prices", ":", "2.50", "euros", ";", "100", "%", "sure", "!"]
    for text in SAMPLE:
        assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("Er sagt „Hallo“ und geht.")) == "Er sagt „Hallo“ und geht."


def test_lowercase_option():
    for name in ("whitespace", "char", "word"):
        tok = make_tokenizer(name, lowercase=True)
        assert "".join(tok.encode("ABC Def")).replace(SPACE_MARK, "") == "abcdef"
    bpe = make_tokenizer("bpe", lowercase=True, train_texts=["Hello World"] * 5, vocab_size=60)
    assert bpe.decode(bpe.encode("Hello World")) == "hello world"


@pytest.mark.parametrize("name", ["whitespace", "char", "word", "bpe", "unigram"])
def test_to_dict_round_trip_encodes_identically(name):
    texts = SAMPLE * 3
    tok = make_tokenizer(name, lowercase=True, train_texts=texts, vocab_size=80)
    data = json.loads(json.dumps(tok.to_dict()))  # what a checkpoint stores
    back = tokenizer_from_dict(data)
    assert type(back) is type(tok) and back.lowercase
    for text in SAMPLE:
        assert back.encode(text) == tok.encode(text)
        assert back.decode(back.encode(text)) == tok.decode(tok.encode(text))


def test_unseen_characters_become_unk():
    bpe = make_tokenizer("bpe", train_texts=["aaa bbb"] * 5, vocab_size=60)
    assert "<unk>" in bpe.encode("aaa zzz")


def test_encode_batch_equals_encode():
    bpe = make_tokenizer("bpe", train_texts=SAMPLE, vocab_size=80)
    assert bpe.encode_batch(SAMPLE) == [bpe.encode(t) for t in SAMPLE]


def test_unknown_tokenizer_and_bad_metadata():
    with pytest.raises(AttnlabError, match='did you mean "word"'):
        make_tokenizer("wrod")
    with pytest.raises(AttnlabError, match="tokenizer"):
        tokenizer_from_dict({"type": "bpe", "hf_json": "{broken"})
    with pytest.raises(AttnlabError):
        tokenizer_from_dict({"lowercase": True})
