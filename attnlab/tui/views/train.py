"""Train: launch runs in a child process, follow their events, plot, control, queue.

The view polls ``RUN/events.jsonl`` on a timer (a few hundred bytes per poll; no thread).
It also watches the child's exit code: a child that dies without a ``done`` event is shown
as an error with the last line of its stderr, and the app keeps running.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Label, Log, OptionList, ProgressBar, Static

from attnlab.config import ExperimentConfig
from attnlab.events import ControlCommand
from attnlab.launch import TrainingProcess
from attnlab.tui.follow import (
    ENTROPY_ROLES,
    ENTROPY_TITLE,
    FAILED,
    FINISHED,
    PAUSED,
    SENTENCE_METRICS_TITLE,
    STARTING,
    RunFollower,
    format_duration,
    metric_label,
    metric_panel,
)
from attnlab.tui.widgets.plots import LegendWrapped, MetricPlot, align_legends
from attnlab.viz.text import run_label


def eta_text(follower: RunFollower, now: float) -> str:
    """``ETA 1:05`` while it trains; a run that ended short of its steps (stopped, failed)
    says so with how far it got, not ``ETA 0:00`` (issue 44); one that finished: 0:00."""
    if not follower.finished:
        return f"ETA {format_duration(follower.eta_s(now))}"
    if follower.state != FINISHED and follower.step < follower.max_steps:
        done = 100.0 * follower.step / max(follower.max_steps, 1)
        return f"{follower.state} at {done:.0f} %"
    return f"ETA {format_duration(0.0)}"


# Builds the child's argv (tests swap in a child that dies); None = ``python -m attnlab train``.
CommandFactory = Callable[[Path, Path, str], Sequence[str]]

POLL_SECONDS = 0.25


class TrainView(Vertical):
    """The Train tab: one active run (a child process or a run followed from disk) + a queue."""

    BINDINGS = [
        Binding("delete", "unqueue", "Unqueue", key_display="Del"),
        Binding("backspace", "unqueue", "Remove from queue", show=False),
        # Short terminals (24 rows): one plot at a time, full width, its own rows; v switches.
        Binding("v", "next_plot", "Next plot"),
    ]
    SHORT = 30  # rows below which one plot shows at a time (the app's ".short" too)

    class RunFinished(Message):
        """The active run ended (finished, stopped or failed)."""

        def __init__(self, run_dir: Path, state: str) -> None:
            super().__init__()
            self.run_dir = run_dir
            self.state = state

    def __init__(
        self,
        runs_dir: Path,
        *,
        command_factory: CommandFactory | None = None,
        poll_seconds: float = POLL_SECONDS,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.runs_dir = runs_dir
        self.command_factory = command_factory
        self.poll_seconds = poll_seconds
        self.process: TrainingProcess | None = None
        self.follower: RunFollower | None = None
        self.queue: list[ExperimentConfig] = []
        self.paused = False
        self.pending_control: str | None = None
        self._timer: Timer | None = None
        self._samples_width = 0  # the line width the samples table was filled for
        self._drawn = (-1, -1, -1, -1)  # (train points, eval points, samples step, log lines)
        self._failure_reported = False
        self._status_shown: tuple | None = None
        self._launched_at = 0.0
        self._queue_shown: tuple[int, ...] | None = None
        self.plot_index = 0  # the plot shown when one shows at a time (short terminals)
        self._has_entropy = False

    def compose(self) -> ComposeResult:
        yield Static(
            "No run yet. Press [b]t[/] (or Train ▶ in Setup) to train the experiment.",
            id="train-status",
        )
        with Horizontal(id="train-progress-row"):
            yield ProgressBar(total=1, show_eta=False, id="train-progress")
            yield Label("", id="train-eta")
        with Horizontal(id="train-queue-row"):
            yield Label("queued\n[dim]Del removes[/]", id="train-queue-label")
            yield OptionList(id="train-queue")
        with Horizontal(id="train-plots"):
            yield MetricPlot("loss", id="loss-plot")
            yield MetricPlot(SENTENCE_METRICS_TITLE, bounds=(0.0, 100.0), id="metric-plot")
            yield MetricPlot(ENTROPY_TITLE, id="entropy-plot")
        with Horizontal(id="train-bottom"):
            table: DataTable[str] = DataTable(id="samples", cursor_type="row", zebra_stripes=True)
            yield table
            yield WrappedLog(id="event-log", max_lines=2000)

    def on_mount(self) -> None:
        table = self.query_one("#samples", DataTable)
        # One row per sample, three lines (src, ref, hyp) each fitted to the panel's width: a
        # column per sentence put ref and hyp dozens of columns off-screen on Multi30k.
        table.add_columns("ok", "sample")  # "ok" first: long sentences never hide it
        self._refresh_queue()
        self._show_plots()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "unqueue":  # listed in the footer only while the queue list has focus
            return bool(self.queue) and self.query_one("#train-queue", OptionList).has_focus
        if action == "next_plot":  # in the footer where the plots take turns
            return self.one_plot
        return True

    @property
    def one_plot(self) -> bool:
        return self.app.size.height < self.SHORT

    def plots(self) -> list[MetricPlot]:
        """The plots this run has (entropy once it logged attention_entropy)."""
        ids = ["#loss-plot", "#metric-plot"] + (["#entropy-plot"] if self._has_entropy else [])
        return [self.query_one(i, MetricPlot) for i in ids]

    def action_next_plot(self) -> None:
        self.plot_index = (self.plot_index + 1) % len(self.plots())
        self._show_plots()

    def _show_plots(self) -> None:
        """Every plot side by side; below SHORT rows one at a time (``v``), full width and
        without the x-axis title, so its y axis gets the rows a figure needs to be read."""
        plots, one = self.plots(), self.one_plot
        chosen = plots[self.plot_index % len(plots)]
        for plot in self.query_one("#train-plots").query(MetricPlot):
            plot.display = plot in plots and (not one or plot is chosen)
            if plot not in plots:
                continue
            x_label = "" if one else "step"  # the ticks are steps; the footer says v
            if plot.x_label != x_label:
                plot.x_label = x_label
                plot.set_series(plot.series)  # redrawn with its axis
        align_legends([p for p in plots if p.display])

    # -- starting and following ---------------------------------------------------------------

    @property
    def active(self) -> bool:
        """A run is in progress (its child runs, or a followed run has not ended)."""
        if self.process is not None and self.process.running:
            return True
        return self.follower is not None and self.process is None and not self.follower.finished

    def train(self, config: ExperimentConfig, queue: bool = False) -> str:
        """Start now, or queue behind the active run. Returns what happened (for the notice)."""
        if queue or self.active:
            self.queue.append(config)
            self._refresh_status()
            return f"queued ({len(self.queue)} waiting)"
        self._launch(config)
        return f"training {self.process.run_name if self.process else ''}"

    def _launch(self, config: ExperimentConfig) -> None:
        process = TrainingProcess.start(config, self.runs_dir, command=self.command_factory)
        self.process = process
        self._launched_at = time.time()
        self._follow(process.run_dir)
        self.log_line(f"started {process.run_name} (pid {process.pid})")

    def follow_run(self, run_dir: Path) -> None:
        """Watch a run started elsewhere (``attnlab train`` in another terminal)."""
        self.process = None
        self._follow(run_dir)
        self.log_line(f"following {run_dir}")

    def _follow(self, run_dir: Path) -> None:
        self.follower = RunFollower(run_dir)
        self.paused = False
        self.pending_control = None
        self._failure_reported = False
        self._samples_width = 0  # the line width the samples table was filled for
        self._drawn = (-1, -1, -1, -1)
        self.query_one("#samples", DataTable).clear()
        self.query_one("#event-log", WrappedLog).clear()
        if self._timer is None:
            self._timer = self.set_interval(self.poll_seconds, self.poll)
        self.poll()

    def poll(self) -> None:
        """Read new events, check the child, redraw what changed, start the next queued run."""
        follower = self.follower
        if follower is None:
            return
        if self.pending_control and follower.run_dir.is_dir():
            word, self.pending_control = self.pending_control, None
            self._send(word)
        follower.poll()
        if follower.deleted and self.process is not None:
            self.process.terminate()  # its run directory is gone: nothing left to train into
        code = self.process.poll() if self.process is not None else None
        if self.process is not None and code is not None and not follower.finished:
            follower.poll()  # the last events may have landed just before the exit
            if not follower.finished:
                tail = self.process.stderr_tail()
                follower.error = tail[-1] if tail else f"training process exited with code {code}"
                follower.state = FAILED
                follower.log.append(f"training process exited with code {code}: {follower.error}")
        self._redraw()
        if follower.finished and (self.process is None or code is not None):
            self._on_run_end(follower)

    def _on_run_end(self, follower: RunFollower) -> None:
        if self._failure_reported:
            return
        self._failure_reported = True
        if follower.state == FAILED:
            self.app.notify(
                follower.error or "training failed", title="Training failed", severity="error"
            )
        self.post_message(self.RunFinished(follower.run_dir, follower.state))
        if self.queue:
            self._launch(self.queue.pop(0))

    # -- controls -----------------------------------------------------------------------------

    def control(self, word: str) -> str:
        """pause / resume / save / stop the active run; returns a notice."""
        if self.follower is not None and self.follower.deleted:
            return self.follower.error  # not "interrupted before the run started"
        if self.follower is None or not self.active:
            return "no run in progress"
        if word == ControlCommand.PAUSE and (self.paused or self.follower.state == PAUSED):
            word = ControlCommand.RESUME.value
        self._send(word)
        return f"{word} requested"

    def _send(self, word: str) -> None:
        assert self.follower is not None
        if not self.follower.run_dir.is_dir():
            if word == ControlCommand.STOP and self.process is not None:
                self.process.interrupt()  # nothing to save yet; stop it now
                self.log_line("stop requested (interrupted before the run started)")
                return
            self.pending_control = word  # the child has not created its run directory yet
            return
        from attnlab.runs import write_control

        write_control(self.follower.run_dir, word)
        if word == ControlCommand.PAUSE:
            self.paused = True
        elif word == ControlCommand.RESUME:
            self.paused = False
        self.log_line(f"{word} requested")
        self._refresh_status()

    # -- drawing ------------------------------------------------------------------------------

    def log_line(self, text: str) -> None:
        self.query_one("#event-log", WrappedLog).add_lines([text])

    def _redraw(self) -> None:
        follower = self.follower
        assert follower is not None
        c = follower.curves
        drawn = (len(c.train_step), len(c.eval_step), id(follower.samples), len(follower.log))
        self._refresh_status()
        if drawn == self._drawn:
            return
        previous = self._drawn
        self._drawn = drawn
        with self.app.batch_update():
            if drawn[:2] != previous[:2]:
                self.query_one("#loss-plot", MetricPlot).set_series(
                    [("train", c.train_step, c.train_loss), ("dev", c.eval_step, c.dev_loss)]
                )
                plot = self.query_one("#metric-plot", MetricPlot)
                title, bounds, series = metric_panel(c)  # the task's metrics, else BLEU & co.
                plot.title, plot.bounds = title, bounds
                plot.set_series(series)
                entropy = self.query_one("#entropy-plot", MetricPlot)
                # Signed weights have no entropy: the legend says which role is missing (in
                # the title it pushed the title itself off a narrow plot).
                signed = [(f"{role}: signed, none", [], []) for role in c.no_entropy()]
                entropy.set_series(
                    [
                        (c.entropy_label(role), c.eval_step, c.entropy[role])
                        for role in ENTROPY_ROLES
                        if role in c.entropy
                    ]
                    + signed
                )
                self._has_entropy = bool(c.entropy)  # runs logged before attention_entropy: none
                self._show_plots()
            if drawn[2] != previous[2]:
                self._fill_samples()
            if drawn[3] != previous[3]:
                start = max(previous[3], 0)
                self.query_one("#event-log", WrappedLog).add_lines(follower.log[start:])

    @on(LegendWrapped)
    def _legend_wrapped(self) -> None:
        """The three plots keep equal heights whatever their legends take."""
        align_legends(list(self.query_one("#train-plots").query(MetricPlot)))

    def _sample_width(self) -> int:
        """Characters a sample's line gets: the table's width less the vertical scrollbar
        (counted always: it appears once rows overflow), the ok column ("ok" and its padding)
        and the sample column's padding."""
        table = self.query_one("#samples", DataTable)
        scrollbar = table.styles.scrollbar_size_vertical
        return max(table.content_region.width - scrollbar - 4 - 2, 12)

    def _fill_samples(self) -> None:
        follower = self.follower
        table = self.query_one("#samples", DataTable)
        cursor = table.cursor_row
        table.clear()
        if follower is None:
            return
        width = self._sample_width()
        self._samples_width = width
        for sample in follower.samples:
            table.add_row(
                "✓" if sample.correct else "✗",
                Text(sample_lines(sample.src, sample.ref, sample.hyp, width)),
                height=3,
            )
        if follower.samples:
            table.move_cursor(row=min(cursor, len(follower.samples) - 1))

    def on_resize(self) -> None:
        self.call_after_refresh(self._refit_samples)  # the table's new width: after layout
        self._show_plots()
        self.refresh_bindings()

    def _refit_samples(self) -> None:
        if self.follower is not None and self._sample_width() != self._samples_width:
            self._fill_samples()

    def _refresh_queue(self) -> None:
        """The queue as a list under the progress bar (hidden while empty)."""
        shown = tuple(id(config) for config in self.queue)
        if shown == self._queue_shown:
            return
        self._queue_shown = shown
        from attnlab.naming import experiment_name

        listing = self.query_one("#train-queue", OptionList)
        highlighted = listing.highlighted
        listing.set_options(
            [
                f"{i + 1}. {experiment_name(c)}  ({c.train.max_steps} steps)"
                for i, c in enumerate(self.queue)
            ]
        )
        if self.queue:
            listing.highlighted = min(highlighted or 0, len(self.queue) - 1)
        self.query_one("#train-queue-row").display = bool(self.queue)

    def remove_queued(self, index: int) -> str:
        """Drop the queued run at ``index``; returns a notice."""
        if not 0 <= index < len(self.queue):
            return "nothing queued there"
        from attnlab.naming import experiment_name

        removed = self.queue.pop(index)
        self._refresh_status()
        self.refresh_bindings()
        return f"removed {experiment_name(removed)} from the queue ({len(self.queue)} waiting)"

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()  # Del appears in the footer while the queue list has focus

    def on_descendant_blur(self) -> None:
        self.refresh_bindings()

    def action_unqueue(self) -> None:
        listing = self.query_one("#train-queue", OptionList)
        if self.queue and listing.has_focus and listing.highlighted is not None:
            self.app.notify(self.remove_queued(listing.highlighted))
            if not self.queue:  # the list is hidden now: focus the samples table
                self.query_one("#samples", DataTable).focus()

    def _refresh_status(self) -> None:
        self._refresh_queue()
        follower = self.follower
        status = self.query_one("#train-status", Static)
        queued = f"  [dim]queue: {len(self.queue)}[/]" if self.queue else ""
        if follower is None:
            status.update(
                "No run yet. Press [b]t[/] (or Train ▶ in Setup) to train the experiment." + queued
            )
            return
        state = follower.state
        if self.paused and state not in (FAILED,) and not follower.finished:
            state = PAUSED
        colour = {
            "failed": "$error",
            "finished": "$success",
            "stopped": "$warning",
            "paused": "$warning",
        }.get(state, "$accent")
        # The run's identity (task-arch-variants-stamp, attnlab.naming), not its preset's name;
        # at 80 columns shortened stamp first so the figures keep their room.
        name = run_label(follower.run_dir.name, 32 if self.app.has_class("narrow") else 64)
        parts = [f"[b]{name}[/]", f"[b {colour}]{state}[/]"]
        if state != STARTING:
            parts.append(f"step {follower.step}/{follower.max_steps or '?'}")
            # Most telling first: at 80 columns the line is cut at the right, so lr goes last.
            have_loss = follower.loss == follower.loss  # NaN until the first step event
            if have_loss:
                parts.append(f"loss {follower.loss:.3f}")
            if follower.last_eval and follower.curves.task:  # the task's first: an LM's loss
                name = next(iter(follower.curves.task))
                value = follower.last_eval.metric(name)
                parts.append(f"dev {metric_label(name)} {float(value or 0):.3f}")
            elif follower.last_eval:
                parts.append(f"BLEU {float(follower.last_eval.bleu or 0):.1f}")
            if have_loss:
                processes = f" ({follower.world_size} processes)" if follower.world_size > 1 else ""
                parts.append(f"{follower.tokens_per_s:,.0f} tok/s{processes}")
                parts.append(f"lr {follower.lr:.2e}")
        if follower.error:
            parts.append(f"[$error]{_escape(follower.error)}[/]")
        now = time.time()  # the child stamps events with time.time(): same clock
        if follower.state == STARTING:  # building data and model: count from the launch
            elapsed = (
                now - self._launched_at if self.process is not None and self._launched_at else 0.0
            )
        else:
            elapsed = follower.live_elapsed_s(now)
        clock = f"elapsed {format_duration(elapsed)}  {eta_text(follower, now)}"
        if queued:
            parts.append(queued.strip())
        width = status.content_region.width or self.app.size.width - 2
        shown = (fit_fields(parts, width), follower.max_steps, follower.step, clock)
        if shown == self._status_shown:
            return  # nothing changed: no repaint (this runs on every poll)
        self._status_shown = shown
        status.update(shown[0])
        bar = self.query_one("#train-progress", ProgressBar)
        bar.update(total=max(follower.max_steps, 1), progress=follower.step)
        self.query_one("#train-eta", Label).update(clock)

    @on(DataTable.RowSelected, "#samples")
    def _sample_selected(self, event: DataTable.RowSelected) -> None:
        # Open the selected sample's attention in Inspect (the app switches tabs).
        if self.follower is not None and event.cursor_row < len(self.follower.samples):
            self.post_message(
                SampleChosen(self.follower.run_dir, self.follower.samples[event.cursor_row])
            )


