"""Interactive attention heatmap: target tokens as rows, source tokens as columns.

A Line-API ``ScrollView``: only the visible lines are rendered, so long sentences scroll
(row labels and column headers stay in place). The cursor (keys or mouse) reports the exact
weight and the two tokens. Half-block mode packs two matrix rows into one text row with
``▀`` (foreground = upper row, background = lower row) for an overview of large matrices.
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

from attnlab.viz.heatmap import LEVELS, heatmap_cell_style, heatmap_level

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


def colour_scale(width: int = 20) -> Text:
    """``0 ███…███ 1`` legend of the colour scale."""
    text = Text("0 ")
    for k in range(width):
        text.append(" ", Style(bgcolor=_PALETTE[round(k * 100 / max(width - 1, 1))]))
    text.append(" 1")
    return text


@dataclass(frozen=True)
class CellInfo:
    row: int
    col: int
    weight: float
    row_label: str
    col_label: str


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
    MAX_HEADER = 6

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

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self.weights = np.zeros((0, 0))
        self.row_labels: list[str] = []
        self.col_labels: list[str] = []

    # -- data --------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        """(target length, source length) of the matrix shown."""
        return tuple(self.weights.shape)  # type: ignore[return-value]

    def set_matrix(
        self, weights: np.ndarray | Sequence[Sequence[float]], rows: Sequence[str], cols: Sequence[str]
    ) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 2:
            raise ValueError(f"attention matrix must be 2-D, got shape {w.shape}")
        self.weights = w
        self.row_labels = [str(t) for t in rows][: w.shape[0]]
        self.row_labels += [""] * (w.shape[0] - len(self.row_labels))
        self.col_labels = [str(t) for t in cols][: w.shape[1]]
        self.col_labels += [""] * (w.shape[1] - len(self.col_labels))
        row, col = self.cursor
        self.set_reactive(
            AttentionHeatmap.cursor,
            (min(row, max(w.shape[0] - 1, 0)), min(col, max(w.shape[1] - 1, 0))),
        )
        self._update_virtual_size()
        self.refresh()
        self._announce()

    def cell(self, row: int, col: int) -> CellInfo:
        return CellInfo(row, col, float(self.weights[row, col]), self.row_labels[row], self.col_labels[col])

    # -- geometry ----------------------------------------------------------------------------

    @property
    def label_width(self) -> int:
        if self.half_block or not self.row_labels:
            return 0
        return min(max(len(t) for t in self.row_labels), self.MAX_ROW_LABEL) + 1

    @property
    def header_height(self) -> int:
        if self.half_block or not self.col_labels:
            return 0
        return max(1, min(max(len(t) for t in self.col_labels), self.MAX_HEADER))

    @property
    def cell_width(self) -> int:
        return 1 if self.half_block else self.CELL_WIDTH

    def _update_virtual_size(self) -> None:
        rows, cols = self.weights.shape if self.weights.size else (0, 0)
        if self.half_block:
            self.virtual_size = Size(cols, (rows + 1) // 2)
        else:
            self.virtual_size = Size(self.label_width + cols * self.cell_width, self.header_height + rows)

    def watch_half_block(self) -> None:
        self._update_virtual_size()
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    # -- rendering ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = Style(bgcolor=self.background_colors[1].rich_color if self.background_colors else None)
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
                return Strip.blank(width, base)
            label = self._row_label(row, label_w, base)
            cells = self._row_strip(row, base)
        cells = cells.crop(scroll_x, scroll_x + visible)
        return Strip.join([label, cells]).extend_cell_length(width, base)

    def _row_label(self, row: int, label_w: int, base: Style) -> Strip:
        text = self.row_labels[row][: label_w - 1].rjust(label_w - 1) + " "
        style = base + Style(reverse=True, bold=True) if row == self.cursor[0] else base
        return Strip([Segment(text, style)])

    def _header_strip(self, k: int, base: Style) -> Strip:
        """Header line k: the k-th character of every column label (vertical labels)."""
        segments = []
        cw = self.cell_width
        for col, label in enumerate(self.col_labels):
            char = label[k] if k < len(label) else " "
            if k == self.header_height - 1 and len(label) > self.header_height:
                char = "…"
            style = base + Style(reverse=True, bold=True) if col == self.cursor[1] else base
            segments.append(Segment(char.center(cw), style))
        return Strip(segments)

    def _row_strip(self, row: int, base: Style) -> Strip:
        cursor_row, cursor_col = self.cursor
        segments = []
        values = self.weights[row]
        for col, weight in enumerate(values):
            if row == cursor_row and col == cursor_col:
                # The cursor cell shows the weight in percent on its own colour.
                segments.append(Segment(f"{weight_index(weight):>3}"[-3:], cell_style(weight, bold=True)))
            else:
                segments.append(Segment(" " * self.cell_width, cell_style(weight)))
        return Strip(segments)

    def _half_block_line(self, line: int, scroll_x: int, width: int, base: Style) -> Strip:
        rows, cols = self.weights.shape
        upper, lower = 2 * line, 2 * line + 1
        if upper >= rows:
            return Strip.blank(width, base)
        segments = []
        for col in range(scroll_x, min(cols, scroll_x + width)):
            top = _PALETTE[weight_index(self.weights[upper, col])]
            bottom = (
                _PALETTE[weight_index(self.weights[lower, col])]
                if lower < rows
                else base.bgcolor
            )
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
