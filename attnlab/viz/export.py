"""SVG / HTML files of what attnlab prints: a recording colour console (truecolor, the given
width) and rich's own exporters. ``attnlab translate --export``, ``attnlab compare --export``
and the lab's Inspect export key all go through here, so a map looks the same in each.
No textual or torch import (like the rest of attnlab.viz)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

EXPORT_SUFFIXES = (".svg", ".html")


def recording_console(width: int) -> Console:
    """A console that records what is printed as a colour terminal would show it."""
    return Console(
        file=io.StringIO(),
        record=True,
        force_terminal=True,
        color_system="truecolor",
        width=width,
        highlight=False,
    )


def save_recording(console: Console, path: Path, title: str) -> Path:
    """What ``console`` recorded, as SVG (``.svg``) or HTML (anything else), written whole."""
    from attnlab.runs import write_output_text

    path = Path(path)
    svg = path.suffix.lower() == ".svg"
    text = console.export_svg(title=title, clear=False) if svg else console.export_html(clear=False)
    write_output_text(path, text)
    return path


def export_heatmap(
    matrix: Sequence[Sequence[float]] | Any,
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    stem: Path,
    width: int = 120,
    normalisation: str = "softmax",
    selected: Any = None,
) -> list[Path]:
    """``stem``.svg and ``stem``.html of one map, drawn by attnlab.viz.heatmap.render_heatmap
    (the renderer of ``attnlab translate --show-attention``), as its ``normalisation`` asks
    (and with ``selected``'s cells marked ``▪``, when given)."""
    from attnlab.viz.heatmap import render_heatmap

    console = recording_console(width)
    drawn = render_heatmap(
        matrix,
        list(rows),
        list(cols),
        title=title,
        max_width=width,
        normalisation=normalisation,
        selected=selected,
    )
    console.print(drawn)
    stem = Path(stem)
    return [save_recording(console, stem.with_name(stem.name + s), title) for s in EXPORT_SUFFIXES]
