"""Drawing a chosen attention map on the console: the heatmap (numbers when piped or
``NO_COLOR``) and / or its arg-max alignment table, for ``translate`` (and ``--at-step``)."""

from __future__ import annotations

from typing import Any

import click

from attnlab.interpret.maps import ChosenMap


def print_maps(
    console: Any,
    maps: list[ChosenMap | None],
    detailed: bool,
    show_attention: bool,
    show_alignment: bool,
) -> None:
    """Each hypothesis's chosen map (None where not kept) as a heatmap and / or its arg-max
    alignment table."""
    from attnlab.cli.inspect import alignment_renderable, alignment_rows

    for rank, chosen in enumerate(maps, start=1):
        if chosen is None:
            continue
        title = chosen.title if not detailed else f"hypothesis {rank}: {chosen.title}"
        if show_attention:
            print_heatmap(
                console,
                chosen.matrix,
                chosen.rows,
                chosen.cols,
                title,
                chosen.normalisation,
                chosen.selected,
            )
        if show_alignment:
            table = alignment_rows(chosen.matrix, chosen.rows, chosen.cols)
            console.print(alignment_renderable(table, f"alignment from {title}"))


def print_heatmap(
    console: Any,
    matrix: Any,
    rows: list[str],
    cols: list[str],
    title: str,
    normalisation: str = "softmax",
    selected: Any = None,
) -> None:
    from attnlab.viz.heatmap import render_heatmap, render_plain_heatmap

    kind = {"normalisation": normalisation, "selected": selected}
    recording = getattr(console, "recording", None)  # --export: a TeeConsole
    if recording is not None:  # the file shows what a colour terminal shows
        width = recording.width
        recording.print(render_heatmap(matrix, rows, cols, title=title, max_width=width, **kind))
        console = console.console
    # Without colours (a pipe, a file, NO_COLOR) cells would be blank: print the numbers.
    if not console.is_terminal or console.no_color:
        click.echo(render_plain_heatmap(matrix, rows, cols, title=title, **kind))
        return
    console.print(render_heatmap(matrix, rows, cols, title=title, max_width=console.width, **kind))
