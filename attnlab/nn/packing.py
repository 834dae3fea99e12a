"""Layouts of a batch's activations: padded [B, T, ...] or padding-free ("packed") [N, ...].

The layout is a property of the batch, carried beside the activations: the Transformer's
layers are written once against it (``Layout``), and only what mixes positions asks it to
move between the two forms (attention's heads, and variants that want the padded form).

A batch of B sentences padded to T positions holds N <= B·T real tokens; with random
(unbucketed) batches of lengths 3-20 about 40 % of the rows are padding. Projections,
feed-forward layers, layer norms, residuals and the output layer treat every row alike, so
they can run on the [N, D] real rows only; attention, which mixes positions, scatters its
projected queries / keys / values back into the padded [B, T, ...] layout. The real rows'
results equal the padded computation's (up to float rounding); pad rows are never computed
(they are zeros where a padded tensor is needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


def split_heads(x: Tensor, heads: int) -> Tensor:
    """[B,T,H·dh] -> [B,H,T,dh]"""
    b, t, d = x.shape
    return x.view(b, t, heads, d // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[B,H,T,dh] -> [B,T,H·dh]"""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


class Layout(Protocol):
    """How a batch's activations are laid out. Position-wise layers (projections, layer norms,
    feed-forward, residuals) are indifferent; attention asks the layout for its heads."""

    def pack(self, x: Tensor) -> Tensor:
        """Padded [B, T, ...] -> this layout."""
        ...

    def unpack(self, x: Tensor) -> Tensor:
        """This layout -> padded [B, T, ...] (zeros at padding)."""
        ...

    def batch_shape(self, x: Tensor) -> tuple[int, int]:
        """(B, T) of the padded batch that ``x`` (in this layout) belongs to."""
        ...

    def project_heads(
        self, x: Tensor, linears: Sequence[nn.Linear], heads: int
    ) -> tuple[Tensor, ...]:
        """Each linear applied to ``x``, split into heads in the padded layout: [B,H,T,dh] each."""
        ...

    def merge_heads(self, context: Tensor) -> Tensor:
        """Heads [B,H,T,dh] -> this layout's rows of width H·dh."""
        ...

    def sdpa_shortcut(
        self, key_mask: Tensor, causal: bool, tq: int, tk: int, dtype: torch.dtype
    ) -> tuple[bool, Tensor | None] | None:
        """For plain softmax attention over keys in this layout: (is_causal, attn_mask) of a
        direct F.scaled_dot_product_attention call, or None for the general masked path."""
        ...


class Padded:
    """The padded layout [B, T, ...]: every method is the identity or the plain head split.
    It never looks at the mask on the host (no device sync), so it serves every device."""

    def pack(self, x: Tensor) -> Tensor:
        return x

    def unpack(self, x: Tensor) -> Tensor:
        return x

    def batch_shape(self, x: Tensor) -> tuple[int, int]:
        return x.shape[0], x.shape[1]

    def project_heads(
        self, x: Tensor, linears: Sequence[nn.Linear], heads: int
    ) -> tuple[Tensor, ...]:
        return tuple(split_heads(linear(x), heads) for linear in linears)

    def merge_heads(self, context: Tensor) -> Tensor:
        return merge_heads(context)

    def sdpa_shortcut(
        self, key_mask: Tensor, causal: bool, tq: int, tk: int, dtype: torch.dtype
    ) -> tuple[bool, Tensor | None] | None:
        return None


PADDED = Padded()


