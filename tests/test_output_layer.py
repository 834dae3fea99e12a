"""OutputLayer.step_logits: the folded-bias product equals nn.Linear and follows weight updates."""

import pytest
import torch

from attnlab.nn.output_layer import OutputLayer, folded_output_layers


def test_step_logits_equal_linear_forward() -> None:
    torch.manual_seed(0)
    layer = OutputLayer(16, 300).double()
    x = torch.randn(7, 16, dtype=torch.float64)
    expected = x @ layer.weight.t() + layer.bias  # by hand, not through F.linear
    with torch.no_grad():
        plain = layer.step_logits(x)
        with layer.folded():
            assert layer._folded is not None  # the folded path is really taken
            got = layer.step_logits(x)
    assert layer._folded is None  # nothing outlives the search
    torch.testing.assert_close(got, expected.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain, expected.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fused", [True, False])
def test_each_search_sees_the_current_weights_after_adamw_steps(fused: bool) -> None:
    """Fused AdamW updates in place without bumping ``_version``: a cache keyed on it went stale."""
    torch.manual_seed(1)
    layer = OutputLayer(8, 50)
    x = torch.randn(3, 8)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.5, fused=fused)
    for _ in range(3):
        with torch.no_grad(), folded_output_layers(layer):
            got = layer.step_logits(x)
        expected = (x.double() @ layer.weight.double().t() + layer.bias.double()).float()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        layer(x).logsumexp(dim=1).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        other = OutputLayer(8, 50)
        layer.load_state_dict(other.state_dict())
        with layer.folded():
            torch.testing.assert_close(layer.step_logits(x), other(x))


def test_step_logits_keep_autograd_when_grad_is_enabled() -> None:
    layer = OutputLayer(4, 10)
    x = torch.randn(2, 4, requires_grad=True)
    with layer.folded():
        layer.step_logits(x).sum().backward()
    assert x.grad is not None and layer.bias.grad is not None
    assert set(layer.state_dict()) == {"weight", "bias"}  # checkpoints are nn.Linear's
