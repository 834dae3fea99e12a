"""A dataset ready for training: splits + vocabularies + tokenizers, and its portable meta.

``load_dataset(config.data)`` builds it for a toy task (``data.task`` in ``TASKS``) or a
parallel corpus (``data.task = "corpus"``). ``dataset.meta()`` is plain JSON (vocabularies
as lists, tokenizers as dicts); a checkpoint stores it, and ``Dataset.from_meta(meta)``
rebuilds vocabularies and tokenizers with no data files, so ``translate`` needs nothing else.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.config import DataConfig
from attnlab.data.example import Example
from attnlab.data.indexed import (  # the value type, one floor down (corpus.py builds it too)
    META_VERSION,
    Dataset,
    build_vocabs,
    vocab_and_tokenizers_from_meta,
)
from attnlab.data.tokenizers import WhitespaceTokenizer

__all__ = [
    "META_VERSION",
    "Dataset",
    "build_vocabs",
    "load_dataset",
    "vocab_and_tokenizers_from_meta",
]


def _toy_dataset(cfg: DataConfig) -> Dataset:
    from attnlab.data.tasks import TASKS

    entry = TASKS.get(cfg.task)
    splits = entry.factory(cfg)
    # A toy task's symbol set is closed and known, so every split contributes symbols
    # (a length-generalisation test split must not turn into <unk>s); frequency is irrelevant.
    everything: list[Example] = [*splits.train, *splits.dev, *splits.test]
    src_vocab, tgt_vocab = build_vocabs(
        [e.src_tokens for e in everything],
        [e.tgt_tokens for e in everything],
        DataConfig(shared_vocab=cfg.shared_vocab),
    )
    tokenizer = WhitespaceTokenizer()
    splits.stats.setdefault("tokenizer", "whitespace")
    return Dataset(
        splits, src_vocab, tgt_vocab, tokenizer, tokenizer, entry.meta.has_alignment, cfg.task
    )


def load_dataset(data_cfg: DataConfig, cache_dir: Path | None = None) -> Dataset:
    """The dataset a config describes: a toy task, or ``task = "corpus"`` (see ``corpus``)."""
    if data_cfg.task == "corpus":
        from attnlab.data.corpus import load_corpus_dataset

        return load_corpus_dataset(data_cfg, cache_dir)
    return _toy_dataset(data_cfg)
