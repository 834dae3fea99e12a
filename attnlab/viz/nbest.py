"""An n-best list as a Rich table: rank, hypothesis, log-prob, lp, cp and final score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:  # no torch import at run time (the TUI imports this on start-up)
    from attnlab.decode.hypothesis import Hypothesis


def render_nbest(
    hypotheses: Sequence[Hypothesis],
    texts: Sequence[str] | None = None,
    title: str | None = None,
) -> Table:
    """One row per hypothesis, in the given (ranked) order.

    ``texts`` are the hypotheses as text (detokenised); by default the token ids. A
    hypothesis cut by the length budget (no </s>) is marked with "…".
    """
    if texts is not None and len(texts) != len(hypotheses):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(texts)} texts")
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right", style="bold")
    table.add_column("hypothesis", overflow="fold", ratio=1)
    for name in ("log P", "lp", "cp", "score"):
        table.add_column(name, justify="right", no_wrap=True)
    for rank, hyp in enumerate(hypotheses, start=1):
        text = texts[rank - 1] if texts is not None else " ".join(str(t) for t in hyp.tokens)
        if not hyp.finished:
            text += " …"
        table.add_row(
            str(rank),
            text,
            f"{hyp.log_prob:.3f}",
            f"{hyp.length_penalty:.3f}",
            f"{hyp.coverage_penalty:.3f}",
            f"{hyp.score:.3f}",
        )
    return table
