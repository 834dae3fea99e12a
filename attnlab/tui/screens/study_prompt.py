"""Setup's ``S``: ask before a study starts (issue 44) — the slot swept, the seeds, how many
runs that makes and about how long they take; Start (or Enter in the seeds field) confirms,
Esc cancels.

The app gives the variants each slot can take with the Setup experiment (those that pass
``attnlab.experiment.validate``) and an estimator (``attnlab.study.estimate``); this screen
only counts and asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

MAX_SEEDS = 50


@dataclass(frozen=True)
class StudyChoice:
    slot_key: str  # e.g. model.cross_attention
    seeds: int


@dataclass(frozen=True)
class SlotOption:
    key: str
    title: str  # e.g. "cross attention"
    variants: tuple[str, ...]  # valid with the Setup experiment


def parse_seeds(text: str) -> int | str:
    """The seed count, or the one line saying what is valid."""
    try:
        seeds = int(text.strip())
    except ValueError:
        return f"seeds {text.strip() or '(empty)'!r}: expected a whole number 1..{MAX_SEEDS}"
    if not 1 <= seeds <= MAX_SEEDS:
        return f"seeds {seeds}: expected 1..{MAX_SEEDS}"
    return seeds


class StudyPrompt(ModalScreen[StudyChoice | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        experiment: str,
        slots: list[SlotOption],
        seeds: int,
        estimate: Callable[[int], str],
        chosen: str | None = None,
    ) -> None:
        """``estimate(runs)`` -> the time line for that many runs."""
        super().__init__()
        self.experiment = experiment
        self.slots = {s.key: s for s in slots}
        self.seeds = seeds
        self.estimate = estimate
        self.chosen = chosen if chosen in self.slots else slots[0].key

    def compose(self) -> ComposeResult:
        with Vertical(id="study-prompt-box"):
            yield Static(f"[b]Study[/b] of {_escape(self.experiment)}", id="study-prompt-title")
            with Horizontal(classes="study-prompt-row"):
                yield Label("slot  ")
                yield Select(
                    [(f"{s.title} ({s.key})", s.key) for s in self.slots.values()],
                    value=self.chosen,
                    allow_blank=False,
                    compact=True,
                    id="study-slot",
                )
            with Horizontal(classes="study-prompt-row"):
                yield Label("seeds ")
                yield Input(str(self.seeds), id="study-seeds", compact=True, type="integer")
            yield Static("", id="study-prompt-plan")
            with Horizontal(classes="buttons"):
                yield Button("Start", id="study-start", variant="warning", compact=True)
                yield Button("Cancel (Esc)", id="study-cancel", compact=True)

    def on_mount(self) -> None:
        self._update()
        # The slot menu first: Enter opens it (a stray Enter starts nothing); Enter in the
        # seeds field or the Start button starts.
        self.query_one("#study-slot", Select).focus()

    def plan(self) -> tuple[int, str] | str:
        """(runs, the plan's text) for the choice made, or the error line."""
        seeds = parse_seeds(self.query_one("#study-seeds", Input).value)
        if isinstance(seeds, str):
            return seeds
        slot = self.slots[str(self.query_one("#study-slot", Select).value)]
        if not slot.variants:
            return f"{slot.title}: no variant works with this experiment"
        runs = len(slot.variants) * seeds
        shown = ", ".join(slot.variants[:6]) + (" …" if len(slot.variants) > 6 else "")
        return runs, (
            f"{len(slot.variants)} variants × {seeds} seeds = [b]{runs} runs[/b]\n"
            f"{_escape(shown)}\n{self.estimate(runs)}"
        )

    @on(Select.Changed)
    @on(Input.Changed)
    def _update(self) -> None:
        plan = self.plan()
        text = f"[$error]✗ {_escape(plan)}[/]" if isinstance(plan, str) else plan[1]
        self.query_one("#study-prompt-plan", Static).update(text)
        self.query_one("#study-start", Button).disabled = isinstance(plan, str)

    @on(Input.Submitted)
    @on(Button.Pressed, "#study-start")
    def action_start(self) -> None:
        plan = self.plan()
        if isinstance(plan, str):
            self.app.notify(plan, severity="error")
            return
        seeds = parse_seeds(self.query_one("#study-seeds", Input).value)
        assert isinstance(seeds, int)
        self.dismiss(StudyChoice(str(self.query_one("#study-slot", Select).value), seeds))

    @on(Button.Pressed, "#study-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