def fit_fields(parts: Sequence[str], width: int, gap: str = "  ") -> str:
    """Markup ``parts`` joined by ``gap``, a new line started before a part that would not fit
    ``width``: the header never breaks inside a field (``8,128`` / ``tok/s``)."""
    lines: list[str] = []
    line, used = "", 0
    for part in parts:
        size = Content.from_markup(part).cell_length  # Textual markup: [$error] etc.
        if line and used + len(gap) + size > width:
            lines.append(line)
            line, used = "", 0
        line, used = (f"{line}{gap}{part}", used + len(gap) + size) if line else (part, size)
    return "\n".join([*lines, line]) if line else "\n".join(lines)


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut with "…" when longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def sample_lines(src: Sequence[str], ref: Sequence[str], hyp: Sequence[str], width: int) -> str:
    """A logged sample as three labelled lines of at most ``width`` characters each, so the
    hypothesis is always on screen however long the sentences are."""
    return "\n".join(
        clip(f"{label} {' '.join(tokens)}", width)
        for label, tokens in (("src", src), ("ref", ref), ("hyp", hyp))
    )


def wrap_log_line(text: str, width: int) -> list[str]:
    """One event-log line wrapped at word boundaries to ``width`` (continuations indented),
    so that nothing is cut at the right edge of a narrow log."""
    if width < 12 or len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent="    ", break_long_words=True) or [text]


class WrappedLog(Log):
    """A Log that wraps its lines to its width (and re-wraps them when resized)."""

    def __init__(self, *, max_lines: int | None = None, id: str | None = None) -> None:
        super().__init__(max_lines=max_lines, id=id)
        self.raw: list[str] = []
        self._wrapped_at = 0

    def add_lines(self, lines: Sequence[str]) -> None:
        self.raw = (self.raw + list(lines))[-2000:]
        width = self.scrollable_content_region.width
        self.write_lines([part for line in lines for part in wrap_log_line(line, width)])

    def clear(self) -> WrappedLog:
        self.raw = []
        super().clear()
        return self

    def on_resize(self) -> None:
        width = self.scrollable_content_region.width
        if width != self._wrapped_at and self.raw:
            self._wrapped_at = width
            raw = self.raw
            super().clear()
            self.write_lines([part for line in raw for part in wrap_log_line(line, width)])


class SampleChosen(Message):
    """A logged sample (with attention) was chosen in the Train view."""

    def __init__(self, run_dir: Path, sample: object) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.sample = sample


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
