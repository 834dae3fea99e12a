"""Large generated tasks in the disk cache (#41): a hit gives the very examples a fresh draw
gives, array splits behave as lists of examples, a damaged entry is drawn again, and another
setting is another entry."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnlab.data.task_cache as task_cache
from attnlab.config import DataConfig
from attnlab.data.arrays import ArrayExamples
from attnlab.data.batching import example_cost, plan_batches
from attnlab.data.dataset import load_dataset
from attnlab.data.tasks import TASKS

FIELDS = {
    "mqar": dict(vocab_size=32, kv_pairs=4, max_len=24),
    "selective-copy": dict(vocab_size=8, copy_tokens=3, max_len=20),
    "induction": dict(vocab_size=8, max_len=16),
    "listops": dict(min_len=5, max_len=30, max_depth=4, max_args=3),
}


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(task_cache, "CACHE_MIN_TOKENS", 100)


def config(task: str, **extra) -> DataConfig:
    sizes = dict(train_size=40, dev_size=8, test_size=8)
    return DataConfig(task=task, **sizes, **{**FIELDS[task], **extra})


@pytest.mark.parametrize("task", sorted(FIELDS))
def test_a_cache_hit_gives_the_examples_a_fresh_draw_gives(task, tmp_path: Path):
    cfg = config(task)
    fresh = TASKS.get(task).factory(cfg)  # the generator itself, no cache
    first = load_dataset(cfg, tmp_path)
    again = load_dataset(cfg, tmp_path)
    assert (first.splits.stats["cache"], again.splits.stats["cache"]) == ("miss", "hit")
    for split in ("train", "dev", "test"):
        expected = list(getattr(fresh, split))
        assert list(getattr(again.splits, split)) == expected == list(getattr(first.splits, split))
    assert again.src_vocab.itos == first.src_vocab.itos


def test_array_splits_read_as_lists_of_examples(tmp_path: Path):
    train = load_dataset(config("selective-copy"), tmp_path).splits.train
    assert isinstance(train, ArrayExamples)
    examples = list(train)
    assert train[-1] == examples[-1] and train[2:5] == examples[2:5] and train == examples
    assert train.costs() == [example_cost(e) for e in examples]
    assert plan_batches(train, batch_tokens=64, seed=3) == plan_batches(
        examples, batch_tokens=64, seed=3
    )
    with pytest.raises(IndexError):
        train[len(examples)]


def test_a_damaged_entry_is_drawn_again_and_another_setting_is_another_entry(tmp_path: Path):
    cfg = config("induction")
    load_dataset(cfg, tmp_path)
    (entry,) = (tmp_path / "tasks").iterdir()
    entry.write_bytes(entry.read_bytes()[:100])  # cut short
    redrawn = load_dataset(cfg, tmp_path)
    assert redrawn.splits.stats["cache"] == "miss"
    assert list(redrawn.splits.train) == list(TASKS.get("induction").factory(cfg).train)
    load_dataset(config("induction", seed=7), tmp_path)
    assert len(list((tmp_path / "tasks").iterdir())) == 2


def test_a_small_task_is_never_cached(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(task_cache, "CACHE_MIN_TOKENS", 10**9)
    data = load_dataset(config("induction"), tmp_path)
    assert "cache" not in data.splits.stats and not (tmp_path / "tasks").exists()
