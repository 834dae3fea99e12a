"""Dropout with a faster CPU mask, used by the Transformer."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """nn.Dropout whose CPU training mask comes from ``rand_like(x) >= p``: the same Bernoulli(1-p)
    keep-mask and 1/(1-p) scaling, ~2x faster than torch's CPU ``bernoulli_`` (which took a third
    of a training step at p = 0.1). Elsewhere (CUDA, eval, p = 0) it is nn.Dropout."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu" or self.p >= 1.0:
            return super().forward(x)
        keep = torch.rand_like(x) >= self.p
        return x * keep.to(x.dtype) * (1.0 / (1.0 - self.p))
