"""attnlab.nn.packing's moves between the padded [B, T, ...] and packed [N, ...] layouts,
against explicit loops over (sentence, position)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

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


def test_pack_takes_the_real_rows_and_its_gradient_is_zero_at_padding():
    pack, real = packing()
    x = torch.randn(5, 4, 3, dtype=torch.float64, requires_grad=True)
    strided = x.transpose(0, 1).contiguous().transpose(0, 1)  # a non-contiguous [B,T,...] input
    rows = pack.pack(strided)
    assert rows.shape == (len(real), 3)
    for row, (b, t) in enumerate(real):
        assert torch.equal(rows[row].detach(), x[b, t].detach())
    weight = torch.randn(len(real), 3, dtype=torch.float64)
    (rows * weight).sum().backward()
    for b in range(5):
        for t in range(4):
            expected = weight[real.index((b, t))] if (b, t) in real else torch.zeros(3)
            assert torch.equal(x.grad[b, t], expected.to(torch.float64)), (b, t)
    assert torch.autograd.gradcheck(lambda v: pack.pack(v), (x.detach().requires_grad_(),))


def test_unpack_heads_gradient_when_the_loss_uses_only_some_heads():
    pack, real = packing()
    x = torch.randn(len(real), 3 * 2 * 2, dtype=torch.float64, requires_grad=True)
    q, _, v = unpack_heads(x, pack, 3, 2)
    (q.sum() + 2 * v.sum()).backward()
    expected = torch.cat([torch.ones(4), torch.zeros(4), 2 * torch.ones(4)]).to(torch.float64)
    assert torch.equal(x.grad, expected.expand(len(real), -1))


@pytest.mark.parametrize("bias", [True, False])
def test_projections_into_the_padded_layout_equal_linear_then_unpack(bias):
    """``project`` / ``project_heads`` write the product straight into the gathered buffer:
    the same values as F.linear then unpack (zeros at padding), and gradients that pass
    gradcheck for x, the weights and the biases (float64)."""
    pack, real = packing()
    torch.manual_seed(5)
    x = torch.randn(len(real), 6, dtype=torch.float64, requires_grad=True)
    linears = [torch.nn.Linear(6, 4, bias=bias).double() for _ in range(3)]
    used = linears if bias else linears[:1]  # a fused product needs every bias (or one linear)
    out = pack.project(x, linears[0])
    torch.testing.assert_close(out, pack.unpack(linears[0](x)), rtol=0, atol=1e-12)
    assert not out[~pack.mask].any()
    weight = torch.cat([lin.weight for lin in used])
    joint_bias = torch.cat([lin.bias for lin in used]) if bias else None
    reference = unpack_heads(F.linear(x, weight, joint_bias), pack, len(used), 2)
    heads = pack.project_heads(x, used, 2)
    for got, want in zip(heads, reference, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    probes = [torch.randn(h.shape, dtype=torch.float64) for h in heads]
    params = [x, *(p for lin in used for p in lin.parameters())]

    def probed_heads(*_: torch.Tensor) -> torch.Tensor:
        outputs = pack.project_heads(x, used, 2)
        return sum((h * w).sum() for h, w in zip(outputs, probes, strict=True))

    assert torch.autograd.gradcheck(probed_heads, params)
    probe = torch.randn(out.shape, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *_: (pack.project(x, linears[0]) * probe).sum(), params)
