"""A dataset's value: splits + vocabularies + tokenizers, and its portable meta.

Below both builders (attnlab.data.dataset for toy tasks, attnlab.data.corpus for parallel
corpora), so neither imports the other back. ``dataset.meta()`` is plain JSON (vocabularies
as lists, tokenizers as dicts); a checkpoint stores it, and ``Dataset.from_meta(meta)``
rebuilds vocabularies and tokenizers with no data files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnlab.config import DataConfig
from attnlab.data.example import Splits
from attnlab.data.tokenizers import Tokenizer, tokenizer_from_dict
from attnlab.data.vocab import Vocab
from attnlab.errors import AttnlabError

META_VERSION = 1


@dataclass
class Dataset:
    splits: Splits
    src_vocab: Vocab
    tgt_vocab: Vocab
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    has_alignment: bool
    name: str  # the toy task's name, or "corpus"
    # A language model's token ids (attnlab.data.lm.TokenStreams; None: sentence pairs).
    streams: Any = None

    @property
    def stats(self) -> dict[str, object]:
        return self.splits.stats

    def tokenize_source(self, text: str) -> list[str]:
        """Raw source text -> source tokens (what ``translate`` feeds the model)."""
        return self.src_tokenizer.encode(text)

    def detokenize_target(self, tokens: Sequence[str]) -> str:
        """Target tokens -> text comparable with the raw references (``Example.tgt_text``)."""
        return self.tgt_tokenizer.decode(tokens)

    def meta(self) -> dict[str, Any]:
        return {
            "version": META_VERSION,
            "task": self.name,
            "has_alignment": self.has_alignment,
            "src_vocab": self.src_vocab.to_list(),
            "tgt_vocab": self.tgt_vocab.to_list(),
            "src_tokenizer": self.src_tokenizer.to_dict(),
            "tgt_tokenizer": self.tgt_tokenizer.to_dict(),
        }

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> Dataset:
        """Vocabularies and tokenizers from ``meta()``; the splits are empty."""
        src_vocab, tgt_vocab, src_tok, tgt_tok = vocab_and_tokenizers_from_meta(meta)
        return cls(
            Splits([], [], []),
            src_vocab,
            tgt_vocab,
            src_tok,
            tgt_tok,
            bool(meta.get("has_alignment", False)),
            str(meta.get("task", "")),
        )


def vocab_and_tokenizers_from_meta(
    meta: dict[str, Any],
) -> tuple[Vocab, Vocab, Tokenizer, Tokenizer]:
    try:
        key = "src_vocab"
        src_vocab = Vocab.from_list(meta[key])
        key = "tgt_vocab"
        tgt_vocab = Vocab.from_list(meta[key])
        key = "tokenizers"
        src_tok = tokenizer_from_dict(meta["src_tokenizer"])
        tgt_tok = tokenizer_from_dict(meta["tgt_tokenizer"])
    except KeyError as err:
        raise AttnlabError(
            f"dataset metadata lacks {err.args[0]!r} (not an attnlab checkpoint?)"
        ) from None
    except ValueError as err:
        raise AttnlabError(f"dataset metadata is invalid: {key}: {err}") from None
    return src_vocab, tgt_vocab, src_tok, tgt_tok


def build_vocabs(
    src_sentences: list[Sequence[str]], tgt_sentences: list[Sequence[str]], cfg: DataConfig
) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies (one shared vocabulary with ``data.shared_vocab``)."""
    if cfg.shared_vocab:
        shared = Vocab.build([*src_sentences, *tgt_sentences], cfg.min_freq, cfg.max_vocab)
        return shared, shared
    return (
        Vocab.build(src_sentences, cfg.min_freq, cfg.max_vocab),
        Vocab.build(tgt_sentences, cfg.min_freq, cfg.max_vocab),
    )
