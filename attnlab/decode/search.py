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

from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.decode.beam import beam_search
from attnlab.decode.greedy import greedy_decode, max_lengths
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.penalties import LENGTH_NORMS
from attnlab.decode.sampling import sample_decode
from attnlab.errors import AttnlabError, unknown_choice
from attnlab.nn.seq2seq import Seq2Seq


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
