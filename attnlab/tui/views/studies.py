"""Studies: every study under ``runs/studies`` (and ``runs``), its table and its dev curves.

The table is ``attnlab study show``'s (attnlab.study.table + render): per cell n/seeds and
mean ± 95 % t half-width per metric with Δ against the baseline and its significance marks;
failed runs with their error line; the methods. The plot: each cell's dev curve as the mean
over seeds, and the highlighted cell's min..max band over seeds. Everything is read in a thread
worker and re-read every few seconds, so a running study fills in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from attnlab.study.listing import find_studies  # noqa: F401 - re-exported for the tests
from attnlab.tui.jobs import error_line
from attnlab.tui.widgets.plots import MetricPlot
from attnlab.viz.text import middle_ellipsis

REFRESH_SECONDS = 3.0
LIST_NAME_WIDTH = 14  # one line per study even in the narrow list (80 columns)


@dataclass
class StudyLoaded(Message):
    directory: Path
    table: Any  # attnlab.study.table.StudyTable, or None with an error
    curves: list[Any]
    error: str = ""


@dataclass
class StudiesFound(Message):
    directories: list[Path]


NAME_MAX, NAME_NARROW = 20, 12  # the cell-name column: it gives way first, never a figure
COLUMN_EDGE = 3  # a column's padding and rule in a rich Table


def metric_pages(columns: list[str], body: list[list[str]], lead: int, width: int) -> list[range]:
    """The metric columns (indices after the ``lead`` ones) in pages that fit ``width``
    whole: each page as many as fit beside the name and n columns (at least one)."""

    def need(i: int) -> int:
        lines = [columns[i], *(line for cells in body for line in cells[i].split("\n"))]
        return max(len(line) for line in lines) + COLUMN_EDGE

    name = min(NAME_MAX if width >= 70 else NAME_NARROW, need(0) - COLUMN_EDGE) + COLUMN_EDGE
    room = width - 1 - name - sum(need(i) for i in range(1, lead))
    pages, start = [], lead
    while start < len(columns):
        end, used = start, 0
        while end < len(columns) and (end == start or used + need(end) <= room):
            used += need(end)
            end += 1
        pages.append(range(start, end))
        start = end
    return pages or [range(lead, lead)]


def table_renderable(
    table: Any, highlighted: str | None = None, width: int = 0, page: int = 0
) -> Table:
    """The study table; with ``width`` only the metrics that fit it whole (page ``page`` of
    them: the caption says which and that ``m`` shows the next)."""
    from attnlab.study.render import stacked_rows

    title = f"{table.name}: {table.split} split, {table.checkpoint} checkpoint"
    out = Table(title=title, expand=True, show_lines=False)
    columns, body = stacked_rows(table)
    lead = 3 if getattr(table, "tune", None) else 2
    pages = metric_pages(columns, body, lead, width) if width else [range(lead, len(columns))]
    shown = [*range(lead), *pages[page % len(pages)]]
    narrow = bool(width) and width < 70
    for i in shown:
        if i == 0:  # the cell's name gives way first: the figures are never cut
            out.add_column(
                columns[i],
                no_wrap=True,
                overflow="ellipsis",
                max_width=NAME_NARROW if narrow else NAME_MAX,
            )
        else:
            out.add_column(columns[i], justify="right", no_wrap=True)
    for cells in body:
        name = cells[0].replace(" (baseline)", " ◆")
        style = "reverse" if highlighted and name.split(" ")[0] == highlighted else ""
        out.add_row(name, *(cells[i] for i in shown[1:]), style=style)
    out.caption = "◆ baseline · * p < 0.05 over seeds · † over sentences (Holm)"
    if len(pages) > 1:
        part = pages[page % len(pages)]
        out.caption += (
            f"\nmetrics {part.start - lead + 1}–{part.stop - lead} of "
            f"{len(columns) - lead} · m: next metrics"
        )
    return out


def notes_text(table: Any) -> Text:
    text = Text()
    for failure in table.failures:
        text.append("failed ", style="bold red")
        text.append(f"{failure['run']}: {failure.get('error') or failure['status']}\n")
    for note in getattr(table, "notes", []):
        text.append("note ", style="bold yellow")
        text.append(f"{note}\n")
    missing = [
        m for row in table.rows for m in row.missing if "error" not in m and "unusable" not in m
    ]
    if missing:
        text.append(f"not scored yet: {len(missing)} run(s)\n", style="dim")
    for line in table.methods.values():
        text.append(f"· {line}\n", style="dim")
    return text


def tune_renderable(table: Any, highlighted: str | None) -> Table | None:
    """The tuning curve of the highlighted cell (the first when none): each candidate's dev
    mean ± half-width, the chosen one marked."""
    from attnlab.study.render import tune_rows

    if not getattr(table, "tune", None) or not table.rows:
        return None
    names = [row.name for row in table.rows]
    cell = highlighted if highlighted in names else names[0]
    columns, body = tune_rows(table, cell)
    out = Table(title=f"{cell}: tuning on dev", expand=True)
    for i, column in enumerate(columns[1:]):
        out.add_column(column, justify="right" if i in (1, 2) else "left", no_wrap=True)
    for cells in body:
        out.add_row(*cells[1:])
    return out


class StudiesView(Vertical):
    """The Studies tab."""

    BINDINGS = [
        Binding("n", "cell(1)", "Next cell"),
        Binding("b", "cell(-1)", "Prev cell"),
        Binding("c", "cost", "Next cost"),
        Binding("m", "metrics", "More metrics"),  # acts (and shows) when they do not all fit
    ]

    DEFAULT_CSS = """
    StudiesView #studies-list { width: 24; height: 1fr; }
    StudiesView #study-body { width: 1fr; height: 1fr; }
    StudiesView #study-table { height: auto; }
    StudiesView #study-notes { height: auto; }
    StudiesView #study-tune { height: auto; display: none; }
    StudiesView #study-curves { height: 12; min-height: 8; }
    StudiesView #study-cost { height: 12; min-height: 8; }
    StudiesView #studies-empty { color: $text-muted; padding: 1; }
    """

    def __init__(
        self, runs_dir: Path, *, refresh_seconds: float = REFRESH_SECONDS, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.runs_dir = Path(runs_dir)
        self.refresh_seconds = refresh_seconds
        self.directories: list[Path] = []
        self.current: Path | None = None
        self.table: Any = None
        self.curves: list[Any] = []
        self.highlighted_cell: str | None = None
        self.shown: tuple[Any, Any] = (None, None)  # (table, notes) as last drawn
        self.tune_shown: Table | None = None  # the highlighted cell's tuning curve
        self.wanted: Path | None = None  # a study just started: shown once its folder appears
        self.cost_key = "train_tokens_per_s"  # the cost the score-against-cost plot reads
        self.metric_page = 0  # which metrics show when they do not all fit (m: the next)

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield OptionList(id="studies-list")
            with VerticalScroll(id="study-body"):
                yield Static(
                    "No study yet: `attnlab study run FILE`, or S in Setup (every variant of "
                    "a slot × N seeds).",
                    id="studies-empty",
                )
                yield Static("", id="study-table")
                yield Static("", id="study-tune")
                yield MetricPlot("dev BLEU: mean over seeds", id="study-curves")
                yield MetricPlot("score against cost", x_label="cost", id="study-cost")
                yield Static("", id="study-notes")

    def on_mount(self) -> None:
        self.scan()
        self.set_interval(self.refresh_seconds, self.scan)

    @work(thread=True, exclusive=True, exit_on_error=False, group="studies-scan")
    def scan(self) -> None:
        self.post_message(StudiesFound(find_studies(self.runs_dir)))
        if self.current is not None:
            self._load(self.current)

    def _load(self, directory: Path) -> None:
        from attnlab.study.curves import study_curves
        from attnlab.study.table import load_table

        try:  # an answer for another study than the one shown is dropped in _loaded
            table = load_table(directory)
            curves = study_curves(directory, "bleu")
        except Exception as err:  # a damaged study file: one line, never a traceback
            self.post_message(StudyLoaded(directory, None, [], error_line(err)))
            return
        self.post_message(StudyLoaded(directory, table, curves))

    @work(thread=True, exclusive=True, exit_on_error=False, group="studies-load")
    def load(self, directory: Path) -> None:
        self._load(directory)

    @on(StudiesFound)
    def _found(self, message: StudiesFound) -> None:
        if message.directories == self.directories:
            return
        self.directories = message.directories
        options = self.query_one("#studies-list", OptionList)
        keep = self.current
        options.clear_options()
        options.add_options(
            [Option(middle_ellipsis(d.name, LIST_NAME_WIDTH), id=str(d)) for d in self.directories]
        )
        self.query_one("#studies-empty").display = not self.directories
        if self.directories:
            chosen = keep if keep in self.directories else self.directories[0]
            if self.wanted in self.directories:
                chosen, self.wanted = self.wanted, None
            options.highlighted = self.directories.index(chosen)
            if chosen != self.current:
                self.show_study(chosen)

    def open_study(self, directory: Path) -> None:
        """Show ``directory`` (a study the lab just started) as soon as it holds study.json."""
        self.wanted = directory
        self.directories = []  # the next scan re-lists, choosing it when it is there
        self.scan()

    def show_study(self, directory: Path) -> None:
        self.current = directory
        self.load(directory)

    @on(OptionList.OptionHighlighted, "#studies-list")
    def _chosen(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None and Path(event.option.id) != self.current:
            self.show_study(Path(event.option.id))

    @on(StudyLoaded)
    def _loaded(self, message: StudyLoaded) -> None:
        if message.directory != self.current:
            return
        table_widget = self.query_one("#study-table", Static)
        if message.table is None:
            # Nothing of the previous study stays beside this one's error.
            self.table, self.curves = None, []
            self.shown = (None, None)
            table_widget.update(Text(f"{message.directory}: {message.error}", style="red"))
            self.query_one("#study-notes", Static).update("")
            self._show_tune()
            self._plot()
            self._plot_cost()
            return
        self.table, self.curves = message.table, message.curves
        self.shown = (self._table(), notes_text(self.table))
        table_widget.update(self.shown[0])
        self.query_one("#study-notes", Static).update(self.shown[1])
        self._show_tune()
        self._plot()
        self._plot_cost()

    def _plot_cost(self) -> None:
        """Each cell's score (the table's first metric) against the chosen cost: one point at
        the mean, its 95 % t interval over seeds as a vertical bar."""
        from attnlab.study.metrics import COSTS, METRICS
        from attnlab.study.render import cost_points

        plot = self.query_one("#study-cost", MetricPlot)
        table = self.table
        metric = table.metrics[0] if table is not None and table.metrics else ""
        points = cost_points(table, metric, self.cost_key) if metric else []
        label = METRICS[metric].label if metric in METRICS else metric
        plot.title = f"{label} against {COSTS[self.cost_key].label} (per cell, 95 % t over seeds)"
        plot.x_label = COSTS[self.cost_key].label
        plot.set_series(
            [(cell, [x, x, x], [low, mean, high]) for cell, x, low, mean, high in points]
        )

    def action_cost(self) -> None:
        """The next cost on the score-against-cost plot's x axis."""
        from attnlab.study.metrics import COSTS

        keys = list(COSTS)
        self.cost_key = keys[(keys.index(self.cost_key) + 1) % len(keys)]
        self._plot_cost()

    def _show_tune(self) -> None:
        widget = self.query_one("#study-tune", Static)
        tune = tune_renderable(self.table, self.highlighted_cell) if self.table else None
        self.tune_shown = tune
        widget.display = tune is not None
        widget.update(tune if tune is not None else "")

    def _plot(self) -> None:
        series: list[tuple[str, list[float], list[float]]] = []
        for curve in self.curves:
            if curve.steps:
                series.append((f"{curve.cell} (n={len(curve.seeds)})", curve.steps, curve.mean))
        band = next((c for c in self.curves if c.cell == self.highlighted_cell), None)
        if band is None and self.curves:
            band = self.curves[0]
        if band is not None and band.steps and len(band.seeds) > 1:
            series.append((f"{band.cell} min", band.steps, band.low))
            series.append((f"{band.cell} max", band.steps, band.high))
        self.query_one("#study-curves", MetricPlot).set_series(series)

    def _table(self) -> Table:
        """The table at the width it is drawn in (the metrics that fit, page ``metric_page``)."""
        width = self.query_one("#study-body").size.width or self.app.size.width
        return table_renderable(self.table, self.highlighted_cell, width - 2, self.metric_page)

    def _pages(self) -> int:
        if self.table is None:
            return 1
        from attnlab.study.render import stacked_rows

        columns, body = stacked_rows(self.table)
        lead = 3 if getattr(self.table, "tune", None) else 2
        width = (self.query_one("#study-body").size.width or self.app.size.width) - 2
        return len(metric_pages(columns, body, lead, width))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "metrics":
            return self._pages() > 1
        return True

    def action_metrics(self) -> None:
        self.metric_page = (self.metric_page + 1) % self._pages()
        self._redraw_table()

    def _redraw_table(self) -> None:
        if self.table is not None:
            self.shown = (self._table(), self.shown[1])
            self.query_one("#study-table", Static).update(self.shown[0])

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw_table)  # at the body's new width
        self.refresh_bindings()

    def action_cell(self, step: int) -> None:
        self.cycle_cell(step)

    def cycle_cell(self, step: int = 1) -> None:
        """Highlight the next cell (its row, and its band in the plot)."""
        if self.table is None or not self.table.rows:
            return
        names = [row.name for row in self.table.rows]
        index = names.index(self.highlighted_cell) if self.highlighted_cell in names else -1
        self.highlighted_cell = names[(index + step) % len(names)]
        self.shown = (self._table(), self.shown[1])
        self.query_one("#study-table", Static).update(self.shown[0])
        self._show_tune()
        self._plot()
