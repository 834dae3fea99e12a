"""The built-in searches as registered strategies: greedy, beam, diverse beam, sampling.

Each class only forwards to its search function (``greedy_decode``, ``beam_search``,
``sample_decode``) with the config unchanged, so a run selected by the older flags decodes
bit for bit as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from attnlab.config import DecodeConfig
from attnlab.decode.beam import beam_search
from attnlab.decode.greedy import greedy_decode
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.sampling import sample_decode
from attnlab.decode.strategy import (
    DecodeParam,
    DecoderSpec,
    DecodingStrategy,
    ToText,
    register_decoder,
)
from attnlab.errors import AttnlabError

_P = DecodeParam.of


def _check_nbest_within_beam(cfg: DecodeConfig) -> None:
    if cfg.nbest > cfg.beam:
        raise AttnlabError(f"decode.nbest={cfg.nbest} must be between 1 and decode.beam={cfg.beam}")


@register_decoder
class Greedy(DecodingStrategy):
    spec = DecoderSpec(
        name="greedy",
        description="the arg-max token at every step; one hypothesis per sentence",
    )

    def check(self, cfg: DecodeConfig) -> None:
        _check_nbest_within_beam(cfg)

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
        # alpha / beta / length_norm change only the reported score (and beta asks the model
        # for attention weights): a caller that reads tokens only gets the plain pass.
        scored = not tokens_only
        hyps = greedy_decode(
            model,
            src,
            src_mask,
            budget,
            need_attention=need_attention,
            min_len=cfg.min_len,
            alpha=cfg.alpha if scored else 0.0,
            beta=cfg.beta if scored else 0.0,
            length_norm=cfg.length_norm,
        )
        return [[h] for h in hyps]


@register_decoder
class Beam(DecodingStrategy):
    spec = DecoderSpec(
        name="beam",
        description="batched beam search with GNMT length and coverage penalties",
        params=(_P("beam", "beam size K"), _P("nbest", "hypotheses kept")),
        nbest=True,
        paper="Wu et al. 2016, arXiv:1609.08144 (penalties)",
    )

    def check(self, cfg: DecodeConfig) -> None:
        _check_nbest_within_beam(cfg)

    def conflict(self, cfg: DecodeConfig) -> str | None:
        if cfg.sample:
            return "decode.sample=true"
        return f"decode.groups={cfg.groups}" if cfg.groups > 1 else None

    def rows_per_sentence(self, cfg: DecodeConfig) -> int:
        return cfg.beam

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
        return beam_search(model, src, src_mask, cfg, budget, need_attention)

    def configure(self, cfg: DecodeConfig, width: int) -> DecodeConfig:
        if width <= 1:  # a beam of one is greedy (as the older flags have it)
            return dataclasses.replace(
                cfg, decoder="greedy", beam=1, nbest=1, groups=1, sample=False
            )
        return dataclasses.replace(
            cfg, decoder=self.spec.name, beam=width, nbest=width, groups=1, sample=False
        )


@register_decoder
class DiverseBeam(Beam):
    spec = DecoderSpec(
        name="diverse-beam",
        description="beam search in G groups with a Hamming diversity penalty between groups",
        params=(
            _P("beam", "beam size K"),
            _P("groups", "groups G (K a multiple of G)"),
            _P("diversity", "Hamming diversity strength λ"),
            _P("nbest", "hypotheses kept"),
        ),
        nbest=True,
        paper="Vijayakumar et al. 2016, arXiv:1610.02424",
    )

    def check(self, cfg: DecodeConfig) -> None:
        if cfg.groups < 1 or cfg.beam % cfg.groups:
            raise AttnlabError(
                f"decode.beam={cfg.beam} must be a multiple of decode.groups={cfg.groups}"
            )
        _check_nbest_within_beam(cfg)

    def conflict(self, cfg: DecodeConfig) -> str | None:
        return "decode.sample=true" if cfg.sample else None

    def configure(self, cfg: DecodeConfig, width: int) -> DecodeConfig:
        groups = cfg.groups if cfg.groups > 1 and width % cfg.groups == 0 else min(width, 2)
        width = max(width, groups) - max(width, groups) % groups
        return dataclasses.replace(
            cfg, decoder=self.spec.name, beam=width, nbest=width, groups=groups, sample=False
        )


@register_decoder
class Sampling(DecodingStrategy):
    spec = DecoderSpec(
        name="sampling",
        description="ancestral sampling with temperature, top-k and top-p, ranked by score",
        params=(
            _P("num_samples", "samples per sentence"),
            _P("temperature", "sampling temperature"),
            _P("top_k", "keep the k most likely tokens (0 = off)"),
            _P("top_p", "nucleus mass (1 = off)"),
            _P("seed", "generator seed"),
            _P("nbest", "hypotheses kept"),
        ),
        nbest=True,
        paper="Holtzman et al. 2020, arXiv:1904.09751 (top-p)",
    )

    def check(self, cfg: DecodeConfig) -> None:
        if cfg.temperature <= 0:
            raise AttnlabError(f"decode.temperature={cfg.temperature} must be greater than 0")
        if not 0.0 < cfg.top_p <= 1.0:
            raise AttnlabError(f"decode.top_p={cfg.top_p} must be in (0, 1]")
        if cfg.top_k < 0:
            raise AttnlabError(f"decode.top_k={cfg.top_k} must be 0 (off) or positive")
        if cfg.num_samples < 1:
            raise AttnlabError(f"decode.num_samples={cfg.num_samples} must be at least 1")
        # The beam bound is kept: configs setting both were valid before the registry.
        if cfg.nbest > max(cfg.num_samples, cfg.beam):
            raise AttnlabError(
                f"decode.nbest={cfg.nbest} exceeds decode.num_samples={cfg.num_samples}"
            )

    def conflict(self, cfg: DecodeConfig) -> str | None:
        return None  # decode.sample wins over decode.beam, as with the older flags

    def rows_per_sentence(self, cfg: DecodeConfig) -> int:
        return cfg.num_samples

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
        return sample_decode(model, src, src_mask, cfg, budget, need_attention)

    def configure(self, cfg: DecodeConfig, width: int) -> DecodeConfig:
        width = max(width, 1)
        return dataclasses.replace(
            cfg, decoder=self.spec.name, sample=True, num_samples=width, nbest=width, beam=1
        )
