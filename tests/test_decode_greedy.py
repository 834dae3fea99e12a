"""Greedy decoding: batched, per-sentence budgets, constraints, attention and scores."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from _decode_fakes import HashModel, pad_batch, sequence_log_prob

from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig
from attnlab.decode.greedy import greedy_decode, max_lengths
from attnlab.decode.penalties import step_log_probs
from attnlab.decode.search import decode_batch
from attnlab.errors import AttnlabError
from attnlab.nn.model import ARCHITECTURES, build_model
from attnlab.nn.seq2seq import BOS_ID, EOS_ID

SOURCES = [[5, 6, 7], [8, 4], [9, 10, 11, 12, 13], [4]]


def reference_greedy(model, src: list[int], max_steps: int, min_len: int = 0):
    """One sentence, one step at a time, arg-max with .item(): the naive loop."""
    s = torch.tensor([src])
    enc = model.encode(s, torch.ones_like(s, dtype=torch.bool))
    state = model.start_state(enc)
    prev, out, attn = BOS_ID, [], []
    for t in range(max_steps):
        logits, state, cross = model.step(torch.tensor([prev]), state, enc, need_weights=True)
        prev = int(step_log_probs(logits, t, min_len).argmax(-1).item())
        attn.append(cross[0])
        out.append(prev)
        if prev == EOS_ID:
            break
    return out, torch.stack(attn, dim=2)  # [L, H, T, S]


def test_greedy_matches_the_one_sentence_loop():
    model = HashModel(eos_bias=0.5)
    src, mask = pad_batch(SOURCES)
    hyps = greedy_decode(model, src, mask, max_len=8, need_attention=True)
    assert len(hyps) == len(SOURCES)
    for sentence, hyp in zip(SOURCES, hyps, strict=True):
        steps, attention = reference_greedy(model, sentence, 8)
        finished = steps[-1] == EOS_ID
        assert hyp.finished == finished
        assert hyp.tokens == (steps[:-1] if finished else steps)
        assert hyp.attention_layers.shape == (2, 2, len(steps), len(sentence))
        torch.testing.assert_close(hyp.attention_layers, attention)
        torch.testing.assert_close(hyp.attention, attention[-1].mean(dim=0))
        assert hyp.log_prob == pytest.approx(sequence_log_prob(model, sentence, steps), abs=1e-5)
        assert hyp.log_prob == pytest.approx(sum(hyp.token_log_probs), abs=1e-6)
        assert hyp.score == pytest.approx(hyp.log_prob)
        assert (hyp.length_penalty, hyp.coverage_penalty) == (1.0, 0.0)


def test_greedy_alone_equals_inside_a_padded_batch():
    model = HashModel(eos_bias=0.3)
    src, mask = pad_batch(SOURCES)
    batched = greedy_decode(model, src, mask, max_len=9, need_attention=True)
    for sentence, together in zip(SOURCES, batched, strict=True):
        alone_src, alone_mask = pad_batch([sentence])
        (alone,) = greedy_decode(model, alone_src, alone_mask, max_len=9, need_attention=True)
        assert alone.tokens == together.tokens
        assert alone.log_prob == pytest.approx(together.log_prob, abs=1e-6)
        torch.testing.assert_close(alone.attention, together.attention)


def test_each_sentence_stops_at_its_own_budget():
    model = HashModel(eos_bias=-100.0)  # never ends by itself
    src, mask = pad_batch(SOURCES)
    budget = torch.tensor([2, 5, 1, 3])
    hyps = greedy_decode(model, src, mask, max_len=budget)
    assert [len(h.tokens) for h in hyps] == [2, 5, 1, 3]
    assert not any(h.finished for h in hyps)
    assert all(EOS_ID not in h.tokens for h in hyps)


def test_min_len_blocks_end_of_sentence():
    model = HashModel(eos_bias=100.0)  # would end at once
    src, mask = pad_batch(SOURCES)
    assert all(h.tokens == [] for h in greedy_decode(model, src, mask, max_len=6))
    hyps = greedy_decode(model, src, mask, max_len=6, min_len=3)
    assert [len(h.tokens) for h in hyps] == [3, 3, 3, 3]
    assert all(h.finished for h in hyps)


def test_pad_and_bos_are_never_produced():
    model = HashModel(eos_bias=-100.0)
    src, mask = pad_batch(SOURCES)
    for hyp in greedy_decode(model, src, mask, max_len=12):
        assert not {0, BOS_ID} & set(hyp.tokens)


def test_max_len_is_a_ratio_of_the_source_length_plus_a_constant():
    _, mask = pad_batch(SOURCES)  # lengths 3, 2, 5, 1
    expected = [math.ceil(1.5 * n) + 2 for n in (3, 2, 5, 1)]
    assert max_lengths(mask, 1.5, 2).tolist() == expected
    model = HashModel(eos_bias=-100.0)
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(max_len_ratio=1.5, max_len_const=2)
    nbest = decode_batch(model, src, mask, cfg)
    assert [len(n[0].tokens) for n in nbest] == expected


def test_decode_batch_with_beam_one_is_greedy():
    model = HashModel(eos_bias=0.4)
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(beam=1, max_len_const=6, max_len_ratio=0.0)
    nbest = decode_batch(model, src, mask, cfg, need_attention=True)
    greedy = greedy_decode(model, src, mask, max_len=6, need_attention=True)
    assert [n[0].tokens for n in nbest] == [g.tokens for g in greedy]
    assert all(len(n) == 1 for n in nbest)


def test_greedy_reports_penalties_when_asked():
    model = HashModel(eos_bias=0.5)
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(alpha=0.6, beta=0.2, max_len_const=8, max_len_ratio=0.0)
    (hyp,) = decode_batch(model, src[:1], mask[:1], cfg, need_attention=True)[0]
    steps = len(hyp.tokens) + hyp.finished
    assert hyp.length_penalty == pytest.approx(((5 + steps) / 6) ** 0.6)
    coverage = hyp.attention.double().sum(dim=0)
    expected_cp = 0.2 * sum(math.log(min(float(c), 1.0)) for c in coverage)
    assert hyp.coverage_penalty == pytest.approx(expected_cp)
    assert hyp.score == pytest.approx(hyp.log_prob / hyp.length_penalty + expected_cp)


@pytest.mark.parametrize(
    "field,value",
    [("beam", 4), ("length_norm", "words")],
)
def test_bad_decode_options_raise_one_line_errors(field, value):
    model = HashModel()
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(**{field: value, "groups": 3} if field == "beam" else {field: value})
    with pytest.raises(AttnlabError, match=f"decode.{field}"):
        decode_batch(model, src, mask, cfg)


def _real_model(arch: str):
    torch.manual_seed(0)
    model = build_model(ExperimentConfig(model=ModelConfig(arch=arch)), 20, 15)
    return model.eval()


@pytest.mark.parametrize("arch", ARCHITECTURES.names())  # every registered architecture
def test_real_model_greedy_alone_equals_batched(arch, device):
    model = _real_model(arch).to(device)
    src, mask = pad_batch(SOURCES)
    together = greedy_decode(model, src.to(device), mask.to(device), max_len=7, need_attention=True)
    for sentence, hyp in zip(SOURCES, together, strict=True):
        s, m = pad_batch([sentence])
        (alone,) = greedy_decode(model, s.to(device), m.to(device), max_len=7, need_attention=True)
        assert alone.tokens == hyp.tokens
        assert alone.log_prob == pytest.approx(hyp.log_prob, abs=1e-4)
        assert hyp.attention.shape == (len(hyp.tokens) + hyp.finished, len(sentence))
        torch.testing.assert_close(alone.attention, hyp.attention, atol=1e-5, rtol=1e-4)


def test_sentences_per_batch_fills_the_row_budget():
    from attnlab.decode.search import sentences_per_batch

    assert sentences_per_batch(DecodeConfig()) == 512  # greedy: one row per sentence
    assert sentences_per_batch(DecodeConfig(beam=5)) == 102
    assert sentences_per_batch(DecodeConfig(sample=True, num_samples=4, batch_rows=10)) == 2
    assert sentences_per_batch(DecodeConfig(beam=8, batch_rows=3)) == 1
    assert sentences_per_batch(DecodeConfig(beam=5, batch_size=7)) == 7  # explicit sentences win


@pytest.mark.parametrize("options", [{}, {"beam": 3, "nbest": 2, "alpha": 0.6}])
def test_decode_sorted_keeps_input_order_and_equals_one_batch(options):
    """Sorting by length and splitting into small batches changes no hypothesis."""
    from attnlab.decode.search import decode_sorted

    model = HashModel(eos_bias=0.3)
    sources = [[5, 6, 7, 8, 9, 10], [4], [8, 4, 6], [9, 10], [11, 12, 13, 14], [5]]
    cfg = DecodeConfig(
        max_len_ratio=1.0, max_len_const=3, batch_rows=2 * options.get("beam", 1), **options
    )
    src, mask = pad_batch(sources)
    together = decode_batch(model, src, mask, cfg)
    sorted_out = decode_sorted(model, sources, cfg)  # 3 batches of 2 sentences
    assert [[h.tokens for h in n] for n in sorted_out] == [[h.tokens for h in n] for n in together]
    assert [h.score for n in sorted_out for h in n] == pytest.approx(
        [h.score for n in together for h in n], abs=1e-5
    )
    for sentence, nbest in zip(sources, sorted_out, strict=True):
        s, m = pad_batch([sentence])
        (alone,) = decode_batch(model, s, m, cfg)
        assert [h.tokens for h in alone] == [h.tokens for h in nbest]


@pytest.mark.parametrize("ratio", [1.1, 2.2, 0.7, 1.5, 1.15, 3.3])
def test_max_lengths_is_the_exact_ceiling_of_the_decimal_ratio(ratio):
    """ceil(r·|X|) in exact rational arithmetic: 1.1 · 50 is 55, not 56 (float rounding)."""
    lengths = list(range(1, 201))
    mask = torch.arange(200).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    exact = [math.ceil(Fraction(str(ratio)) * n) + 3 for n in lengths]
    assert max_lengths(mask, ratio, 3).tolist() == exact
