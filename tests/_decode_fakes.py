"""Tiny deterministic Seq2Seq models for the decoding tests (no training, no randomness).

``HashModel``: the next-token logits are a pseudo-random function of the whole prefix,
the step and the (unpadded) source, so greedy is not optimal in general, and a sentence
decodes the same alone or inside a padded batch. Cross-attention [B, L, H, S] is a masked
softmax that also depends on the prefix, with distinct layers and heads.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.decode.penalties import step_log_probs
from attnlab.decode.search import decode_batch
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, EncoderOutput, Seq2Seq

HASH_MOD = 1_000_003


class HashModel(Seq2Seq):
    def __init__(
        self,
        vocab: int = 7,
        layers: int = 2,
        heads: int = 2,
        scale: float = 3.0,
        salt: float = 0.0,
        eos_bias: float = 0.0,
    ) -> None:
        super().__init__()
        self.src_vocab_size = 20
        self.tgt_vocab_size = vocab
        self.layers, self.heads, self.scale, self.salt = layers, heads, scale, salt
        self.eos_bias = eos_bias
        self.calls = 0  # number of step() calls

    def encode(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:
        positions = torch.arange(1, src.size(1) + 1, device=src.device)
        # a code of the real tokens only: padding never changes it
        code = ((src * positions) * src_mask).sum(dim=1).to(torch.float64)  # [B]
        states = torch.zeros(src.size(0), src.size(1), 4)
        return EncoderOutput(states=states, mask=src_mask, extras={"code": code, "src": src})

    def start_state(self, enc: EncoderOutput) -> dict[str, Tensor]:
        batch = enc.states.size(0)
        return {
            "prefix": torch.zeros(batch, dtype=torch.long),
            "t": torch.zeros(batch, dtype=torch.long),
        }

    def step(
        self,
        prev_tokens: Tensor,
        state: dict[str, Tensor],
        enc: EncoderOutput,
        need_weights: bool = False,
    ) -> tuple[Tensor, dict[str, Tensor], Tensor | None]:
        self.calls += 1
        # the prefix hash includes the token fed now (BOS at t = 0)
        prefix = (state["prefix"] * 31 + prev_tokens + 1) % HASH_MOD  # [B]
        t = state["t"]
        v = torch.arange(self.tgt_vocab_size, dtype=torch.float64)
        x = (
            prefix.double()[:, None] * 12.9898
            + v[None] * 78.233
            + enc.extras["code"][:, None] * 3.14159
            + t.double()[:, None] * 1.618
            + self.salt
        )
        noise = torch.frac(torch.sin(x).abs() * 43758.5453)  # [B, V] in [0, 1)
        logits = (self.scale * noise).float()
        logits[:, EOS_ID] += self.eos_bias
        cross = None
        if need_weights:
            src = enc.extras["src"].double()  # [B, S]
            lh = torch.arange(self.layers * self.heads, dtype=torch.float64).view(
                1, self.layers, self.heads, 1
            )
            raw = torch.sin(
                src[:, None, None, :] * (1.3 + lh) + prefix.double()[:, None, None, None] * 0.77
            )
            raw = raw.masked_fill(~enc.mask[:, None, None, :], float("-inf"))
            cross = torch.softmax(2.0 * raw, dim=-1).float()  # [B, L, H, S]
        return logits, {"prefix": prefix, "t": t + 1}, cross


def sequence_log_prob(model: Seq2Seq, src: list[int], seq: list[int]) -> float:
    """log P(seq | src) in float64, one unbatched step per token (the reference)."""
    s = torch.tensor([src])
    mask = torch.ones_like(s, dtype=torch.bool)
    enc = model.encode(s, mask)
    state = model.start_state(enc)
    prev = torch.tensor([BOS_ID])
    total = 0.0
    for t, token in enumerate(seq):
        logits, state, _ = model.step(prev, state, enc)
        total += float(step_log_probs(logits.double(), t)[0, token])
        prev = torch.tensor([token])
    return total


def exhaustive_best(
    model: Seq2Seq, src: list[int], max_steps: int, words: list[int]
) -> tuple[list[int], float]:
    """The arg-max over every finished sequence of at most ``max_steps`` steps (</s> included)."""
    best: tuple[list[int], float] = ([], -math.inf)
    for length in range(max_steps):
        for body in itertools.product(words, repeat=length):
            seq = [*body, EOS_ID]
            score = sequence_log_prob(model, src, seq)
            if score > best[1]:
                best = (list(body), score)
    return best


def pad_batch(rows: list[list[int]]) -> tuple[Tensor, Tensor]:
    width = max(len(r) for r in rows)
    src = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r)
    return src, src != 0


def assert_batch_decodes_as_alone(
    model: Seq2Seq, sources: list[list[int]], cfg: DecodeConfig
) -> None:
    """Every sentence of a padded batch gets, through ``decode_batch``, what it gets alone:
    the same n-best tokens, scores to 1e-4, and attention over its own source only."""
    src, mask = pad_batch(sources)
    together = decode_batch(model, src, mask, cfg, need_attention=True)
    for sentence, nbest in zip(sources, together, strict=True):
        s, m = pad_batch([sentence])
        (alone,) = decode_batch(model, s, m, cfg, need_attention=True)
        assert [h.tokens for h in alone] == [h.tokens for h in nbest]
        assert [h.score for h in alone] == pytest.approx([h.score for h in nbest], abs=1e-4)
        assert nbest[0].attention.shape[-1] == len(sentence)
