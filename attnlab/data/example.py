"""One parallel sentence pair and a dataset's three splits."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Example:
    src_tokens: tuple[str, ...]
    tgt_tokens: tuple[str, ...]
    # Raw text, used as the BLEU reference (detokenised scoring). For toy tasks the
    # tokens joined by spaces.
    src_text: str = ""
    tgt_text: str = ""
    # Gold alignment for toy tasks: alignment[t] = source index that target token t copies.
    alignment: tuple[int, ...] | None = None


@dataclass
class Splits:
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    stats: dict[str, object] = field(default_factory=dict)  # e.g. skipped empty lines

    def split(self, name: str) -> list[Example]:
        from attnlab.errors import unknown_choice

        if name in ("dev", "val", "valid"):
            return self.dev
        if name in ("train", "test"):
            return getattr(self, name)
        raise unknown_choice("split", name, ["train", "dev", "test"])
