"""The contract every encoder-decoder implements; decoding and training only use this.

Shapes: B batch, S source length, T target length, V target vocabulary, L layers, H heads.
Token ids: pad 0, unk 1, bos 2, eos 3 (see attnlab.data.vocab).

- ``encode(src[B,S], src_mask[B,S]) -> EncoderOutput``
- ``start_state(enc) -> DecoderState`` (a dict of batch-first tensors)
- ``step(prev_tokens[B], state, enc, need_weights) -> (logits[B,V], state, cross[B,L,H,S] | None)``
  one decoding step; Transformers keep a key/value cache in ``state``.
- ``forward(src, src_mask, tgt_in[B,T], teacher_forcing=1.0, need_weights=False) -> ModelOutput``
  the training pass. With ``teacher_forcing < 1`` each target position (t > 0) reads the
  model's own previous prediction with probability ``1 - teacher_forcing`` (scheduled
  sampling), decided per token and vectorised over the batch.

Beam search reorders ``state`` and ``enc`` along dim 0 with ``select_state`` /
``EncoderOutput.index_select``, and the searches drop finished rows with ``keep_state`` /
``EncoderOutput.keep`` (views of the first rows when they can), so every tensor in them must
be batch-first and read-only to ``step``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

DecoderState = dict[str, Tensor]


@dataclass
class EncoderOutput:
    states: Tensor  # [B, S, D] encoder states (memory for cross-attention)
    mask: Tensor  # [B, S] bool, True for real tokens
    extras: dict[str, Tensor] = field(default_factory=dict)  # batch-first, arch-specific
    # Decoder rows per encoder row: 1, or a beam's K (``Seq2Seq.beam_encoder``), where the K
    # consecutive decoder rows of a sentence read its one encoder row.
    group: int = 1

    def index_select(self, index: Tensor) -> EncoderOutput:
        """Rows ``index`` of every tensor (beam expansion / reordering)."""
        return EncoderOutput(
            states=self.states.index_select(0, index),
            mask=self.mask.index_select(0, index),
            extras={k: v.index_select(0, index) for k, v in self.extras.items()},
            group=self.group,
        )

    def ungrouped(self) -> EncoderOutput:
        """One encoder row per decoder row (each row repeated ``group`` times)."""
        if self.group == 1:
            return self
        rows = torch.arange(self.states.shape[0], device=self.states.device)
        return replace(self.index_select(rows.repeat_interleave(self.group)), group=1)

    def keep(self, kept: Tensor) -> EncoderOutput:
        """Rows ``kept`` (ascending, as ``nonzero`` gives them): views when they are the first
        rows, else copies. A search dropping its finished sentences mostly drops a suffix:
        the searches order a batch longest source first (``longest_first``)."""
        if not is_prefix(kept):
            return self.index_select(kept)
        n = kept.numel()
        extras = {k: v[:n] for k, v in self.extras.items()}
        return EncoderOutput(self.states[:n], self.mask[:n], extras, self.group)


def is_prefix(kept: Tensor) -> bool:
    """Whether ascending row indices ``kept`` are 0, 1, ..., n - 1."""
    n = kept.numel()
    return n == 0 or int(kept[-1]) == n - 1


def select_state(state: DecoderState, index: Tensor) -> DecoderState:
    """Rows ``index`` of every batch-first tensor in a decoder state."""
    return {k: v.index_select(0, index) for k, v in state.items()}


def keep_state(state: DecoderState, kept: Tensor) -> DecoderState:
    """Rows ``kept`` (ascending) of a decoder state: views when they are the first rows."""
    if not is_prefix(kept):
        return select_state(state, kept)
    n = kept.numel()
    return {k: v[:n] for k, v in state.items()}


@dataclass
class ModelOutput:
    logits: Tensor  # [B, T, V]
    # "cross": [B, L, H, T, S] for every architecture (RNN: L = 1);
    # Transformers also "enc_self": [B, L, H, S, S] and "dec_self": [B, L, H, T, T].
    attentions: dict[str, Tensor] = field(default_factory=dict)
    extras: dict[str, Tensor] = field(default_factory=dict)
    # With need_weights, for a block-sparse variant (nsa): attentions' key -> the same shape,
    # bool, True where the query read the key because its block was selected. Others: absent.
    selected: dict[str, Tensor] = field(default_factory=dict)


class Seq2Seq(nn.Module):
    """Base class: subclasses implement encode / start_state / step / forward."""

    src_vocab_size: int
    tgt_vocab_size: int

    def encode(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:  # pragma: no cover
        raise NotImplementedError

    def start_state(self, enc: EncoderOutput) -> DecoderState:  # pragma: no cover
        raise NotImplementedError

    def beam_encoder(self, enc: EncoderOutput, beams: int) -> EncoderOutput:
        """``enc`` for ``beams`` consecutive decoder rows per sentence. By default each row
        repeated; a model whose ``step`` reads a grouped output (``EncoderOutput.group``)
        may return one row per sentence, and work shared by its beams done once."""
        return replace(enc, group=beams).ungrouped()

    def step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        enc: EncoderOutput,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderState, Tensor | None]:  # pragma: no cover
        raise NotImplementedError

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        teacher_forcing: float = 1.0,
        need_weights: bool = False,
    ) -> ModelOutput:  # pragma: no cover
        raise NotImplementedError
