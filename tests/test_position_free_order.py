"""Why the length-generalisation study's ALiBi and NSA cells cannot learn to copy (docs/studies.md).

With ``model.positions=none`` and a symmetric position signal in the bidirectional encoder (ALiBi's
−m·|i − j|; NSA's block means, blocks and |i − j| window within one block), reversing the source
reverses the encoder states, and content-only cross-attention cannot tell the two apart: the model
gives a source and its reverse the same output distribution, so it can copy at most one of them.
A sinusoidal model (the control) can tell them apart.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.config import ExperimentConfig, ModelConfig
from attnlab.data.vocab import BOS_ID
from attnlab.nn.model import build_model

VOCAB = 20
SOURCE = [5, 9, 13, 6, 17, 8]  # 6 tokens: inside one NSA block of 8


def _model(self_attention: str, positions: str) -> torch.nn.Module:
    config = ExperimentConfig(
        model=ModelConfig(
            arch="transformer",
            d_model=16,
            heads=2,
            ff=32,
            enc_layers=2,
            dec_layers=2,
            self_attention=self_attention,
            positions=positions,
            dropout=0.0,
        )
    )
    torch.manual_seed(0)
    return build_model(config, VOCAB, VOCAB).double().eval()


def _logits(model: torch.nn.Module, source: list[int]) -> torch.Tensor:
    src = torch.tensor([source])
    tgt_in = torch.tensor([[BOS_ID, 7, 11, 4]])  # any prefix: every step's distribution
    with torch.no_grad():
        return model(src, src != 0, tgt_in).logits


@pytest.mark.parametrize("variant", ["alibi", "nsa"])
def test_symmetric_position_signal_gives_a_source_and_its_reverse_one_output(variant):
    model = _model(variant, "none")
    forward, backward = _logits(model, SOURCE), _logits(model, SOURCE[::-1])
    torch.testing.assert_close(backward, forward, rtol=1e-10, atol=1e-12)


def test_sinusoidal_positions_tell_a_source_from_its_reverse():
    model = _model("scaled-dot", "sinusoidal")
    difference = (_logits(model, SOURCE) - _logits(model, SOURCE[::-1])).abs().max()
    assert difference > 1e-3
