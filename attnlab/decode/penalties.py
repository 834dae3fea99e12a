"""Scores shared by every search: token constraints, length and coverage penalties.

GNMT (Wu et al. 2016, "Google's Neural Machine Translation System", eq. 14):

    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
    lp(Y)   = ((5 + |Y|) / 6) ** alpha                       (length_norm = "gnmt")
    cp(X;Y) = beta * sum_i log(min(sum_t a[t, i], 1.0))

fairseq normalises by the plain length instead: lp(Y) = |Y| ** alpha (length_norm = "fairseq").
|Y| counts the scored tokens, so a finished hypothesis counts its </s>.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.errors import unknown_choice
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID

LENGTH_NORMS = ("gnmt", "fairseq")
# Floor for the coverage sum so a source word that got exactly zero weight (sparse
# attention, or a masked-out head) gives a large finite penalty instead of -inf.
COVERAGE_FLOOR = 1e-10


def step_log_probs(logits: Tensor, step: int, min_len: int = 0, in_place: bool = False) -> Tensor:
    """Log-probabilities for one decoding step with the output constraints applied.

    <pad> and <s> are never produced; </s> is blocked while fewer than ``min_len`` tokens
    were generated (``step`` tokens so far). Blocking happens before the softmax, so the
    distribution is renormalised over the tokens that may be produced.
    logits[N, V] -> log_probs[N, V] (float32). With ``in_place`` float32 ``logits`` are
    overwritten (blocked columns, then the log-softmax itself): a search that owns the
    model's fresh logits saves two [N, V] blocks per step; the values are the same.
    """
    if in_place and logits.dtype == torch.float32:
        logits[:, PAD_ID] = float("-inf")
        logits[:, BOS_ID] = float("-inf")
        if step < min_len:
            logits[:, EOS_ID] = float("-inf")
        # Into the logits' own storage: no fresh [N, V] block to fault in (the same values).
        return torch.log_softmax(logits, dim=-1, out=logits)
    blocked = torch.zeros(logits.size(-1), device=logits.device)  # [V] 0 or -inf
    blocked[PAD_ID] = blocked[BOS_ID] = float("-inf")
    if step < min_len:
        blocked[EOS_ID] = float("-inf")
    return torch.log_softmax(logits.float() + blocked, dim=-1)  # out of place: logits untouched


def length_penalty(lengths: Tensor, alpha: float, norm: str = "gnmt") -> Tensor:
    """lp(Y) per hypothesis; lengths[N] -> [N] float64. Exactly 1.0 when alpha = 0."""
    lengths = lengths.to(torch.float64)
    if alpha == 0.0:
        return torch.ones_like(lengths)
    if norm == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    if norm == "fairseq":
        return lengths.clamp(min=1.0) ** alpha
    raise unknown_choice("decode.length_norm", norm, LENGTH_NORMS)


def coverage_penalty(attention: Tensor, src_mask: Tensor, beta: float) -> Tensor:
    """cp(X; Y) per hypothesis.

    attention[N, T, S]: rows of steps not taken must already be zero; src_mask[N, S] bool
    (padded source positions do not count). Returns [N] float64; 0.0 when beta = 0.
    """
    return coverage_from_totals(attention.to(torch.float64).sum(dim=1), src_mask, beta)


def coverage_from_totals(coverage: Tensor, src_mask: Tensor, beta: float) -> Tensor:
    """cp from the total weight each source word received: coverage[N, S] -> [N] float64."""
    if beta == 0.0:
        return torch.zeros(coverage.size(0), dtype=torch.float64, device=coverage.device)
    per_word = torch.log(coverage.to(torch.float64).clamp(min=COVERAGE_FLOOR, max=1.0))  # [N, S]
    return beta * (per_word * src_mask.to(torch.float64)).sum(dim=-1)


def final_score(log_prob: Tensor, lp: Tensor, cp: Tensor) -> Tensor:
    """s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y); all [N]."""
    return log_prob.to(torch.float64) / lp + cp
