"""Longest source first: the batch order in which searches drop finished sentences cheaply.

A sentence's output length follows its source length, so in a batch ordered longest first
the sentences that finish at a step are mostly the last rows: dropping them narrows the
encoder output and the decoder state (views, ``EncoderOutput.keep``) instead of copying
them. Every sentence is searched on its own, so the order changes no result.
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


def longest_first(src_mask: Tensor) -> Tensor | None:
    """The batch order by source length, longest first (stable); None when already so."""
    lengths = src_mask.sum(dim=1)
    order = lengths.argsort(descending=True, stable=True)
    if bool((order == torch.arange(order.numel(), device=order.device)).all()):
        return None
    return order


def in_input_order(results: list[T], order: Tensor | None) -> list[T]:
    """``results`` of the reordered batch (``order`` from ``longest_first``), in input order."""
    if order is None:
        return results
    out: list[T] = list(results)
    for position, index in enumerate(order.tolist()):
        out[index] = results[position]
    return out
