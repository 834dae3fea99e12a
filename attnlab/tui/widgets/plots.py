"""Metric plots (plotext through textual-plotext): curves against step, and grouped bars.

Legends are drawn *below* the plot area as coloured text (plotext would draw them over the
data). Axes come from :func:`attnlab.viz.text.integer_ticks`: integer step ticks over the
real range of the data; a series with few points gets visible markers so that a single eval
is more than one braille dot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static
from textual_plotext import PlotextPlot

from attnlab.viz.text import integer_ticks

Series = tuple[str, Sequence[float], Sequence[float]]  # (label, steps, values)

# One colour per series, in order; the same names are valid for plotext and for Rich.
COLOURS = ("cyan", "magenta", "green", "yellow", "red", "blue")
MARKER_POINTS = 12  # series with at most this many points also get a "●" marker per point


# Beyond this a value is not plottable: plotext's arithmetic on a damaged log's 1e308 loss
# overflowed to inf (OverflowError) and took the lab down. No real loss or score gets near it.
PLOT_MAX = 1e15


def plottable(y: object) -> bool:
    return isinstance(y, (int, float)) and math.isfinite(y) and abs(y) <= PLOT_MAX


def finite_points(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Drop NaN / inf points (a missing metric is logged as null or NaN) and values beyond
    PLOT_MAX."""
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if plottable(y) and plottable(x):
            px.append(x)
            py.append(y)
    return px, py


def x_axis(xs: Sequence[float], max_ticks: int = 5) -> tuple[tuple[float, float], list[int]]:
    """(x limits, integer ticks) over the real range of the steps (a lone step gets ±1)."""
    lo, hi = min(xs), max(xs)
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    ticks = [t for t in integer_ticks(lo, hi, max_ticks) if lo <= t <= hi]
    return (lo, hi), ticks


def y_limits(ys: Sequence[float]) -> tuple[float, float]:
    """The data range with a little room, never empty (one value v gets v ± 5% or ± 1);
    never below 0 for data that is not (losses and metrics do not go negative)."""
    lo, hi = min(ys), max(ys)
    pad = max(abs(lo) * 0.05, 1.0) if hi - lo < 1e-9 else (hi - lo) * 0.05
    bottom = lo - pad if lo < 0 else max(lo - pad, 0.0)
    return bottom, hi + pad


def nice_ticks(low: float, high: float, max_ticks: int = 5) -> list[float]:
    """Evenly spaced ticks on a 1-2-5 step (…, 0.01, 0.02, 0.05, 0.1, …) inside [low, high],
    the finest step that gives at most ``max_ticks``: plotext's own ticks read
    ``0.0072904 … 0.0072797`` at uneven gaps."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    magnitude = 10.0 ** (math.floor(math.log10(high - low)) - 2)
    while True:
        for mult in (1, 2, 5):
            step = mult * magnitude
            first = math.ceil(low / step - 1e-9)
            last = math.floor(high / step + 1e-9)
            if last - first + 1 <= max(max_ticks, 1):
                return [round(k * step, 12) for k in range(first, last + 1)]
        magnitude *= 10


def tick_count(rows: int) -> int:
    """Y ticks for a plot area of ``rows`` rows: about one every other row, 2 to 6, and never
    more than the rows (plotext then picks which labels to show, differently run to run)."""
    return max(1, min(rows, max(2, min(6, rows // 2 + 1))))


def tick_labels(ticks: Sequence[float]) -> list[str]:
    """Labels with the decimals the step needs, all alike (``0.5 1.0 1.5``, ``20 40 60``)."""
    if len(ticks) < 2:
        return [f"{t:.3g}" for t in ticks]
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:], strict=False)) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{t:.{decimals}f}" for t in ticks]


def clamp_limits(
    limits: tuple[float, float], bounds: tuple[float, float] | None
) -> tuple[float, float]:
    """``limits`` kept inside a bounded metric's range (BLEU and chrF 0–100, exact match
    0–1): room around the data never shows 103.2 for a score that cannot pass 100."""
    if bounds is None:
        return limits
    lo, hi = max(limits[0], bounds[0]), min(limits[1], bounds[1])
    return (lo, hi) if hi > lo else bounds


def legend_text(labels: Sequence[str], width: int = 0) -> Text:
    """``━ train  ━ dev`` in the series' colours (printed under the plot, not on it).

    Entries are never broken: one that does not fit on the line starts a new line."""
    text = Text(no_wrap=True, overflow="ellipsis")
    column = 0
    for k, label in enumerate(labels):
        entry = 2 + len(label)
        if k:
            if width and column + 2 + entry > width:
                text.append("\n")
                column = 0
            else:
                text.append("  ")
                column += 2
        text.append("━ ", style=f"bold {COLOURS[k % len(COLOURS)]}")
        text.append(label)
        column += entry
    return text


class LegendWrapped(Message):
    """A plot's legend now takes a different number of lines (plots side by side re-align)."""


