"""Attention heatmaps as Rich renderables: a pure function of a matrix and its tokens.

Target tokens are rows, source tokens are columns. Column labels are whole tokens written
horizontally and staggered over a few header rows so that they never overlap (or, when even
that does not fit, the columns are numbered and a legend maps numbers to tokens); each
cell is coloured on a sequential (viridis-like) scale from 0 to the matrix maximum, with a
legend below. ``half_block`` packs two target rows into one text row with ``▀``
(foreground = upper row, background = lower row) for an overview of large matrices.

No textual and no torch import here: the CLI prints these, the tests snapshot them, and
the TUI reuses ``heatmap_cell_style`` / ``heatmap_rgb`` and the header layout of
:mod:`attnlab.viz.text` for its own widget. :func:`render_plain_heatmap` is the colourless form
(weights x 100 as aligned integers) for piped output.

Both read the map's ``normalisation`` (attnlab.attention_map): softmax maps are drawn as
above; **signed** maps (differential attention) on the diverging blue-white-red scale of
:mod:`attnlab.viz.diverging`, symmetric ±max |w| and centred on 0; **sub-stochastic** maps get
one more column, ``∅``, the weight each row gave to nothing (1 − row sum); **sparse** maps
draw an exactly-zero weight as ``·`` without colour and count them in the legend.

A ``selected`` mask (a block-sparse variant's, nsa: True where the query read the key because
its block was selected) puts ``▪`` into those cells on their weight colour (the plain form:
after the number) and the legend says so; half-block mode has no room for marks. Without a
mask nothing changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from attnlab.attention_map import (
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    SELECTED_MARK,
    SELECTED_NOTE,
    UNATTENDED_LABEL,
    check_normalisation,
)
from attnlab.viz.diverging import diverging_rgb
from attnlab.viz.text import column_header, column_legend, header_rows, middle_ellipsis

# viridis stops (position, RGB): perceptually ordered, readable on dark and light themes
SCALE_STOPS: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.0, (0x44, 0x01, 0x54)),
    (0.25, (0x3B, 0x52, 0x8B)),
    (0.5, (0x21, 0x91, 0x8C)),
    (0.75, (0x5E, 0xC9, 0x62)),
    (1.0, (0xFD, 0xE7, 0x25)),
)
LEVELS = 101  # the scale is quantised to 101 colours (0.00 .. 1.00 of the maximum)
MAX_ROW_LABEL = 12
MAX_COL_LABEL = 11
MAX_HEADER_ROWS = 4  # staggered label rows before the columns are numbered instead
MAX_CELL = 4  # cells widen up to this (from 2, or 3 with values) when the width allows
LEGEND_WIDTH = 20
HALF_BLOCK = "▀"
ZERO_MARK = "·"  # a sparse map's exact zero


def _interpolate(position: float) -> tuple[int, int, int]:
    for (p0, c0), (p1, c1) in zip(SCALE_STOPS, SCALE_STOPS[1:], strict=False):
        if position <= p1:
            f = 0.0 if p1 == p0 else (position - p0) / (p1 - p0)
            return tuple(round(a + (b - a) * f) for a, b in zip(c0, c1, strict=True))  # type: ignore[return-value]
    return SCALE_STOPS[-1][1]


PALETTE: tuple[tuple[int, int, int], ...] = tuple(
    _interpolate(i / (LEVELS - 1)) for i in range(LEVELS)
)


def heatmap_level(value: float, vmax: float = 1.0) -> int:
    """Palette index 0..100 of ``value`` on a 0..vmax scale (clamped; NaN -> 0)."""
    if value != value or vmax <= 0:  # NaN, or an all-zero matrix
        return 0
    return int(round(min(max(value / vmax, 0.0), 1.0) * (LEVELS - 1)))


def heatmap_rgb(value: float, vmax: float = 1.0) -> tuple[int, int, int]:
    return PALETTE[heatmap_level(value, vmax)]


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _text_colour(rgb: tuple[int, int, int]) -> str:
    # perceived brightness (ITU-R BT.601 weights): dark text on the light end of the scale
    brightness = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 255
    return "#000000" if brightness > 0.5 else "#ffffff"


def heatmap_cell_style(value: float, vmax: float = 1.0) -> Style:
    """Background = the scale colour of ``value``; foreground readable on it."""
    rgb = heatmap_rgb(value, vmax)
    return Style(bgcolor=_hex(rgb), color=_text_colour(rgb))


def diverging_cell_style(value: float, vmax: float) -> Style:
    """A signed weight's cell: blue (< 0) … white (0) … red (> 0) on ±vmax; dark text."""
    return Style(bgcolor=_hex(diverging_rgb(value, vmax)), color="#000000")


