"""Architecture registry: ``build_model(config, src_vocab_size, tgt_vocab_size) -> Seq2Seq``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlab.config import ExperimentConfig
from attnlab.nn.seq2seq import Seq2Seq
from attnlab.registry import Registry


@dataclass(frozen=True)
class ArchSpec:
    description: str
    # Config-time checks (attention roles, sizes); raise AttnlabError with a one-line reason.
    check: Callable[[ExperimentConfig], None]


ARCHITECTURES: Registry[Callable[[ExperimentConfig, int, int], Seq2Seq]] = Registry("architecture")


def build_model(config: ExperimentConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    return ARCHITECTURES.get(config.model.arch).factory(config, src_vocab_size, tgt_vocab_size)


def count_parameters(model: Seq2Seq) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# Importing the built-in architectures runs their ARCHITECTURES.add(...) calls.
from attnlab.nn import rnn, transformer  # noqa: E402,F401
