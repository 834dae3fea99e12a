"""Minimum Bayes risk (MBR) decoding over sampled or beam candidates.

For each sentence, ``decode.mbr_candidates`` candidates come from the model, batched over
sentences by the existing searches (``decode.mbr_source = sample``: ancestral sampling with
the ``decode.temperature/top_k/top_p/seed`` settings; ``beam``: the n-best of a beam of that
width). The candidates double as pseudo-references, and the output is the candidate with the
highest expected utility

    E[u](c_i) = 1/(N-1) · Σ_{j≠i} u(c_i, c_j)

(uniform weights over the other N-1 candidates, as in Eikema & Aziz 2020, arXiv:2005.10283,
and Freitag et al. 2022, arXiv:2111.09388; a candidate drawn twice counts twice, which is
how sampling weights by probability). ``u`` is sacrebleu's sentence-level chrF or BLEU
(``decode.mbr_utility``), hypothesis c_i against reference c_j, on the text ``to_text``
gives (token ids joined by spaces without it). The list comes back ranked by E[u]; ties keep
the search's order (model score). ``Hypothesis.score`` is E[u] (0-100), ``log_prob`` stays
the model's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.decode.beam import beam_search
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.sampling import sample_decode
from attnlab.decode.strategies import Sampling
from attnlab.decode.strategy import (
    DecodeParam,
    DecoderSpec,
    DecodingStrategy,
    ToText,
    register_decoder,
)
from attnlab.errors import AttnlabError, unknown_choice

MBR_SOURCES = ("sample", "beam")
MBR_UTILITIES = ("chrf", "bleu")

Utility = Callable[[str, str], float]  # (hypothesis, reference) -> 0..100


def sentence_utility(name: str) -> Utility:
    """sacrebleu sentence-level chrF (β = 2) or BLEU (effective order, exp smoothing)."""
    from sacrebleu.metrics import BLEU, CHRF

    metric = CHRF() if name == "chrf" else BLEU(effective_order=True)
    return lambda hyp, ref: float(metric.sentence_score(hyp, [ref]).score)


def expected_utilities(texts: Sequence[str], utility: Utility) -> list[float]:
    """E[u](c_i) = mean over j ≠ i of u(c_i, c_j); a lone candidate gets 0.

    Each distinct (hypothesis, reference) text pair is scored once: samples repeat a lot.
    """
    n = len(texts)
    if n < 2:
        return [0.0] * n
    cache: dict[tuple[str, str], float] = {}
    out = []
    for i, hyp in enumerate(texts):
        total = 0.0
        for j, ref in enumerate(texts):
            if j != i:
                key = (hyp, ref)
                if key not in cache:
                    cache[key] = utility(hyp, ref)
                total += cache[key]
        out.append(total / (n - 1))
    return out


def mbr_rank(
    candidates: list[Hypothesis], texts: Sequence[str], utility: Utility
) -> list[Hypothesis]:
    """Candidates ranked by expected utility (stable: ties keep the given order)."""
    gains = expected_utilities(texts, utility)
    order = sorted(range(len(candidates)), key=lambda i: -gains[i])
    return [dataclasses.replace(candidates[i], score=gains[i]) for i in order]


def ids_as_text(ids: Sequence[int]) -> str:
    return " ".join(str(i) for i in ids)


@register_decoder
class MBR(DecodingStrategy):
    spec = DecoderSpec(
        name="mbr",
        description="minimum Bayes risk: the candidate with the best mean chrF/BLEU "
        "against the other candidates",
        params=(
            DecodeParam.of("mbr_candidates", "candidates (and pseudo-references) per sentence"),
            DecodeParam.of("mbr_source", "where candidates come from"),
            DecodeParam.of("mbr_utility", "sentence-level utility"),
            DecodeParam.of("nbest", "hypotheses kept (ranked by expected utility)"),
            DecodeParam.of("temperature", "sampling temperature (mbr_source = sample)"),
            DecodeParam.of("top_k", "top-k filter (mbr_source = sample)"),
            DecodeParam.of("top_p", "nucleus mass (mbr_source = sample)"),
            DecodeParam.of("seed", "sampling seed (mbr_source = sample)"),
        ),
        nbest=True,
        paper="Eikema & Aziz 2020, arXiv:2005.10283; Freitag et al. 2022, arXiv:2111.09388",
    )

    def check(self, cfg: DecodeConfig) -> None:
        if cfg.mbr_candidates < 1:
            raise AttnlabError(f"decode.mbr_candidates={cfg.mbr_candidates} must be at least 1")
        if cfg.nbest > cfg.mbr_candidates:
            raise AttnlabError(
                f"decode.nbest={cfg.nbest} exceeds decode.mbr_candidates={cfg.mbr_candidates}"
            )
        if cfg.mbr_source not in MBR_SOURCES:
            raise unknown_choice("decode.mbr_source", cfg.mbr_source, MBR_SOURCES)
        if cfg.mbr_utility not in MBR_UTILITIES:
            raise unknown_choice("decode.mbr_utility", cfg.mbr_utility, MBR_UTILITIES)
        if cfg.mbr_source == "sample":
            Sampling().check(self.candidate_config(cfg))

    def rows_per_sentence(self, cfg: DecodeConfig) -> int:
        return cfg.mbr_candidates

    def candidate_config(self, cfg: DecodeConfig) -> DecodeConfig:
        """The sampling / beam config that yields ``mbr_candidates`` candidates per sentence."""
        n = cfg.mbr_candidates
        if cfg.mbr_source == "beam":
            return dataclasses.replace(cfg, decoder="", sample=False, beam=n, nbest=n, groups=1)
        return dataclasses.replace(cfg, decoder="", sample=True, num_samples=n, nbest=n, beam=1)

    def candidates(
        self,
        model: Any,
        src: Tensor,
        src_mask: Tensor,
        cfg: DecodeConfig,
        budget: Tensor,
        need_attention: bool,
    ) -> list[list[Hypothesis]]:
        """Per sentence its candidates, from one batched search over all sentences."""
        cand = self.candidate_config(cfg)
        if cfg.mbr_source == "beam":
            return beam_search(model, src, src_mask, cand, budget, need_attention)
        return sample_decode(model, src, src_mask, cand, budget, need_attention)

    def search(
        self,
        model: Any,
        src: Tensor,
        src_mask: Tensor,
        cfg: DecodeConfig,
        budget: Tensor,
        *,
        need_attention: bool = False,
        to_text: ToText | None = None,
        tokens_only: bool = False,
    ) -> list[list[Hypothesis]]:
        text = to_text or ids_as_text
        utility = sentence_utility(cfg.mbr_utility)
        out = []
        for cands in self.candidates(model, src, src_mask, cfg, budget, need_attention):
            ranked = mbr_rank(cands, [text(h.tokens) for h in cands], utility)
            out.append(ranked[: cfg.nbest])
        return out

    def configure(self, cfg: DecodeConfig, width: int) -> DecodeConfig:
        n = max(cfg.mbr_candidates, width, 2)
        return dataclasses.replace(
            cfg, decoder=self.spec.name, sample=False, beam=1, nbest=max(width, 1), mbr_candidates=n
        )
