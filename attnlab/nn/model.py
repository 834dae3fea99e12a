"""Architecture registry: ``build_model(config, src_vocab_size, tgt_vocab_size) -> Seq2Seq``.

The registry and the architectures' declarations live in attnlab.nn.archs (no torch); the
built-in factories import their model modules on first use.
"""

from __future__ import annotations

from attnlab.config import ExperimentConfig
from attnlab.nn.archs import ARCHITECTURES, ArchSpec, AttentionSlot
from attnlab.nn.seq2seq import Seq2Seq


def build_model(config: ExperimentConfig, src_vocab_size: int, tgt_vocab_size: int) -> Seq2Seq:
    return ARCHITECTURES.get(config.model.arch).factory(config, src_vocab_size, tgt_vocab_size)


def count_parameters(model: Seq2Seq) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["ARCHITECTURES", "ArchSpec", "AttentionSlot", "build_model", "count_parameters"]
