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

    def token_rows(self, tokens: Tensor, start: int = 0) -> tuple[Tensor, Tensor, int]:
        """Token ids [B, T] -> (this layout's ids, their positions in the sentence (from
        ``start``), one past the last position)."""
        ...

    def project(self, x: Tensor, linear: nn.Linear) -> Tensor:
        """``linear`` applied to ``x``, in the padded layout: ``unpack(linear(x))``."""
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

    def token_rows(self, tokens: Tensor, start: int = 0) -> tuple[Tensor, Tensor, int]:
        end = start + tokens.shape[1]
        return tokens, torch.arange(start, end, device=tokens.device), end

    def project(self, x: Tensor, linear: nn.Linear) -> Tensor:
        return linear(x)

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


class Dense(Padded):
    """The padded layout of a batch with no padding at all (every key real): plain softmax
    attention needs no mask tensor, so the fused kernel runs with ``is_causal`` (a language
    model's windows). The caller vouches that every key mask it passes is all true."""

    def sdpa_shortcut(
        self, key_mask: Tensor, causal: bool, tq: int, tk: int, dtype: torch.dtype
    ) -> tuple[bool, Tensor | None] | None:
        if causal:
            return (True, None) if tq == tk else None
        return False, None


DENSE = Dense()


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

    def token_rows(self, tokens: Tensor, start: int = 0) -> tuple[Tensor, Tensor, int]:
        """The real tokens' ids [N] and positions [N] (a packed batch is a full pass: start 0);
        nothing is embedded for padding."""
        return self.take_rows(tokens), self.index % self.length, self.length

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, ...] -> [N, ...] (the real rows, in batch-major order)."""
        if x.requires_grad and torch.is_grad_enabled():
            return _Move.apply(x, self, True)
        return self.take_rows(x)

    def take_rows(self, x: Tensor) -> Tensor:
        """``pack`` without autograd: the real rows of [B, T, ...] gathered."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """[N, ...] -> [B, T, ...] with zeros at the padded positions."""
        if x.requires_grad and torch.is_grad_enabled():
            return _Move.apply(x, self, False)
        return self.gather_rows(x)

    def gather_rows(self, x: Tensor) -> Tensor:
        """``unpack`` without autograd: [x; 0] gathered at ``source_row``."""
        with_zero = torch.cat([x, x.new_zeros(1, *x.shape[1:])])
        out = with_zero.index_select(0, self.source_row)
        return out.view(self.batch, self.length, *x.shape[1:])

    def batch_shape(self, x: Tensor) -> tuple[int, int]:
        return self.batch, self.length

    def project(self, x: Tensor, linear: nn.Linear) -> Tensor:
        """``project_heads`` with one linear and one head: [B, T, F]."""
        (padded,) = self.project_heads(x, (linear,), 1)
        return padded.squeeze(1)

    def project_heads(
        self, x: Tensor, linears: Sequence[nn.Linear], heads: int
    ) -> tuple[Tensor, ...]:
        """The projections run on the real rows only, as one fused matmul (e.g. QKV), the
        weights staying separate parameters, straight into the buffer that the padded gather
        reads; the heads come back padded (zeros at padding)."""
        if len(linears) == 1:
            weight, bias = linears[0].weight, linears[0].bias
        else:
            weight = torch.cat([linear.weight for linear in linears])
            bias = torch.cat([linear.bias for linear in linears])
        if not _fusable(x):
            return unpack_heads(F.linear(x, weight, bias), self, len(linears), heads)
        return _LinearUnpackHeads.apply(x, weight, bias, self, len(linears), heads)

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


def _fusable(x: Tensor) -> bool:
    """Whether a product may be written into the padded gather's buffer by hand (``out=``
    bypasses CPU autocast, so not under it)."""
    return x.device.type == "cpu" and not torch.is_autocast_enabled("cpu")


def _linear_rows(x: Tensor, weight: Tensor, bias: Tensor | None, pack: Packing) -> Tensor:
    """[x·Wᵀ + b; 0]: the rows' product in a buffer with the zero row that padding gathers."""
    rows = x.new_empty(pack.rows + 1, weight.shape[0])
    if bias is None:
        torch.mm(x, weight.t(), out=rows[:-1])
    else:
        torch.addmm(bias, x, weight.t(), out=rows[:-1])
    rows[-1].zero_()
    return rows