def signed_vmax(rows: Iterable[Iterable[float]]) -> float:
    """max |w| of a signed map (1.0 for an all-zero one): the symmetric scale's end."""
    peak = max((abs(v) for row in rows for v in row if v == v), default=0.0)
    return peak if peak > 0 else 1.0


def with_unattended(rows: list[list[float]]) -> list[list[float]]:
    """Each row followed by its unattended mass, max(1 − row sum, 0) (sub-stochastic maps)."""
    return [[*row, max(1.0 - sum(row), 0.0)] for row in rows]


def count_zeros(rows: Iterable[Iterable[float]]) -> tuple[int, int]:
    """(weights exactly 0, weights) of a matrix."""
    values = [v for row in rows for v in row]
    return sum(1 for v in values if v == 0.0), len(values)


def normalisation_note(normalisation: str, rows: list[list[float]]) -> str:
    """What a map's legend adds for its kind ("" for softmax); ``rows`` as drawn."""
    if normalisation == NORM_SIGNED:
        return "signed weights: blue < 0 < red, centred on 0"
    if normalisation == NORM_SUB_STOCHASTIC:
        return f"{UNATTENDED_LABEL} = unattended mass (1 − row sum)"
    if normalisation == NORM_SPARSE:
        zeros, total = count_zeros(rows)
        return f"{ZERO_MARK} = exactly 0 ({zeros} of {total} weights)"
    return ""


def as_mask_rows(selected: Any, n_rows: int, n_cols: int) -> list[list[bool]] | None:
    """A selection mask (tensor, array or nested lists) as rows of bools of the matrix's
    shape; None stays None."""
    if selected is None:
        return None
    if hasattr(selected, "detach"):
        selected = selected.detach().cpu()
    if hasattr(selected, "tolist"):
        selected = selected.tolist()
    rows = [[bool(v) for v in row] for row in selected]
    if len(rows) != n_rows or any(len(row) != n_cols for row in rows):
        raise ValueError(f"selected mask is not {n_rows}x{n_cols} like the matrix")
    return rows


def marked_cell(cell: int) -> str:
    """A selected cell's text: the mark centred in ``cell`` characters."""
    return SELECTED_MARK.center(cell)


def block_max(rows: list[list[float]], factor: int) -> list[list[float]]:
    """Each ``factor`` × ``factor`` block's maximum (the last blocks may be smaller); NaN
    weights are skipped unless a block holds nothing else."""
    out = []
    for i in range(0, len(rows), factor):
        band = rows[i : i + factor]
        width = len(band[0]) if band else 0
        line = []
        for j in range(0, width, factor):
            values = [v for row in band for v in row[j : j + factor] if v == v]
            line.append(max(values) if values else float("nan"))
        out.append(line)
    return out


def _as_rows(matrix: Any) -> list[list[float]]:
    if hasattr(matrix, "detach"):  # a torch tensor, without importing torch
        matrix = matrix.detach().float().cpu()
    if hasattr(matrix, "tolist"):
        matrix = matrix.tolist()
    return [[float(v) for v in row] for row in matrix]


def _fit(label: str, width: int) -> str:
    """``label`` cut to ``width`` characters with an ellipsis in the middle."""
    return middle_ellipsis(label, width)


