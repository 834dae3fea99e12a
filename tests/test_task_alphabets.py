"""A toy task's vocabulary is its alphabet (from the task's definition, not its sample):
runs of one task with other data.train_size share it, so compare and --significance work."""

from __future__ import annotations

import dataclasses

import pytest

from attnlab.config import DataConfig
from attnlab.data.dataset import load_dataset
from attnlab.data.tasks import TASKS
from attnlab.interpret.compare import incomparable_reason

TASK_SETTINGS = {
    "copy": {},
    "reverse": {},
    "sort": {},
    "addition": {},
    "dates": {},
    "listops": {"min_len": 1, "max_len": 20},
    "mqar": {"vocab_size": 32, "max_len": 16, "kv_pairs": 2},
    "selective-copy": {"vocab_size": 12, "max_len": 16, "copy_tokens": 3},
    "induction": {"vocab_size": 12, "max_len": 10},
}


def _data(task: str, train_size: int, **extra) -> DataConfig:
    return DataConfig(
        task=task,
        train_size=train_size,
        dev_size=3,
        test_size=3,
        **{**TASK_SETTINGS[task], **extra},
    )


@pytest.mark.parametrize("task", sorted(TASK_SETTINGS))
def test_vocabulary_does_not_depend_on_the_sample(task):
    small, large = load_dataset(_data(task, 2)), load_dataset(_data(task, 300, seed=7))
    assert small.src_vocab.itos == large.src_vocab.itos
    assert small.tgt_vocab.itos == large.tgt_vocab.itos
    assert incomparable_reason(small.meta(), large.meta()) == ""
    # every drawn symbol has its own id (never <unk>), and ids are distinct
    for ds in (small, large):
        for e in [*ds.splits.train, *ds.splits.dev, *ds.splits.test]:
            assert set(e.src_tokens) <= set(ds.src_vocab.stoi)
            assert set(e.tgt_tokens) <= set(ds.tgt_vocab.stoi)
        assert len(set(ds.src_vocab.itos)) == len(ds.src_vocab.itos)


def test_every_builtin_task_has_an_alphabet():
    assert all(TASKS.get(name).meta.alphabet is not None for name in TASK_SETTINGS)
    assert set(TASK_SETTINGS) <= set(TASKS.names())


def test_copy_alphabet_is_the_symbols_in_value_order():
    ds = load_dataset(DataConfig(task="copy", vocab_size=7, train_size=1, dev_size=1, test_size=1))
    # the paper's definition: symbols 0 .. vocab_size-1, whatever one example happens to use
    assert ds.src_vocab.itos[4:] == [str(i) for i in range(7)] == ds.tgt_vocab.itos[4:]


def test_shared_vocabulary_is_the_union():
    ds = load_dataset(_data("addition", 5, shared_vocab=True))
    assert ds.src_vocab is ds.tgt_vocab
    assert ds.src_vocab.itos[4:] == [*"0123456789", "+"]


def test_resume_keeps_the_checkpoints_vocabulary(tmp_path, tiny_config):
    """A run trained when the vocabulary came from the sample (same size, other order) resumes
    with the ids its weights were trained with."""
    from attnlab.data.vocab import Vocab
    from attnlab.nn.model import build_model
    from attnlab.runs import keep_checkpoint_vocabularies, save_checkpoint

    dataset = load_dataset(tiny_config.data)
    old = Vocab(list(reversed(dataset.src_vocab.itos[4:])))  # an older, frequency order
    trained = dataclasses.replace(dataset, src_vocab=old)
    model = build_model(tiny_config, len(old), len(dataset.tgt_vocab))
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir, "last", model, tiny_config, trained.meta(), 3, {}, 0)
    kept = keep_checkpoint_vocabularies(run_dir, dataset)
    assert kept.src_vocab.itos == old.itos and kept.tgt_vocab.itos == dataset.tgt_vocab.itos
    assert keep_checkpoint_vocabularies(tmp_path / "none", dataset) is dataset
