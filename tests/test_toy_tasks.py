"""Toy tasks: determinism, sizes, lengths, targets and gold alignments against references."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from attnlab.config import DataConfig
from attnlab.data.dataset import Dataset, load_dataset
from attnlab.data.tasks import TASKS
from attnlab.errors import AttnlabError

SMALL = dict(train_size=300, dev_size=40, test_size=40, seed=7)
ALL_TASKS = ["copy", "reverse", "sort", "addition", "dates"]


def cfg(task: str, **kw) -> DataConfig:
    base = dict(SMALL, task=task)
    if task == "addition":
        base.update(min_len=1, max_len=4)
    base.update(kw)
    return DataConfig(**base)


def test_all_builtin_tasks_are_registered():
    assert set(ALL_TASKS) <= set(TASKS.names())
    assert {e.name for e in TASKS.entries() if e.meta.has_alignment} >= {"copy", "reverse", "sort"}


@pytest.mark.parametrize("task", ALL_TASKS)
def test_same_seed_same_data_other_seed_other_data(task):
    a = TASKS.get(task).factory(cfg(task))
    b = TASKS.get(task).factory(cfg(task))
    c = TASKS.get(task).factory(cfg(task, seed=8))
    assert a.train == b.train and a.dev == b.dev and a.test == b.test
    assert a.train != c.train


@pytest.mark.parametrize("task", ALL_TASKS)
def test_changing_dev_size_keeps_train(task):
    a = TASKS.get(task).factory(cfg(task))
    b = TASKS.get(task).factory(cfg(task, dev_size=10))
    assert a.train == b.train


@pytest.mark.parametrize("task", ALL_TASKS)
def test_split_sizes(task):
    splits = TASKS.get(task).factory(cfg(task))
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (300, 40, 40)


@pytest.mark.parametrize("task", ALL_TASKS)
def test_dev_and_test_sources_never_in_train(task):
    splits = TASKS.get(task).factory(cfg(task))
    train = {e.src_tokens for e in splits.train}
    dev = {e.src_tokens for e in splits.dev}
    assert not train & dev
    assert not (train | dev) & {e.src_tokens for e in splits.test}
    assert splits.stats["overlap"] == 0


def test_tiny_space_allows_overlap_and_counts_it():
    # vocab 2, length 1: only two possible sources, so dev/test must reuse train sources.
    splits = TASKS.get("copy").factory(
        DataConfig(
            task="copy", vocab_size=2, min_len=1, max_len=1, train_size=20, dev_size=3, test_size=3
        )
    )
    assert splits.stats["overlap"] == 6
    assert len(splits.dev) == 3


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_lengths_and_symbols(task):
    splits = TASKS.get(task).factory(cfg(task, min_len=3, max_len=20, vocab_size=30))
    lengths = {len(e.src_tokens) for e in splits.train}
    assert min(lengths) == 3 and max(lengths) == 20
    symbols = {t for e in splits.train for t in e.src_tokens}
    assert symbols == {str(i) for i in range(30)}


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_length_generalisation_test_split(task):
    splits = TASKS.get(task).factory(
        cfg(task, min_len=3, max_len=10, test_min_len=15, test_max_len=25)
    )
    assert all(3 <= len(e.src_tokens) <= 10 for e in splits.train + splits.dev)
    assert all(15 <= len(e.src_tokens) <= 25 for e in splits.test)


def test_test_lengths_validated():
    with pytest.raises(AttnlabError, match="test_min_len"):
        TASKS.get("copy").factory(cfg("copy", test_min_len=30, test_max_len=25))


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_targets_and_gold_alignments(task):
    splits = TASKS.get(task).factory(cfg(task))
    for e in splits.train + splits.test:
        src = list(e.src_tokens)
        expected = {"copy": src, "reverse": src[::-1], "sort": sorted(src, key=int)}[task]
        assert list(e.tgt_tokens) == expected
        assert e.alignment is not None and len(e.alignment) == len(e.tgt_tokens)
        # The gold source token is the one the target token copies.
        assert [src[i] for i in e.alignment] == list(e.tgt_tokens)
        assert sorted(e.alignment) == list(range(len(src)))  # a permutation


def test_reverse_alignment_is_antidiagonal():
    e = TASKS.get("reverse").factory(cfg("reverse")).train[0]
    n = len(e.src_tokens)
    assert e.alignment == tuple(range(n - 1, -1, -1))


def test_sort_duplicates_keep_source_order():
    from attnlab.data.toy import sort_alignment

    src = ("4", "1", "4", "0", "1")
    assert sort_alignment(src) == (3, 1, 4, 0, 2)
    # Over real data: equal symbols point at increasing source positions.
    for e in TASKS.get("sort").factory(cfg("sort", vocab_size=5)).train:
        for t in range(1, len(e.tgt_tokens)):
            if e.tgt_tokens[t] == e.tgt_tokens[t - 1]:
                assert e.alignment[t] > e.alignment[t - 1]


def test_addition_against_integer_arithmetic():
    splits = TASKS.get("addition").factory(cfg("addition", min_len=1, max_len=6))
    ops = 0
    for e in splits.train + splits.dev + splits.test:
        text = "".join(e.src_tokens)
        a, b = text.split("+")
        assert all(len(t) == 1 for t in e.src_tokens)
        assert 1 <= len(a) <= 6 and 1 <= len(b) <= 6
        assert int("".join(e.tgt_tokens)) == int(a) + int(b)
        assert e.alignment is None
        ops += 1
    assert ops == 380


def test_addition_example_from_issue_format():
    e = TASKS.get("addition").factory(cfg("addition")).train[0]
    assert "+" in e.src_tokens and e.src_text == " ".join(e.src_tokens)


def _parse_date(tokens: tuple[str, ...]) -> dt.date:
    """An independent parser for every surface format (joined back into text)."""
    text = " ".join(tokens)
    squashed = re.sub(r"(?<=\d) (?=\d)", "", text)  # "2 0 1 9" -> "2019"
    for fmt in ("%B %d , %Y", "%d %B %Y", "%d / %m / %Y", "%d %b %y", "%d . %m . %Y"):
        try:
            return dt.datetime.strptime(squashed, fmt).date()
        except ValueError:
            pass
    match = re.fullmatch(r"(?:(\w+) , )?(\w+) (\d+) (st|nd|rd|th) ,? ?(\d+)", squashed)
    assert match, f"unparsed date {text!r}"
    month_format = "%B" if match[1] else "%b"
    day = dt.datetime.strptime(f"{match[2]} {match[3]} {match[5]}", f"{month_format} %d %Y").date()
    if match[1]:
        assert match[1] == day.strftime("%A").lower()
    suffix = (
        "th" if day.day in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(day.day % 10, "th")
    )
    assert match[4] == suffix
    return day


def test_dates_target_is_iso_of_source():
    splits = TASKS.get("dates").factory(cfg("dates", train_size=1000))
    formats = set()
    for e in splits.train + splits.test:
        day = _parse_date(e.src_tokens)
        assert "".join(e.tgt_tokens) == day.isoformat()
        formats.add(tuple("d" if t.isdigit() else t for t in e.src_tokens if not t.isalpha()))
    assert len(formats) >= 5  # several surface formats occur


def test_dates_years_within_the_two_digit_pivot():
    for e in TASKS.get("dates").factory(cfg("dates", train_size=2000)).train:
        year = int("".join(e.tgt_tokens[:4]))
        assert 1969 <= year <= 2068


@pytest.mark.parametrize("task", ALL_TASKS)
def test_load_dataset_builds_vocab_and_meta_round_trip(task):
    ds = load_dataset(cfg(task))
    assert ds.name == task
    assert ds.has_alignment == (task in ("copy", "reverse", "sort"))
    for e in ds.splits.test:
        assert 1 not in ds.src_vocab.encode(e.src_tokens)  # no <unk> in toy data
        assert ds.detokenize_target(e.tgt_tokens) == e.tgt_text
    meta = json.loads(json.dumps(ds.meta()))
    back = Dataset.from_meta(meta)
    assert back.src_vocab.itos == ds.src_vocab.itos and back.tgt_vocab.itos == ds.tgt_vocab.itos
    text = ds.splits.dev[0].src_text
    assert back.tokenize_source(text) == list(ds.splits.dev[0].src_tokens)


def test_unknown_task_names_valid_choices():
    with pytest.raises(AttnlabError, match='did you mean "reverse"'):
        load_dataset(DataConfig(task="revers"))


def test_joeynmt_comparable_reverse_default():
    # (How long it takes to generate is printed by benchmarks/prepare_speed.py, not asserted here.)
    ds = load_dataset(
        DataConfig(task="reverse", train_size=20000, min_len=3, max_len=20, vocab_size=30)
    )
    assert len(ds.splits.train) == 20000
    assert len(ds.src_vocab) == 34  # 30 symbols + 4 specials
