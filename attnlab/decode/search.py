"""One entry point for every search, configured by ``DecodeConfig`` (the ``decode.*`` keys).

- ``decode.sample = true``: ancestral sampling (temperature, top-k, top-p), ``num_samples``
  hypotheses per sentence, ranked by score.
- ``decode.beam > 1``: batched beam search (diverse when ``decode.groups > 1``), the
  ``decode.nbest`` best hypotheses per sentence.
- otherwise greedy: one hypothesis per sentence.

Each sentence may take ceil(max_len_ratio * |X|) + max_len_const steps (</s> included);
</s> is blocked before ``min_len`` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.data.batching import pad
from attnlab.decode.beam import beam_search
from attnlab.decode.greedy import greedy_decode, max_lengths
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.penalties import LENGTH_NORMS
from attnlab.decode.sampling import sample_decode
from attnlab.errors import AttnlabError, unknown_choice
from attnlab.nn.seq2seq import PAD_ID, Seq2Seq


def check_decode_config(cfg: DecodeConfig) -> None:
    """The decoding options that would make a search meaningless; one-line AttnlabErrors."""
    if cfg.length_norm not in LENGTH_NORMS:
        raise unknown_choice("decode.length_norm", cfg.length_norm, LENGTH_NORMS)
    if cfg.beam < 1:
        raise AttnlabError(f"decode.beam={cfg.beam} must be at least 1")
    if cfg.groups < 1 or cfg.beam % cfg.groups:
        raise AttnlabError(f"decode.beam={cfg.beam} must be a multiple of decode.groups={cfg.groups}")
    if cfg.nbest < 1 or (not cfg.sample and cfg.nbest > cfg.beam):
        raise AttnlabError(f"decode.nbest={cfg.nbest} must be between 1 and decode.beam={cfg.beam}")
    if cfg.sample:
        if cfg.temperature <= 0:
            raise AttnlabError(f"decode.temperature={cfg.temperature} must be greater than 0")
        if not 0.0 < cfg.top_p <= 1.0:
            raise AttnlabError(f"decode.top_p={cfg.top_p} must be in (0, 1]")
        if cfg.top_k < 0:
            raise AttnlabError(f"decode.top_k={cfg.top_k} must be 0 (off) or positive")
        if cfg.num_samples < 1:
            raise AttnlabError(f"decode.num_samples={cfg.num_samples} must be at least 1")


def decode_batch(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    need_attention: bool = False,
) -> list[list[Hypothesis]]:
    """Decode src[B, S]; per sentence a list of hypotheses, best first."""
    check_decode_config(cfg)
    budget = max_lengths(src_mask, cfg.max_len_ratio, cfg.max_len_const)  # [B]
    was_training = model.training
    model.eval()
    try:
        if cfg.sample:
            return sample_decode(model, src, src_mask, cfg, budget, need_attention)
        if cfg.beam > 1:
            return beam_search(model, src, src_mask, cfg, budget, need_attention)
        hyps = greedy_decode(
            model,
            src,
            src_mask,
            budget,
            need_attention=need_attention,
            min_len=cfg.min_len,
            alpha=cfg.alpha,
            beta=cfg.beta,
            length_norm=cfg.length_norm,
        )
        return [[h] for h in hyps]
    finally:
        model.train(was_training)


def sentences_per_batch(cfg: DecodeConfig) -> int:
    """``decode.batch_size``, or with 0 the sentences that fill ``decode.batch_rows`` decoder rows.

    Each sentence takes ``beam`` rows (``num_samples`` when sampling) in every step. Rows,
    not sentences, set the cost of a step: the [rows, V] output projection, log-softmax
    and top-k; past a few hundred rows those tensors outgrow the CPU caches.
    """
    if cfg.batch_size > 0:
        return cfg.batch_size
    per_sentence = cfg.num_samples if cfg.sample else cfg.beam
    return max(1, cfg.batch_rows // max(1, per_sentence))


def decode_sorted(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    need_attention: bool = False,
    device: torch.device | str | None = None,
) -> list[list[Hypothesis]]:
    """Decode many id sequences; per sentence its hypotheses, in input order.

    Sentences are sorted by length and decoded ``sentences_per_batch(cfg)`` at a time, so a
    batch carries little padding and its sentences finish at about the same step.
    """
    if device is None:
        weight = next(model.parameters(), None)
        device = weight.device if weight is not None else "cpu"
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[Hypothesis]] = [[] for _ in sources]
    size = sentences_per_batch(cfg)
    for start in range(0, len(order), size):
        idx = order[start : start + size]
        src = pad([sources[i] for i in idx]).to(device)
        for i, nbest in zip(idx, decode_batch(model, src, src != PAD_ID, cfg, need_attention), strict=True):
            out[i] = nbest
    return out
