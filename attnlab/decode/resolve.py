"""Which strategy a DecodeConfig runs, and every check of the decoding options.

Above the registry (attnlab.decode.strategy) and the built-in strategies: importing this
module imports the modules whose decorators register greedy, beam, diverse-beam, sampling
and mbr, so the registry module itself never imports its members back.
"""

from __future__ import annotations

import attnlab.decode.mbr  # noqa: F401  (registers mbr)
import attnlab.decode.strategies  # noqa: F401  (registers greedy, beam, diverse-beam, sampling)
from attnlab.attention_map import NORM_SIGNED
from attnlab.config import DecodeConfig
from attnlab.decode.penalties import LENGTH_NORMS
from attnlab.decode.strategy import DECODERS, DecodingStrategy, derived_decoder
from attnlab.errors import AttnlabError, unknown_choice


def resolve_decoder(cfg: DecodeConfig) -> DecodingStrategy:
    """The strategy ``cfg`` runs, its options checked; one-line AttnlabError otherwise."""
    name = cfg.decoder or derived_decoder(cfg)
    if name not in DECODERS:
        raise unknown_choice("decode.decoder", name, DECODERS.names())
    strategy = DECODERS.get(name).factory()
    if cfg.decoder:
        flag = strategy.conflict(cfg)
        if flag is not None:
            raise AttnlabError(
                f"decode.decoder={name} contradicts {flag} (which selects "
                f"{derived_decoder(cfg)}); drop one of them"
            )
    _check_common(cfg)
    strategy.check(cfg)
    return strategy


def check_decode(cfg: DecodeConfig) -> None:
    """Every check of the decoding options (config validation and each search run it)."""
    resolve_decoder(cfg)


def check_coverage(cfg: DecodeConfig, variant: str | None, normalisation: str) -> None:
    """The coverage penalty (decode.beta) against the cross-attention it sums: log(min(Σ_t a,
    1)) needs non-negative weights. Sparse and sub-stochastic rows are fine (exact zeros hit
    the floor, COVERAGE_FLOOR); signed rows (differential attention) are refused."""
    if cfg.beta != 0.0 and normalisation == NORM_SIGNED:
        raise AttnlabError(
            f"decode.beta={cfg.beta}: the coverage penalty needs non-negative attention; "
            f"{variant or 'the cross-attention'}'s weights are signed (set decode.beta=0)"
        )


def _check_common(cfg: DecodeConfig) -> None:
    """Options every strategy shares; a DecodeConfig built in code skips config validation."""
    if cfg.length_norm not in LENGTH_NORMS:
        raise unknown_choice("decode.length_norm", cfg.length_norm, LENGTH_NORMS)
    if cfg.beam < 1:
        raise AttnlabError(f"decode.beam={cfg.beam} must be at least 1")
    if cfg.nbest < 1:
        raise AttnlabError(f"decode.nbest={cfg.nbest} must be at least 1")
