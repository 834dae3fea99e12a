"""Padded tensor batches and (length-bucketed) batch iteration."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.data.example import Example
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab


@dataclass
class Batch:
    src: Tensor  # [B, S] source ids (no bos/eos)
    src_mask: Tensor  # [B, S] bool, True for real tokens
    tgt_in: Tensor  # [B, T] <s> y1 .. y_{n}
    tgt_out: Tensor  # [B, T] y1 .. y_n </s>
    tgt_mask: Tensor  # [B, T] bool
    examples: Sequence[Example]

    @property
    def n_tokens(self) -> int:
        """Target tokens including </s> (what tokens/s counts)."""
        return int(self.tgt_mask.sum())

    @property
    def padding_fraction(self) -> float:
        total = self.src_mask.numel() + self.tgt_mask.numel()
        real = int(self.src_mask.sum()) + self.n_tokens
        return 1.0 - real / max(total, 1)

    def pin_memory(self) -> Batch:
        """Page-locked copies (CUDA): ``to(device)`` then copies asynchronously."""
        return Batch(
            self.src.pin_memory(),
            self.src_mask.pin_memory(),
            self.tgt_in.pin_memory(),
            self.tgt_out.pin_memory(),
            self.tgt_mask.pin_memory(),
            self.examples,
        )

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=True),
            self.src_mask.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.tgt_mask.to(device, non_blocking=True),
            self.examples,
        )


def pad(rows: Sequence[Sequence[int]], min_len: int = 1) -> Tensor:
    """[B, max length] long tensor, PAD_ID after each row (one tensor construction)."""
    width = max([len(r) for r in rows] + [min_len])
    return torch.tensor(
        [[*row, *([PAD_ID] * (width - len(row)))] for row in rows], dtype=torch.long
    )


def make_batch(examples: Sequence[Example], src_vocab: Vocab, tgt_vocab: Vocab) -> Batch:
    src = pad([src_vocab.encode(e.src_tokens) for e in examples])
    tgt_ids = [tgt_vocab.encode(e.tgt_tokens) for e in examples]
    tgt_in = pad([[BOS_ID, *ids] for ids in tgt_ids])
    tgt_out = pad([[*ids, EOS_ID] for ids in tgt_ids])
    return Batch(src, src != PAD_ID, tgt_in, tgt_out, tgt_out != PAD_ID, examples)


def bucket_width(width: int, multiple: int) -> int:
    """``width`` rounded up to a multiple of ``multiple`` (at least one multiple)."""
    return max(-(-width // multiple), 1) * multiple


def pad_batch(batch: Batch, rows: int, src_width: int, tgt_width: int) -> Batch:
    """``batch`` grown to ``rows`` sentences of ``src_width`` / ``tgt_width`` positions (a
    static shape). Positions past a sentence are padding, as before; the filler rows are a
    one-token source (``<unk>``) and ``<s>`` with no target token: every attention row keeps a
    real key (no all-masked softmax, no NaN) and no filler position reaches the loss, so the
    summed loss and every gradient are the unpadded batch's."""
    b, s = batch.src.shape
    t = batch.tgt_in.shape[1]
    if rows < b or src_width < s or tgt_width < t:
        raise ValueError(
            f"cannot pad a [{b}, {s}, {t}] batch to [{rows}, {src_width}, {tgt_width}]"
        )

    def grown(x: Tensor, width: int, pad: int | bool, filler: int | bool) -> Tensor:
        out = x.new_full((rows, width), pad)
        out[:b, : x.shape[1]] = x
        out[b:, 0] = filler
        return out

    return Batch(
        grown(batch.src, src_width, PAD_ID, UNK_ID),
        grown(batch.src_mask, src_width, False, True),
        grown(batch.tgt_in, tgt_width, PAD_ID, BOS_ID),
        grown(batch.tgt_out, tgt_width, PAD_ID, PAD_ID),
        grown(batch.tgt_mask, tgt_width, False, False),
        batch.examples,
    )


def example_cost(example: Example) -> tuple[int, int]:
    """(source length, target length + 1 for </s>): the padded widths an example needs."""
    return len(example.src_tokens), len(example.tgt_tokens) + 1


def plan_batches(
    examples: Sequence[Example],
    batch_size: int = 64,
    batch_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    bucket: bool = True,
    width_multiple: int = 1,
) -> list[list[int]]:
    """One epoch as lists of example indices (every index exactly once).

    With ``batch_tokens > 0`` a batch holds as many sentences as fit in that many padded
    source + target tokens (``n * (max_src + max_tgt)``; a single longer sentence gets a
    batch of its own) and ``batch_size`` is ignored; otherwise a batch holds ``batch_size``
    sentences. With ``bucket`` sentences of
    similar length go together: sorted by length inside shuffled pools of about 100
    batches, so batches stay random across pools while padding stays low. With
    ``width_multiple > 1`` the token budget counts widths rounded up to that multiple (the
    widths ``pad_batch`` gives them under static shapes), so a padded batch stays in budget.
    """
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if shuffle:
        rng.shuffle(order)
    # an array split knows its lengths without building an example (attnlab.data.arrays)
    lengths = getattr(examples, "costs", None)
    costs = lengths() if lengths is not None else [example_cost(e) for e in examples]
    if batch_tokens > 0:
        mean = sum(s + t for s, t in costs) / max(len(costs), 1)
        pool_size = max(int(batch_tokens / max(mean, 1.0)), 1) * 100
    else:
        pool_size = batch_size * 100
    batches: list[list[int]] = []
    for start in range(0, len(order), pool_size):
        pool = order[start : start + pool_size]
        if bucket:
            pool.sort(key=lambda i: (costs[i][0] + costs[i][1], costs[i][0]))
        current: list[int] = []
        max_src = max_tgt = 0
        for i in pool:
            src_len, tgt_len = costs[i]
            new_src, new_tgt = max(max_src, src_len), max(max_tgt, tgt_len)
            if batch_tokens > 0:
                width = new_src + new_tgt
                if width_multiple > 1:
                    width = bucket_width(new_src, width_multiple) + bucket_width(
                        new_tgt, width_multiple
                    )
                full = bool(current) and (len(current) + 1) * width > batch_tokens
            else:
                full = len(current) >= batch_size
            if full:
                batches.append(current)
                current, new_src, new_tgt = [], src_len, tgt_len
            current.append(i)
            max_src, max_tgt = new_src, new_tgt
        if current:
            batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def iterate_batches(
    examples: Sequence[Example],
    batch_size: int = 64,
    batch_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    bucket: bool = True,
) -> Iterator[list[Example]]:
    """One epoch of batches of examples (see ``plan_batches`` for the rules)."""
    for idx in plan_batches(examples, batch_size, batch_tokens, shuffle, seed, bucket):
        yield [examples[i] for i in idx]


def padding_fraction(examples: Sequence[Example], batches: Sequence[Sequence[int]]) -> float:
    """Share of padded positions (source + target incl. </s>) over an epoch of batches."""
    real = padded = 0
    for idx in batches:
        costs = [example_cost(examples[i]) for i in idx]
        real += sum(s + t for s, t in costs)
        padded += len(costs) * (max(s for s, _ in costs) + max(t for _, t in costs))
    return 1.0 - real / padded if padded else 0.0
