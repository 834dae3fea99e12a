"""attnlab.nn.fast_tanh against math.tanh in float64, element by element."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.nn.fast_tanh import tanh, tanh_

# Dense near 0 (where 2·σ(2x) − 1 cancels), out to where tanh saturates, and the limits.
GRID = [0.0, 1e-30, -1e-12, 1e-7, -3e-4, 0.01, -0.5, 0.9, 1.7, -3.3, 8.0, -19.0, 44.0, -89.0]
GRID += [i / 37.0 for i in range(-400, 401)]


def reference(values: list[float]) -> list[float]:
    return [math.tanh(v) for v in values]


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 3e-7), (torch.float64, 1e-15)])
def test_equals_tanh_to_rounding(dtype, tolerance):
    x = torch.tensor(GRID, dtype=dtype)
    expected = reference(GRID)
    for got in (tanh_(x.clone()), tanh(x, out=torch.empty_like(x))):
        assert got.dtype == dtype
        worst = max(abs(g - e) for g, e in zip(got.tolist(), expected, strict=True))
        assert worst <= tolerance, worst


def test_limits_and_nan():
    x = torch.tensor([math.inf, -math.inf, math.nan, 1e4, -1e4])
    got = tanh_(x.clone()).tolist()
    assert got[:2] == [1.0, -1.0] and math.isnan(got[2]) and got[3:] == [1.0, -1.0]


def test_in_place_and_out_semantics():
    x = torch.linspace(-3, 3, 11)
    y = x.clone()
    assert tanh_(y) is y
    out = torch.empty_like(x)
    assert tanh(x, out=out) is out and torch.allclose(x, torch.linspace(-3, 3, 11))
    assert tanh(x.clone(), out=x) is x  # out may be the input


def test_autograd_keeps_torch_tanh_and_its_gradient():
    """Under autograd the in-place logistic chain would clobber σ's saved output: the helper
    must fall back to tanh, whose gradient is 1 − tanh²."""
    x = torch.linspace(-2, 2, 9, dtype=torch.float64, requires_grad=True)
    y = tanh_(x * 1.0)
    y.sum().backward()
    expected = [1.0 - math.tanh(v) ** 2 for v in x.detach().tolist()]
    assert max(abs(g - e) for g, e in zip(x.grad.tolist(), expected, strict=True)) < 1e-15
    with torch.no_grad():  # no recording: the logistic route, same values
        z = tanh_(x * 1.0)
    assert torch.allclose(z, y.detach(), atol=1e-15, rtol=0)
