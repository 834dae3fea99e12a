"""One switch for every fast path: reference mode.

Each module with a fast path (the fused GRU encoder / GRU + Bahdanau decoder and the lean
decoding step of ``RNNSeq2Seq``, the padding-free pass of ``TransformerSeq2Seq``, the fused
SDPA kernel of the multi-head attentions) has a ``reference_mode`` attribute, False by
default; True makes it take its reference path (nn.GRU over packed sequences and the step
loop, the padded pass, the explicit softmax). The fast paths are optimisations only: the
tests run both and compare (values, weights and gradients)::

    with reference_mode(model):
        ref = model(src, src_mask, tgt_in)
    fast = model(src, src_mask, tgt_in)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


def set_reference_mode(module: nn.Module, on: bool = True) -> None:
    """Switch every fast path in ``module`` (and its submodules) off (on=True) or back on."""
    for sub in module.modules():
        if hasattr(sub, "reference_mode"):
            sub.reference_mode = on


@contextmanager
def reference_mode(module: nn.Module, on: bool = True) -> Iterator[nn.Module]:
    """``set_reference_mode`` for the ``with`` block; each module's own setting comes back."""
    subs = [sub for sub in module.modules() if hasattr(sub, "reference_mode")]
    saved = [(sub, sub.reference_mode) for sub in subs]
    try:
        set_reference_mode(module, on)
        yield module
    finally:
        for sub, value in saved:
            sub.reference_mode = value