class Packing:
    """The packed layout of a [B, T] bool mask (True = real token): activations are the [N, ...]
    real rows. Built on the host once per batch (cheap on CPU, a sync on an accelerator)."""

    def __init__(self, mask: Tensor):
        self.batch, self.length = mask.shape
        self.mask = mask
        self.index = mask.reshape(-1).nonzero().squeeze(1)  # [N] flat positions of real tokens
        # For each of the B·T positions its packed row, or N (a zero row appended) at padding:
        # unpack is one gather (index_select runs in parallel; index_copy_ does not).
        rows = self.index.shape[0]
        self.source_row = torch.full((self.batch * self.length,), rows, device=mask.device)
        self.source_row[self.index] = torch.arange(rows, device=mask.device)
        # Whether every sentence has at least one real token (no all-masked attention row).
        self.all_nonempty = bool(mask.any(dim=1).all())
        self._key_bias: dict[object, Tensor] = {}

    def key_bias(self, dtype: torch.dtype) -> Tensor:
        """[B,1,1,T] additive attention mask (0 real, -inf padding), built once per batch:
        SDPA would otherwise turn a bool mask into this in every layer."""
        if dtype not in self._key_bias:
            bias = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device)
            self._key_bias[dtype] = bias.masked_fill_(~self.mask, float("-inf"))[:, None, None, :]
        return self._key_bias[dtype]

    @property
    def rows(self) -> int:
        return self.index.shape[0]

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, ...] -> [N, ...] (the real rows, in batch-major order)."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """[N, ...] -> [B, T, ...] with zeros at the padded positions."""
        if x.requires_grad and torch.is_grad_enabled():
            return _Unpack.apply(x, self)
        return self.gather_rows(x)

    def gather_rows(self, x: Tensor) -> Tensor:
        """``unpack`` without autograd: [x; 0] gathered at ``source_row``."""
        with_zero = torch.cat([x, x.new_zeros(1, *x.shape[1:])])
        out = with_zero.index_select(0, self.source_row)
        return out.view(self.batch, self.length, *x.shape[1:])

    def batch_shape(self, x: Tensor) -> tuple[int, int]:
        return self.batch, self.length

    def project_heads(
        self, x: Tensor, linears: Sequence[nn.Linear], heads: int
    ) -> tuple[Tensor, ...]:
        """The projections run on the real rows only, as one fused matmul (e.g. QKV), the
        weights staying separate parameters; the heads come back padded (zeros at padding)."""
        if len(linears) == 1:
            return unpack_heads(linears[0](x), self, 1, heads)
        weight = torch.cat([linear.weight for linear in linears])
        bias = torch.cat([linear.bias for linear in linears])
        return unpack_heads(F.linear(x, weight, bias), self, len(linears), heads)

    def merge_heads(self, context: Tensor) -> Tensor:
        return self.pack(context.transpose(1, 2)).flatten(1)  # [N,H·dh]

    def sdpa_shortcut(
        self, key_mask: Tensor, causal: bool, tq: int, tk: int, dtype: torch.dtype
    ) -> tuple[bool, Tensor | None] | None:
        if causal:
            # Every query sees itself: no empty row, and is_causal needs no mask tensor.
            return (True, None) if tq == tk and bool(key_mask.all()) else None
        if self.all_nonempty and key_mask is self.mask:
            return False, self.key_bias(dtype)
        return None


class _Unpack(torch.autograd.Function):
    """``Packing.unpack`` under autograd: the backward is ``pack`` (each real row's gradient;
    the zero row's is dropped), not index_select's scatter-add."""

    @staticmethod
    def forward(ctx, x: Tensor, pack: Packing) -> Tensor:  # type: ignore[override]
        ctx.pack = pack
        return pack.gather_rows(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return ctx.pack.pack(grad), None


class _UnpackHeads(torch.autograd.Function):
    """[N, G·H·dh] packed rows -> G tensors [B,H,T,dh] (views of one zero-padded buffer).
    The backward gathers each head-split gradient's real rows straight into [N, G·H·dh]; the
    autograd of view / transpose / unbind would first copy the padded gradients twice."""

    @staticmethod
    def forward(ctx, x: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:  # type: ignore[override]
        padded = pack.gather_rows(x).view(pack.batch, pack.length, groups, heads, -1)
        outputs = padded.transpose(1, 3).unbind(2)
        ctx.pack, ctx.shape, ctx.dtype = pack, outputs[0].shape, x.dtype
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor | None) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        pack: Packing = ctx.pack
        rows = []
        for grad in grads:  # [B,H,T,dh] each (SDPA gives them [B,T,H,dh]-major: free reshape)
            if grad is None:  # an output that the loss does not use
                grad = torch.zeros(ctx.shape, dtype=ctx.dtype, device=pack.mask.device)
            rows.append(pack.pack(grad.transpose(1, 2)).flatten(1))
        return torch.cat(rows, dim=1), None, None, None


def unpack_heads(x: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:
    """``groups`` head-split tensors [B,H,T,dh] from packed [N, groups·H·dh] (e.g. q, k, v)."""
    return _UnpackHeads.apply(x, pack, groups, heads)
