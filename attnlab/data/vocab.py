"""Token <-> id mapping with fixed special ids (pad 0, unk 1, bos 2, eos 3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class Vocab:
    def __init__(self, tokens: Sequence[str]):
        """``tokens`` excludes the specials; they are always ids 0-3."""
        self.itos: list[str] = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(
        cls, sentences: Iterable[Sequence[str]], min_freq: int = 1, max_size: int = 0
    ) -> Vocab:
        """Most frequent first (ties by first appearance, so the order is deterministic)."""
        counts: Counter[str] = Counter()
        for sentence in sentences:
            counts.update(sentence)
        tokens = [t for t, c in counts.most_common() if c >= min_freq]
        if max_size > 0:
            tokens = tokens[:max_size]
        return cls(tokens)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str], bos: bool = False, eos: bool = False) -> list[int]:
        ids = [self.stoi.get(t, UNK_ID) for t in tokens]
        return ([BOS_ID] if bos else []) + ids + ([EOS_ID] if eos else [])

    def decode(self, ids: Iterable[int], strip: bool = True) -> list[str]:
        """ids -> tokens; with ``strip`` stop at eos and drop pad/bos."""
        out = []
        for i in ids:
            i = int(i)
            if strip and i == EOS_ID:
                break
            if strip and i in (PAD_ID, BOS_ID):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return out

    def to_list(self) -> list[str]:
        return list(self.itos)

    @classmethod
    def from_list(cls, itos: Sequence[str]) -> Vocab:
        if not isinstance(itos, (list, tuple)) or not all(isinstance(t, str) for t in itos):
            raise ValueError("a vocabulary must be a list of token strings")  # damaged meta
        if tuple(itos[:4]) != SPECIALS:
            raise ValueError("vocabulary must start with the special tokens <pad> <unk> <s> </s>")
        # A repeated token (or a special past id 3) would shift every later id: the weights'
        # rows would meet the wrong tokens, silently.
        first: dict[str, int] = {}
        for index, token in enumerate(itos):
            if token in first:
                raise ValueError(f"token {token!r} appears twice (ids {first[token]} and {index})")
            first[token] = index
        return cls(itos[4:])
