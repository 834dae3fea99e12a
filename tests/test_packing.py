"""attnlab.nn.packing's moves between the padded [B, T, ...] and packed [N, ...] layouts,
against explicit loops over (sentence, position)."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.packing import Packing, unpack_heads

LENGTHS = [3, 1, 4, 2, 4]  # T = 4; a sentence of one token, two full ones


def packing() -> tuple[Packing, list[tuple[int, int]]]:
    mask = torch.tensor([[t < n for t in range(4)] for n in LENGTHS])
    real = [(b, t) for b, n in enumerate(LENGTHS) for t in range(n)]  # batch-major order
    return Packing(mask), real


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unpack_puts_each_row_at_its_position_and_zeros_elsewhere(dtype):
    pack, real = packing()
    x = torch.randn(len(real), 3, dtype=dtype)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            out = pack.unpack(x.clone().requires_grad_(grad))
        assert out.shape == (5, 4, 3) and out.dtype == dtype
        for b in range(5):
            for t in range(4):
                expected = x[real.index((b, t))] if (b, t) in real else torch.zeros(3, dtype=dtype)
                assert torch.equal(out[b, t].detach(), expected), (b, t)
    assert torch.equal(pack.pack(pack.unpack(x)), x)


def test_unpack_gradient_is_each_real_positions_weight():
    pack, real = packing()
    x = torch.randn(len(real), 2, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, 4, 2, dtype=torch.float64)
    (pack.unpack(x) * weight).sum().backward()
    for row, (b, t) in enumerate(real):
        assert torch.equal(x.grad[row], weight[b, t])
    assert torch.autograd.gradcheck(lambda v: pack.unpack(v), (x.detach().requires_grad_(),))


def test_unpack_heads_splits_groups_and_heads_with_zero_padding():
    pack, real = packing()
    groups, heads, dh = 3, 2, 2
    x = torch.randn(len(real), groups * heads * dh, dtype=torch.float64, requires_grad=True)
    outs = unpack_heads(x, pack, groups, heads)
    assert len(outs) == groups and all(o.shape == (5, heads, 4, dh) for o in outs)
    for g, out in enumerate(outs):
        for b in range(5):
            for t in range(4):
                for h in range(heads):
                    if (b, t) in real:
                        start = (g * heads + h) * dh
                        expected = x[real.index((b, t)), start : start + dh]
                    else:
                        expected = torch.zeros(dh, dtype=torch.float64)
                    assert torch.equal(out[b, h, t], expected)
    assert torch.autograd.gradcheck(
        lambda v: unpack_heads(v, pack, groups, heads), (x.detach().requires_grad_(),)
    )
