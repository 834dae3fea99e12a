"""Metric plots (plotext through textual-plotext): curves against step, and grouped bars."""

from __future__ import annotations

import math
from collections.abc import Sequence

from textual_plotext import PlotextPlot

Series = tuple[str, Sequence[float], Sequence[float]]  # (label, steps, values)


def finite_points(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Drop NaN / inf points (a missing metric is logged as null or NaN)."""
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if y is not None and isinstance(y, (int, float)) and math.isfinite(y):
            px.append(x)
            py.append(y)
    return px, py


class MetricPlot(PlotextPlot):
    """A line plot of one or more series against step; redraws only when the data changes."""

    DEFAULT_CSS = """
    MetricPlot { height: 1fr; width: 1fr; min-height: 5; }
    """

    def __init__(self, title: str, *, y_label: str = "", id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.title = title
        self.y_label = y_label
        self.series: list[Series] = []
        self.points = 0  # number of finite points drawn (tests check that the plot moved)

    def on_mount(self) -> None:
        self._draw()

    def set_series(self, series: list[Series]) -> None:
        self.series = series
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        plt.xlabel("step")
        if self.y_label:
            plt.ylabel(self.y_label)
        total = 0
        for label, xs, ys in self.series:
            px, py = finite_points(xs, ys)
            if px:
                plt.plot(px, py, label=label, marker="braille")
                total += len(px)
        self.points = total
        self.refresh()


class BarsPlot(PlotextPlot):
    """Grouped bars: BLEU by source-length bucket for several runs."""

    DEFAULT_CSS = """
    BarsPlot { height: 1fr; width: 1fr; min-height: 5; }
    """

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.title = title
        self.groups: list[str] = []
        self.bars: list[tuple[str, list[float]]] = []

    def on_mount(self) -> None:
        self._draw()

    def set_bars(self, groups: list[str], bars: list[tuple[str, list[float]]]) -> None:
        self.groups, self.bars = groups, bars
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(self.title)
        if self.groups and self.bars:
            labels = [label for label, _ in self.bars]
            values = [[v if math.isfinite(v) else 0.0 for v in vals] for _, vals in self.bars]
            if len(values) == 1:
                plt.bar(self.groups, values[0], label=labels[0])
            else:
                plt.multiple_bar(self.groups, values, labels=labels)
        self.refresh()
