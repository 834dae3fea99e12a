"""A signed matrix (e.g. A − B attention) as a Rich table on a diverging blue-white-red scale.

Blue cells: B larger; red: A larger; white: equal. The scale is symmetric, ±max |value|.
No textual or torch import (like attnlab.viz.heatmap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.style import Style
from rich.table import Table
from rich.text import Text

NEGATIVE, ZERO, POSITIVE = (0x21, 0x66, 0xAC), (0xF7, 0xF7, 0xF7), (0xB2, 0x18, 0x2B)


def diverging_rgb(value: float, vmax: float) -> tuple[int, int, int]:
    """Colour of ``value`` on −vmax (blue) … 0 (white) … vmax (red)."""
    if vmax <= 0 or value != value:
        return ZERO
    f = min(abs(value) / vmax, 1.0)
    end = POSITIVE if value > 0 else NEGATIVE
    mixed = (round(z + (e - z) * f) for z, e in zip(ZERO, end, strict=True))
    return tuple(mixed)  # type: ignore[return-value]


def render_diverging(
    matrix: Sequence[Sequence[float]] | Any,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    title: str | None = None,
    row_notes: Sequence[str] | None = None,
) -> Table:
    rows = matrix.tolist() if hasattr(matrix, "tolist") else [list(r) for r in matrix]
    vmax = max((abs(v) for row in rows for v in row), default=0.0)
    # ×100, as the A and B maps print their weights (issue 44: they were ×100, A − B not)
    table = Table(
        title=title,
        caption=f"×100 · blue: B larger · red: A larger · scale ±{vmax * 100:.1f}",
    )
    table.add_column("")
    for label in col_labels:
        table.add_column(Text(str(label)), justify="right")
    if row_notes is not None:
        table.add_column("")
    for i, (label, row) in enumerate(zip(row_labels, rows, strict=False)):
        cells = []
        for value in row:
            rgb = diverging_rgb(value, vmax)
            cells.append(
                Text(
                    f"{value * 100:+.1f}",
                    style=Style(bgcolor="#{:02x}{:02x}{:02x}".format(*rgb), color="#000000"),
                )
            )
        extra = [Text(row_notes[i])] if row_notes is not None else []
        table.add_row(Text(str(label)), *cells, *extra)
    return table
