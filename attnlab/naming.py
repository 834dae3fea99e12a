"""Names and one-line descriptions of experiments, shared by the CLI and the lab.

One rule names every run: ``<task>-<arch>-<variants>-<YYYYmmdd-HHMMSS>``. ``<task>`` is the toy
task, or for a corpus the name of its folder or file (``multi30k``), so that runs on different
corpora are told apart. ``<variants>`` is
the variant in each of the architecture's attention slots (``ArchSpec.slots`` in
attnlab.nn.archs), resolved the way the engine builds them (``ArchSpec.resolve``: e.g. an
empty decoder self-attention means the encoder's variant when it can be causal): one name
when all agree, else joined by "_" in slot order. Names are one path component of
``[A-Za-z0-9._-]``.
"""

from __future__ import annotations

import time
from pathlib import Path

from attnlab.config import NAME_MAX, DataConfig, ExperimentConfig, ModelConfig, safe_name
from attnlab.nn.archs import arch_spec

STAMP_FORMAT = "%Y%m%d-%H%M%S"
CORPUS_FILE_SUFFIXES = (".tsv", ".csv", ".txt", ".jsonl")  # a corpus file: its stem names it
# Room for "-YYYYmmdd-HHMMSS" and the lab's "-N" collision suffix within NAME_MAX.
EXPERIMENT_NAME_MAX = NAME_MAX - 24


def attention_roles(model: ModelConfig) -> dict[str, str]:
    """``{"arch": ..., slot name: variant}`` as the engine builds it (the start event's
    "roles"); an unregistered architecture reads ``model.attention``."""
    spec = arch_spec(model.arch)
    if spec is None:
        return {"arch": model.arch, "cross": model.attention}
    return spec.roles(model)


def roles_text(variants: tuple[str, ...] | list[str], sep: str = "_") -> str:
    """``bahdanau``; ``scaled-dot``; ``performer_relative_linformer`` (in slot order)."""
    return variants[0] if len(set(variants)) == 1 else sep.join(variants)


def variants_text(model: ModelConfig, sep: str = "_") -> str:
    spec = arch_spec(model.arch)
    return roles_text(spec.variants(model) if spec else (model.attention,), sep)


def task_label(data: DataConfig) -> str:
    """``reverse``; ``multi30k`` for ``data.path = "../shared/corpora/multi30k"``; ``de-en`` for
    a ``de-en.tsv`` file; ``corpus`` when a corpus comes from ``src_file``/``tgt_file`` only."""
    if data.task != "corpus":
        return data.task
    if not data.path.strip():
        return "corpus"
    path = Path(data.path)
    return path.stem if path.suffix.lower() in CORPUS_FILE_SUFFIXES else path.name


def experiment_name(config: ExperimentConfig) -> str:
    """``<task>-<arch>-<variants>``: what the experiment is, without a time stamp; a valid run
    name (``attnlab.config.safe_name``, the run-name rule) short enough for a stamp and suffix."""
    text = f"{task_label(config.data)}-{config.model.arch}-{variants_text(config.model)}"
    return safe_name(text)[:EXPERIMENT_NAME_MAX].rstrip("-")


def run_name_for(config: ExperimentConfig, now: float | None = None) -> str:
    """A new run's name: ``<task>-<arch>-<variants>-<YYYYmmdd-HHMMSS>`` (local time)."""
    return f"{experiment_name(config)}-{time.strftime(STAMP_FORMAT, time.localtime(now))}"


def describe(config: ExperimentConfig) -> str:
    """A one-line description of the experiment (what Setup → Save writes)."""
    spec = arch_spec(config.model.arch)
    model = spec.describe(config) if spec else f"{config.model.arch} with {config.model.attention}"
    return f"{config.data.task}: {model}; {config.train.max_steps} steps"
