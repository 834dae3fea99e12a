"""Inspect's history mode: the cross-attention the trainer stored at each evaluation
(``attnlab.runs.history``), stepped through with ``[`` / ``]`` (``{`` / ``}``: first / last).

The history is read in a thread worker (safetensors files: no blocking reads on the UI thread)
that posts ``HistoryLoaded`` / ``HistoryFailed``; the view then only slices numpy arrays.
Handlers are ``on_<message>`` methods: Textual's ``@on`` is not registered on a mixin.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from textual import work
from textual.message import Message

from attnlab.attention_map import NORM_SOFTMAX, target_rows
from attnlab.tui.follow import exact_match_percent
from attnlab.tui.jobs import Jobs

HISTORY_HINT = "set train.attention_history in the config to store it at each evaluation"
SLIDER_MAX = 15  # stored steps drawn one mark each; more are drawn on a 15-mark scale


HISTORIES = Jobs()  # one history read at a time; a read superseded by a newer `y` is dropped


@dataclass
class HistoryLoaded(Message):
    run_dir: Path
    history: Any  # attnlab.runs.history.AttentionHistory
    frames: list[Any]  # one HistoryFrame per stored step, in history.steps' order
    number: int | None = None  # its request's number (attnlab.tui.jobs)


@dataclass
class HistoryMissing(Message):
    run_dir: Path
    number: int | None = None


@dataclass
class HistoryFailed(Message):
    error: str
    number: int | None = None


def slider(index: int, count: int) -> str:
    """``○──●──○``: where the shown step sits among ``count`` stored steps."""
    if count <= 0:
        return ""
    marks = min(count, SLIDER_MAX)
    at = round(index * (marks - 1) / (count - 1)) if count > 1 else 0
    return "──".join("●" if i == at else "○" for i in range(marks))


def score_text(scores: dict[str, float]) -> str:
    """`` · dev BLEU 12.3 · exact 40%`` (exact match) from an evaluation's scores (what it has)."""
    parts = []
    # BLEU and exact match, as the Train plots, in words short enough for 80 columns
    if "bleu" in scores:
        parts.append(f"dev BLEU {scores['bleu']:.1f}")
    if "exact_match" in scores:  # logged as a fraction; shown as the Train plots show it
        parts.append(f"exact {exact_match_percent(scores['exact_match']):.0f}%")
    return "".join(f" · {p}" for p in parts)


def layer_text(layer: int | None, head: str) -> str:
    if layer is None:
        return "RNN attention"
    heads = "mean of heads" if head == "mean" else f"head {head}"
    # the trainer stores the last layer (its index, or -1)
    return f"last layer, {heads}" if layer < 0 else f"last layer ({layer}), {heads}"


