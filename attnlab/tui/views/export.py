"""Export: write a self-contained ``.safetensors`` bundle, or a CTranslate2 model directory
(docs/export.md), and show the command that uses it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Select, Static

from attnlab.exporters.ct2_check import OFFERED_QUANTIZATIONS
from attnlab.tui.help import ConfirmScreen
from attnlab.tui.jobs import Jobs
from attnlab.tui.views.run_select import refresh_run_select


@dataclass
class ExportDone(Message):
    path: Path
    command: str


@dataclass
class ExportFailed(Message):
    error: str


EXPORTS = Jobs(every=True)  # one bundle written at a time; each request is answered
SAFETENSORS, CTRANSLATE2 = "safetensors", "ctranslate2"
FLOAT32 = "float32"  # CTranslate2 export without --quantization


def translate_command(bundle: Path, example: str = "", export_format: str = SAFETENSORS) -> str:
    """The ``attnlab translate`` line that uses an exported bundle (or CTranslate2 directory)."""
    text = f" {shlex.quote(example)}" if example else ""
    if export_format == CTRANSLATE2:
        return f"attnlab translate --engine ctranslate2 {shlex.quote(str(bundle))}{text}"
    return f"attnlab translate {shlex.quote(str(bundle))}{text} --show-attention"


class ExportView(Vertical):
    def __init__(self, runs_dir: Path, *, id: str | None = None):
        super().__init__(id=id)
        self.runs_dir = runs_dir
        self._run_paths: list[str] = []
        self.last_export: Path | None = None
        self._auto_path = ""  # the path this view filled in; a user's own path is kept
        self.command = ""

    def compose(self) -> ComposeResult:
        yield Static(
            "safetensors: one file of weights + config, vocabularies/tokenizers and metrics, "
            "for attnlab (plain safetensors loads it). CTranslate2: a model directory a "
            "Transformer serves from in production (docs/export.md).",
            id="export-help",
        )
        with Horizontal(classes="field"):
            yield Label("run", classes="field-label")
            yield Select([], id="export-run", compact=True, prompt="(no runs)")
        with Horizontal(classes="field"):
            yield Label("checkpoint", classes="field-label")
            yield Select(
                [("best", "best"), ("last", "last")],
                value="best",
                allow_blank=False,
                id="export-which",
                compact=True,
            )
        with Horizontal(classes="field"):
            yield Label("format", classes="field-label")
            yield Select(
                [("safetensors (attnlab)", SAFETENSORS), ("CTranslate2", CTRANSLATE2)],
                value=SAFETENSORS,
                allow_blank=False,
                id="export-format",
                compact=True,
            )
        with Horizontal(classes="field", id="export-weights-field"):
            yield Label("weights", classes="field-label")
            yield Select(
                [(FLOAT32, FLOAT32), *((q, q) for q in OFFERED_QUANTIZATIONS)],
                value=FLOAT32,
                allow_blank=False,
                id="export-weights",
                compact=True,
            )
        with Horizontal(classes="field"):
            yield Label("write to", classes="field-label")
            yield Input(placeholder="model.safetensors", id="export-path", compact=True)
        yield Button("Export", id="export-go", variant="primary", compact=True)
        yield Static("", id="export-result")
        # The command on one line (scrolls sideways rather than wrapping, so it copy-pastes),
        # and a button that puts it on the clipboard.
        with Horizontal(id="export-use"):
            yield Static("", id="export-command", markup=False)
            yield Button("Copy", id="export-copy", compact=True)

    def on_mount(self) -> None:
        self.refresh_runs()
        self.query_one("#export-use").display = False
        self.query_one("#export-weights-field").display = False

    def on_show(self) -> None:
        self.refresh_runs()

    def refresh_runs(self) -> None:
        self._run_paths = refresh_run_select(
            self.query_one("#export-run", Select), self.runs_dir, self._run_paths
        )

    @property
    def export_format(self) -> str:
        return str(self.query_one("#export-format", Select).value)

    @on(Select.Changed, "#export-run")
    @on(Select.Changed, "#export-which")
    @on(Select.Changed, "#export-format")
    def _source_changed(self) -> None:
        """The path follows the chosen run, checkpoint and format, unless the user typed
        their own; the weights menu is CTranslate2's only."""
        ct2 = self.export_format == CTRANSLATE2
        self.query_one("#export-weights-field").display = ct2
        self.query_one("#export-path", Input).placeholder = (
            "model-ct2/ (a directory)" if ct2 else "model.safetensors"
        )
        run = self.query_one("#export-run", Select).value
        path_input = self.query_one("#export-path", Input)
        if run is Select.NULL or path_input.value.strip() not in ("", self._auto_path):
            return
        which = str(self.query_one("#export-which", Select).value)
        self._auto_path = default_export_path(Path(str(run)), which, self.export_format)
        path_input.value = self._auto_path
        self.query_one("#export-result", Static).update("")  # a result names the previous run

    @on(Button.Pressed, "#export-go")
    @on(Input.Submitted, "#export-path")
    def export(self) -> None:
        run = self.query_one("#export-run", Select).value
        out = self.query_one("#export-path", Input).value.strip()
        if run is Select.NULL or not out:
            where = (
                "a directory to write"
                if self.export_format == CTRANSLATE2
                else "a file name ending in .safetensors"
            )
            self.app.notify(f"choose a run and {where}", severity="error")
            return
        which = str(self.query_one("#export-which", Select).value)
        target = Path(out)
        # An empty directory is no loss (the CTranslate2 export writes into one without --force).
        if not target.exists() or (target.is_dir() and not any(target.iterdir())):
            self._start(Path(str(run)), target, which)
            return

        def decide(overwrite: bool | None) -> None:
            if overwrite:  # the user said yes: the engine may replace the file (export --force)
                self._start(Path(str(run)), target, which, force=True)
            else:
                self.query_one("#export-result", Static).update(
                    f"[dim]kept {_escape(str(target))}[/]"
                )

        self.app.push_screen(
            ConfirmScreen(
                f"[b]{_escape(str(target))}[/b] exists. Overwrite it with "
                f"[b]{_escape(Path(str(run)).name)}[/b] ({which})?"
            ),
            decide,
        )

    def _start(self, run_dir: Path, out: Path, which: str, force: bool = False) -> None:
        self.query_one("#export-result", Static).update("exporting …")
        weights = str(self.query_one("#export-weights", Select).value)
        quantization = None if weights == FLOAT32 else weights
        self.write_bundle(run_dir, out, which, force, self.export_format, quantization)

    # Queued, never two at once (EXPORTS): two writes of one bundle must not interleave.
    @work(thread=True, exit_on_error=False, group="export")
    def write_bundle(
        self,
        run_dir: Path,
        out: Path,
        which: str,
        force: bool = False,
        export_format: str = SAFETENSORS,
        quantization: str | None = None,
    ) -> None:
        def write() -> Path:
            # Without force the engine refuses a file that appeared since the check above.
            if export_format == CTRANSLATE2:
                from attnlab.exporters.ctranslate2 import export_ctranslate2

                return export_ctranslate2(run_dir, out, quantization, which=which, force=force)
            from attnlab.runs import export_checkpoint

            return export_checkpoint(run_dir, out, which, force=force)

        # A refusal (RNN, a variant CTranslate2 lacks) or an OSError is one line.
        outcome = EXPORTS.run(EXPORTS.issue(), write)
        if outcome.error or outcome.value is None:
            self.post_message(ExportFailed(outcome.error or f"{out}: nothing written"))
            return
        command = translate_command(outcome.value, _example(run_dir), export_format)
        self.post_message(ExportDone(outcome.value, command))

    @on(ExportDone)
    def _done(self, message: ExportDone) -> None:
        self.last_export = message.path
        self.query_one("#export-result", Static).update(
            f"[b $success]✓[/] wrote {message.path}\n\nUse it:"
        )
        self.command = message.command
        self.query_one("#export-command", Static).update(message.command)
        self.query_one("#export-use").display = True
        self.app.notify(f"exported {message.path}")

    @on(Button.Pressed, "#export-copy")
    def copy_command(self) -> None:
        """Put the ``attnlab translate`` line on the clipboard (OSC 52, via Textual)."""
        if self.command:
            self.app.copy_to_clipboard(self.command)
            self.app.notify("command copied to the clipboard")

    @on(ExportFailed)
    def _failed(self, message: ExportFailed) -> None:
        self.query_one("#export-result", Static).update(f"[$error]✗ {_escape(message.error)}[/]")
        self.app.notify(message.error, title="Export", severity="error")


def default_export_path(run_dir: Path, which: str, export_format: str = SAFETENSORS) -> str:
    """``exports/<run>-<checkpoint>.safetensors`` (the CLI's default too), or for CTranslate2
    the directory ``exports/<run>-<checkpoint>-ct2``."""
    from attnlab.runs import default_export_path

    path = default_export_path(run_dir, which)
    return str(path.with_name(f"{path.stem}-ct2") if export_format == CTRANSLATE2 else path)


def _example(run_dir: Path) -> str:
    """A source sentence from the run's logged samples, to make the command copy-pasteable."""
    from attnlab.events import Sample, iter_typed_events

    try:
        for event in iter_typed_events(run_dir):
            if isinstance(event, Sample) and event.src:
                return " ".join(event.src)
    except OSError:
        pass
    return ""


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
