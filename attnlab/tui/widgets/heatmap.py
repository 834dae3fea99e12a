"""Interactive attention heatmap: target tokens as rows, source tokens as columns.

A Line-API ``ScrollView``: only the visible lines are rendered, so long sentences scroll
(row labels and column headers stay in place). Column labels are whole tokens, staggered over
a few header rows by the CLI's layout (``attnlab.viz.text.column_header``); when they would
need too many rows the columns are numbered and a legend follows the grid. The row-label
width is fixed per map (from all its row labels), so stepping through a map never shifts
it. The cursor (keys or mouse) reports the exact weight and the two tokens. Half-block mode
packs two matrix rows into one text row with ``▀`` (foreground = upper row, background =
lower row) for an overview of large matrices.

The map's ``normalisation`` (attnlab.attention_map) changes the drawing as in the CLI's
renderer: signed maps on the diverging blue-white-red scale (±max |w|, centred on 0), a
sub-stochastic map's unattended mass (1 − row sum) as one more column, ``∅``, and a sparse
map's exact zeros as ``·`` without colour. Softmax maps are drawn as always.

An optional ``selected`` mask (nsa's selected blocks) draws ``▪`` in those cells on their
weight colour (the cursor cell keeps its percent; the cursor line says "▪ selected");
half-block mode has no room for it. Without a mask the drawing is exactly as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from attnlab.attention_map import (
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    SELECTED_MARK,
    UNATTENDED_LABEL,
    check_normalisation,
    unattended_mass,
)
from attnlab.viz.heatmap import (
    LEVELS,
    ZERO_MARK,
    diverging_cell_style,
    heatmap_cell_style,
    heatmap_level,
    marked_cell,
)
from attnlab.viz.text import Placement, column_header, column_legend, middle_ellipsis

# The colour scale is the CLI's (attnlab.viz.heatmap, viridis-like, readable on dark and
# light themes) on an absolute 0..1 scale, so weights compare across rows and samples.
_STYLES = [heatmap_cell_style(i / (LEVELS - 1)) for i in range(LEVELS)]
_PALETTE = [style.bgcolor for style in _STYLES]


def weight_index(weight: float) -> int:
    """0..100 palette index of a weight in [0, 1] (clamped; NaN -> 0)."""
    return heatmap_level(weight, 1.0)


def cell_style(weight: float, bold: bool = False) -> Style:
    style = _STYLES[weight_index(weight)]
    return style + Style(bold=True) if bold else style


def colour_scale(
    width: int = 20, normalisation: str = NORM_SOFTMAX, vmax: float = 1.0, selected: bool = False
) -> Text:
    """``0 ███…███ 1`` legend of the colour scale; a signed map's ``−v ███ +v`` diverging one
    (blue below 0, red above), symmetric around 0; ``selected``: then ``▪ selected``."""
    if normalisation == NORM_SIGNED:
        text = Text(f"−{vmax:.2f} ")
        for k in range(width):
            value = (2 * k / max(width - 1, 1) - 1) * vmax
            text.append(" ", Style(bgcolor=diverging_cell_style(value, vmax).bgcolor))
        text.append(f" +{vmax:.2f} signed")
    else:
        text = Text("0 ")
        for k in range(width):
            text.append(" ", Style(bgcolor=_PALETTE[round(k * 100 / max(width - 1, 1))]))
        text.append(" 1")
    if selected:
        text.append(f"  {SELECTED_LEGEND}")
    return text


# beside the colour scale: short, the cursor line shares the row (the diagnostics say more)
SELECTED_LEGEND = f"{SELECTED_MARK} selected"


@dataclass(frozen=True)
class CellInfo:
    row: int
    col: int
    weight: float
    row_label: str
    col_label: str
    selected: bool = False  # in a block the query selected (nsa)


class AttentionHeatmap(ScrollView, can_focus=True):
    """Heatmap of one attention matrix [T, S] with a cursor."""

    DEFAULT_CSS = """
    AttentionHeatmap {
        height: 1fr;
        width: 1fr;
        background: $surface;
    }
    """

    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("home", "jump_row(0)", "First column", show=False),
        Binding("end", "jump_row(-1)", "Last column", show=False),
    ]

    CELL_WIDTH = 3
    MAX_ROW_LABEL = 10
    MAX_HEADER = 4  # staggered label rows before the columns are numbered
    MAX_COL_LABEL = 11

    cursor: reactive[tuple[int, int]] = reactive((0, 0), layout=False)
    half_block: reactive[bool] = reactive(False)

    class CursorMoved(Message):
        """The cursor (keys, click or hover) is on a new cell."""

        def __init__(self, heatmap: AttentionHeatmap, cell: CellInfo) -> None:
            super().__init__()
            self.heatmap = heatmap
            self.cell = cell

        @property
        def control(self) -> AttentionHeatmap:
            return self.heatmap

    def __init__(
        self, *, name: str | None = None, id: str | None = None, classes: str | None = None
    ):
        super().__init__(name=name, id=id, classes=classes)
        self.weights = np.zeros((0, 0))
        self.row_labels: list[str] = []
        self.col_labels: list[str] = []
        self._label_w = 0
        self._placements: list[Placement] = []
        self._header_h = 0
        self._legend: list[str] = []
        self._cell = self.CELL_WIDTH
        self.normalisation = NORM_SOFTMAX
        self.vmax = 1.0  # a signed map's scale end, max |w|
        self.selected: np.ndarray | None = None  # bool, the weights' shape; None: no marks

    # -- data --------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        """(target length, source length) of the matrix shown."""
        return tuple(self.weights.shape)  # type: ignore[return-value]

    def set_matrix(
        self,
        weights: np.ndarray | Sequence[Sequence[float]],
        rows: Sequence[str],
        cols: Sequence[str],
        normalisation: str = NORM_SOFTMAX,
        selected: np.ndarray | None = None,
        vmax: float | None = None,
    ) -> None:
        """Show ``weights`` [T, S]; a sub-stochastic map gets its ``∅`` column here.
        ``selected`` ([T, S] bool, optional): the cells to mark ``▪`` (nsa's selected blocks).
        ``vmax``: a signed map's scale end ±vmax (default its own max |w|; Compare shares one
        between two maps)."""
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 2:
            raise ValueError(f"attention matrix must be 2-D, got shape {w.shape}")
        self.normalisation = check_normalisation(normalisation)
        mask = None if selected is None else np.asarray(selected, dtype=bool)
        if mask is not None and mask.shape != w.shape:
            raise ValueError(f"selected mask {mask.shape} is not the matrix's {w.shape}")
        if normalisation == NORM_SUB_STOCHASTIC and w.size:
            keys = [str(t) for t in cols][: w.shape[1]]
            cols = [*keys, *[""] * (w.shape[1] - len(keys)), UNATTENDED_LABEL]
            w = np.concatenate([w, unattended_mass(w)[:, None]], axis=1)
            if mask is not None:  # ∅ is no key: never selected
                mask = np.concatenate([mask, np.zeros((w.shape[0], 1), dtype=bool)], axis=1)
        self.selected = mask
        peak = float(np.abs(w).max()) if w.size else 0.0
        peak = peak if vmax is None else float(vmax)
        self.vmax = peak if peak > 0 else 1.0
        self.weights = w
        # Width from every row label given (also rows not shown yet while stepping).
        longest = max((len(str(t)) for t in rows), default=0)
        self._label_w = min(longest, self.MAX_ROW_LABEL) + 1 if longest else 0
        self.row_labels = [str(t) for t in rows][: w.shape[0]]
        self.row_labels += [""] * (w.shape[0] - len(self.row_labels))
        self.col_labels = [str(t) for t in cols][: w.shape[1]]
        self.col_labels += [""] * (w.shape[1] - len(self.col_labels))
        self._fit_cells()
        self._layout_header()
        row, col = self.cursor
        self.set_reactive(
            AttentionHeatmap.cursor,
            (min(row, max(w.shape[0] - 1, 0)), min(col, max(w.shape[1] - 1, 0))),
        )
        self._update_virtual_size()
        self.refresh()
        self._announce()

    def _style(self, weight: float, bold: bool = False) -> Style | None:
        """A cell's style by the map's kind; None for a sparse map's exact zero (``·``)."""
        if self.normalisation == NORM_SPARSE and weight == 0.0:
            return None
        if self.normalisation == NORM_SIGNED:
            style = diverging_cell_style(weight, self.vmax)
            return style + Style(bold=True) if bold else style
        return cell_style(weight, bold)

    def _colour(self, weight: float) -> object:
        """A half-block's colour (a sparse zero: the lowest colour; no room for ``·``)."""
        if self.normalisation == NORM_SIGNED:
            return diverging_cell_style(weight, self.vmax).bgcolor
        return _PALETTE[weight_index(weight)]

    def is_selected(self, row: int, col: int) -> bool:
        return self.selected is not None and bool(self.selected[row, col])

    def cell(self, row: int, col: int) -> CellInfo:
        return CellInfo(
            row,
            col,
            float(self.weights[row, col]),
            self.row_labels[row],
            self.col_labels[col],
            self.is_selected(row, col),
        )

    # -- geometry ----------------------------------------------------------------------------

    def _fit_cells(self) -> None:
        """Cells of 3 characters, or 2 when that makes every column fit without scrolling."""
        cols = self.weights.shape[1] if self.weights.ndim == 2 else 0
        room = self.scrollable_content_region.width - self._label_w
        narrow = cols * self.CELL_WIDTH > room >= cols * 2 > 0
        self._cell = 2 if narrow else self.CELL_WIDTH

    def on_resize(self) -> None:
        cell = self._cell
        self._fit_cells()
        if cell != self._cell:
            self._layout_header()
            self._update_virtual_size()
            self.refresh()

    def _layout_header(self) -> None:
        placements, numbered = column_header(
            self.col_labels, self._cell, self.MAX_HEADER, self.MAX_COL_LABEL
        )
        self._placements = placements
        self._header_h = max((p.row for p in placements), default=-1) + 1
        self._legend = column_legend(self.col_labels, 60) if numbered else []

    @property
    def label_width(self) -> int:
        if self.half_block or not self.row_labels:
            return 0
        return self._label_w

    @property
    def header_height(self) -> int:
        if self.half_block or not self.col_labels:
            return 0
        return max(self._header_h, 1)

    @property
    def cell_width(self) -> int:
        return 1 if self.half_block else self._cell

    def _update_virtual_size(self) -> None:
        rows, cols = self.weights.shape if self.weights.size else (0, 0)
        if self.half_block:
            self.virtual_size = Size(cols, (rows + 1) // 2)
        else:
            width = max((p.start + len(p.text) for p in self._placements), default=0)
            width = max(width, cols * self.cell_width)
            self.virtual_size = Size(
                self.label_width + width, self.header_height + rows + len(self._legend)
            )

    def watch_half_block(self) -> None:
        self._update_virtual_size()
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    # -- rendering ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = Style(
            bgcolor=self.background_colors[1].rich_color if self.background_colors else None
        )
        if not self.weights.size:
            return Strip.blank(width, base)
        scroll_x, scroll_y = self.scroll_offset
        if self.half_block:
            return self._half_block_line(y + scroll_y, scroll_x, width, base)
        label_w, header_h = self.label_width, self.header_height
        visible = max(width - label_w, 0)
        if y < header_h:
            label = Strip([Segment(" " * label_w, base)])
            cells = self._header_strip(y, base)
        else:
            row = scroll_y + y - header_h
            if row >= self.weights.shape[0]:
                return self._legend_line(row - self.weights.shape[0], width, base)
            label = self._row_label(row, label_w, base)
            cells = self._row_strip(row, base)
        cells = cells.crop(scroll_x, scroll_x + visible)
        return Strip.join([label, cells]).extend_cell_length(width, base)

    def _legend_line(self, k: int, width: int, base: Style) -> Strip:
        """Numbered columns: the legend lines under the grid (``0 ein  1 mann …``)."""
        if k >= len(self._legend):
            return Strip.blank(width, base)
        dim = base + Style(dim=True)
        return Strip([Segment(self._legend[k], dim)]).extend_cell_length(width, base).crop(0, width)

    def _row_label(self, row: int, label_w: int, base: Style) -> Strip:
        text = middle_ellipsis(self.row_labels[row], label_w - 1).rjust(label_w - 1) + " "
        style = base + Style(reverse=True, bold=True) if row == self.cursor[0] else base
        return Strip([Segment(text, style)])

    def _header_strip(self, k: int, base: Style) -> Strip:
        """Header line k (top first): the whole-token labels placed on that row."""
        level = self.header_height - 1 - k  # placement rows count up from the grid
        segments = []
        at = 0
        for p in self._placements:
            if p.row != level:
                continue
            if p.start > at:
                segments.append(Segment(" " * (p.start - at), base))
            cursor = p.column == self.cursor[1]
            segments.append(
                Segment(p.text, base + Style(reverse=True, bold=True) if cursor else base)
            )
            at = p.start + len(p.text)
        return Strip(segments)

    def _row_strip(self, row: int, base: Style) -> Strip:
        cursor_row, cursor_col = self.cursor
        segments = []
        values = self.weights[row]
        cw = self.cell_width
        for col, weight in enumerate(values):
            cursor = row == cursor_row and col == cursor_col
            style = self._style(weight, bold=cursor)
            if style is None:  # a sparse map's exact zero: no colour, a dot
                dot = base + Style(dim=not cursor, bold=cursor, reverse=cursor)
                segments.append(Segment(ZERO_MARK.rjust(cw), dot))
            elif cursor and self.normalisation == NORM_SIGNED:
                segments.append(Segment(f"{round(100 * weight):>{cw}}"[-cw:], style))
            elif cursor:
                # The cursor cell shows the weight in percent on its own colour.
                # (2-character cells show 99 for 100; the cursor line has the exact weight)
                percent = min(weight_index(weight), 10**cw - 1)
                segments.append(Segment(f"{percent:>{cw}}", style))
            elif self.is_selected(row, col):  # the mark on the weight's own colour
                segments.append(Segment(marked_cell(cw), style))
            else:
                segments.append(Segment(" " * cw, style))
        return Strip(segments)

    def _half_block_line(self, line: int, scroll_x: int, width: int, base: Style) -> Strip:
        rows, cols = self.weights.shape
        upper, lower = 2 * line, 2 * line + 1
        if upper >= rows:
            return Strip.blank(width, base)
        segments = []
        for col in range(scroll_x, min(cols, scroll_x + width)):
            top = self._colour(self.weights[upper, col])
            bottom = self._colour(self.weights[lower, col]) if lower < rows else base.bgcolor
            segments.append(Segment("▀", Style(color=top, bgcolor=bottom)))
        return Strip(segments).extend_cell_length(width, base)

    # -- cursor ------------------------------------------------------------------------------

    def watch_cursor(self) -> None:
        self._scroll_to_cursor()
        self.refresh()
        self._announce()

    def _announce(self) -> None:
        if self.weights.size:
            self.post_message(self.CursorMoved(self, self.cell(*self.cursor)))

    def _scroll_to_cursor(self) -> None:
        if self.half_block or not self.weights.size:
            return
        row, col = self.cursor
        height = self.scrollable_content_region.height - self.header_height
        width = self.scrollable_content_region.width - self.label_width
        scroll_x, scroll_y = self.scroll_offset
        new_y = scroll_y
        if row < scroll_y:
            new_y = row
        elif height > 0 and row >= scroll_y + height:
            new_y = row - height + 1
        left, right = col * self.cell_width, (col + 1) * self.cell_width
        new_x = scroll_x
        if left < scroll_x:
            new_x = left
        elif width > 0 and right > scroll_x + width:
            new_x = right - width
        if (new_x, new_y) != (scroll_x, scroll_y):
            self.scroll_to(new_x, new_y, animate=False)

    def action_move(self, d_row: int, d_col: int) -> None:
        rows, cols = self.weights.shape if self.weights.size else (0, 0)
        if not rows:
            return
        row, col = self.cursor
        self.cursor = (min(max(row + d_row, 0), rows - 1), min(max(col + d_col, 0), cols - 1))

    def action_jump_row(self, col: int) -> None:
        if self.weights.size:
            self.cursor = (self.cursor[0], col % self.weights.shape[1])

    def _cell_at(self, x: int, y: int) -> tuple[int, int] | None:
        if self.half_block or not self.weights.size:
            return None
        scroll_x, scroll_y = self.scroll_offset
        if x < self.label_width or y < self.header_height:
            return None
        col = (x - self.label_width + scroll_x) // self.cell_width
        row = y - self.header_height + scroll_y
        rows, cols = self.weights.shape
        return (row, col) if 0 <= row < rows and 0 <= col < cols else None

    def on_mouse_move(self, event: events.MouseMove) -> None:
        cell = self._cell_at(event.x, event.y)
        if cell is not None and cell != self.cursor:
            self.cursor = cell

    def on_click(self, event: events.Click) -> None:
        cell = self._cell_at(event.x, event.y)
        if cell is not None:
            self.cursor = cell
        self.focus()