class Heatmap:
    """A Rich renderable for one attention matrix; build it with :func:`render_heatmap`."""

    def __init__(
        self,
        rows: list[list[float]],
        row_labels: list[str],
        col_labels: list[str],
        title: str | None,
        max_width: int | None,
        half_block: bool,
        show_values: bool,
        vmax: float | None,
        normalisation: str = NORM_SOFTMAX,
        selected: list[list[bool]] | None = None,
    ) -> None:
        self.normalisation = check_normalisation(normalisation)
        self.note = normalisation_note(normalisation, rows)
        # a line of its own under the scale (half blocks have no room for marks)
        self.selected_note = SELECTED_NOTE if selected is not None and not half_block else ""
        if normalisation == NORM_SUB_STOCHASTIC:  # one more column: the unattended mass
            rows, col_labels = with_unattended(rows), [*col_labels, UNATTENDED_LABEL]
            if selected is not None:  # ∅ is no key: never selected
                selected = [[*row, False] for row in selected]
        self.selected = selected
        self.rows = rows
        self.row_labels = row_labels
        self.col_labels = col_labels
        self.title = title
        self.max_width = max_width
        self.half_block = half_block
        self.show_values = show_values
        if normalisation == NORM_SIGNED:  # symmetric: ±max |w|
            self.vmax = float(vmax) if vmax is not None else signed_vmax(rows)
            return
        peak = max((v for row in rows for v in row if v == v), default=0.0)
        self.vmax = float(vmax) if vmax is not None else (peak if peak > 0 else 1.0)

    def _style(self, value: float) -> Style:
        if self.normalisation == NORM_SIGNED:
            return diverging_cell_style(value, self.vmax)
        return heatmap_cell_style(value, self.vmax)

    def _rgb(self, value: float) -> tuple[int, int, int]:
        if self.normalisation == NORM_SIGNED:
            return diverging_rgb(value, self.vmax)
        return heatmap_rgb(value, self.vmax)

    def _blank(self, value: float) -> bool:
        """A sparse map's exact zero: drawn as ``·`` without colour."""
        return self.normalisation == NORM_SPARSE and value == 0.0

    # -- layout ----------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_cols(self) -> int:
        return len(self.col_labels)

    def _label_width(self) -> int:
        if self.half_block:
            labels = self._half_labels(MAX_ROW_LABEL)
        else:
            labels = self.row_labels
        return min(max((len(x) for x in labels), default=0), MAX_ROW_LABEL)

    def layout(self, width: int) -> tuple[int, int]:
        """(cell width, columns shown) that fit in ``width`` characters."""
        budget = max(width - self._label_width() - 1, 1)
        if self.half_block:
            return 1, min(self.n_cols, budget)
        base = 3 if self.show_values else 2
        longest = max((len(x) for x in self.col_labels), default=1)
        wide = min(max(longest + 1, base), MAX_CELL)
        widths = tuple(range(wide, base - 1, -1)) + ((2, 1) if self.show_values else (1,))
        for cell in widths:
            if cell * self.n_cols <= budget:
                return cell, self.n_cols
        cell = widths[-1]
        marker = 2 + len(str(self.n_cols))  # room for the " +k" marker
        return cell, max(min(self.n_cols, (budget - marker) // cell), 1)

    def _half_labels(self, width: int) -> list[str]:
        labels = []
        for i in range(0, len(self.row_labels), 2):
            pair = self.row_labels[i : i + 2]
            labels.append(_fit("/".join(pair), width))
        return labels

    # -- rich protocol -------------------------------------------------------------------
    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = self.max_width or options.max_width
        cell, shown = self.layout(min(width, options.max_width))
        used = self._label_width() + 1 + cell * shown + (3 if shown < self.n_cols else 0)
        header = self._header_plain(cell, shown, width)[0]
        used = max(used, len(self._legend_text().plain), len(self.title or ""))
        used = max(used, len(self.selected_note))
        used = max(used, self._label_width() + 1 + max((len(x) for x in header), default=0))
        return Measurement(min(used, options.max_width), min(used, options.max_width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = min(self.max_width or options.max_width, options.max_width)
        for line in self.lines(width):
            line.truncate(width)
            yield from line.render(console, end="")
            yield Segment.line()

    # -- downsampling ----------------------------------------------------------------------
    def block_factor(self, width: int) -> int:
        """1, or the side of the square blocks a map far wider than ``width`` is drawn in:
        a map up to twice as wide as fits is cut with a "+k" marker (every weight of what is
        shown), a wider one (a 1024-token map on 80 columns) shows each block's maximum."""
        budget = max(width - MAX_ROW_LABEL - 2, 1)
        if self.n_cols <= 2 * budget:
            return 1
        return -(-self.n_cols // budget)

    def downsampled(self, factor: int) -> Heatmap:
        """The map as ``factor`` × ``factor`` blocks, each cell its block's maximum (the
        strongest weight inside survives), rows labelled by their positions, the title saying
        so; marks are left out (a block is not one key)."""
        blocks = block_max(self.rows, factor)
        n_rows, n_cols = self.n_rows, self.n_cols
        row_labels = [f"{i}-{min(i + factor, n_rows) - 1}" for i in range(0, n_rows, factor)]
        col_labels = [str(j) for j in range(0, n_cols, factor)]
        note = (
            f"max of each {factor}×{factor} block ({n_rows}×{n_cols} shown as "
            f"{len(blocks)}×{len(blocks[0]) if blocks else 0})"
        )
        drawn = Heatmap(
            blocks,
            row_labels,
            col_labels,
            f"{self.title} — {note}" if self.title else note,
            self.max_width,
            self.half_block,
            False,
            self.vmax,
            NORM_SOFTMAX if self.normalisation == NORM_SUB_STOCHASTIC else self.normalisation,
        )
        drawn.note = self.note
        return drawn

    # -- the lines -------------------------------------------------------------------------
    def lines(self, width: int) -> list[Text]:
        factor = self.block_factor(width)
        if factor > 1:
            return self.downsampled(factor).lines(width)
        cell, shown = self.layout(width)
        label_width = self._label_width()
        out: list[Text] = []
        if self.title:
            out.append(Text(self.title, style="bold"))
        out.extend(self._header(label_width, cell, shown, width))
        if self.half_block:
            out.extend(self._half_rows(label_width, shown))
        else:
            out.extend(self._full_rows(label_width, cell, shown))
        out.append(self._legend_text())
        if self.selected_note:
            out.append(Text(self.selected_note, style="dim"))
        _, numbered = self._header_plain(cell, shown, width)
        if numbered:
            labels = self.col_labels[:shown]
            out.extend(Text(line, style="dim") for line in column_legend(labels, width))
        return out

    def _header_plain(self, cell: int, shown: int, width: int) -> tuple[list[str], bool]:
        """Header lines (whole tokens, staggered) and whether the columns are numbered."""
        limit = max(width - self._label_width() - 1, 1)
        placements, numbered = column_header(
            self.col_labels[:shown], cell, MAX_HEADER_ROWS, MAX_COL_LABEL, limit
        )
        return header_rows(placements), numbered

    def _header(self, label_width: int, cell: int, shown: int, width: int) -> list[Text]:
        """Source tokens as whole words above their columns (staggered, never split)."""
        lines, _ = self._header_plain(cell, shown, width)
        return [Text(" " * (label_width + 1) + line, style="bold") for line in lines]

    def _more(self, shown: int) -> str:
        hidden = self.n_cols - shown
        return f" +{hidden}" if hidden > 0 else ""

    def _full_rows(self, label_width: int, cell: int, shown: int) -> list[Text]:
        lines = []
        for i, (label, row) in enumerate(zip(self.row_labels, self.rows, strict=True)):
            text = Text()
            text.append(_fit(label, label_width).rjust(label_width), style="bold")
            text.append(" ")
            for j, value in enumerate(row[:shown]):
                if self._blank(value):
                    text.append(ZERO_MARK.rjust(cell), Style(dim=True))
                    continue
                style = self._style(value)
                marked = self.selected is not None and self.selected[i][j]
                if self.show_values and cell >= 2:
                    shown_value = f"{round(100 * value):d}" if value == value else "?"
                    if marked:  # the number, then the mark in the cell's last character
                        shown_value = shown_value.rjust(cell - 1)[1 - cell :] + SELECTED_MARK
                    text.append(shown_value.rjust(cell)[-cell:], style)
                else:
                    text.append(marked_cell(cell) if marked else " " * cell, style)
            text.append(self._more(shown), style="dim")
            lines.append(text)
        return lines

    def _half_rows(self, label_width: int, shown: int) -> list[Text]:
        lines = []
        labels = self._half_labels(label_width)
        for pair_index, i in enumerate(range(0, self.n_rows, 2)):
            text = Text()
            text.append(labels[pair_index].rjust(label_width), style="bold")
            text.append(" ")
            upper = self.rows[i]
            lower = self.rows[i + 1] if i + 1 < self.n_rows else None
            for j in range(shown):
                fg = _hex(self._rgb(upper[j]))
                bg = _hex(self._rgb(lower[j])) if lower is not None else None
                text.append(HALF_BLOCK, Style(color=fg, bgcolor=bg))
            text.append(self._more(shown), style="dim")
            lines.append(text)
        return lines

    def _legend_text(self) -> Text:
        if self.normalisation == NORM_SIGNED:
            return self._signed_legend()
        text = Text("0 ")
        for k in range(LEGEND_WIDTH):
            level = round(k * (LEVELS - 1) / (LEGEND_WIDTH - 1))
            text.append(" ", Style(bgcolor=_hex(PALETTE[level])))
        text.append(f" {self.vmax:.2f}")
        if self.note:
            text.append(f"  {self.note}", style="dim")
        return text

    def _signed_legend(self) -> Text:
        """``−0.42 ░░░ +0.42  signed weights: …``: the diverging scale, centred on 0."""
        text = Text(f"−{self.vmax:.2f} ")
        for k in range(LEGEND_WIDTH):
            value = (2 * k / (LEGEND_WIDTH - 1) - 1) * self.vmax
            text.append(" ", Style(bgcolor=_hex(diverging_rgb(value, self.vmax))))
        text.append(f" +{self.vmax:.2f}")
        text.append(f"  {self.note}", style="dim")
        return text


def render_heatmap(
    matrix: Sequence[Sequence[float]] | Any,
    row_labels: Iterable[str],
    col_labels: Iterable[str],
    title: str | None = None,
    max_width: int | None = None,
    half_block: bool = False,
    show_values: bool = False,
    vmax: float | None = None,
    normalisation: str = NORM_SOFTMAX,
    selected: Any = None,
) -> Heatmap:
    """A renderable heatmap of matrix[T, S] (list of rows or a tensor / array).

    ``row_labels`` are the T target tokens, ``col_labels`` the S source tokens. Colours run
    from 0 to ``vmax`` (default: the matrix maximum, so the largest weight gets the top
    colour). ``show_values`` prints each weight in percent inside its cell. When the columns
    do not fit in ``max_width`` (or the console), cells narrow to one character and then the
    right-most columns are cut with a "+k" marker. ``normalisation`` (the map's kind) picks
    the signed scale, the unattended column or the marked zeros (see the module docstring);
    ``selected`` ([T, S] bools, optional) marks the cells of selected blocks with ``▪``.
    """
    rows = _as_rows(matrix)
    row_labels, col_labels = [str(x) for x in row_labels], [str(x) for x in col_labels]
    if len(rows) != len(row_labels):
        raise ValueError(f"matrix has {len(rows)} rows but {len(row_labels)} row labels")
    for i, row in enumerate(rows):
        if len(row) != len(col_labels):
            raise ValueError(
                f"matrix row {i} has {len(row)} columns but {len(col_labels)} column labels"
            )
    mask = as_mask_rows(selected, len(rows), len(col_labels))
    return Heatmap(
        rows,
        row_labels,
        col_labels,
        title,
        max_width,
        half_block,
        show_values,
        vmax,
        normalisation,
        mask,
    )


PLAIN_MAX_LABEL = 11


def render_plain_heatmap(
    matrix: Sequence[Sequence[float]] | Any,
    row_labels: Iterable[str],
    col_labels: Iterable[str],
    title: str | None = None,
    normalisation: str = NORM_SOFTMAX,
    selected: Any = None,
) -> str:
    """The colourless form for pipes and files: weights x 100 as right-aligned integers.

    Every column is as wide as its token (at least 3, for "100") plus a space, so numbers
    never run together; the header names the columns, each row starts with its token, and a
    last line says how to read the numbers (and, by ``normalisation``: a sub-stochastic map's
    ``∅`` column of unattended mass, a sparse map's exact zeros as ``·``, signed weights;
    with a ``selected`` mask, ``▪`` after the number of each cell of a selected block).
    """
    check_normalisation(normalisation)
    rows = _as_rows(matrix)
    rlabels = [middle_ellipsis(str(x), PLAIN_MAX_LABEL) for x in row_labels]
    clabels = [middle_ellipsis(str(x), PLAIN_MAX_LABEL) for x in col_labels]
    if len(rows) != len(rlabels) or any(len(r) != len(clabels) for r in rows):
        raise ValueError(f"matrix is not {len(rlabels)}x{len(clabels)} like its labels")
    mask = as_mask_rows(selected, len(rows), len(clabels))
    # (no colours here: a signed map's note is the footer itself)
    note = "" if normalisation == NORM_SIGNED else normalisation_note(normalisation, rows)
    if mask is not None:
        note = f"{note}; {SELECTED_NOTE}" if note else SELECTED_NOTE
    if normalisation == NORM_SUB_STOCHASTIC:
        rows, clabels = with_unattended(rows), [*clabels, UNATTENDED_LABEL]
        mask = None if mask is None else [[*row, False] for row in mask]
    blank = normalisation == NORM_SPARSE
    label_w = max((len(x) for x in rlabels), default=0)
    # with a mask every cell has one more character: the mark or a space
    extra = 0 if mask is None else 1
    widths = [max(len(c), 3 + extra) for c in clabels]
    lines = [title] if title else []
    lines.append(
        " " * label_w + "".join(" " + c.rjust(w) for c, w in zip(clabels, widths, strict=True))
    )
    for i, (label, row) in enumerate(zip(rlabels, rows, strict=True)):
        marks = [" "] * len(row) if mask is None else [SELECTED_MARK if m else " " for m in mask[i]]
        texts = (_plain_cell(v, blank) + marks[j] * extra for j, v in enumerate(row))
        cells = (" " + t.rjust(w) for t, w in zip(texts, widths, strict=True))
        lines.append(label.rjust(label_w) + "".join(cells))
    lines.append(_PLAIN_FOOTERS[normalisation] + (f"; {note}" if note else "") + ")")
    return "\n".join(lines)


_PLAIN_FOOTERS = {
    NORM_SOFTMAX: "(weights x 100; rows: queries, columns: keys; each row sums to ~100",
    NORM_SPARSE: "(weights x 100; rows: queries, columns: keys; each row sums to ~100",
    NORM_SUB_STOCHASTIC: "(weights x 100; rows: queries, columns: keys; rows sum to <= 100",
    NORM_SIGNED: "(signed weights x 100; rows: queries, columns: keys; rows may be negative",
    # sigmoid attention (each weight in (0, 1)) and attribution scores: no fixed row sum
    NORM_UNNORMALISED: "(weights x 100; rows: queries, columns: keys; rows need not sum to 100",
}


def _plain_cell(value: float, blank: bool) -> str:
    if blank and value == 0.0:
        return ZERO_MARK
    return f"{round(100 * value):d}" if value == value else "?"
