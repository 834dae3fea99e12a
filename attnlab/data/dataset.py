"""A dataset ready for training: splits + vocabularies + tokenizers, and its portable meta.

``load_dataset(config.data)`` builds it for a toy task (``data.task`` in ``TASKS``) or a
parallel corpus (``data.task = "corpus"``). ``dataset.meta()`` is plain JSON (vocabularies
as lists, tokenizers as dicts); a checkpoint stores it, and ``Dataset.from_meta(meta)``
rebuilds vocabularies and tokenizers with no data files, so ``translate`` needs nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlab.config import DataConfig
from attnlab.data.arrays import ArrayExamples
from attnlab.data.example import Example, Splits
from attnlab.data.indexed import (  # the value type, one floor down (corpus.py builds it too)
    META_VERSION,
    Dataset,
    build_vocabs,
    vocab_and_tokenizers_from_meta,
)
from attnlab.data.tokenizers import WhitespaceTokenizer
from attnlab.data.vocab import Vocab
from attnlab.errors import AttnlabError

__all__ = [
    "META_VERSION",
    "Dataset",
    "build_vocabs",
    "load_dataset",
    "vocab_and_tokenizers_from_meta",
]


def _toy_dataset(cfg: DataConfig, cache_dir: Path | None = None) -> Dataset:
    from attnlab.data.task_cache import load_task_splits
    from attnlab.data.tasks import TASKS

    entry = TASKS.get(cfg.task)
    splits = load_task_splits(cfg, entry, cache_dir)  # a large task from the disk cache
    alphabet = getattr(entry.meta, "alphabet", None)
    if alphabet is not None:
        src_vocab, tgt_vocab = alphabet_vocabs(alphabet(cfg), splits, cfg.shared_vocab)
    else:
        # A plug-in without an alphabet: every split contributes symbols (a length-
        # generalisation test split must not turn into <unk>s); frequency is irrelevant.
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


def _symbols_used(parts: Sequence[Sequence[Example]]) -> tuple[set[str], set[str]]:
    """Every symbol of the source and target sides (an array split answers from its ids)."""
    src: set[str] = set()
    tgt: set[str] = set()
    for part in parts:
        if isinstance(part, ArrayExamples):
            s, t = part.symbols_used()
            src |= s
            tgt |= t
        else:
            src = src.union(*(e.src_tokens for e in part))
            tgt = tgt.union(*(e.tgt_tokens for e in part))
    return src, tgt


def alphabet_vocabs(
    alphabet: tuple[Sequence[str], Sequence[str]], splits: Splits, shared: bool
) -> tuple[Vocab, Vocab]:
    """The vocabularies of a task's alphabet, in its order: the same for every sample of the
    task (data.train_size, data.seed), so two runs of one task always compare. A drawn symbol
    outside the alphabet is a bug in the task, refused rather than read as <unk>."""
    src = list(dict.fromkeys(alphabet[0]))
    tgt = list(dict.fromkeys(alphabet[1]))
    used = _symbols_used([splits.train, splits.dev, splits.test])
    for side, symbols, drawn in (("source", src, used[0]), ("target", tgt, used[1])):
        stray = drawn - set(symbols)
        if stray:
            raise AttnlabError(
                f"task {splits.stats.get('task')!r} drew {side} symbol {min(stray)!r} "
                "outside its alphabet (a bug in the task's generator)"
            )
    if shared:
        vocab = Vocab(list(dict.fromkeys([*src, *tgt])))
        return vocab, vocab
    return Vocab(src), Vocab(tgt)


def load_dataset(
    data_cfg: DataConfig, cache_dir: Path | None = None, reuse: Dataset | None = None
) -> Dataset:
    """The dataset a config describes: a toy task, ``task = "corpus"`` (see ``corpus``) or a
    task that builds its own (``TaskSpec.dataset``: "lm"). ``reuse``: a dataset (a
    checkpoint's) whose tokenizer and vocabulary such a task encodes with; the others ignore
    it (their callers swap the vocabularies in)."""
    if data_cfg.task == "corpus":
        from attnlab.data.corpus import load_corpus_dataset

        return load_corpus_dataset(data_cfg, cache_dir)
    from attnlab.data.tasks import TASKS

    builder = getattr(TASKS.get(data_cfg.task).meta, "dataset", None)
    if builder is not None:
        return builder(data_cfg, reuse)
    return _toy_dataset(data_cfg, cache_dir)
