"""Test-only attention variants whose weights are not softmax rows, one per normalisation.

Each is a MultiHeadBase whose ``attend`` returns its own weights (so the SDPA path is off and
the KV cache works as for every multi-head variant); the context is weights @ values:

- ``test-signed``: softmax(s) − softmax(−s) (rows sum to 0: negative where scores are low);
- ``test-sub-stochastic``: ½·softmax(s) (rows sum to ½: half the mass goes nowhere);
- ``test-sparse``: one-hot on each row's arg-max allowed key (exact zeros elsewhere).

``registered()`` adds them to the registry for a test and removes them after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

from attnlab.nn.attention import ATTENTION, AttentionSpec
from attnlab.nn.attention.base import (
    NORM_SIGNED,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    masked_softmax,
)
from attnlab.nn.attention.multihead import TRANSFORMER_ROLES, MultiHeadBase, key_pattern_mask

SIGNED, SUB, SPARSE = "test-signed", "test-sub-stochastic", "test-sparse"


def _spec(name: str, normalisation: str) -> AttentionSpec:
    return AttentionSpec(
        name=name,
        roles=TRANSFORMER_ROLES,
        formula=f"a test variant with {normalisation} rows",
        complexity="O(Tq·Tk·d)",
        known_for="tests only",
        normalisation=normalisation,
    )


class _Own(MultiHeadBase):
    """Computes weights with ``weigh`` from the masked scores; context = weights @ v."""

    def weigh(self, scores: Tensor, mask: Tensor) -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        tq, tk = q.shape[2], k.shape[2]
        mask = key_pattern_mask(key_mask, self.allowed(tq, tk, causal, q.device))
        weights = self.weigh(self.scores(q, k), mask)
        return weights @ v, weights


class SignedTest(_Own):
    spec = _spec(SIGNED, NORM_SIGNED)

    def weigh(self, scores: Tensor, mask: Tensor) -> Tensor:
        return masked_softmax(scores, mask) - masked_softmax(-scores, mask)


class SubStochasticTest(_Own):
    spec = _spec(SUB, NORM_SUB_STOCHASTIC)

    def weigh(self, scores: Tensor, mask: Tensor) -> Tensor:
        return 0.5 * masked_softmax(scores, mask)


class SparseTest(_Own):
    spec = _spec(SPARSE, NORM_SPARSE)

    def weigh(self, scores: Tensor, mask: Tensor) -> Tensor:
        mask = mask.expand_as(scores)
        best = scores.masked_fill(~mask, float("-inf")).argmax(dim=-1, keepdim=True)
        one_hot = torch.zeros_like(scores).scatter(-1, best, 1.0)
        return one_hot * mask.any(dim=-1, keepdim=True)  # an all-masked row stays zero


VARIANTS = (SignedTest, SubStochasticTest, SparseTest)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """The three variants in the registry for the duration of a ``with`` block."""
    for cls in VARIANTS:
        ATTENTION.add(cls.spec.name, cls, cls.spec)
    try:
        yield
    finally:
        for cls in VARIANTS:
            ATTENTION.remove(cls.spec.name)
