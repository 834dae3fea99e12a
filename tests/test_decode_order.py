"""The searches' longest-first batch order and the row-dropping views it makes possible."""

from __future__ import annotations

import pytest
import torch
from _decode_fakes import assert_batch_decodes_as_alone, pad_batch

from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig
from attnlab.decode.order import in_input_order, longest_first
from attnlab.nn.model import build_model
from attnlab.nn.seq2seq import EncoderOutput, is_prefix, keep_state


def mask_of(lengths: list[int]) -> torch.Tensor:
    width = max(lengths)
    return torch.tensor([[j < n for j in range(width)] for n in lengths])


def test_longest_first_is_a_stable_descending_sort_and_round_trips():
    lengths = [2, 5, 3, 5, 1, 3]
    order = longest_first(mask_of(lengths))
    # By hand: 5 (index 1), 5 (3), 3 (2), 3 (5), 2 (0), 1 (4); ties keep input order.
    assert order.tolist() == [1, 3, 2, 5, 0, 4]
    decoded = [f"sentence {i}" for i in order.tolist()]  # results in the reordered batch
    assert in_input_order(decoded, order) == [f"sentence {i}" for i in range(6)]
    assert longest_first(mask_of([4, 4, 2, 1])) is None  # already longest first
    assert in_input_order(["a", "b"], None) == ["a", "b"]


def test_is_prefix():
    assert is_prefix(torch.tensor([0, 1, 2])) and is_prefix(torch.tensor([], dtype=torch.long))
    assert not is_prefix(torch.tensor([0, 2])) and not is_prefix(torch.tensor([1, 2]))


@pytest.mark.parametrize("kept", [[0, 1, 2], [0, 2, 3], [1]])
def test_keep_equals_index_select_and_is_a_view_for_a_prefix(kept):
    torch.manual_seed(0)
    enc = EncoderOutput(torch.randn(4, 3, 5), mask_of([3, 2, 3, 1]), {"pre": torch.randn(4, 3, 2)})
    state = {"hidden": torch.randn(4, 1, 6), "pos": torch.arange(4)}
    index = torch.tensor(kept)
    kept_enc, expected = enc.keep(index), enc.index_select(index)
    kept_state = keep_state(state, index)
    assert torch.equal(kept_enc.states, expected.states)
    assert torch.equal(kept_enc.mask, expected.mask)
    assert torch.equal(kept_enc.extras["pre"], expected.extras["pre"])
    for key, value in state.items():
        assert torch.equal(kept_state[key], value.index_select(0, index))
    shares = kept_enc.states.data_ptr() == enc.states.data_ptr()
    assert shares == (kept == list(range(len(kept))))  # a view exactly when a prefix
    assert kept_enc.states.is_contiguous()


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
@pytest.mark.parametrize(
    "cfg", [DecodeConfig(), DecodeConfig(beam=3, nbest=2, alpha=0.6, beta=0.2)], ids=str
)
def test_a_shortest_first_batch_decodes_as_each_sentence_alone(arch, cfg):
    """Reordered inside the search and dropped by views, every sentence still gets what it
    gets alone, in input order."""
    torch.manual_seed(0)
    model = build_model(ExperimentConfig(model=ModelConfig(arch=arch)), 20, 15).eval()
    sources = [[4], [8, 4], [5, 6, 7], [9, 10, 11, 12, 13], [6, 5, 4, 9, 8, 7, 10]]
    assert longest_first(pad_batch(sources)[1]) is not None  # the search reorders this batch
    assert_batch_decodes_as_alone(model, sources, cfg)
