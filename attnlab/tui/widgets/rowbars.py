"""One attention row as a horizontal bar chart, with the uniform level 1/S marked.

Used while stepping through decoding: the row of the current target token, one bar per
source token. A bar that barely passes the ``┆`` marker is no better than uniform attention.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(fraction: float, width: int) -> str:
    """A bar of ``fraction`` (0..1) of ``width`` cells with eighth-block resolution."""
    eighths = int(round(min(max(fraction, 0.0), 1.0) * width * 8))
    full, part = divmod(eighths, 8)
    text = "█" * full + (BLOCKS[part] if part else "")
    return text.ljust(width)


def row_bars(
    weights: Sequence[float], labels: Sequence[str], width: int = 30, title: str = ""
) -> Text:
    """Render one attention row: ``label ███▌     ┆   0.42`` per source token."""
    text = Text()
    if title:
        text.append(title + "\n", style="bold")
    n = len(weights)
    if n == 0:
        return text
    label_w = min(max((len(str(t)) for t in labels), default=1), 10)
    uniform = 1.0 / n
    mark = min(int(round(uniform * width)), width - 1)
    for i, weight in enumerate(weights):
        label = str(labels[i]) if i < len(labels) else ""
        cells = list(bar(float(weight), width))
        if cells[mark] == " ":
            cells[mark] = "┆"
        text.append(label[:label_w].rjust(label_w) + " ")
        text.append("".join(cells))
        text.append(f" {float(weight):.2f}\n")
    text.append(" " * (label_w + 1) + "┆ = uniform 1/S = " + f"{uniform:.2f}", style="dim")
    return text
