"""The chunk-maxima arg-max and beam top-k equal torch's plain argmax / topk."""

from __future__ import annotations

import pytest
import torch

from attnlab.decode import topk
from attnlab.decode.topk import row_argmax, search_topk

NEG_INF = float("-inf")


@pytest.mark.parametrize("vocab", [256, 300, 5898])  # no tail, a tail, the Multi30k vocabulary
def test_row_argmax_is_the_first_maximum(vocab):
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(50, vocab, generator=g)
    x[:, :3] = NEG_INF  # blocked tokens
    x[1, vocab - 1] = 10.0  # the maximum in the tail (or the last chunk)
    x[2, 7] = x[2, vocab - 2] = 10.0  # a tie: the first one wins
    x[3, 100] = x[3, 164] = 10.0  # a tie across chunks
    x[4] = torch.randint(0, 3, (vocab,), generator=g).float()  # many ties
    assert torch.equal(row_argmax(x), x.argmax(dim=1))
    assert row_argmax(x)[2] == 7 and row_argmax(x)[3] == 100


@pytest.mark.parametrize("vocab", [256, 300, 5898])
@pytest.mark.parametrize(("beams", "n"), [(5, 10), (1, 2), (3, 6)])
def test_search_topk_equals_topk_over_all_candidates(vocab, beams, n):
    g = torch.Generator().manual_seed(vocab + beams)
    log_probs = torch.log_softmax(torch.randn(7, beams, vocab, generator=g) * 3, dim=-1)
    log_probs[:, :, :3] = NEG_INF
    scores = -10 * torch.rand(7, beams, generator=g)
    scores[0, 1:] = NEG_INF  # step 0: one live beam
    scores[1, -1] = NEG_INF  # a dead beam
    values, beam, token = search_topk(scores, log_probs, n)
    expect, index = (scores[:, :, None] + log_probs).reshape(7, -1).topk(n, dim=1)
    assert torch.equal(values, expect)  # the same float sums, best first
    finite = torch.isfinite(expect)  # (which of several -inf candidates comes back is arbitrary)
    assert torch.equal((beam * vocab + token)[finite], index[finite])
    assert torch.equal(
        values, scores.gather(1, beam) + log_probs.reshape(7, -1).gather(1, beam * vocab + token)
    )


def test_plain_path_below_four_chunks(monkeypatch):
    """Short rows skip the chunking (and the tests above exercise both paths)."""
    x = torch.randn(4, 4 * topk.CHUNK - 1)
    calls = []
    monkeypatch.setattr(torch.Tensor, "amax", lambda *a, **k: calls.append(1))
    assert torch.equal(row_argmax(x), x.argmax(dim=1)) and not calls


def test_plain_path_for_a_few_rows(monkeypatch):
    """A handful of rows (a beam of one sentence, the tail of a batch) takes one plain call."""
    x = torch.randn(topk.SMALL_ROWS, 5898)
    expected = x.argmax(dim=1)
    calls = []
    monkeypatch.setattr(torch.Tensor, "amax", lambda *a, **k: calls.append(1))
    assert torch.equal(row_argmax(x), expected) and not calls
