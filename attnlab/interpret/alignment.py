"""Word alignments from attention, Pharaoh files and the alignment error rate.

**Pharaoh format** (one line per sentence pair): space-separated links ``i-j`` (sure) and
``i?j`` (possible). By default ``i`` is the 0-based *source* token index and ``j`` the 0-based
*target* token index ("src-tgt", the usual fast_align / GIZA++ order);
``order="tgt-src"`` reads ``i`` as the target index. Indices count the model's tokens (the
file must be tokenised the way the model tokenises). An empty line: no links.

**AER** (Och & Ney 2003): with A the predicted links, S the sure and P the possible gold
links (P ⊇ S: sure links are also possible), AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|).
Summed over a corpus before the ratio.

**Alignments from a map** [T, S] (rows = target tokens): arg-max per target row, one link
per target token. **Shift-Att** (Chen et al. 2020, arXiv:2004.14837): y_t is aligned with
the arg-max of the row where y_t is the decoder *input* (the step predicting y_{t+1}), i.e.
rows 1..T of the teacher-forced [T+1, S] map whose row 0 reads ``<s>``; the layer is the
one with the lowest AER on the gold file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from attnlab.errors import AttnlabError
from attnlab.regular_files import read_bounded

Link = tuple[int, int]  # (source index, target index)
_LINK = re.compile(r"^(\d+)([-?])(\d+)$")
ORDERS = ("src-tgt", "tgt-src")


@dataclass
class GoldAlignment:
    sure: set[Link] = field(default_factory=set)
    possible: set[Link] = field(default_factory=set)  # always ⊇ sure


def parse_pharaoh_line(line: str, order: str = "src-tgt", where: str = "") -> GoldAlignment:
    if order not in ORDERS:
        raise AttnlabError(f'unknown alignment order "{order}"; valid: {", ".join(ORDERS)}')
    gold = GoldAlignment()
    for token in line.split():
        match = _LINK.match(token)
        if match is None:
            raise AttnlabError(
                f'{where}: "{token}" is not a Pharaoh link; valid: i-j (sure) or i?j (possible)'
            )
        a, kind, b = int(match.group(1)), match.group(2), int(match.group(3))
        link = (a, b) if order == "src-tgt" else (b, a)
        gold.possible.add(link)
        if kind == "-":
            gold.sure.add(link)
    return gold


PHARAOH_MAX_BYTES = 256 << 20  # gold alignments of a test set are a few MB at most


def read_pharaoh(path: Path, order: str = "src-tgt") -> list[GoldAlignment]:
    path = Path(path)
    try:  # a regular file (a FIFO never blocks), of bounded size
        lines = read_bounded(path, PHARAOH_MAX_BYTES, "gold alignment file").decode().splitlines()
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise AttnlabError(f"{path}: not a UTF-8 text file") from None
    except OSError as err:
        raise AttnlabError(f"{path}: cannot read ({err.strerror})") from None
    return [parse_pharaoh_line(line, order, f"{path}:{n}") for n, line in enumerate(lines, 1)]


def write_pharaoh(alignments: Iterable[GoldAlignment]) -> str:
    """Pharaoh text (src-tgt order), sure links as i-j, possible-only links as i?j."""
    lines = []
    for gold in alignments:
        links = [f"{s}-{t}" for s, t in sorted(gold.sure)]
        links += [f"{s}?{t}" for s, t in sorted(gold.possible - gold.sure)]
        lines.append(" ".join(links))
    return "\n".join(lines) + "\n"


def argmax_links(attention: Tensor) -> set[Link]:
    """[T, S] map -> {(arg-max source, target)} for every target row."""
    if attention.numel() == 0:
        return set()
    return {(int(s), t) for t, s in enumerate(attention.argmax(dim=-1).tolist())}


def shift_att_links(attention: Tensor, n_target: int) -> set[Link]:
    """Shift-Att: [T+1, S] teacher-forced map (row r reads input r, row 0 = <s>) -> links of
    the ``n_target`` target tokens, token t taken from row t + 1."""
    return argmax_links(attention[1 : n_target + 1])


def aer_counts(predicted: set[Link], gold: GoldAlignment) -> tuple[int, int, int, int]:
    """(|A∩S|, |A∩P|, |A|, |S|) with P taken as P ∪ S."""
    possible = gold.possible | gold.sure
    return len(predicted & gold.sure), len(predicted & possible), len(predicted), len(gold.sure)


def aer(pairs: Sequence[tuple[set[Link], GoldAlignment]]) -> float | None:
    """Corpus AER over (predicted, gold) pairs; None when nothing is predicted or sure."""
    a_s = a_p = n_a = n_s = 0
    for predicted, gold in pairs:
        c = aer_counts(predicted, gold)
        a_s, a_p, n_a, n_s = a_s + c[0], a_p + c[1], n_a + c[2], n_s + c[3]
    if n_a + n_s == 0:
        return None
    return 1.0 - (a_s + a_p) / (n_a + n_s)


def gold_from_positions(alignment: Sequence[int]) -> GoldAlignment:
    """A toy task's gold (one source index per target token) as sure links."""
    links = {(int(s), t) for t, s in enumerate(alignment) if s >= 0}
    return GoldAlignment(sure=set(links), possible=set(links))


@dataclass
class AlignmentRow:
    target: str
    source: str
    source_index: int
    weight: float


def alignment_table(
    attention: Tensor, rows: Sequence[str], cols: Sequence[str]
) -> list[AlignmentRow]:
    """Per target token its arg-max source token and that weight ([T, S] map)."""
    table = []
    weights, index = attention.max(dim=-1)
    for t, label in enumerate(rows[: attention.shape[0]]):
        j = int(index[t])
        table.append(AlignmentRow(label, cols[j] if j < len(cols) else "?", j, float(weights[t])))
    return table


def links_per_layer(cross: Tensor, n_target: int, shift: bool) -> list[set[Link]]:
    """cross [L, H, T+1, S] (head-averaged per layer) -> links per layer."""
    out = []
    for layer in cross.mean(dim=1):
        out.append(shift_att_links(layer, n_target) if shift else argmax_links(layer[:n_target]))
    return out


def as_tensor(rows: Sequence[Sequence[float]]) -> Tensor:
    return torch.tensor(rows, dtype=torch.float64)
