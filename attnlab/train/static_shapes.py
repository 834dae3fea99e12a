"""Static shapes: every training batch padded to one of a few bucket shapes.

An accelerator pays per distinct shape (a CUDA graph is captured once per shape, cuBLAS and
the allocator pick plans per shape); a batch of ragged widths is a new shape almost every step.
Under ``train.pad_buckets`` each batch's source and target widths are rounded up to a multiple
of ``train.pad_multiple`` and its rows to one count per width pair: ``train.batch_size``, or
with a token budget the most sentences that fit it at those widths (``plan_batches`` counts
the rounded widths, so no batch of the plan needs more). The filler is padding that no loss
position reads (``attnlab.data.batching.pad_batch``): the summed loss and the gradients equal
the unpadded batch's, and the loss is still divided by the real target tokens.

Off on the CPU by default: there the Transformer trains padding-free and the RNN over packed
sequences, so padding only adds work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnlab.data.batching import Batch, bucket_width, pad_batch


@dataclass(frozen=True)
class BucketPadding:
    multiple: int  # widths are multiples of this
    batch_size: int  # rows of a sentence-count batch
    batch_tokens: int  # > 0: token-budget batches (rows from the budget and the widths)

    def shape(self, rows: int, src_width: int, tgt_width: int) -> tuple[int, int, int]:
        """The bucket (rows, source width, target width) of a batch of this shape."""
        src = bucket_width(src_width, self.multiple)
        tgt = bucket_width(tgt_width, self.multiple)
        cap = self.batch_tokens // (src + tgt) if self.batch_tokens > 0 else self.batch_size
        return max(rows, cap), src, tgt  # rows > cap: one over-long sentence alone

    def apply(self, batch: Batch) -> Batch:
        rows, src_width = batch.src.shape
        return pad_batch(batch, *self.shape(rows, src_width, batch.tgt_in.shape[1]))


def wants_padding(cfg: Any, device: torch.device, graphs: bool) -> bool:
    """``train.pad_buckets``: on, off, or auto (on CUDA, and whenever CUDA graphs run)."""
    if cfg.pad_buckets == "auto":
        return device.type == "cuda" or graphs
    return cfg.pad_buckets == "on"


def bucket_padding(cfg: Any, device: torch.device, graphs: bool = False) -> BucketPadding | None:
    """The run's bucket padding, or None when batches keep their own shapes."""
    if not wants_padding(cfg, device, graphs):
        return None
    return BucketPadding(cfg.pad_multiple, cfg.batch_size, cfg.batch_tokens)
