"""Ancestral sampling with temperature, top-k and top-p (nucleus) filtering.

Each step draws y_t ~ softmax(filter(logits / temperature)), where top-k keeps the k most
likely tokens (Fan et al. 2018) and top-p keeps the smallest set of most likely tokens whose
probability reaches p (Holtzman et al. 2020, "The Curious Case of Neural Text
Degeneration"). Draws come from a ``torch.Generator`` seeded with ``decode.seed``, so a
run is reproducible. Every sentence gets ``decode.num_samples`` samples, decoded together
in one batch; reported log-probs and scores are the model's own (temperature 1, unfiltered).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.decode.greedy import decode_one_path
from attnlab.decode.hypothesis import Hypothesis
from attnlab.nn.seq2seq import Seq2Seq


def filter_log_probs(
    log_probs: Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """The sampling distribution's log-probs (renormalised); log_probs[N, V] -> [N, V].

    Tokens outside the top-k or outside the nucleus get -inf. The nucleus is the shortest
    prefix of the tokens sorted by probability whose mass reaches ``top_p``; the most
    likely token is always kept.
    """
    scaled = log_probs / temperature
    if top_k > 0 and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # [N, 1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        probs = torch.softmax(scaled, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
        outside = mass_before >= top_p
        outside[:, 0] = False
        scaled = scaled.masked_fill(outside.scatter(1, order, outside), float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def draw(
    log_probs: Tensor,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Tensor:
    """One token per row of log_probs[N, V] drawn from the filtered distribution -> [N]."""
    filtered = filter_log_probs(log_probs, temperature, top_k, top_p)
    return torch.multinomial(filtered.exp(), 1, generator=generator).squeeze(1)


def make_sampler(cfg: DecodeConfig, generator: torch.Generator):
    """A TokenPicker that draws from the filtered distribution with ``generator``."""

    def pick(log_probs: Tensor, rows: Tensor) -> Tensor:
        return draw(log_probs, generator, cfg.temperature, cfg.top_k, cfg.top_p)

    return pick


@torch.no_grad()
def sample_decode(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    budget: Tensor,
    need_attention: bool = False,
) -> list[list[Hypothesis]]:
    """``cfg.num_samples`` samples per sentence of src[B, S], each list ranked by score."""
    generator = torch.Generator(device=src.device)
    generator.manual_seed(cfg.seed)
    copies = cfg.num_samples
    hyps = decode_one_path(
        model,
        src,
        src_mask,
        budget,
        make_sampler(cfg, generator),
        need_attention=need_attention,
        min_len=cfg.min_len,
        alpha=cfg.alpha,
        beta=cfg.beta,
        length_norm=cfg.length_norm,
        copies=copies,
    )
    out = [hyps[b * copies : (b + 1) * copies] for b in range(src.size(0))]
    return [sorted(samples, key=lambda h: h.score, reverse=True) for samples in out]
