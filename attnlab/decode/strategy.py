"""Decoding strategies as a registry: one class + one registration per search.

A strategy is a ``DecodingStrategy`` subclass with a ``spec`` (``DecoderSpec``: name,
one-line description, the ``decode.*`` keys it reads with their ranges, whether it returns
an n-best list and attention) registered in ``DECODERS``, like attention variants in
``ATTENTION``. Other packages add strategies through the entry-point group
``attnlab.decoders`` (``name = "package.module:ClassName"``).

Which strategy runs is ``decode.decoder``; the default "" derives it from the older flags,
so presets and flags written before the registry keep their meaning:
``decode.sample`` -> sampling, ``decode.beam > 1`` with ``decode.groups > 1`` -> diverse-beam,
``decode.beam > 1`` -> beam, otherwise greedy. An explicit decoder together with a flag that
selects another search is a one-line error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from attnlab.config import CHOICES, RANGES, DecodeConfig
from attnlab.decode.hypothesis import Hypothesis
from attnlab.registry import Registry

# ids (no <s>/</s>) -> the text a text-level utility compares (e.g. MBR's chrF).
ToText = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class DecodeParam:
    """A ``decode.<key>`` a strategy reads; range and choices are the config's own."""

    key: str
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    @classmethod
    def of(cls, key: str, help: str) -> DecodeParam:
        """The parameter with the range / choices ``attnlab.config`` checks it against."""
        low, high = RANGES.get(f"decode.{key}", (None, None))
        return cls(key, help, low, high, CHOICES.get(f"decode.{key}", ()))

    def describe(self) -> str:
        """e.g. ``beam [1..1000]`` or ``mbr_utility {chrf|bleu}``."""
        if self.choices:
            return f"{self.key} {{{'|'.join(self.choices)}}}"
        if self.low is None and self.high is None:
            return self.key
        low = "" if self.low is None else f"{self.low:g}"
        high = "" if self.high is None else f"{self.high:g}"
        return f"{self.key} [{low}..{high}]"


@dataclass(frozen=True)
class DecoderSpec:
    """Registry metadata shown by ``attnlab decoders`` and the lab's Inspect menu."""

    name: str
    description: str  # one line
    params: tuple[DecodeParam, ...] = ()  # its own keys; every strategy reads COMMON_PARAMS
    nbest: bool = False  # returns more than one hypothesis per sentence
    attention: bool = True  # hypotheses can carry their cross-attention
    paper: str = ""


# The step budget, </s> blocking and the scores' penalties: read by every built-in strategy.
COMMON_PARAMS = (
    DecodeParam.of("max_len_ratio", "step budget: ceil(ratio·|X|) + const"),
    DecodeParam.of("max_len_const", "step budget constant"),
    DecodeParam.of("min_len", "no </s> before this many tokens"),
    DecodeParam.of("alpha", "length penalty exponent α"),
    DecodeParam.of("beta", "coverage penalty weight β"),
    DecodeParam.of("length_norm", "length penalty form"),
    DecodeParam.of("batch_size", "sentences per batch (0: fill batch_rows)"),
    DecodeParam.of("batch_rows", "decoder rows per step"),
)


class DecodingStrategy:
    """Base class of every search. Subclasses set ``spec`` and implement ``search``."""

    spec: ClassVar[DecoderSpec]

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
        """Per sentence of src[B, S] its hypotheses, best first; budget[B] = steps allowed.

        ``to_text`` turns ids into text for strategies that compare texts; ``tokens_only``
        says the caller reads tokens (and attention) only, so work that changes nothing
        but the reported scores may be skipped.
        """
        raise NotImplementedError  # pragma: no cover - interface

    def check(self, cfg: DecodeConfig) -> None:
        """This strategy's own option checks (one-line AttnlabErrors)."""

    def conflict(self, cfg: DecodeConfig) -> str | None:
        """A ``decode.*`` setting that selects another search, or None.

        By default ``decode.sample`` and ``decode.beam > 1`` do (they select sampling / beam).
        """
        if cfg.sample:
            return "decode.sample=true"
        if cfg.beam > 1:
            return f"decode.beam={cfg.beam}"
        return None

    def rows_per_sentence(self, cfg: DecodeConfig) -> int:
        """Decoder rows one sentence takes per step (sets how many sentences fill a batch)."""
        return 1

    def configure(self, cfg: DecodeConfig, width: int) -> DecodeConfig:
        """``cfg`` set to run this strategy with ``width`` hypotheses (the lab's width box)."""
        return dataclasses.replace(cfg, decoder=self.spec.name, sample=False, beam=1, nbest=1)


DECODERS: Registry[type[DecodingStrategy]] = Registry("decoder")
DECODERS.enable_plugins("attnlab.decoders")


def register_decoder(cls: type[DecodingStrategy]) -> type[DecodingStrategy]:
    """Class decorator: register a strategy under ``cls.spec.name``."""
    DECODERS.add(cls.spec.name, cls, cls.spec)
    return cls


def derived_decoder(cfg: DecodeConfig) -> str:
    """The strategy the older flags select (what ``decode.decoder = ""`` means)."""
    if cfg.sample:
        return "sampling"
    if cfg.beam > 1:
        return "diverse-beam" if cfg.groups > 1 else "beam"
    return "greedy"
