"""Batching: token budgets, one pass over every example per epoch, bucketing reduces padding."""

from __future__ import annotations

import random

import torch

from attnlab.data.batching import iterate_batches, make_batch, padding_fraction, plan_batches
from attnlab.data.example import Example
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab


def random_examples(n: int, seed: int = 0, max_len: int = 40) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        # target length close to source length, as in translation
        src_len = rng.randint(1, max_len)
        tgt_len = max(1, src_len + rng.randint(-3, 3))
        src = tuple(f"s{rng.randint(0, 9)}" for _ in range(src_len))
        tgt = tuple(f"t{rng.randint(0, 9)}" for _ in range(tgt_len))
        out.append(Example(src, tgt, src_text=f"#{i}"))
    return out


def test_make_batch_shapes_masks_and_shifted_targets():
    examples = [Example(("a", "b", "c"), ("x",)), Example(("b",), ("y", "x", "x"))]
    src_vocab, tgt_vocab = Vocab(["a", "b", "c"]), Vocab(["x", "y"])
    batch = make_batch(examples, src_vocab, tgt_vocab)
    assert batch.src.tolist() == [[4, 5, 6], [5, PAD_ID, PAD_ID]]
    assert batch.src_mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 4, PAD_ID, PAD_ID], [BOS_ID, 5, 4, 4]]
    assert batch.tgt_out.tolist() == [[4, EOS_ID, PAD_ID, PAD_ID], [5, 4, 4, EOS_ID]]
    assert batch.n_tokens == 6
    # 3+1 real source of 6 slots, 2+4 real target of 8 slots
    assert abs(batch.padding_fraction - (1 - 10 / 14)) < 1e-12
    assert batch.to("cpu").src.dtype == torch.long


def test_every_example_exactly_once_per_epoch():
    examples = random_examples(537)
    for kwargs in (
        dict(batch_size=32),
        dict(batch_tokens=400),
        dict(batch_tokens=400, bucket=False),
    ):
        seen = [e.src_text for batch in iterate_batches(examples, seed=3, **kwargs) for e in batch]
        assert sorted(seen) == sorted(e.src_text for e in examples)


def test_sentence_batches_have_batch_size():
    sizes = [
        len(b)
        for b in plan_batches(random_examples(100), batch_size=32, shuffle=False, bucket=False)
    ]
    assert sizes == [32, 32, 32, 4]


def test_token_budget_respected():
    examples = random_examples(800)
    budget = 500
    for bucket in (True, False):
        for idx in plan_batches(examples, batch_tokens=budget, seed=1, bucket=bucket):
            batch = make_batch([examples[i] for i in idx], Vocab([]), Vocab([]))
            padded = batch.src.numel() + batch.tgt_out.numel()
            assert padded <= budget or len(idx) == 1


def test_single_example_longer_than_budget_gets_own_batch():
    examples = random_examples(50, max_len=10) + [Example(tuple("a" * 300), tuple("b" * 300))]
    batches = plan_batches(examples, batch_tokens=100, seed=0)
    big = [b for b in batches if 50 in b]
    assert big == [[50]]


def test_bucketing_reduces_padding():
    examples = random_examples(2000, seed=5)
    bucketed = plan_batches(examples, batch_tokens=800, seed=2, bucket=True)
    plain = plan_batches(examples, batch_tokens=800, seed=2, bucket=False)
    assert padding_fraction(examples, bucketed) < 0.5 * padding_fraction(examples, plain)
    # fewer padded slots -> more sentences per batch under the same budget
    assert len(bucketed) < len(plain)


def test_shuffle_is_seeded():
    examples = random_examples(300)
    a = plan_batches(examples, batch_size=16, seed=4)
    b = plan_batches(examples, batch_size=16, seed=4)
    c = plan_batches(examples, batch_size=16, seed=5)
    assert a == b and a != c


def test_padding_fraction_matches_batches():
    examples = random_examples(64, seed=9)
    plan = plan_batches(examples, batch_size=16, seed=0)
    real = padded = 0
    for idx in plan:
        batch = make_batch([examples[i] for i in idx], Vocab([]), Vocab([]))
        real += int(batch.src_mask.sum()) + int(batch.tgt_mask.sum())
        padded += batch.src.numel() + batch.tgt_out.numel()
    assert abs(padding_fraction(examples, plan) - (1 - real / padded)) < 1e-12
