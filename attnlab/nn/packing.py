"""Padding-free ("packed") rows for the Transformer's position-wise layers.

A batch of B sentences padded to T positions holds N <= B·T real tokens; with random
(unbucketed) batches of lengths 3-20 about 40 % of the rows are padding. Projections,
feed-forward layers, layer norms, residuals and the output layer treat every row alike, so
they can run on the [N, D] real rows only; attention, which mixes positions, scatters its
projected queries / keys / values back into the padded [B, T, ...] layout. The real rows'
results equal the padded computation's (up to float rounding); pad rows are never computed
(they are zeros where a padded tensor is needed).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class Packing:
    """The real positions of a [B, T] bool mask, with pack / unpack between the two layouts."""

    def __init__(self, mask: Tensor):
        self.batch, self.length = mask.shape
        self.mask = mask
        self.index = mask.reshape(-1).nonzero().squeeze(1)  # [N] flat positions of real tokens
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
        # In place into fresh zeros (autograd tracks the copy for x): no clone of the zeros.
        out = x.new_zeros(self.batch * self.length, *x.shape[1:]).index_copy_(0, self.index, x)
        return out.view(self.batch, self.length, *x.shape[1:])


class _UnpackHeads(torch.autograd.Function):
    """[N, G·H·dh] packed rows -> G tensors [B,H,T,dh] (views of one zero-padded buffer).
    The backward gathers each head-split gradient's real rows straight into [N, G·H·dh]; the
    autograd of view / transpose / unbind would first copy the padded gradients twice."""

    @staticmethod
    def forward(ctx, x: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:  # type: ignore[override]
        padded = pack.unpack(x).view(pack.batch, pack.length, groups, heads, -1)
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
