"""One entry point for every search: the strategy ``decode.decoder`` names in the registry.

``attnlab.decode.strategy.DECODERS`` holds the strategies (``attnlab decoders`` lists them):
greedy, beam, diverse-beam, sampling and MBR built in, more through the entry-point group
``attnlab.decoders``. With ``decode.decoder = ""`` the older flags choose: ``decode.sample``
-> sampling, ``decode.beam > 1`` -> beam (diverse-beam when ``decode.groups > 1``), else
greedy.

Each sentence may take ceil(max_len_ratio * |X|) + max_len_const steps (</s> included);
</s> is blocked before ``min_len`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.data.batching import pad
from attnlab.decode.greedy import max_lengths
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.resolve import check_decode, resolve_decoder  # loads the built-ins
from attnlab.decode.strategy import DECODERS, ToText
from attnlab.nn.seq2seq import PAD_ID, Seq2Seq

__all__ = [
    "DECODERS",
    "check_decode",
    "decode_batch",
    "decode_sorted",
    "sentences_per_batch",
    "sorted_batches",
]


def decode_batch(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    need_attention: bool = False,
    *,
    to_text: ToText | None = None,
    tokens_only: bool = False,
) -> list[list[Hypothesis]]:
    """Decode src[B, S]; per sentence a list of hypotheses, best first.

    ``to_text`` (ids -> text) serves strategies that compare texts (MBR's utility);
    ``tokens_only``: the caller reads tokens and attention, not scores (see the strategies).
    """
    strategy = resolve_decoder(cfg)
    budget = max_lengths(src_mask, cfg.max_len_ratio, cfg.max_len_const)  # [B]
    was_training = model.training
    model.eval()
    try:
        return strategy.search(
            model,
            src,
            src_mask,
            cfg,
            budget,
            need_attention=need_attention,
            to_text=to_text,
            tokens_only=tokens_only,
        )
    finally:
        model.train(was_training)


def sentences_per_batch(cfg: DecodeConfig) -> int:
    """``decode.batch_size``, or with 0 the sentences that fill ``decode.batch_rows`` decoder rows.

    Each sentence takes the strategy's ``rows_per_sentence`` rows in every step (1 greedy,
    ``beam``, ``num_samples`` when sampling, ``mbr_candidates`` for MBR). Rows,
    not sentences, set the cost of a step: the [rows, V] output projection, log-softmax
    and top-k; past a few hundred rows those tensors outgrow the CPU caches.
    """
    if cfg.batch_size > 0:
        return cfg.batch_size
    per_sentence = resolve_decoder(cfg).rows_per_sentence(cfg)
    return max(1, cfg.batch_rows // max(1, per_sentence))


def sorted_batches(lengths: Sequence[int], size: int) -> Iterator[list[int]]:
    """Indices sorted by length (stable), ``size`` at a time: little padding per batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    size = max(1, size)
    for start in range(0, len(order), size):
        yield order[start : start + size]


def decode_sorted(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    cfg: DecodeConfig,
    need_attention: bool = False,
    device: torch.device | str | None = None,
    *,
    batch_size: int = 0,
    to_text: ToText | None = None,
    tokens_only: bool = False,
) -> list[list[Hypothesis]]:
    """Decode many id sequences; per sentence its hypotheses, in input order.

    Sentences are sorted by length and decoded ``batch_size`` (default
    ``sentences_per_batch(cfg)``) at a time, so a batch carries little padding and its
    sentences finish at about the same step.
    """
    if device is None:
        weight = next(model.parameters(), None)
        device = weight.device if weight is not None else "cpu"
    out: list[list[Hypothesis]] = [[] for _ in sources]
    size = batch_size or sentences_per_batch(cfg)
    for idx in sorted_batches([len(s) for s in sources], size):
        src = pad([sources[i] for i in idx]).to(device)
        nbests = decode_batch(
            model, src, src != PAD_ID, cfg, need_attention, to_text=to_text, tokens_only=tokens_only
        )
        for i, nbest in zip(idx, nbests, strict=True):
            out[i] = nbest
    return out
