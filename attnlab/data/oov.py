"""Source tokens a model has no id for: they read as ``<unk>``, whatever was typed.

``translate`` and the lab's Inspect call these so that a sentence outside the vocabulary
(German typed into a digits model, a rare word on Multi30k) is never decoded without a word:
``unknown_tokens`` lists them, ``unknown_warning`` says so in one line, and
``source_labels`` is what a map's columns should read (``<unk>`` where the model saw it).
"""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.data.vocab import UNK, Vocab


def unknown_tokens(vocab: Vocab, tokens: Sequence[str]) -> list[str]:
    """The distinct tokens of ``tokens`` that ``vocab`` has no id for, in order of first use
    (a literal ``<unk>`` typed by the user is one of the vocabulary's tokens, not unknown)."""
    return list(dict.fromkeys(t for t in tokens if t not in vocab.stoi))


def source_labels(vocab: Vocab, tokens: Sequence[str]) -> list[str]:
    """Column labels of a map over ``tokens``: each token as the model read it."""
    return [t if t in vocab.stoi else UNK for t in tokens]


def unknown_warning(unknown: Sequence[str], limit: int = 8) -> str:
    """One line (no ``warning:`` prefix: the caller adds its own) naming the unknown tokens."""
    if not unknown:
        return ""
    shown = ", ".join(unknown[:limit]) + (
        f" … (+{len(unknown) - limit})" if len(unknown) > limit else ""
    )
    noun = "token is" if len(unknown) == 1 else "tokens are"
    return f"{len(unknown)} source {noun} not in the model's vocabulary and read as {UNK}: {shown}"
