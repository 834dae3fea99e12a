"""Runs / Compare: every run in the runs directory, live; overlay the marked runs.

The table re-reads ``attnlab.runs.list_runs`` every couple of seconds, so a run started with
``attnlab train`` in another terminal appears and its figures move. Space marks runs; the
marked runs' dev BLEU curves, their last BLEU-by-source-length buckets and their mean
cross-attention entropy (from eval events' attention_entropy) are overlaid.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from attnlab.events import RunStatus
from attnlab.tui.follow import RunFollower, format_duration
from attnlab.tui.widgets.plots import BarsPlot, MetricPlot
from attnlab.viz.text import fit_count, fold_warnings, middle_ellipsis, run_label, run_labels

REFRESH_SECONDS = 2.0
COLUMNS = (
    "",
    "run",
    "task",
    "model",
    "params",
    "steps",
    "BLEU",
    "chrF",
    "exact",
    "tok/s",
    "wall",
    "status",
)
COMPARE_BLEU_TITLE = "dev BLEU of marked runs"
COMPARE_LOSS_TITLE = "dev loss of marked runs"  # when every marked run is a language model
# Content widths (without the two padding cells DataTable adds); "run" takes what is left.
WIDTHS = {
    "": 1,
    "task": 8,
    "model": 16,
    "params": 7,
    "steps": 5,
    "BLEU": 5,
    "chrF": 5,
    "exact": 5,
    "tok/s": 6,
    "wall": 6,
    "status": max(len(status.value) for status in RunStatus),  # never cut: "interrupted"
}
# What matters most at 80 columns comes first: which run, which model, how good, is it done.
PRIORITY = (
    "",
    "run",
    "model",
    "BLEU",
    "status",
    "chrF",
    "steps",
    "exact",
    "tok/s",
    "task",
    "wall",
    "params",
)
RUN_MIN, RUN_MAX, PAD = 16, 40, 2
ARCH_SHORT = {"transformer": "tfm"}


def fit_columns(width: int, longest_run: int) -> tuple[list[str], int]:
    """The columns (in table order) that fit ``width`` by priority, and the run column's width.

    The run column gets at least RUN_MIN characters (names are cut in the middle to fit),
    and whatever is left after the other chosen columns, up to the longest name.
    """
    chosen = ["", "run"]
    used = WIDTHS[""] + PAD + RUN_MIN + PAD
    for name in PRIORITY[2:]:
        if used + WIDTHS[name] + PAD <= width:
            chosen.append(name)
            used += WIDTHS[name] + PAD
    run_width = min(max(RUN_MIN + width - used, RUN_MIN), max(longest_run, RUN_MIN), RUN_MAX)
    return [c for c in COLUMNS if c in chosen], run_width


def model_label(arch: str, attention: str, width: int = WIDTHS["model"]) -> str:
    """``rnn/bahdanau``, ``tfm/performer``: the architecture abbreviated, the variant kept
    (roles that share one variant, ``scaled-dot/scaled-dot``, are named once)."""
    roles = attention.split("/")
    variant = roles[0] if len(set(roles)) == 1 else attention
    return middle_ellipsis(f"{ARCH_SHORT.get(arch, arch)}/{variant}", width)


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _count_text(value: Any, width: int) -> str:
    """A count that fits its column (9,031,512 parameters -> ``9.03M``), "–" when unknown."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return fit_count(value, width)


def summary_row(run: Any, marked: bool) -> tuple[str, ...]:
    """One table row from an ``attnlab.runs.RunSummary``."""
    em = getattr(run, "best_exact_match", None)
    em_text = _fmt(em * 100 if isinstance(em, (int, float)) and em <= 1 else em, ".1f")
    return (
        "●" if marked else " ",
        str(getattr(run, "listed_name", Path(run.path).name)),
        str(run.task),
        model_label(str(run.arch), str(run.attention)),
        _count_text(run.params, WIDTHS["params"]),
        _count_text(run.steps, WIDTHS["steps"]),
        _fmt(run.best_bleu),
        _fmt(run.best_chrf),
        em_text,
        _count_text(run.tokens_per_s, WIDTHS["tok/s"]),
        format_duration(run.wall_s) if run.wall_s is not None else "–",
        str(run.status),
    )


