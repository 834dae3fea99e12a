"""The projection to the vocabulary, with a cheaper path for one decoding step on CPU."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class OutputLayer(nn.Linear):
    """``nn.Linear(d, V)`` (same parameters, same checkpoints) plus :meth:`step_logits`.

    ``F.linear`` with a bias first writes the bias into every row of the [R, V] result and
    then accumulates the product on top: one extra pass over the largest tensor of a
    decoding step. ``step_logits`` instead multiplies ``[x, 1]`` by ``[Wᵀ; b]`` (cached,
    rebuilt whenever the weights change), so the bias is one more term of the product.
    The logits agree with ``forward`` to float rounding (a different summation order).
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self._folded: Tensor | None = None  # [d + 1, V], not a parameter and not saved
        self._folded_key: tuple[object, ...] | None = None

    def step_logits(self, x: Tensor) -> Tensor:
        """x[R, d] -> logits[R, V] for a search step (no autograd)."""
        if torch.is_grad_enabled() or x.device.type != "cpu" or self.bias is None or x.dtype != self.weight.dtype:
            return self.forward(x)
        weight, bias = self.weight, self.bias
        # _version counts in-place updates (optimizer steps, load_state_dict), so a model
        # that trains between evaluations never decodes with stale weights.
        key = (weight.data_ptr(), weight._version, bias.data_ptr(), bias._version)
        if self._folded is None or self._folded_key != key:
            self._folded = torch.cat([weight, bias.unsqueeze(1)], dim=1).t().contiguous()
            self._folded_key = key
        ones = x.new_ones(x.size(0), 1)
        return torch.mm(torch.cat([x, ones], dim=1), self._folded)
