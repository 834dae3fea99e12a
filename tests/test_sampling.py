"""Sampling: reproducible with a seed, top-k 1 is greedy, top-p stays in the nucleus."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from _decode_fakes import HashModel, pad_batch, sequence_log_prob

from attnlab.config import DecodeConfig
from attnlab.decode.greedy import greedy_decode
from attnlab.decode.penalties import step_log_probs
from attnlab.decode.sampling import filter_log_probs
from attnlab.decode.search import decode_batch
from attnlab.nn.seq2seq import BOS_ID, EOS_ID

SOURCES = [[5, 6, 7], [8, 4], [9, 10, 11, 12, 13], [4]]


def sample(model, sources, **options):
    src, mask = pad_batch(sources)
    options.setdefault("max_len_ratio", 0.0)
    options.setdefault("max_len_const", 6)
    return decode_batch(model, src, mask, DecodeConfig(sample=True, **options), need_attention=True)


def test_fixed_seed_is_reproducible():
    model = HashModel(scale=1.0, eos_bias=-0.5)
    first = sample(model, SOURCES, num_samples=4, nbest=4, seed=7)
    again = sample(model, SOURCES, num_samples=4, nbest=4, seed=7)
    other = sample(model, SOURCES, num_samples=4, nbest=4, seed=8)
    tokens = [[h.tokens for h in n] for n in first]
    assert tokens == [[h.tokens for h in n] for n in again]
    assert tokens != [[h.tokens for h in n] for n in other]


def test_top_k_one_equals_greedy():
    model = HashModel(eos_bias=0.3)
    src, mask = pad_batch(SOURCES)
    greedy = greedy_decode(model, src, mask, max_len=6)
    for n, g in zip(
        sample(model, SOURCES, top_k=1, num_samples=3, nbest=3, temperature=2.0),
        greedy,
        strict=True,
    ):
        assert [h.tokens for h in n] == [g.tokens] * 3


def test_samples_carry_the_models_log_prob_and_are_ranked():
    model = HashModel(scale=1.0, eos_bias=-0.5)
    out = sample(model, SOURCES, num_samples=5, nbest=5, temperature=1.7, top_p=0.9, seed=3)
    for sentence, samples in zip(SOURCES, out, strict=True):
        assert len(samples) == 5
        assert [h.score for h in samples] == sorted((h.score for h in samples), reverse=True)
        for hyp in samples:
            seq = hyp.tokens + ([EOS_ID] if hyp.finished else [])
            assert hyp.log_prob == pytest.approx(sequence_log_prob(model, sentence, seq), abs=1e-5)
            assert hyp.attention.shape == (len(seq), len(sentence))


def nucleus_by_hand(probs: list[float], top_p: float) -> set[int]:
    order = sorted(range(len(probs)), key=lambda i: probs[i], reverse=True)
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs[i]
        if mass >= top_p:
            break
    return kept


def test_top_p_filter_on_a_hand_table():
    probs = [0.05, 0.5, 0.1, 0.2, 0.15]
    log_probs = torch.tensor([probs]).log()
    filtered = filter_log_probs(log_probs, top_p=0.8).exp()[0]
    assert nucleus_by_hand(probs, 0.8) == {1, 3, 4}
    expected = [0.0, 0.5 / 0.85, 0.0, 0.2 / 0.85, 0.15 / 0.85]
    assert filtered.tolist() == pytest.approx(expected, abs=1e-6)
    # a most likely token above p is kept alone
    assert filter_log_probs(log_probs, top_p=0.3).exp()[0].tolist() == pytest.approx(
        [0, 1, 0, 0, 0]
    )


def test_temperature_and_top_k_on_a_hand_table():
    probs = [0.05, 0.5, 0.1, 0.2, 0.15]
    log_probs = torch.tensor([probs]).log()
    powered = [p ** (1 / 2.0) for p in probs]
    expected = [p / sum(powered) for p in powered]
    assert filter_log_probs(log_probs, temperature=2.0).exp()[0].tolist() == pytest.approx(
        expected, abs=1e-6
    )
    top2 = filter_log_probs(log_probs, top_k=2).exp()[0].tolist()
    assert top2 == pytest.approx([0, 0.5 / 0.7, 0, 0.2 / 0.7, 0], abs=1e-6)


def test_top_p_never_samples_outside_the_nucleus():
    model = HashModel(vocab=12, scale=2.0)
    sentence = [5, 6, 7]
    s = torch.tensor([sentence])
    enc = model.encode(s, torch.ones_like(s, dtype=torch.bool))
    logits, _, _ = model.step(torch.tensor([BOS_ID]), model.start_state(enc), enc)
    probs = step_log_probs(logits.double(), 0).exp()[0].tolist()
    top_p = 0.6
    nucleus = nucleus_by_hand(probs, top_p)
    assert 1 < len(nucleus) < len(probs) - 2  # a real cut
    draws = sample(
        model, [sentence], num_samples=1000, nbest=1, top_p=top_p, max_len_const=1, seed=11
    )[0]
    first = Counter((h.tokens + [EOS_ID])[0] for h in draws)
    assert set(first) <= nucleus
    assert set(first) == nucleus  # every nucleus token is drawn in 1000 tries
    mass = sum(probs[i] for i in nucleus)
    for token, count in first.items():  # frequencies follow the renormalised nucleus
        expected = probs[token] / mass
        assert abs(count / 1000 - expected) < 4 * math.sqrt(expected * (1 - expected) / 1000) + 0.01