class RunsView(Vertical):
    BINDINGS = [
        Binding("space", "mark", "Mark/compare"),
        Binding("enter", "inspect", "Inspect", show=False),
        Binding("w", "watch", "Follow in Train"),
        # In the footer while it matters: below NARROW columns, where the panels take turns.
        Binding("e", "toggle_entropy", "Bars/entropy"),
        Binding("r", "refresh_runs", "Refresh"),
    ]
    NARROW = 90  # below this width the BLEU-by-length bars and the entropy overlay take turns

    def __init__(
        self, runs_dir: Path, *, refresh_seconds: float = REFRESH_SECONDS, id: str | None = None
    ):
        super().__init__(id=id)
        self.runs_dir = runs_dir
        self.refresh_seconds = refresh_seconds
        self.runs: list[Any] = []
        self.marked: set[str] = set()
        self.entropy_first = False  # narrow terminals: the entropy overlay instead of the bars
        self._followers: dict[str, RunFollower] = {}
        self._rows: list[tuple[str, ...]] = []
        self._last_signature: tuple | None = None
        self._layout: tuple[list[str], int] | None = None
        self._status = ""  # the status line without the cursor's run name
        self._labels: list[str] = []  # the run column's labels, in self.runs' order

    def compose(self) -> ComposeResult:
        yield Static("", id="runs-status")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="compare"):
            yield MetricPlot(COMPARE_BLEU_TITLE, bounds=(0.0, 100.0), id="compare-curves")
            yield BarsPlot("BLEU by source length", bounds=(0.0, 100.0), id="compare-bars")
            yield MetricPlot("cross-attention entropy (nats)", id="compare-entropy")

    class Listed(Message):
        """The runs a background refresh read (``runs`` None: nothing changed)."""

        def __init__(self, signature: tuple, runs: list[Any] | None, error: str | None) -> None:
            super().__init__()
            self.signature, self.runs, self.error = signature, runs, error

    def on_mount(self) -> None:
        self.refresh_runs()
        # Polls read the runs folder off the UI thread: a slow disk or a giant event log
        # never freezes the lab (the files themselves are opened non-blocking, regular only).
        self.set_interval(self.refresh_seconds, self._refresh_in_background)

    def _refresh_in_background(self) -> None:
        self._list_in_thread(self._last_signature)

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-list")
    def _list_in_thread(self, last: tuple | None) -> None:
        signature = self._signature()
        if signature == last:
            return
        runs, error = self._read_runs()
        self.post_message(self.Listed(signature, runs, error))

    @on(Listed)
    def _listed(self, message: Listed) -> None:
        self._last_signature = message.signature
        self._show_runs(message.runs or [], message.error)

    def _read_runs(self) -> tuple[list[Any] | None, str | None]:
        try:  # the runs directory's runs, then each study's under its study and cell
            from attnlab.study.listing import lab_runs

            return lab_runs(self.runs_dir), None
        except ImportError:
            return [], None
        except Exception as err:  # a half-written run directory must not break the lab
            return None, str(err)

    def _signature(self) -> tuple:
        """Cheap change detector: each run's event-log size and mtime (study runs too)."""
        from attnlab.study.listing import lab_signature

        return lab_signature(self.runs_dir)

    def refresh_runs(self, force: bool = False) -> None:
        """Re-read the runs when a run directory or event log changed (polled on a timer)."""
        signature = self._signature()
        if not force and signature == self._last_signature:
            return
        self._last_signature = signature
        runs, error = self._read_runs()
        self._show_runs(runs or [], error)

    def _show_runs(self, runs: list[Any], error: str | None) -> None:
        if error is not None:
            self.query_one("#runs-status", Static).update(
                f"[$error]cannot list runs: {escape(error)}[/]"
            )
            return
        self.runs = runs
        rows = [summary_row(run, str(run.path) in self.marked) for run in runs]
        # The event reader's warnings (skipped lines): the first, by run name (its text starts
        # with the file's path) and without its per-line details, so that it fits the line;
        # every warning in full is the line's tooltip.
        folded = fold_warnings([(run.path.name, w) for run in runs for w in run.warnings])
        note = f"  [$warning]{escape(folded)}[/]" if folded else ""
        status = self.query_one("#runs-status", Static)
        self._status = (
            f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {self.runs_dir}{note}  "
            "[dim]Space: mark for comparison · Enter: inspect · w: follow[/]"
        )
        status.update(self._status)
        status.tooltip = "\n".join(w for run in runs for w in run.warnings) or None
        if rows != self._rows or self._layout != self._fit():
            self._rows = rows
            self._fill_table()
        self._show_cursor_name()
        self._update_compare()

    def _fit(self) -> tuple[list[str], int]:
        width = self.query_one("#runs-table", DataTable).size.width or self.app.size.width
        longest = max((len(r[1]) for r in self._rows), default=RUN_MIN)
        return fit_columns(width - 2, longest)  # 2: the vertical scrollbar

    def _fill_table(self) -> None:
        """(Re)build the table for the current width.

        Chosen columns, run names cut in the middle.
        """
        table = self.query_one("#runs-table", DataTable)
        layout = self._fit()
        row = table.cursor_row
        if layout != self._layout:
            self._layout = layout
            table.clear(columns=True)
            columns, run_width = layout
            for name in columns:
                table.add_column(name, width=run_width if name == "run" else WIDTHS[name], key=name)
        table.clear()
        columns, run_width = self._layout
        index = [COLUMNS.index(c) for c in columns]
        # The stamp goes before the variant, unless that makes two runs look the same.
        labels = run_labels([cells[1] for cells in self._rows], run_width)
        for run, cells, label in zip(self.runs, self._rows, labels, strict=True):
            shown = [cells[i] for i in index]
            shown[1] = label
            table.add_row(*shown, key=str(run.path))
        self._labels = labels
        if self._rows:
            table.move_cursor(row=min(max(row, 0), len(self._rows) - 1))
        self._show_cursor_name()

    @on(DataTable.RowHighlighted, "#runs-table")
    def _show_cursor_name(self) -> None:
        """The highlighted run's whole name first on the status line when its row cuts it
        (issue 44: the cut label is never all there is)."""
        run = self._current()
        index = self.runs.index(run) if run is not None else -1
        label = self._labels[index] if 0 <= index < len(self._labels) else ""
        full = str(getattr(run, "listed_name", "")) if run is not None else ""
        prefix = f"[b]▸ {escape(full)}[/]  ·  " if full and label != full else ""
        self.query_one("#runs-status", Static).update(prefix + self._status)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_entropy":  # wide: all three panels show, nothing to switch
            return self.app.size.width < self.NARROW
        return True

    def on_resize(self) -> None:
        if self.is_mounted and self._layout is not None and self._layout != self._fit():
            self._fill_table()
        if self.is_mounted:
            self._show_panels()
            self.refresh_bindings()

    def action_toggle_entropy(self) -> None:
        """At 80 columns: the third panel shows BLEU by length or the entropy overlay."""
        self.entropy_first = not self.entropy_first
        self._show_panels()

    def _show_panels(self) -> None:
        """Three panels when they fit; else the curves plus one of bars / entropy (``e``)."""
        entropy = self.query_one("#compare-entropy", MetricPlot)
        has_entropy = any(len(ys) for _, _, ys in entropy.series)
        narrow = self.app.size.width < self.NARROW
        entropy.display = has_entropy and (not narrow or self.entropy_first)
        self.query_one("#compare-bars", BarsPlot).display = not (narrow and entropy.display)

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
        losses = []  # the dev loss: what language models (no BLEU) are compared by
        entropy = []
        groups: list[str] = []
        bars: list[tuple[str, list[float]]] = []
        followers = []
        for key in sorted(self.marked):
            follower = self._followers.setdefault(key, RunFollower(Path(key)))
            follower.poll()
            followers.append(follower)
            label = run_label(Path(key).name, 28)  # keeps the variant, cuts the stamp
            c = follower.curves
            series.append((label, c.eval_step, c.bleu))
            losses.append((label, c.eval_step, c.dev_loss))
            # cross-attention: the one role every architecture has (RNN and Transformer alike)
            entropy.append((label, c.eval_step, c.entropy.get("cross", [])))
            buckets = c.bleu_by_length
            if buckets:
                names = [str(b.get("bucket")) for b in buckets]
                if not groups:
                    groups = names
                by_name = {str(b.get("bucket")): float(b.get("bleu") or 0.0) for b in buckets}
                bars.append((label, [by_name.get(g, 0.0) for g in groups]))
        curves = self.query_one("#compare-curves", MetricPlot)
        # Every marked run declares its task's metrics (language models): their dev loss.
        by_loss = bool(followers) and all(f.curves.task for f in followers)
        curves.title = COMPARE_LOSS_TITLE if by_loss else COMPARE_BLEU_TITLE
        curves.bounds = None if by_loss else (0.0, 100.0)
        curves.set_series(losses if by_loss else series)
        self.query_one("#compare-bars", BarsPlot).set_bars(groups, bars)
        self.query_one("#compare-entropy", MetricPlot).set_series(entropy)
        self._show_panels()  # the overlay appears once a marked run logged attention_entropy