class InspectHistory:
    """Mixed into ``InspectView`` (which supplies maps, labels, _title, redraw, ...)."""

    history: Any = None
    history_frames: list[Any] = []
    history_index = 0  # which stored step
    history_sentence = 0  # which of the stored dev sentences
    _history_saved: dict[str, Any] | None = None

    @property
    def in_history(self) -> bool:
        return self._history_saved is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The step and sentence keys act (and show in the footer) in history mode only."""
        if action in ("history_step", "history_sentence"):
            return self.in_history
        return True

    def action_history(self) -> None:
        """Enter history mode (reading the run's history off the UI thread), or leave it."""
        if self.in_history:
            self.leave_history()
            return
        run = self._shown_run()
        if run is None:
            self.app.notify("no run to inspect yet: train one first", severity="warning")
            return
        self.load_history(run, HISTORIES.issue())

    @work(thread=True, exit_on_error=False, group="inspect-history")
    def load_history(self, run_dir: Path, number: int | None = None) -> None:
        from attnlab.runs.history import read_history

        number = HISTORIES.issue() if number is None else number

        def read() -> tuple[Any, list[Any]] | None:
            history = read_history(run_dir)
            return None if history is None else (history, [history.frame(s) for s in history.steps])

        outcome = HISTORIES.run(number, read)
        if outcome.skipped:
            return
        if outcome.error:
            self.post_message(HistoryFailed(outcome.error, number))
        elif outcome.value is None:
            self.post_message(HistoryMissing(run_dir, number))
        else:
            self.post_message(HistoryLoaded(run_dir, *outcome.value, number))

    def on_history_missing(self, message: HistoryMissing) -> None:
        if HISTORIES.stale(message.number):
            return
        self.app.notify(
            f"{message.run_dir.name} has no attention history: {HISTORY_HINT}",
            title="History",
            severity="warning",
        )

    def on_history_failed(self, message: HistoryFailed) -> None:
        if HISTORIES.stale(message.number):
            return
        self.app.notify(message.error, title="History", severity="error")

    def on_history_loaded(self, message: HistoryLoaded) -> None:
        if message.run_dir != self._shown_run() or HISTORIES.stale(message.number):
            return  # the user chose another run (or pressed y again) meanwhile
        if not message.frames:
            self.on_history_missing(HistoryMissing(message.run_dir))
            return
        if not self.in_history:
            self._history_saved = {
                "result": self.result,
                "gold": self.gold,
                "maps": self.maps,
                "labels": self.labels,
                "normalisations": self.normalisations,
                "selected": self.selected,
                "hyp_index": self.hyp_index,
            }
        self.history = message.history
        self.history_frames = message.frames
        self.history_index = len(message.frames) - 1  # open on the last stored step
        self.history_sentence = 0
        self.show_history_frame()
        self.refresh_bindings()

    def show_history_frame(self) -> None:
        history, frame = self.history, self.history_frames[self.history_index]
        sentence = min(self.history_sentence, len(history.sources) - 1)
        weights = np.asarray(frame.maps[sentence], dtype=np.float64)
        hyp, src = list(frame.hyps[sentence]), list(history.sources[sentence])
        # the view's own map fields: the heatmap, cursor, bars and diagnostics work unchanged
        self.result, self.gold = None, None
        self.maps = {"cross": weights[None, None]}
        # a stored map has one row per token; a row beyond them can only be </s>'s
        rows = target_rows(hyp, finished=weights.shape[0] > len(hyp))
        self.labels = {"cross": (rows[: weights.shape[0]], src)}
        self.normalisations = {"cross": NORM_SOFTMAX}
        self.selected = {}
        self.step_row = None
        self._configure_selectors()
        self._title(self.history_header())
        self.redraw()

    def history_header(self) -> str:
        from attnlab.tui.views.inspect_text import escape_markup

        history, frame = self.history, self.history_frames[self.history_index]
        count = len(self.history_frames)
        sentence = min(self.history_sentence, len(history.sources) - 1)
        return (
            f"[b]history[/] step {frame.step}/{history.steps[-1]}{score_text(frame.scores)}"
            f" · {layer_text(history.layer, history.head)}\n"
            f"{slider(self.history_index, count)}  {self.history_index + 1}/{count} · "
            f"sentence {sentence + 1}/{len(history.sources)}: "
            f"{escape_markup(' '.join(history.sources[sentence]))} · [b]y[/] leave"
        )

    def action_history_step(self, delta: int) -> None:
        if not self.in_history:
            return
        last = len(self.history_frames) - 1
        index = min(max(self.history_index + delta, 0), last)  # bounds stop, no wrap
        if index != self.history_index:
            self.history_index = index
            self.show_history_frame()

    def action_history_sentence(self) -> None:
        if not self.in_history:
            return
        self.history_sentence = (self.history_sentence + 1) % len(self.history.sources)
        self.show_history_frame()

    def leave_history(self) -> None:
        """Back to the normal Inspect view: what it showed before history mode."""
        saved, self._history_saved = self._history_saved, None
        self.history, self.history_frames = None, []
        self.refresh_bindings()
        if saved is None:
            return
        for name, value in saved.items():
            setattr(self, name, value)
        if self.result is not None:
            self.show_hypothesis(self.hyp_index)
            return
        if self.maps:
            self._configure_selectors()
            self._title("[b]history mode left[/] · the logged sample")
            self.redraw()
            return
        self._clear_maps()
        self._title("Pick a run and press Decode, or Enter on a sample in Train.", "note")

    def forget_history(self) -> None:
        """A new decode or logged sample replaces the map: history mode ends silently."""
        if self._history_saved is not None:
            self.refresh_bindings()
        self._history_saved = None
        self.history, self.history_frames = None, []
