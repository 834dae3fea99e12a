"""Padded tensor batches and (length-bucketed) batch iteration."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.data.example import Example
from attnlab.data.vocab import BOS_ID, EOS_ID, PAD_ID, Vocab


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
    width = max([len(r) for r in rows] + [min_len])
    out = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def make_batch(examples: Sequence[Example], src_vocab: Vocab, tgt_vocab: Vocab) -> Batch:
    src = pad([src_vocab.encode(e.src_tokens) for e in examples])
    tgt_ids = [tgt_vocab.encode(e.tgt_tokens) for e in examples]
    tgt_in = pad([[BOS_ID, *ids] for ids in tgt_ids])
    tgt_out = pad([[*ids, EOS_ID] for ids in tgt_ids])
    return Batch(src, src != PAD_ID, tgt_in, tgt_out, tgt_out != PAD_ID, examples)


def iterate_batches(
    examples: Sequence[Example],
    batch_size: int = 64,
    batch_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    bucket: bool = True,
) -> Iterator[list[Example]]:
    """One epoch of batches.

    With ``batch_tokens > 0`` a batch holds as many sentences as fit in that many (padded)
    source+target tokens; with ``bucket`` sentences of similar length go together (sorted
    inside shuffled pools of 100 batches), which keeps padding low.
    """
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if shuffle:
        rng.shuffle(order)

    def length(i: int) -> int:
        e = examples[i]
        return max(len(e.src_tokens), len(e.tgt_tokens) + 1)

    pool_size = (batch_size if batch_tokens <= 0 else max(batch_tokens // 16, 1)) * 100
    batches: list[list[int]] = []
    for start in range(0, len(order), pool_size):
        pool = order[start : start + pool_size]
        if bucket:
            pool.sort(key=length)
        current: list[int] = []
        longest = 0
        for i in pool:
            longest_if_added = max(longest, length(i))
            too_big = (
                len(current) >= batch_size
                if batch_tokens <= 0
                else current and longest_if_added * (len(current) + 1) * 2 > batch_tokens
            )
            if too_big:
                batches.append(current)
                current, longest_if_added = [], length(i)
            current.append(i)
            longest = longest_if_added
        if current:
            batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    for idx in batches:
        yield [examples[i] for i in idx]
