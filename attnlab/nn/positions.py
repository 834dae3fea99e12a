"""Absolute position information for the Transformer: sinusoidal, learned, none, rotary.

Sinusoidal and learned positions are added to the token embeddings; rotary positions
(Su et al. 2021, RoFormer) rotate each head's queries and keys inside self-attention, so
they live in the attention module (see ``Rotary`` and ``MultiHeadBase.rotary``).
Shaw-style relative positions and ALiBi change the attention scores and are attention
variants (``attnlab.nn.attention.positional``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import AttnlabError

POSITIONS = ("sinusoidal", "learned", "none", "rotary")


def sinusoid_table(length: int, dim: int) -> Tensor:
    """[length, dim]: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...).

    Vaswani et al. 2017.
    """
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class AbsolutePositions(nn.Module):
    """Scales token embeddings and adds position vectors: scale · x + P[positions]."""

    def __init__(self, kind: str, dim: int, max_positions: int):
        super().__init__()
        self.kind = kind
        self.max_positions = max_positions
        if kind == "sinusoidal":
            self.register_buffer("table", sinusoid_table(max_positions, dim), persistent=False)
        elif kind == "learned":
            self.embedding = nn.Embedding(max_positions, dim)
            nn.init.normal_(self.embedding.weight, std=dim**-0.5)

    def forward(self, x: Tensor, scale: float, positions: Tensor, end: int) -> Tensor:
        """scale · x + P[positions] in one pass: x [..., D] token embeddings whose positions
        (``positions``, broadcast against x's leading dims) are all below ``end``."""
        if self.kind not in ("sinusoidal", "learned"):
            return x * scale
        if end > self.max_positions:
            raise AttnlabError(
                f"sequence of length {end} exceeds the model's {self.max_positions} "
                f"{self.kind} positions"
            )
        table = self.table.to(x.dtype) if self.kind == "sinusoidal" else self.embedding.weight
        return torch.add(F.embedding(positions, table), x, alpha=scale)


class Rotary(nn.Module):
    """Rotary position embedding for one head size: rotate pairs of channels by p·θ_i."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise AttnlabError(
                f"positions=rotary needs an even head size; d_model/heads = {head_dim}"
            )
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    # Per row [B]: the index of each row's first real token (a decoder-only model's batch is
    # left-padded; attnlab.nn.decoder_only sets it around a pass). None: every row starts at 0.
    # Rotating by the position in the row rather than the index keeps a variant whose scores
    # are not a plain dot product (additive, Shaw, kernels) independent of the padding.
    origin: Tensor | None = None

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """x [B,H,T,dh] at absolute positions start..start+T-1 -> rotated x."""
        positions = torch.arange(start, start + x.shape[-2], device=x.device, dtype=torch.float32)
        if self.origin is not None:  # [B,(1,)T]: per row, broadcast over heads if x has them
            per_row = positions[None, :] - self.origin[:, None].to(positions.dtype)
            positions = per_row.view(per_row.shape[0], *(1,) * (x.dim() - 3), -1)
        angles = positions[..., None] * self.inv_freq  # [(B,(1,))T, dh/2]
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)