def _linear_backward(ctx, grad_rows: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """F.linear's gradients (x, weight, bias) from the gradient of its output rows."""
    x, weight = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    return (
        grad_rows @ weight if need_x else None,
        grad_rows.t() @ x if need_w else None,
        grad_rows.sum(0) if need_b and ctx.has_bias else None,
    )


class _Move(torch.autograd.Function):
    """``pack`` (``to_packed``) or ``unpack`` under autograd, whose backward is the opposite
    move: pack's is the zero-padded gather (not index_select's zero-fill and serial
    index_add), unpack's takes each real row's gradient (the zero row's is dropped)."""

    @staticmethod
    def forward(ctx, x: Tensor, pack: Packing, to_packed: bool) -> Tensor:  # type: ignore[override]
        ctx.pack, ctx.to_packed = pack, to_packed
        return pack.take_rows(x) if to_packed else pack.gather_rows(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        pack: Packing = ctx.pack
        return (pack.gather_rows(grad) if ctx.to_packed else pack.take_rows(grad)), None, None


def _head_views(padded_rows: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:
    """Padded rows [B·T, G·H·dh] -> G views [B,H,T,dh]."""
    padded = padded_rows.view(pack.batch, pack.length, groups, heads, -1)
    return padded.transpose(1, 3).unbind(2)


def _head_grad_rows(ctx, grads: tuple[Tensor | None, ...]) -> Tensor:
    """The G gradients [B,H,T,dh] -> the packed rows' gradient [N, G·H·dh]: one strided copy
    lays them out as the forward's padded rows, one gather takes the real rows (the autograd
    of view / transpose / unbind would copy the padded gradients twice, and index_select's
    would zero-fill and add serially)."""
    pack: Packing = ctx.pack
    heads = [  # None: an output the loss does not use
        torch.zeros(ctx.shape, dtype=ctx.dtype, device=pack.mask.device) if g is None else g
        for g in grads
    ]
    if len(heads) == 1:  # [B,T,1,H,dh] as a view (a single head needs no copy)
        padded = heads[0].transpose(1, 2).unsqueeze(2)
    else:
        padded = torch.stack([g.transpose(1, 2) for g in heads], dim=2)
    return pack.take_rows(padded).flatten(1)


class _UnpackHeads(torch.autograd.Function):
    """[N, G·H·dh] packed rows -> G tensors [B,H,T,dh] (views of one zero-padded buffer)."""

    @staticmethod
    def forward(ctx, x: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:  # type: ignore[override]
        outputs = _head_views(pack.gather_rows(x), pack, groups, heads)
        ctx.pack, ctx.shape, ctx.dtype = pack, outputs[0].shape, x.dtype
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor | None) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return _head_grad_rows(ctx, grads), None, None, None


class _LinearUnpackHeads(torch.autograd.Function):
    """``unpack_heads(F.linear(x, weight, bias), ...)`` with the product written into
    [rows; 0]."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: Tensor, weight: Tensor, bias: Tensor | None, pack: Packing, groups: int, heads: int
    ) -> tuple[Tensor, ...]:
        ctx.save_for_backward(x, weight)
        ctx.pack, ctx.has_bias = pack, bias is not None
        rows = _linear_rows(x, weight, bias, pack)
        outputs = _head_views(rows.index_select(0, pack.source_row), pack, groups, heads)
        ctx.shape, ctx.dtype = outputs[0].shape, x.dtype
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor | None) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        return (*_linear_backward(ctx, _head_grad_rows(ctx, grads)), None, None, None)


def unpack_heads(x: Tensor, pack: Packing, groups: int, heads: int) -> tuple[Tensor, ...]:
    """``groups`` head-split tensors [B,H,T,dh] from packed [N, groups·H·dh] (e.g. q, k, v)."""
    return _UnpackHeads.apply(x, pack, groups, heads)
