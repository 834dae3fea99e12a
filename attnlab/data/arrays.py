"""A split held as integer arrays, each ``Example`` built only when it is read.

100,000 examples of 512 tokens are 51 million token strings as tuples: building them takes
longer than drawing them (tens of seconds), and training reads a batch at a time. So a split
of a generated task is one array of symbol ids per side, ragged rows as (flat ids, row
offsets), with the symbol table; ``examples[i]`` builds that one ``Example``. It is a
``Sequence[Example]`` (len, index, slice, iterate, compare with a list), so every consumer of
a list of examples reads it unchanged; the hot consumers ask it directly for what they need
(``costs`` for batching, ``symbols_used`` for the alphabet check) without building examples.
The same arrays are what the task cache stores (attnlab.data.task_cache).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from attnlab.data.example import Example

Ragged = tuple[np.ndarray, np.ndarray]  # (flat values, offsets [rows + 1])


def ragged(matrix: np.ndarray) -> Ragged:
    """A [rows, width] matrix as ragged rows of equal width."""
    rows, width = matrix.shape
    return matrix.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width


def ragged_rows(rows: Sequence[Sequence[int]]) -> Ragged:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.fromiter((v for r in rows for v in r), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def _compact(values: np.ndarray) -> np.ndarray:
    """The smallest integer dtype that holds ``values`` (symbol ids and positions are small)."""
    if values.size == 0:
        return values.astype(np.int32)
    return values.astype(np.min_scalar_type(int(values.max())) if values.min() >= 0 else np.int64)


class ArrayExamples(Sequence[Example]):
    """Examples as ragged id arrays over ``symbols`` (see the module doc)."""

    def __init__(
        self,
        symbols: Sequence[str],
        src: Ragged,
        tgt: Ragged,
        alignment: Ragged | None = None,
    ):
        self.symbols = list(symbols)
        self._table = np.array(self.symbols, dtype=object)
        self.src = (_compact(src[0]), src[1])
        self.tgt = (_compact(tgt[0]), tgt[1])
        self.alignment = None if alignment is None else (_compact(alignment[0]), alignment[1])
        if len(self.src[1]) != len(self.tgt[1]):
            raise ValueError("source and target rows differ in number")

    @classmethod
    def from_examples(cls, examples: Sequence[Example]) -> ArrayExamples:
        """The arrays of examples built one by one (a task that draws tuples)."""
        symbols = sorted({t for e in examples for t in (*e.src_tokens, *e.tgt_tokens)})
        index = {s: i for i, s in enumerate(symbols)}
        src = ragged_rows([[index[t] for t in e.src_tokens] for e in examples])
        tgt = ragged_rows([[index[t] for t in e.tgt_tokens] for e in examples])
        aligned = bool(examples) and all(e.alignment is not None for e in examples)
        alignment = ragged_rows([e.alignment or () for e in examples]) if aligned else None
        return cls(symbols, src, tgt, alignment)

    def __len__(self) -> int:
        return len(self.src[1]) - 1

    def _row(self, side: Ragged, i: int) -> np.ndarray:
        return side[0][side[1][i] : side[1][i + 1]]

    def _example(self, i: int) -> Example:
        src = tuple(self._table[self._row(self.src, i)].tolist())
        tgt = tuple(self._table[self._row(self.tgt, i)].tolist())
        align = None if self.alignment is None else tuple(self._row(self.alignment, i).tolist())
        return Example(src, tgt, " ".join(src), " ".join(tgt), align)

    @overload
    def __getitem__(self, i: int) -> Example: ...
    @overload
    def __getitem__(self, i: slice) -> list[Example]: ...
    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._example(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(i)
        return self._example(j)

    def __iter__(self) -> Iterator[Example]:
        return (self._example(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ArrayExamples):
            return list(self) == list(other)
        return isinstance(other, list) and list(self) == other

    def __add__(self, other: Sequence[Example]) -> list[Example]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Example]) -> list[Example]:
        return [*other, *self]

    __hash__ = None  # type: ignore[assignment]  # mutable-looking, as a list

    def __repr__(self) -> str:
        return f"ArrayExamples({len(self)} examples)"

    def costs(self) -> list[tuple[int, int]]:
        """(source length, target length + 1) per example, as batching.example_cost gives."""
        src = np.diff(self.src[1])
        tgt = np.diff(self.tgt[1]) + 1
        return list(zip(src.tolist(), tgt.tolist(), strict=True))

    def symbols_used(self) -> tuple[set[str], set[str]]:
        """The symbols that occur on each side."""
        return (
            {self.symbols[i] for i in np.unique(self.src[0]).tolist()},
            {self.symbols[i] for i in np.unique(self.tgt[0]).tolist()},
        )
