"""Runs / Compare: every run in the runs directory, live; overlay the marked runs.

The table re-reads ``attnlab.runs.list_runs`` every couple of seconds, so a run started with
``attnlab train`` in another terminal appears and its figures move. Space marks runs; the
marked runs' dev BLEU curves and their last BLEU-by-source-length buckets are overlaid.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from attnlab.tui.follow import RunFollower, format_duration
from attnlab.tui.widgets.plots import BarsPlot, MetricPlot

REFRESH_SECONDS = 2.0
COLUMNS = ("", "run", "task", "model", "params", "steps", "BLEU", "chrF", "exact", "tok/s", "wall", "status")


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def summary_row(run: Any, marked: bool) -> tuple[str, ...]:
    """One table row from an ``attnlab.runs.RunSummary``."""
    em = getattr(run, "best_exact_match", None)
    em_text = _fmt(em * 100 if isinstance(em, (int, float)) and em <= 1 else em, ".1f")
    return (
        "●" if marked else " ",
        Path(run.path).name,
        str(run.task),
        f"{run.arch}/{run.attention}",
        _fmt(run.params, ","),
        _fmt(run.steps, "d"),
        _fmt(run.best_bleu),
        _fmt(run.best_chrf),
        em_text,
        _fmt(run.tokens_per_s, ",.0f"),
        format_duration(run.wall_s) if run.wall_s is not None else "–",
        str(run.status),
    )


class RunsView(Vertical):
    BINDINGS = [
        Binding("space", "mark", "Mark/compare"),
        Binding("enter", "inspect", "Inspect", show=False),
        Binding("w", "watch", "Follow in Train"),
        Binding("r", "refresh_runs", "Refresh"),
    ]

    def __init__(self, runs_dir: Path, *, refresh_seconds: float = REFRESH_SECONDS, id: str | None = None):
        super().__init__(id=id)
        self.runs_dir = runs_dir
        self.refresh_seconds = refresh_seconds
        self.runs: list[Any] = []
        self.marked: set[str] = set()
        self._followers: dict[str, RunFollower] = {}
        self._rows: list[tuple[str, ...]] = []
        self._last_signature: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="runs-status")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="compare"):
            yield MetricPlot("dev BLEU of marked runs", id="compare-curves")
            yield BarsPlot("BLEU by source length", id="compare-bars")

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        table.add_columns(*COLUMNS)
        self.refresh_runs()
        self.set_interval(self.refresh_seconds, self.refresh_runs)

    def _signature(self) -> tuple:
        """Cheap change detector: each run directory's event-log size and mtime."""
        try:
            entries = []
            for d in self.runs_dir.iterdir():
                events = d / "events.jsonl"
                stat = events.stat() if events.exists() else None
                entries.append((d.name, stat.st_size if stat else -1, stat.st_mtime if stat else 0.0))
            return tuple(sorted(entries))
        except OSError:
            return ()

    def refresh_runs(self, force: bool = False) -> None:
        """Re-read the runs when a run directory or event log changed (polled on a timer)."""
        signature = self._signature()
        if not force and signature == self._last_signature:
            return
        self._last_signature = signature
        try:
            from attnlab.runs import list_runs

            runs = list_runs(self.runs_dir)
        except ImportError:
            runs = []
        except Exception as err:  # a half-written run directory must not break the lab
            self.query_one("#runs-status", Static).update(f"[$error]cannot list runs: {err}[/]")
            return
        self.runs = runs
        rows = [summary_row(run, str(run.path) in self.marked) for run in runs]
        self.query_one("#runs-status", Static).update(
            f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {self.runs_dir}  [dim]Space: mark for comparison · Enter: inspect · w: follow[/]"
        )
        if rows != self._rows:
            self._rows = rows
            table = self.query_one("#runs-table", DataTable)
            row = table.cursor_row
            table.clear()
            for run, cells in zip(runs, rows, strict=True):
                table.add_row(*cells, key=str(run.path))
            if rows:
                table.move_cursor(row=min(row, len(rows) - 1))
        self._update_compare()

    def _current(self) -> Any | None:
        table = self.query_one("#runs-table", DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

    def action_mark(self) -> None:
        run = self._current()
        if run is None:
            return
        key = str(run.path)
        self.marked.symmetric_difference_update({key})
        self._rows = []  # force a redraw of the marks
        self.refresh_runs(force=True)

    def action_inspect(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_in_inspect(Path(run.path))  # type: ignore[attr-defined]

    @on(DataTable.RowSelected, "#runs-table")
    def _selected(self) -> None:
        self.action_inspect()

    def action_watch(self) -> None:
        run = self._current()
        if run is not None:
            self.app.train_view.follow_run(Path(run.path))  # type: ignore[attr-defined]
            self.app.action_tab("train")  # type: ignore[attr-defined]

    def action_refresh_runs(self) -> None:
        self.refresh_runs(force=True)

    def _update_compare(self) -> None:
        series = []
        groups: list[str] = []
        bars: list[tuple[str, list[float]]] = []
        for key in sorted(self.marked):
            follower = self._followers.setdefault(key, RunFollower(Path(key)))
            follower.poll()
            label = Path(key).name[-24:]
            c = follower.curves
            series.append((label, c.eval_step, c.bleu))
            buckets = c.bleu_by_length
            if buckets:
                names = [str(b.get("bucket")) for b in buckets]
                if not groups:
                    groups = names
                by_name = {str(b.get("bucket")): float(b.get("bleu") or 0.0) for b in buckets}
                bars.append((label, [by_name.get(g, 0.0) for g in groups]))
        self.query_one("#compare-curves", MetricPlot).set_series(series)
        self.query_one("#compare-bars", BarsPlot).set_bars(groups, bars)
