"""The projection to the vocabulary, with a cheaper path for the steps of one search on CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

F = TypeVar("F", bound=Callable[..., Any])


class OutputLayer(nn.Linear):
    """``nn.Linear(d, V)`` (same parameters, same checkpoints) plus :meth:`step_logits`.

    ``F.linear`` with a bias first writes the bias into every row of the [R, V] result and
    then accumulates the product on top: one extra pass over the largest tensor of a
    decoding step. Inside :meth:`folded` (one search), ``step_logits`` instead multiplies
    ``[x, 1]`` by ``[Wᵀ; b]``, so the bias is one more term of the product. The logits agree
    with ``forward`` to float rounding (a different summation order).

    The folded copy lives only for the duration of one search and is rebuilt for the next:
    nothing may keep it across weight updates, because no counter reliably tells that the
    weights changed (fused AdamW updates them in place without bumping ``_version``).
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self._folded: Tensor | None = None  # [d + 1, V], only inside folded(); never saved

    @contextmanager
    def folded(self) -> Iterator[None]:
        """Within the block, ``step_logits`` on CPU uses a ``[Wᵀ; b]`` built at entry."""
        previous = self._folded
        if self.bias is not None and self.weight.device.type == "cpu":
            with torch.no_grad():
                weight = torch.cat([self.weight, self.bias.unsqueeze(1)], dim=1)
                self._folded = weight.t().contiguous()
        try:
            yield
        finally:
            self._folded = previous

    def step_logits(self, x: Tensor) -> Tensor:
        """x[R, d] -> logits[R, V] for a search step."""
        folded = self._folded
        unusable = folded is None or x.device.type != "cpu" or x.dtype != folded.dtype
        if unusable or torch.is_grad_enabled():
            return self.forward(x)
        ones = x.new_ones(x.size(0), 1)
        return torch.mm(torch.cat([x, ones], dim=1), folded)


@contextmanager
def folded_output_layers(model: nn.Module) -> Iterator[None]:
    """Fold every OutputLayer of ``model`` for the duration of one search."""
    with ExitStack() as stack:
        for module in model.modules():
            if isinstance(module, OutputLayer):
                stack.enter_context(module.folded())
        yield


def search_with_folded_output(search: F) -> F:
    """Decorator for a search ``f(model, ...)``: its steps use the folded output layers."""

    @functools.wraps(search)
    def wrapper(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
        with folded_output_layers(model):
            return search(model, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
