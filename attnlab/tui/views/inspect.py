"""Inspect: a run's alignment matrices, per sample, kind, layer, head, hypothesis and step.

Model loading and decoding run in a thread worker (``attnlab.tui.inspect_engine``) that posts
``InspectReady`` / ``InspectFailed``; the view only slices numpy arrays. A sample logged by
the trainer (chosen in the Train view) is shown straight from its event, with no model.
Self-attention maps of nsa carry their selected blocks: the heatmap marks those cells ``▪``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Input, Label, OptionList, Select, Static

from attnlab.attention_map import (
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    SELECTED_MARK,
    SELECTED_NOTE,
    UNATTENDED_LABEL,
    target_rows,
)
from attnlab.errors import AttnlabError
from attnlab.tui.diagnostics import alignment_accuracy, diagnose
from attnlab.tui.jobs import Jobs
from attnlab.tui.views.inspect_export import MapExport, MapExported  # noqa: F401 - re-export
from attnlab.tui.views.inspect_history import InspectHistory
from attnlab.tui.views.inspect_text import (  # noqa: F401 - fit_pair: re-exported for tests
    HEAD_AVERAGE,
    KIND_AXES,
    KIND_LABELS,
    METHOD_CYCLE,
    escape_markup,
    fit_pair,
    normalisation_lines,
)
from attnlab.tui.views.run_select import has_checkpoint, refresh_run_select
from attnlab.tui.widgets.heatmap import AttentionHeatmap, colour_scale
from attnlab.tui.widgets.rowbars import row_bars
from attnlab.viz.text import run_label

_STEP = Binding.Group("Step", compact=True)
_HYP = Binding.Group("Hyp", compact=True)
RUN_LABEL = 18  # run names in the 24-column control panel: one line, variant kept


@dataclass
class InspectReady(Message):
    result: Any  # attnlab.tui.inspect_engine.InspectResult
    number: int | None = None  # the request it answers (attnlab.tui.jobs); None: always shown


@dataclass
class InspectFailed(Message):
    error: str
    number: int | None = None


def is_attribution(kind: str | None) -> bool:
    """rollout / relevancy / gradient / norm: scores, not weights (no fixed 0..1 range)."""
    return kind in METHOD_CYCLE[1:]


class InspectView(InspectHistory, MapExport, Horizontal):
    BINDINGS = [
        Binding("d", "decode", "Decode"),
        # Grouped so that n/b and k/l fit the footer at 80 columns.
        Binding("n", "step(1)", "Next token", group=_STEP),
        Binding("b", "step(-1)", "Back a token", group=_STEP),
        Binding("a", "show_all", "All"),  # short: the footer keeps ^q Quit at 80 columns
        Binding("h", "toggle_half", "Half"),
        Binding("k", "hypothesis(-1)", "Prev hyp", group=_HYP),
        Binding("l", "hypothesis(1)", "Next hyp", group=_HYP),
        Binding("m", "cycle_method", "Method"),
        Binding("e", "export_map", "SVG"),
        Binding("H", "heads", "Heads", show=False),  # in the help and the palette
        Binding("c", "compare", "Compare", show=False),
        # history mode (attnlab.tui.views.inspect_history): the maps stored at each evaluation
        # y out of the footer: at 80 columns it pushed ^q Quit off (listed in ? help); the
        # step keys show in the footer in history mode only (InspectHistory.check_action)
        Binding("y", "history", "History", show=False),
        Binding("left_square_bracket", "history_step(-1)", "Prev step", key_display="["),
        Binding("right_square_bracket", "history_step(1)", "Next step", key_display="]"),
        Binding("left_curly_bracket", "history_step(-1_000_000)", "First step", show=False),
        Binding("right_curly_bracket", "history_step(1_000_000)", "Last step", show=False),
        Binding("j", "history_sentence", "History sentence", show=False),
    ]

    def __init__(self, runs_dir: Path, *, id: str | None = None):
        super().__init__(id=id)
        self.runs_dir = runs_dir
        self.result: Any = None
        self.maps: dict[str, np.ndarray] = {}  # kind -> [L, H, rows, cols] of the hypothesis shown
        self.labels: dict[str, tuple[list[str], list[str]]] = {}
        # kind -> how its rows are normalised (attnlab.attention_map); absent = softmax
        self.normalisations: dict[str, str] = {}
        # kind -> [L, H, rows, cols] bool: cells of the blocks nsa selected; absent: no marks
        self.selected: dict[str, np.ndarray] = {}
        self.hyp_index = 0
        self.step_row: int | None = None  # stepping through decoding: rows 0..step_row shown
        self.gold: list[int] | None = None
        self._run_paths: list[str] = []
        self._last_request: tuple[str, ...] | None = None
        self._decoders_filled = False
        self._layer_chosen = False  # the user picked a layer: keep it (else the last layer)
        self._layer_set: object = 0  # the layer last set here (compose's value: 0)
        self.last_export: list[Path] = []
        self.decodes = Jobs()  # one decode at a time; an older one's answer is dropped

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="inspect-controls"):
            yield Label("run")
            yield Select([], id="insp-run", compact=True, prompt="(no runs)")
            # The chosen run's whole name when its menu label is cut (issue 44).
            yield Static("", id="insp-run-name")
            with Horizontal(classes="pair"):
                yield Select(
                    [("best", "best"), ("last", "last")],
                    value="best",
                    allow_blank=False,
                    id="insp-ckpt",
                    compact=True,
                )
                yield Select(
                    [("dev", "dev"), ("test", "test")],
                    value="dev",
                    allow_blank=False,
                    id="insp-split",
                    compact=True,
                )
            with Horizontal(classes="pair"):
                yield Label("sample #")
                yield Input("0", id="insp-index", compact=True, type="integer")
            with Horizontal(classes="pair"):
                yield Label("beam")
                yield Input("1", id="insp-beam", compact=True, type="integer")
            with Horizontal(classes="pair"):  # the decoder registry; "beam" box = hypotheses
                yield Label("search")
                # Filled from the registry once the lab has loaded it (torch off the UI thread).
                yield Select(
                    [("beam", "beam")],
                    value="beam",
                    allow_blank=False,
                    id="insp-decoder",
                    compact=True,
                )
            yield Input(placeholder="or type a sentence", id="insp-text", compact=True)
            yield Button("Decode ⏎", id="insp-go", compact=True, variant="primary")
            yield Label("attention")
            yield Select(
                [("cross", "cross")], value="cross", allow_blank=False, id="insp-kind", compact=True
            )
            with Horizontal(classes="pair", id="insp-layer-head"):
                yield Select(
                    [("layer 0", 0)], value=0, allow_blank=False, id="insp-layer", compact=True
                )
                yield Select(
                    [("avg", HEAD_AVERAGE)],
                    value=HEAD_AVERAGE,
                    allow_blank=False,
                    id="insp-head",
                    compact=True,
                )
            yield Label("n-best")
            yield OptionList(id="insp-nbest")
        with Vertical(id="inspect-main"):
            yield Static(
                "Pick a run and press Decode, or Enter on a sample in Train.",
                id="insp-title",
                classes="note",  # wraps: at 80 columns it was cut to "... a sample in …"
            )
            # Source tokens the model has no id for (read as <unk>): hidden while there are none.
            yield Static("", id="insp-warning")
            yield AttentionHeatmap(id="heatmap")
            with Horizontal(id="insp-cell-row"):
                yield Static("", id="insp-cell")
                yield Static(colour_scale(12), id="insp-scale")
            with Horizontal(id="insp-bottom"):
                yield Static("", id="insp-diag")
                with VerticalScroll(id="insp-bars-box"):
                    yield Static("", id="insp-bars")

    def on_mount(self) -> None:
        self.refresh_runs()

    def on_show(self) -> None:
        self.refresh_runs()
        self._fill_decoders()
        if not self.maps and self.query_one("#insp-run", Select).value is not Select.NULL:
            self._decode_if_new()  # open on something: sample 0 of the newest run with a checkpoint

    def action_decode(self) -> None:
        self.decode()

    @on(Select.Changed, "#insp-run")
    @on(Select.Changed, "#insp-ckpt")
    @on(Select.Changed, "#insp-split")
    @on(Select.Changed, "#insp-decoder")
    def _source_changed(self) -> None:
        # A new choice replaces whatever the title said (an error names the previous run).
        # No run yet: the checkpoint/split menus' first values are not a request to decode.
        # A hidden tab decodes nothing (on_show opens it on the newest run).
        run = self.query_one("#insp-run", Select).value if self.is_mounted else Select.NULL
        if run is not Select.NULL and all(node.display for node in self.ancestors_with_self):
            self._decode_if_new()

    def _decode_if_new(self) -> None:
        """Decode unless the same request is already shown or on its way (a menu refill or a
        repeated show is not a new choice)."""
        if self._request() != self._last_request:
            self.decode()

    def _request(self) -> tuple[str, ...]:
        return tuple(
            str(self.query_one(f"#insp-{w}").value)
            for w in ("run", "ckpt", "split", "index", "beam", "text", "decoder")
        )

    # -- choosing what to inspect ----------------------------------------------------------------

    def _fill_decoders(self) -> None:
        """The search menu: every registered decoding strategy (once the menus are loaded)."""
        menus = getattr(self.app, "menus", None)
        select = self.query_one("#insp-decoder", Select)
        if self._decoders_filled or menus is None or not menus.decoders:
            return  # done, or the registries are still loading: "beam" meanwhile
        with self.prevent(Select.Changed):
            select.set_options(menus.decoders)
            select.value = "beam"
        self._decoders_filled = True

    def refresh_runs(self) -> None:
        select = self.query_one("#insp-run", Select)
        with self.prevent(Select.Changed):  # a refreshed list is not a new choice
            self._run_paths = refresh_run_select(
                select,
                self.runs_dir,
                self._run_paths,
                prefer=has_checkpoint,
                label_width=RUN_LABEL,
            )
        self._show_run_name()

    @on(Select.Changed, "#insp-run")
    def _show_run_name(self) -> None:
        """Under the run menu: the chosen run's whole name (``STUDY/…`` for a study's run)
        when the menu's label is cut (from 30 rows); the menu's tooltip says it always."""
        from attnlab.study.listing import listed_name

        select = self.query_one("#insp-run", Select)
        name_line = self.query_one("#insp-run-name", Static)
        value = select.value
        if value is Select.NULL or not value:
            name_line.update("")
            name_line.display = False
            return
        full = listed_name(Path(str(value)))
        label = next((str(text) for text, v in select._options if v == value), full)
        select.tooltip = full
        name_line.update(escape_markup(full))
        # Below 30 rows the controls have no row to spare (they would scroll): the tooltip
        # and the Runs tab's status line name it there.
        name_line.display = label != full and not self.app.has_class("short")

    def on_resize(self) -> None:
        self._show_run_name()

    def select_run(self, run_dir: Path) -> None:
        self._run_paths = []
        self.refresh_runs()
        select = self.query_one("#insp-run", Select)
        if str(run_dir) in self._run_paths:
            with self.prevent(Select.Changed):
                select.value = str(run_dir)
        self.decode()

    @on(Button.Pressed, "#insp-go")
    @on(Input.Submitted)
    def decode(self) -> None:
        from attnlab.tui.inspect_engine import InspectRequest

        run = self.query_one("#insp-run", Select).value
        if run is Select.NULL or not run:
            self.app.notify("no run to inspect yet: train one first", severity="warning")
            return
        self.forget_history()  # a decode (or another run) replaces the history shown
        self._last_request = self._request()
        number = self.decodes.issue()  # whatever is still decoding is now stale
        if not has_checkpoint(str(run)):
            # A run still training before its first eval: say so calmly, no error.
            self._clear_maps()
            self._title(
                f"[b]{escape_markup(Path(str(run)).name)}[/] has no checkpoint yet "
                "(it saves one at its first evaluation). Choose another run, or Enter on a "
                "sample in Train.",
                "note",
            )
            return
        try:
            index = int(self.query_one("#insp-index", Input).value or 0)
            beam = int(self.query_one("#insp-beam", Input).value or 1)
        except ValueError:
            self.app.notify("sample # and beam must be whole numbers", severity="error")
            return
        request = InspectRequest(
            Path(str(run)),
            str(self.query_one("#insp-ckpt", Select).value),
            str(self.query_one("#insp-split", Select).value),
            index,
            self.query_one("#insp-text", Input).value,
            beam,
            str(self.query_one("#insp-decoder", Select).value),
        )
        from attnlab.study.listing import listed_name

        self._title(f"decoding with {escape_markup(listed_name(Path(str(run))))} …")
        self.run_analysis(request, number)

    # Not exclusive: a cancelled worker's thread runs on anyway; Jobs queues and numbers them.
    @work(thread=True, exit_on_error=False, group="inspect")
    def run_analysis(self, request: Any, number: int | None = None) -> None:
        from attnlab.tui.inspect_engine import analyse

        number = self.decodes.issue() if number is None else number
        outcome = self.decodes.run(number, lambda: analyse(request))
        if outcome.skipped:
            return
        if outcome.error:
            self.post_message(InspectFailed(outcome.error, number))
            return
        self.post_message(InspectReady(outcome.value, number))

    @on(InspectFailed)
    def _failed(self, message: InspectFailed) -> None:
        if self.decodes.stale(message.number):
            return  # a newer request is on its way: its answer replaces this one
        self._clear_maps()  # no heatmap of another run under this run's error
        self._last_request = None  # choosing the same again retries
        # An error wraps in full (a normal title is cut with an ellipsis).
        self._title(f"[$error]✗ {escape_markup(message.error)}[/]", "error")
        self.app.notify(message.error, title="Inspect", severity="error")

    @on(InspectReady)
    def _ready(self, message: InspectReady) -> None:
        if self.decodes.stale(message.number):
            return  # an older request's answer (the user asked again meanwhile)
        self.forget_history()
        result = message.result
        self.result = result
        self.gold = result.gold
        self.normalisations = dict(result.normalisations)
        options = [
            f"{i + 1}. {' '.join(h.tokens)}  ({h.score:.2f})"
            for i, h in enumerate(result.hypotheses)
        ]
        nbest = self.query_one("#insp-nbest", OptionList)
        nbest.set_options(options)
        if options:
            nbest.highlighted = 0
        self._warn_unknown(list(getattr(result, "unknown", [])))
        self.show_hypothesis(0)

    def _warn_unknown(self, unknown: list[str]) -> None:
        """The warning line over the map: which source tokens the model read as <unk> (the
        columns say <unk>); every decode re-checks, so switching runs re-reads typed text."""
        from attnlab.data.oov import unknown_warning

        text = unknown_warning(unknown)
        warning = self.query_one("#insp-warning", Static)
        warning.update(f"[$warning]⚠ {escape_markup(text)}[/]" if text else "")
        warning.display = bool(text)
        if text:
            self.app.notify(text, title="Inspect", severity="warning")

    def _title(self, text: str, kind: str = "") -> None:
        """Set the title; ``error``/``note`` titles wrap in full, others are one cut line."""
        title = self.query_one("#insp-title", Static)
        title.update(text)
        title.set_class(kind == "error", "error")
        title.set_class(kind == "note", "note")

    def _clear_maps(self) -> None:
        self.result, self.gold, self.maps, self.labels = None, None, {}, {}
        self.normalisations, self.selected = {}, {}
        self._warn_unknown([])
        self.query_one("#insp-nbest", OptionList).clear_options()
        self.query_one(AttentionHeatmap).set_matrix(np.zeros((0, 0)), [], [])
        for wid in ("#insp-cell", "#insp-diag", "#insp-bars"):
            self.query_one(wid, Static).update("")

    def show_logged_sample(self, run_dir: Path, sample: Any) -> None:
        """A sample from the trainer's events: its cross-attention, no model needed."""
        self.decodes.issue()  # a decode still running must not replace this sample
        self.forget_history()
        self.result = None
        self.gold = None
        # The run menu names the run whose sample is shown.
        self._run_paths = []
        self.refresh_runs()
        if str(run_dir) in self._run_paths:
            with self.prevent(Select.Changed):
                self.query_one("#insp-run", Select).value = str(run_dir)
        self._last_request = self._request()  # shown: a late menu event must not replace it
        self._warn_unknown([])  # a logged sample is the run's own data
        try:
            logged = sample.weights()
        except AttnlabError as err:  # a long map's file, damaged or gone
            self.query_one("#insp-title", Static).update(
                Content.from_markup("[$error]$message[/]", message=str(err))
            )
            return
        weights = np.asarray(logged if logged is not None else np.zeros((0, 0)), dtype=np.float64)
        if weights.ndim != 2 or not weights.size:
            self.query_one("#insp-title", Static).update(
                "[$warning]this sample carries no attention weights[/]"
            )
            return
        # a logged map has one row per token; a row beyond them can only be </s>'s
        rows = target_rows(sample.hyp, finished=weights.shape[0] > len(sample.hyp))
        self.maps = {"cross": weights[None, None]}  # [L=1, H=1, T, S]
        self.selected = {}
        self.labels = {"cross": (rows, list(sample.src))}
        self.normalisations = {"cross": getattr(sample, "normalisation", NORM_SOFTMAX)}
        self.hyp_index = 0
        self.query_one("#insp-nbest", OptionList).set_options([" ".join(sample.hyp)])
        self._configure_selectors()
        width = self._title_width()
        name = run_label(run_dir.name, max(12, width // 3))  # the sentence pair gets the room
        prefix = f"{name} logged sample {sample.index}: "
        src, hyp = fit_pair(" ".join(sample.src), " ".join(sample.hyp), width - len(prefix))
        self.query_one("#insp-title", Static).update(
            f"[b]{escape_markup(name)}[/] logged sample {sample.index}: "
            f"{escape_markup(src)} → {escape_markup(hyp)}"
        )
        self.step_row = None
        self.redraw()

    def show_hypothesis(self, index: int) -> None:
        if self.result is None or not self.result.hypotheses:
            return
        self.hyp_index = index % len(self.result.hypotheses)
        hyp = self.result.hypotheses[self.hyp_index]
        self.maps, self.labels = hyp.maps, hyp.labels
        self.selected = dict(getattr(hyp, "selected", {}))
        self._configure_selectors()
        r = self.result
        ref = f" · ref: {escape_markup(' '.join(r.ref))}" if r.ref is not None else ""
        cross_layers = hyp.maps["cross"].shape[0] if "cross" in hyp.maps else 1
        where = f" (layer {cross_layers - 1}/{cross_layers})" if cross_layers > 1 else ""
        acc = (
            f" · align acc.{where} {r.alignment_accuracy:.0%}"
            if r.alignment_accuracy is not None
            else ""
        )
        # Two lines: the sentence pair, then the figures (short ones first so 80 columns keep them).
        src, shown = fit_pair(" ".join(r.src), " ".join(hyp.tokens), self._title_width())
        self.query_one("#insp-title", Static).update(
            f"[b]{escape_markup(src)}[/] → [b]{escape_markup(shown)}[/]\n"
            f"hyp {self.hyp_index + 1}/{len(r.hypotheses)} · score {hyp.score:.2f} "
            f"· step {r.step}{acc}{ref}"
        )
        self.step_row = None
        self.redraw()

    def _title_width(self) -> int:
        """Characters the title's line has (its padding left out)."""
        title = self.query_one("#insp-title", Static)
        return max(title.content_region.width or self.app.size.width - 30, 20)

    def _configure_selectors(self) -> None:
        kind_select = self.query_one("#insp-kind", Select)
        kinds = [k for k in KIND_LABELS if k in self.maps]
        with self.prevent(Select.Changed):
            current = (
                kind_select.value
                if kind_select.value in kinds
                else (kinds[0] if kinds else Select.NULL)
            )
            kind_select.set_options([(KIND_LABELS[k], k) for k in kinds])
            if current is not Select.NULL:
                kind_select.value = current
        self._configure_layer_head()

    def _configure_layer_head(self) -> None:
        kind = self.current_kind
        if kind is None:
            return
        layers, heads = self.maps[kind].shape[:2]
        layer_select = self.query_one("#insp-layer", Select)
        head_select = self.query_one("#insp-head", Select)
        with self.prevent(Select.Changed):
            # The last layer unless the user chose one (the header's figures and the CLI's
            # --layer default read the last layer too).
            layer = (
                layer_select.value
                if self._layer_chosen
                and isinstance(layer_select.value, int)
                and layer_select.value < layers
                else layers - 1
            )
            layer_select.set_options([(f"layer {i}", i) for i in range(layers)])
            layer_select.value = self._layer_set = layer
            head = (
                head_select.value
                if isinstance(head_select.value, int) and head_select.value < heads
                else HEAD_AVERAGE
            )
            head_select.set_options(
                [("head avg", HEAD_AVERAGE), *((f"head {i}", i) for i in range(heads))]
            )
            head_select.value = head
        # An RNN (or any 1-layer, 1-head map) has nothing to choose: hide the selectors.
        layer_select.display = layers > 1
        head_select.display = heads > 1
        self.query_one("#insp-layer-head").display = layers > 1 or heads > 1

    @property
    def current_kind(self) -> str | None:
        value = self.query_one("#insp-kind", Select).value
        if value in self.maps:
            return str(value)
        return next(iter(self.maps), None)

    @property
    def current_normalisation(self) -> str:
        """How the rows of the map on screen are normalised (attribution maps: scores with no
        row sum, "unnormalised", or "signed" where one is negative, as ``attnlab compare`` and
        ``translate --method`` read them; so the entropy is that of each row scaled to sum 1)."""
        kind = self.current_kind
        if kind is None:
            return NORM_SOFTMAX
        if is_attribution(kind):
            return NORM_SIGNED if bool((self.maps[kind] < 0).any()) else NORM_UNNORMALISED
        return self.normalisations.get(kind, NORM_SOFTMAX)

    def current_matrix(self) -> tuple[np.ndarray, list[str], list[str]] | None:
        """The matrix on screen (before step truncation), with its row and column labels;
        attribution maps divided by their maximum."""
        from attnlab.tui.inspect_engine import select_map

        kind = self.current_kind
        if kind is None:
            return None
        layer = self.query_one("#insp-layer", Select).value
        head = self.query_one("#insp-head", Select).value
        matrix = select_map(
            self.maps[kind],
            int(layer) if isinstance(layer, int) else 0,
            None if head in (HEAD_AVERAGE, Select.NULL) else int(head),
        )
        if is_attribution(kind) and matrix.size:
            # Attribution scores have no 0..1 range: shown relative to their maximum (the
            # colours of `attnlab translate --method`); the diagnostics say so.
            top = float(np.nanmax(matrix))
            matrix = matrix / top if top > 0 else matrix
        rows, cols = self.labels.get(kind, ([], []))
        return matrix, list(rows), list(cols)

    def current_selected(self) -> np.ndarray | None:
        """The selection mask of the map on screen ([rows, cols] bool; the head average's:
        cells any head selected), or None when the map has none (every variant but nsa)."""
        from attnlab.tui.inspect_engine import select_selected

        kind = self.current_kind
        if kind is None or kind not in self.selected:
            return None
        layer = self.query_one("#insp-layer", Select).value
        head = self.query_one("#insp-head", Select).value
        return select_selected(
            self.selected[kind],
            int(layer) if isinstance(layer, int) else 0,
            None if head in (HEAD_AVERAGE, Select.NULL) else int(head),
        )

    # -- drawing ----------------------------------------------------------------------------------

    def redraw(self) -> None:
        current = self.current_matrix()
        heatmap = self.query_one(AttentionHeatmap)
        if current is None:  # nothing drawn: the title (hint, note, error) stays as it is
            heatmap.set_matrix(np.zeros((0, 0)), [], [])
            return
        self.query_one("#insp-title", Static).remove_class("error", "note")
        matrix, rows, cols = current
        shown = matrix if self.step_row is None else matrix[: self.step_row + 1]
        kind = self.current_normalisation
        mask = self.current_selected()
        if mask is not None:
            mask = mask[: shown.shape[0]]
        heatmap.set_matrix(shown, rows, cols, kind, mask)
        scale = colour_scale(12, kind, heatmap.vmax, selected=mask is not None)
        self.query_one("#insp-scale", Static).update(scale)
        if self.step_row is not None and matrix.shape[1]:
            # Stepping: the cursor goes to where the new token looks most (its row's arg-max).
            heatmap.cursor = (self.step_row, int(np.argmax(matrix[self.step_row])))
        self._draw_diagnostics(matrix, rows, cols)
        self._draw_bars(matrix, cols)

    def _draw_diagnostics(self, matrix: np.ndarray, rows: list[str], cols: list[str]) -> None:
        d = diagnose(matrix, cols, self.current_normalisation)
        kind = self.current_kind or ""
        scale = " · ÷ its max" if is_attribution(kind) else ""
        lines = [
            f"[b]{KIND_LABELS.get(kind, kind)}[/] {matrix.shape[0]}×{matrix.shape[1]} "
            f"({KIND_AXES.get(kind, '?')}){self._where()}{scale} · [b]m[/] method",
            *normalisation_lines(d),
        ]
        mask = self.current_selected()
        if mask is not None:
            lines.append(f"{SELECTED_NOTE}: {int(mask.sum())} of {mask.size} cells")
        if d.eos_mass is not None:
            lines.append(f"mass on </s> {d.eos_mass:.0%}")
        if d.diagonal is not None and self.current_kind in ("enc_self", "dec_self"):
            lines.append(
                f"diagonal {d.diagonal:.0%} weight, arg-max on diagonal {d.diagonal_argmax:.0%}"
            )
        if self.current_kind == "cross" and self.gold is not None and self.result is not None:
            acc = alignment_accuracy(matrix, self.gold)
            if acc is not None and self.result.hypotheses[self.hyp_index].tokens == self.result.ref:
                lines.append(f"alignment acc. (this hyp{self._where(', ')}) {acc:.0%}")
        for warning in d.warnings():
            lines.append(f"[$warning]⚠ {warning}[/]")
        self.query_one("#insp-diag", Static).update("\n".join(lines))

    def _where(self, sep: str = " · ") -> str:
        """`` · layer 1/2, head avg`` for a map with several layers or heads ("" otherwise):
        every figure says which layer it reads."""
        kind = self.current_kind
        if kind is None:
            return ""
        layers, heads = self.maps[kind].shape[:2]
        layer = self.query_one("#insp-layer", Select).value
        head = self.query_one("#insp-head", Select).value
        parts = []
        if layers > 1:
            parts.append(f"layer {layer}/{layers}")  # as export names it: index/count
        if heads > 1:
            parts.append("head avg" if head in (HEAD_AVERAGE, Select.NULL) else f"head {head}")
        return sep + ", ".join(parts) if parts else ""

    def _draw_bars(self, matrix: np.ndarray, cols: list[str]) -> None:
        row = (
            self.step_row
            if self.step_row is not None
            else self.query_one(AttentionHeatmap).cursor[0]
        )
        if not matrix.size or row >= matrix.shape[0]:
            self.query_one("#insp-bars", Static).update("")
            return
        rows = self.labels.get(self.current_kind or "", ([], []))[0]
        label = rows[row] if row < len(rows) else str(row)
        self.query_one("#insp-bars", Static).update(
            row_bars(matrix[row], cols, width=16, title=f"row {row}: {label}")
        )
        # A long source runs past the panel: bring the row's largest weight into view.
        if np.isfinite(matrix[row]).any():
            entry = min(max((len(str(c)) for c in cols), default=1), 10) + 1 + 16 + 5
            self.call_after_refresh(self._show_bar, int(np.nanargmax(matrix[row])), entry)

    def _show_bar(self, index: int, entry_width: int) -> None:
        """Scroll the bar panel to bar ``index`` (one bar is ``entry_width`` cells, wrapped
        onto several lines in a narrow panel), unless it is already in view."""
        box = self.query_one("#insp-bars-box", VerticalScroll)
        region = box.scrollable_content_region
        per_bar = max(1, -(-entry_width // max(region.width, 1)))
        first, last = 1 + index * per_bar, index * per_bar + per_bar  # after the title line
        top = int(box.scroll_offset.y)
        if region.height > 0 and not (top <= first and last < top + region.height):
            box.scroll_to(y=max(0, first - region.height // 2), animate=False)

    # -- events -----------------------------------------------------------------------------------

    @on(Select.Changed, "#insp-kind")
    def _kind_changed(self) -> None:
        self._configure_layer_head()
        self.step_row = None
        self.redraw()

    @on(Select.Changed, "#insp-layer")
    @on(Select.Changed, "#insp-head")
    def _layer_head_changed(self, event: Select.Changed) -> None:
        if event.select.id == "insp-layer" and event.value != self._layer_set:
            # the user's choice (not an echo of our own setting, which Select may post late):
            # kept across decodes while the model has that layer
            self._layer_chosen = True
        self.redraw()

    @on(OptionList.OptionSelected, "#insp-nbest")
    @on(OptionList.OptionHighlighted, "#insp-nbest")
    def _hyp_chosen(self, event: OptionList.OptionHighlighted) -> None:
        if self.result is not None and event.option_index != self.hyp_index:
            self.show_hypothesis(event.option_index)

    @on(AttentionHeatmap.CursorMoved)
    def _cursor(self, message: AttentionHeatmap.CursorMoved) -> None:
        cell = message.cell
        unattended = message.heatmap.normalisation == NORM_SUB_STOCHASTIC and (
            cell.col == message.heatmap.shape[1] - 1 and cell.col_label == UNATTENDED_LABEL
        )
        where = "unattended mass" if unattended else f"col {cell.col}"
        chosen = f"  {SELECTED_MARK} selected" if cell.selected else ""
        self.query_one("#insp-cell", Static).update(
            f"[b]{escape_markup(cell.row_label)}[/] → [b]{escape_markup(cell.col_label)}[/]  "
            f"weight [b]{cell.weight:.4f}[/]"
            f"  (row {cell.row}, {where}){chosen}"
        )
        current = self.current_matrix()
        if current is not None and self.step_row is None:
            self._draw_bars(current[0], current[2])

    def action_step(self, delta: int) -> None:
        current = self.current_matrix()
        if current is None:
            return
        rows = current[0].shape[0]
        start = -1 if self.step_row is None else self.step_row
        self.step_row = min(max(start + delta, 0), rows - 1)
        self.redraw()

    def action_show_all(self) -> None:
        self.step_row = None
        self.redraw()

    def action_cycle_method(self) -> None:
        """Raw cross-attention -> rollout -> relevancy -> gradient-weighted -> norm-weighted."""
        available = [k for k in METHOD_CYCLE if k in self.maps]
        if not available:
            return
        current = self.current_kind
        index = available.index(current) + 1 if current in available else 0
        self.query_one("#insp-kind", Select).value = available[index % len(available)]

    # -- export, heads, compare ------------------------------------------------------------------

    def _shown_run(self) -> Path | None:
        run = self.query_one("#insp-run", Select).value
        return None if run is Select.NULL or not run else Path(str(run))

    def action_heads(self) -> None:
        """Head importance and the pruning curve of the chosen run (a screen with a worker)."""
        from attnlab.tui.screens.heads import HeadsScreen

        run = self._shown_run()
        if run is None or not has_checkpoint(str(run)):
            self.app.notify("pick a run with a checkpoint first", severity="warning")
            return
        self.app.push_screen(
            HeadsScreen(
                run,
                str(self.query_one("#insp-ckpt", Select).value),
                str(self.query_one("#insp-split", Select).value),
            )
        )

    def action_compare(self) -> None:
        """This sentence through a second run: both maps, A − B, JS per row, AER."""
        from attnlab.tui.screens.compare import CompareScreen, CompareSource

        run = self._shown_run()
        if run is None or not has_checkpoint(str(run)):
            self.app.notify("pick a run with a checkpoint first", severity="warning")
            return
        try:
            index = int(self.query_one("#insp-index", Input).value or 0)
        except ValueError:
            index = 0
        try:  # the search Inspect shows: compare decodes both runs with it
            beam = max(int(self.query_one("#insp-beam", Input).value or 1), 1)
        except ValueError:
            beam = 1
        kind = self.current_kind
        self.app.push_screen(
            CompareScreen(
                CompareSource(
                    run,
                    str(self.query_one("#insp-ckpt", Select).value),
                    str(self.query_one("#insp-split", Select).value),
                    index,
                    self.query_one("#insp-text", Input).value.strip(),
                    "raw" if kind in (None, "cross") or not is_attribution(kind) else kind,
                    str(self.query_one("#insp-decoder", Select).value),
                    beam,
                ),
                self.runs_dir,
            )
        )

    def action_toggle_half(self) -> None:
        heatmap = self.query_one(AttentionHeatmap)
        heatmap.half_block = not heatmap.half_block

    def action_hypothesis(self, delta: int) -> None:
        if self.result is not None and self.result.hypotheses:
            self.show_hypothesis(self.hyp_index + delta)
            self.query_one("#insp-nbest", OptionList).highlighted = self.hyp_index
