"""The toy-task registry alone: name -> generator(DataConfig) -> Splits.

Task modules (attnlab.data.toy, or a plug-in) import this and register; nothing here imports
them back. ``attnlab.data.tasks`` is the public face that also loads the built-in tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
    "data.min_freq",
    "data.max_vocab",
    "data.shared_vocab",
    "data.train_max_tokens",
    "data.eval_max_tokens",
    "data.seed",
)

# Setup's label of each data field (at most 17 characters: the label column at 80 columns);
# a field without one (a plug-in's own) is labelled from its name. Types and ranges come
# from attnlab.config (DataConfig's defaults, RANGES, CHOICES).
FIELD_LABELS: dict[str, str] = {
    "data.min_len": "min length",
    "data.max_len": "max length",
    "data.train_size": "train pairs",
    "data.dev_size": "dev pairs",
    "data.test_size": "test pairs",
    "data.vocab_size": "vocabulary size",
    "data.test_min_len": "test min length",
    "data.test_max_len": "test max length",
    "data.seed": "data seed",
    "data.path": "corpus path",
    "data.src_file": "source file",
    "data.tgt_file": "target file",
    "data.src_lang": "source language",
    "data.tgt_lang": "target language",
    "data.columns": "TSV columns",
    "data.max_pairs": "max pairs/split",
    "data.dev_fraction": "dev fraction",
    "data.test_fraction": "test fraction",
    "data.lowercase": "lowercase",
    "data.tokenizer": "tokenizer",
    "data.subword_vocab": "subword vocab",
    "data.min_freq": "min frequency",
    "data.max_vocab": "max vocabulary",
    "data.shared_vocab": "shared vocab",
    "data.train_max_tokens": "train max tokens",
    "data.eval_max_tokens": "eval max tokens",
}


def field_label(key: str) -> str:
    """``data.kv_pairs`` -> its label, or ``kv pairs`` for a field with none."""
    return FIELD_LABELS.get(key) or key.split(".", 1)[-1].replace("_", " ")


def declared_fields(fields_by_task: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """Every data field of the tasks' declarations (``fields_read`` of each), each task's in
    its own order (the first task that declares a field places it); ``data.seed`` last, as
    every task's last knob."""
    fields = dict.fromkeys(key for declared in fields_by_task for key in declared)
    seed = fields.pop("data.seed", 0) is None  # dict.fromkeys' value: None when present
    return (*fields, *(("data.seed",) if seed else ()))


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
