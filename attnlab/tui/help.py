"""Modal screens: the key help (``?``) and the quit-while-training question."""

from __future__ import annotations

import re

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

# One logical entry per line: help_renderable wraps each under its own column.
HELP_TEXT = """\
[b]attnlab — keys[/b]   (mouse works everywhere too; Ctrl+P opens the command palette)

[b]Everywhere[/b]
  1..6        Setup · Train · Inspect · Runs · Export · Studies
  t / Ctrl+T  train the Setup experiment (queued if a run is active)
  p           pause / resume the active run
  x           stop the active run (it saves a checkpoint)
  s           save a checkpoint now
  Esc         leave a field for the tab's body (so letter keys act as commands)
  Tab         next field in this tab (1..5 or the mouse switch tabs)
  ?  F1       this help
  Ctrl+Q      quit (asks when a run is active)

[b]Setup[/b]    Tab / Shift+Tab move between fields; Enter opens a menu.
  Invalid values are marked in red; Train stays disabled and the reason is shown.
  Queue + adds the experiment to the queue; palette: "Queue every variant".
  S           a study: every variant of one attention slot × N seeds (asks first)

[b]Train[/b]    plots of train/dev loss, dev BLEU/chrF/exact match and mean attention \
entropy per role (nats, from each evaluation); the samples table (Enter on a sample opens its \
attention in Inspect) and the event log.
  Runs queued with t / Queue + are listed under the progress bar: Del removes the highlighted \
one.
  v           below 30 rows (80×24): the next plot (one shows at a time, full width)

[b]Inspect[/b]  pick run, checkpoint, split and sample (or type a sentence); d decodes \
(Enter in a field, or the Decode button, does the same). Esc returns to the heatmap.
  arrows      move the heatmap cursor (weight and tokens shown below it)
  n / b       step decoding forward / back one target token (bar chart of that row)
  a           show all rows again
  h           half-block overview of the whole matrix
  k / l       previous / next hypothesis of the beam's n-best list
  m           map method: raw attention → rollout → relevancy (∇) → gradient × attention \
→ ‖α f(v)‖ (attribution scores are coloured relative to their maximum)
  e           export the map shown to RUN/figures/*.svg and *.html (as `translate --export`)
  H           heads: layer × head importance and the pruning curve (c stops it, Esc closes)
  c           compare: this sentence through a second run (both maps, A − B, JS, AER)
  y           history mode: the cross-attention stored at each evaluation \
(train.attention_history); y again leaves it
  [ / ]       history: previous / next stored step ({ / } first / last); j next sentence

[b]Runs[/b]     Space marks runs to compare (BLEU, BLEU by length, cross-attention entropy; \
below 90 columns e switches the third panel between bars and entropy).
  Enter opens the run in Inspect; w follows it live in Train; r refreshes.

[b]Export[/b]   writes one .safetensors bundle and shows the `attnlab translate` command.

[b]Studies[/b]  n / b move the highlighted cell; m shows the next metrics when they do not all \
fit the width.
"""


_KEY_COLUMN = 14  # "  t / Ctrl+T  ": where a key line's description starts
_SECTION = re.compile(r"^(\[b\][^[]+\[/b\]\s+)(\S.*)$")  # "[b]Setup[/b]    Tab / ..."


def _hanging(line: str) -> tuple[str, str]:
    """(the part that stays put, the text that wraps under itself) of one help line: a key
    and its description, a section name and its first sentence, an indented continuation."""
    section = _SECTION.match(line)
    if section:
        return section.group(1), section.group(2)
    if line.startswith("  ") and line[2:3] != " " and line[_KEY_COLUMN - 2 : _KEY_COLUMN] == "  ":
        return line[:_KEY_COLUMN], line[_KEY_COLUMN:]  # a key column
    indent = len(line) - len(line.lstrip(" "))
    return line[:indent], line[indent:]


def help_renderable(text: str = HELP_TEXT) -> Group:
    """The help as rows whose wrapped lines stay in their own column (at 80 columns a long
    description went back to column 1, under the keys)."""
    rows = []
    for line in text.splitlines():
        fixed, rest = _hanging(line)
        if not fixed or not rest:
            rows.append(Text.from_markup(line))
            continue
        grid = Table.grid(expand=True)
        grid.add_column(width=Text.from_markup(fixed).cell_len, no_wrap=True)
        grid.add_column(ratio=1)
        grid.add_row(Text.from_markup(fixed), Text.from_markup(rest))
        rows.append(grid)
    return Group(*rows)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_renderable(), id="help-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


class QuitScreen(ModalScreen[str]):
    """Quit while a run trains: stop it (it saves a checkpoint), keep it running, or cancel."""

    BINDINGS = [
        Binding("s", "choose('stop')", "Stop & quit"),
        Binding("k", "choose('keep')", "Keep running & quit"),
        Binding("escape", "choose('cancel')", "Cancel"),
    ]

    def __init__(self, run_name: str) -> None:
        super().__init__()
        self.run_name = run_name

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static(
                f"[b]{self.run_name}[/b] is still training.\n"
                "Stop it (saving a checkpoint) or keep it running in the background?"
            )
            with Horizontal(classes="buttons"):
                yield Button("Stop & save (s)", id="stop", variant="warning", compact=True)
                yield Button("Keep running (k)", id="keep", compact=True)
                yield Button("Cancel (Esc)", id="cancel", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question (e.g. overwrite an existing file); Esc or n answers no."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-text")
            with Horizontal(classes="buttons"):
                yield Button("Overwrite (y)", id="yes", variant="warning", compact=True)
                yield Button("Cancel (n)", id="no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
