"""Heads: which heads matter for this model (issue 15).

The layer × head importance grid (Michel et al. 2019, |∂L/∂ξ_h| of a head gate, ℓ2-normalised
per layer) as a heatmap, and the pruning curve (dev BLEU with the k least important heads
masked, k = 0 … all) as a plot. Both come from ``attnlab.interpret.reports.heads_report`` in
a thread worker that posts progress messages; ``c`` stops it between curve points, Esc closes
the screen (which cancels the worker too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, ProgressBar, Static
from textual.worker import get_current_worker

from attnlab.tui.jobs import Jobs
from attnlab.tui.views.run_select import checkpoint_path
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.tui.widgets.plots import MetricPlot

HEADS = Jobs()  # one heads report at a time, across Heads screens
SENTENCES = 50  # dev sentences per curve point: a curve of a small model in seconds on a CPU
ROLE_SHORT = {"enc_self": "enc", "dec_self": "dec", "cross": "cross"}


@dataclass
class HeadsProgress(Message):
    phase: str  # "importance" | "curve"
    done: int
    total: int
    point: dict[str, Any] | None


@dataclass
class HeadsDone(Message):
    report: dict[str, Any] | None
    error: str = ""
    cancelled: bool = False


def importance_grid(
    importance: dict[str, list[list[float]]],
) -> tuple[np.ndarray, list[str], list[str]]:
    """{role: [[per head] per layer]} -> ([role·layer, head] matrix, row labels, head labels)."""
    rows, labels = [], []
    for role, layers in importance.items():
        for layer, heads in enumerate(layers):
            rows.append(heads)
            labels.append(f"{ROLE_SHORT.get(role, role)} L{layer}")
    width = max((len(r) for r in rows), default=0)
    matrix = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        matrix[i, : len(row)] = row
    return matrix, labels, [f"h{h}" for h in range(width)]


def head_name(head: list[Any] | None) -> str:
    return "–" if head is None else f"{ROLE_SHORT.get(head[0], head[0])} L{head[1]} h{head[2]}"


class HeadsScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("c", "cancel", "Stop curve"),
    ]

    def __init__(
        self,
        run_dir: Path,
        checkpoint: str = "best",
        split: str = "dev",
        sentences: int = SENTENCES,
    ) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.checkpoint = checkpoint
        self.split = split
        self.sentences = sentences
        self.report: dict[str, Any] | None = None
        self.curve: list[dict[str, Any]] = []
        self.finished = False
        self._stop = False

    def compose(self) -> ComposeResult:
        with Vertical(id="heads-box"):
            yield Static(
                f"[b]Heads[/] of [b]{_escape(self.run_dir.name)}[/] ({self.checkpoint}, "
                f"{self.split}, first {self.sentences} sentences)",
                id="heads-title",
            )
            with Horizontal(id="heads-progress-row"):
                yield ProgressBar(total=None, show_eta=False, id="heads-progress")
                yield Static("loading the model …", id="heads-status")
            with Horizontal(id="heads-body"):
                with Vertical(id="heads-grid-box"):
                    yield Static(
                        "importance (Michel et al. 2019; ℓ2 = 1 per layer)", classes="heads-label"
                    )
                    yield AttentionHeatmap(id="heads-grid")
                yield MetricPlot(
                    "pruning curve", y_label="BLEU", x_label="heads masked", id="heads-curve"
                )
            yield Static("", id="heads-cell")
            yield Static("", id="heads-order")
        yield Footer()

    def on_mount(self) -> None:
        self.compute(HEADS.issue())

    # HEADS runs one report at a time: a screen opened again waits for the closed one's worker
    # (cancelled, it stops between curve points) instead of sharing the machine with it.
    @work(thread=True, exit_on_error=False, group="heads")
    def compute(self, number: int | None = None) -> None:
        from attnlab.interpret.reports import Cancelled, heads_report, scoring_dataset
        from attnlab.runs import load_checkpoint

        worker = get_current_worker()
        number = HEADS.issue() if number is None else number

        def progress(phase: str, done: int, total: int, point: dict[str, Any] | None) -> None:
            self.post_message(HeadsProgress(phase, done, total, point))

        def report() -> dict[str, Any] | None:
            loaded = load_checkpoint(checkpoint_path(self.run_dir, self.checkpoint))
            dataset = scoring_dataset(loaded, loaded.config)
            try:
                return heads_report(
                    loaded,
                    dataset,
                    self.split,
                    self.sentences,
                    "cpu",
                    progress=progress,
                    cancelled=lambda: self._stop or worker.is_cancelled,
                )
            except Cancelled:
                return None

        outcome = HEADS.run(number, report)
        if outcome.error:
            self.post_message(HeadsDone(None, outcome.error))
        elif not outcome.skipped:
            self.post_message(HeadsDone(outcome.value, cancelled=outcome.value is None))

    @on(HeadsProgress)
    def _progress(self, message: HeadsProgress) -> None:
        bar = self.query_one("#heads-progress", ProgressBar)
        if message.phase == "importance" and message.point is not None:
            self.report = message.point
            matrix, rows, cols = importance_grid(message.point["importance"])
            self.query_one("#heads-grid", AttentionHeatmap).set_matrix(
                np.nan_to_num(matrix), rows, cols
            )
            order = message.point["order"]
            self.query_one("#heads-order", Static).update(
                "least important first: "
                + ", ".join(head_name(h) for h in order[:8])
                + (" …" if len(order) > 8 else "")
            )
            bar.update(total=len(order) + 1, progress=0)
            self._status(f"pruning curve: 0/{len(order) + 1} points (c stops)")
            return
        if message.point is not None:
            self.curve.append(message.point)
            bar.update(total=message.total, progress=message.done)
            last = message.point
            self._status(
                f"pruning curve: {message.done}/{message.total} points · {last['masked']} masked "
                f"({head_name(last['head'])}) → BLEU {last['bleu']:.2f}"
            )
            self._plot()

    @on(AttentionHeatmap.CursorMoved, "#heads-grid")
    def _cell(self, message: AttentionHeatmap.CursorMoved) -> None:
        cell = message.cell
        self.query_one("#heads-cell", Static).update(
            f"[b]{cell.row_label} {cell.col_label}[/]: importance {cell.weight:.3f}"
        )

    def _plot(self) -> None:
        xs = [p["masked"] for p in self.curve]
        self.query_one("#heads-curve", MetricPlot).set_series(
            [(f"{self.split} BLEU", xs, [p["bleu"] for p in self.curve])]
        )

    @on(HeadsDone)
    def _done(self, message: HeadsDone) -> None:
        self.finished = True
        bar = self.query_one("#heads-progress", ProgressBar)
        if message.error:
            bar.display = False
            self._status(f"[$error]✗ {_escape(message.error)}[/]")
            return
        if message.cancelled:
            self._status(f"stopped after {len(self.curve)} points (Esc closes)")
            return
        self.report = message.report
        bar.update(total=1, progress=1)
        base = self.curve[0]["bleu"] if self.curve else float("nan")
        self._status(f"done: {len(self.curve)} points; BLEU {base:.2f} with every head")

    def _status(self, text: str) -> None:
        self.query_one("#heads-status", Static).update(text)

    def action_cancel(self) -> None:
        self._stop = True
        if not self.finished:
            self._status("stopping after this point …")

    def action_close(self) -> None:
        self._stop = True
        self.dismiss(None)


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