class _Legend(Static):
    """The legend line(s) under a plot; re-wrapped when the plot is resized."""

    DEFAULT_CSS = "_Legend { height: auto; max-height: 3; padding: 0 1; }"

    def __init__(self) -> None:
        super().__init__("")
        self.labels: list[str] = []
        self.lines = 0  # lines the legend text takes at the current width

    def show(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        text = legend_text(self.labels, self.size.width - 2) if self.labels else Text("")
        self.update(text)
        lines = text.plain.count("\n") + 1 if self.labels else 0
        if lines != self.lines:
            self.lines = lines
            self.post_message(LegendWrapped())

    def on_resize(self) -> None:
        self.show(self.labels)


def align_legends(plots: Sequence[Widget]) -> None:
    """Give the legends of plots side by side the height of the tallest one, so that their
    canvases (and axes) keep equal heights when one legend wraps onto a second line."""
    shown = [plot for plot in plots if plot.display]
    rows = max((plot.query_one(_Legend).lines for plot in shown), default=0)
    for plot in shown:
        legend = plot.query_one(_Legend)
        legend.styles.max_height = 3
        legend.styles.height = min(max(rows, 1), 3)


class _Canvas(PlotextPlot):
    DEFAULT_CSS = "_Canvas { height: 1fr; width: 1fr; }"

    y_range: tuple[float, float] | None = None  # set: nice y ticks for the size drawn at

    def render(self) -> RenderResult:
        # The ticks are chosen here, at the size the plot is drawn at (the height settles
        # only after layout). The plot area is the height less the frame and x axis rows.
        if self.y_range is not None:
            ticks = nice_ticks(*self.y_range, tick_count(max(self.size.height - 4, 1)))
            self.plt.yticks(ticks, tick_labels(ticks))
        return super().render()


class _Title(Static):
    """The plot's title, one line cut with "…": plotext dropped a title wider than its plot
    (the third Train plot at 80 columns, or with a signed role's note)."""

    DEFAULT_CSS = """
    _Title {
        height: 1; width: 1fr; text-align: center; text-wrap: nowrap; text-overflow: ellipsis;
    }
    """


class MetricPlot(Vertical):
    """A line plot of one or more series against step; redraws only when the data changes."""

    DEFAULT_CSS = """
    MetricPlot { height: 1fr; width: 1fr; min-height: 5; }
    """

    def __init__(
        self,
        title: str,
        *,
        y_label: str = "",
        x_label: str = "step",
        bounds: tuple[float, float] | None = None,
        id: str | None = None,
        classes: str | None = None,
    ):
        super().__init__(id=id, classes=classes)
        self.title = title
        self.bounds = bounds  # the metric's own range (scores): the y axis stays inside it
        self.y_label = y_label
        self.x_label = x_label
        self.series: list[Series] = []
        self.points = 0  # number of finite points drawn (tests check that the plot moved)

    def compose(self) -> ComposeResult:
        yield _Title()
        yield _Canvas()
        yield _Legend()

    def on_mount(self) -> None:
        self._draw()

    def set_series(self, series: list[Series]) -> None:
        self.series = series
        if self.is_mounted:
            self._draw()

    def _draw(self) -> None:
        canvas = self.query_one(_Canvas)
        plt = canvas.plt
        plt.clear_data()
        plt.clear_figure()
        canvas.y_range = None
        self.query_one(_Title).update(Text(self.title))
        plt.xlabel(self.x_label)
        if self.y_label:
            plt.ylabel(self.y_label)
        total = 0
        labels: list[str] = []
        all_x: list[float] = []
        all_y: list[float] = []
        for k, (label, xs, ys) in enumerate(self.series):
            px, py = finite_points(xs, ys)
            colour = COLOURS[k % len(COLOURS)]
            labels.append(label)
            if not px:
                continue
            if len(px) > 1:
                plt.plot(px, py, marker="braille", color=colour)
            if len(px) <= MARKER_POINTS:
                plt.scatter(px, py, marker="●", color=colour)
            total += len(px)
            all_x += px
            all_y += py
        if all_x:
            (x_lo, x_hi), ticks = x_axis(all_x)
            plt.xlim(x_lo, x_hi)
            plt.xticks(ticks, [str(t) for t in ticks])
            y_lo, y_hi = clamp_limits(y_limits(all_y), self.bounds)
            plt.ylim(y_lo, y_hi)
            canvas.y_range = (y_lo, y_hi)
        self.points = total
        self.query_one(_Legend).show(labels)
        canvas.refresh()


class BarsPlot(Vertical):
    """Grouped bars: BLEU by source-length bucket for several runs (legend below the bars)."""

    DEFAULT_CSS = """
    BarsPlot { height: 1fr; width: 1fr; min-height: 5; }
    """

    def __init__(
        self,
        title: str,
        *,
        bounds: tuple[float, float] | None = None,
        id: str | None = None,
        classes: str | None = None,
    ):
        super().__init__(id=id, classes=classes)
        self.title = title
        self.bounds = bounds
        self.groups: list[str] = []
        self.bars: list[tuple[str, list[float]]] = []

    def compose(self) -> ComposeResult:
        yield _Title()
        yield _Canvas()
        yield _Legend()

    def on_mount(self) -> None:
        self._draw()

    def set_bars(self, groups: list[str], bars: list[tuple[str, list[float]]]) -> None:
        self.groups, self.bars = groups, bars
        if self.is_mounted:
            self._draw()

    def _draw(self) -> None:
        canvas = self.query_one(_Canvas)
        plt = canvas.plt
        plt.clear_data()
        plt.clear_figure()
        canvas.y_range = None
        self.query_one(_Title).update(Text(self.title))
        labels = [label for label, _ in self.bars]
        if self.groups and self.bars:
            values = [[v if plottable(v) else 0.0 for v in vals] for _, vals in self.bars]
            colours = [COLOURS[k % len(COLOURS)] for k in range(len(values))]
            if len(values) == 1:
                plt.bar(self.groups, values[0], color=colours[0])
            else:
                plt.multiple_bar(self.groups, values, color=colours)
            top = max((v for vals in values for v in vals), default=0.0)
            y_lo, y_hi = clamp_limits((0.0, max(top * 1.05, 1.0)), self.bounds)
            plt.ylim(y_lo, y_hi)
            canvas.y_range = (y_lo, y_hi)
        self.query_one(_Legend).show(labels)
        canvas.refresh()
