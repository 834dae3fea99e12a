"""The toy-task registry alone: name -> generator(DataConfig) -> Splits.

Task modules (attnlab.data.toy, or a plug-in) import this and register; nothing here imports
them back. ``attnlab.data.tasks`` is the public face that also loads the built-in tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.config import DataConfig
from attnlab.data.example import Splits
from attnlab.registry import Registry

# The data.* fields a generated toy task reads (every built-in one); a task registered with
# other needs names its own in TaskSpec.reads. Setup shows only these under Data.
TOY_FIELDS: tuple[str, ...] = (
    "data.min_len",
    "data.max_len",
    "data.train_size",
    "data.dev_size",
    "data.test_size",
    "data.vocab_size",
    "data.test_min_len",
    "data.test_max_len",
    "data.seed",
)
# What task "corpus" (parallel text, attnlab.data.corpus; not a registered generator) reads.
CORPUS_FIELDS: tuple[str, ...] = (
    "data.path",
    "data.src_file",
    "data.tgt_file",
    "data.src_lang",
    "data.tgt_lang",
    "data.columns",
    "data.max_pairs",
    "data.dev_fraction",
    "data.test_fraction",
    "data.lowercase",
    "data.tokenizer",
    "data.subword_vocab",
    "data.train_max_tokens",
    "data.eval_max_tokens",
    "data.seed",
)


# data config -> (source symbols, target symbols): a task's whole alphabet, from its definition.
Alphabet = Callable[[DataConfig], tuple[Sequence[str], Sequence[str]]]


@dataclass(frozen=True)
class TaskSpec:
    description: str  # one line for menus
    has_alignment: bool  # exposes gold alignments (alignment accuracy)
    example: str = ""  # e.g. "5 9 2 7 -> 7 2 9 5"
    reads: tuple[str, ...] = TOY_FIELDS  # the data.* fields its generator reads
    # The vocabulary, from the task's definition rather than the sample: runs of one task
    # with other data.train_size then share it (compare, --significance). None: a plug-in
    # without one gets the symbols its sample uses.
    alphabet: Alphabet | None = None
    # A task that builds its whole dataset (data config, a dataset whose vocabulary to reuse
    # or None -> attnlab.data.indexed.Dataset) instead of generating sentence pairs: "lm".
    dataset: Callable[..., Any] | None = None
    # The dev metrics the task's evaluation reports (attnlab.study.metrics has each one's
    # label and direction); empty: the sentence-pair metrics (BLEU, chrF, exact match, loss).
    metrics: tuple[str, ...] = ()


def fields_read(task: str) -> tuple[str, ...]:
    """The task-specific data.* fields ``task`` reads (besides data.task and the vocabulary
    options every task shares); an unknown name reads none."""
    if task == "corpus":
        return CORPUS_FIELDS
    if task in TASKS.names():
        return tuple(getattr(TASKS.get(task).meta, "reads", TOY_FIELDS))
    return ()


def task_metrics(task: str) -> tuple[str, ...]:
    """The dev metrics ``task`` declares (empty: the sentence-pair ones, BLEU and the rest)."""
    if task in TASKS.names():
        return tuple(getattr(TASKS.get(task).meta, "metrics", ()) or ())
    return ()


def run_metric(task: str, metric: str) -> str:
    """The ``train.metric`` a run of ``task`` picks its best checkpoint by: ``metric`` when
    the task reports it, else the task's first declared metric (an LM run left at the default
    "bleu" is chosen by its loss)."""
    declared = task_metrics(task)
    return metric if not declared or metric in declared else declared[0]


TASKS: Registry[Callable[[DataConfig], Splits]] = Registry("task")
