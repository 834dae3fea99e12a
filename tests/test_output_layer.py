"""OutputLayer.step_logits: the folded-bias product equals nn.Linear and follows weight updates."""

import torch

from attnlab.nn.output_layer import OutputLayer


def test_step_logits_equal_linear_forward() -> None:
    torch.manual_seed(0)
    layer = OutputLayer(16, 300).double()
    x = torch.randn(7, 16, dtype=torch.float64)
    with torch.no_grad():
        got = layer.step_logits(x)
    expected = x @ layer.weight.t() + layer.bias  # by hand, not through F.linear
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_step_logits_follow_optimizer_steps_and_loaded_weights() -> None:
    torch.manual_seed(1)
    layer = OutputLayer(8, 50)
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = layer.step_logits(x)  # builds the cached [Wᵀ; b]
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(x).logsumexp(dim=1).sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = layer.step_logits(x)
        torch.testing.assert_close(after, layer(x))
        assert not torch.allclose(after, before)
        other = OutputLayer(8, 50)
        layer.load_state_dict(other.state_dict())
        torch.testing.assert_close(layer.step_logits(x), other(x))


def test_step_logits_keep_autograd_when_grad_is_enabled() -> None:
    layer = OutputLayer(4, 10)
    x = torch.randn(2, 4, requires_grad=True)
    layer.step_logits(x).sum().backward()
    assert x.grad is not None and layer.bias.grad is not None
    assert set(layer.state_dict()) == {"weight", "bias"}  # checkpoints are nn.Linear's
