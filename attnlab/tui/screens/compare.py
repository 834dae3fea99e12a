"""Compare: how do two runs align the same sentence (issue 15)?

Run A and the sentence (a sample of a split, or a typed one) come from Inspect; run B and the
method (raw / rollout / relevancy / gradient / norm) are chosen here. Both maps are drawn on
one colour scale; where the two runs produced the same target tokens the A − B map (blue: B
larger, red: A larger) and the Jensen-Shannon divergence of each target row follow (each side's rows
read by their kind: ∅ counted for sub-stochastic rows, unnormalised rows scaled to sum 1,
none for a signed side: "JS —" and the reason); with gold
alignments each run's alignment accuracy and AER. The report is
``attnlab.interpret.reports.compare_report`` (the ``attnlab compare`` command's), computed in a
thread worker.
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
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Label, Select, Static

from attnlab.attention_map import NORM_SOFTMAX
from attnlab.tui.jobs import Jobs
from attnlab.tui.views.run_select import checkpoint_path, has_checkpoint
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.viz.text import run_labels

COMPARES = Jobs()  # one comparison at a time, in every Compare screen (a closed one's too)
METHODS = ("raw", "rollout", "relevancy", "gradient", "norm")  # attnlab.interpret.attribution


@dataclass(frozen=True)
class CompareSource:
    """Run A and the sentence: ``text`` typed, else sample ``index`` of ``split``."""

    run_dir: Path
    checkpoint: str
    split: str
    index: int
    text: str
    method: str = "raw"
    decoder: str = ""  # Inspect's search (a registered decoder; "" = beam) and its width
    beam: int = 1


@dataclass
class CompareDone(Message):
    request: tuple[str, str]  # (run B, method) it answers
    report: dict[str, Any] | None
    error: str = ""
    number: int | None = None  # its request's number (attnlab.tui.jobs)


def shown_maps(report: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, float]:
    """A's and B's maps on one scale: attention weights as they are (0..1), attribution
    scores divided by the larger maximum of the two (so the top cell of either is 1)."""
    a = np.asarray(report["a"]["map"], dtype=np.float64).reshape(len(report["a"]["rows"]), -1)
    b = np.asarray(report["b"]["map"], dtype=np.float64).reshape(len(report["b"]["rows"]), -1)
    scale = 1.0 if report["method"] == "raw" else float(report["vmax"] or 0.0)
    if scale > 0:
        a, b = a / scale, b / scale
    return a, b, scale


def side_kind(report: dict[str, Any], key: str) -> str:
    """How side ``key``'s rows are normalised (a report without the field: softmax)."""
    return str(report[key].get("normalisation", NORM_SOFTMAX))


def kinds_text(report: dict[str, Any]) -> str:
    """The status' `` · rows: A signed, B softmax`` when a side is not softmax ("" otherwise)."""
    kinds = [side_kind(report, key) for key in ("a", "b")]
    if all(kind == NORM_SOFTMAX for kind in kinds):
        return ""
    return f" · rows: A {kinds[0]}, B {kinds[1]}"


def alignment_line(report: dict[str, Any]) -> str:
    parts = []
    for key in ("a", "b"):
        side = report[key]
        if side["aer"] is not None:
            parts.append(
                f"{key.upper()}: alignment acc. {side['alignment_accuracy']:.0%}, "
                f"AER {side['aer']:.3f}"
            )
    return " · ".join(parts) if parts else "no gold alignments for this sentence"


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, source: CompareSource, runs_dir: Path) -> None:
        super().__init__()
        self.source = source
        self.runs_dir = Path(runs_dir)
        self.report: dict[str, Any] | None = None
        self._paths: list[str] = []
        self._pending: tuple[str, str] | None = None
        self._left_out: list[tuple[str, str]] = []  # (run name, why it is not comparable)

    def compose(self) -> ComposeResult:
        src = self.source
        what = f'"{_escape(src.text)}"' if src.text else f"{src.split} sample {src.index}"
        with Vertical(id="cmp-box"):
            yield Static(
                f"[b]A[/] {_escape(src.run_dir.name)} ({src.checkpoint}) · {what}", id="cmp-title"
            )
            with Horizontal(id="cmp-controls"):
                yield Label("B")
                yield Select([], id="cmp-run", compact=True, prompt="(no other run)")
                yield Select(
                    [(m, m) for m in METHODS],
                    value=src.method,
                    allow_blank=False,
                    id="cmp-method",
                    compact=True,
                )
            yield Static("", id="cmp-status")
            with Horizontal(id="cmp-maps"):
                with Vertical(classes="cmp-side cmp-side-a"):  # a gap before B's header
                    yield Static("A", id="cmp-a-label", classes="cmp-label")
                    yield AttentionHeatmap(id="cmp-a")
                with Vertical(classes="cmp-side"):
                    yield Static("B", id="cmp-b-label", classes="cmp-label")
                    yield AttentionHeatmap(id="cmp-b")
            with VerticalScroll(id="cmp-diff-box"):
                yield Static("", id="cmp-diff")
        yield Footer()

    def on_mount(self) -> None:
        select = self.query_one("#cmp-run", Select)
        mine = str(self.source.run_dir)
        self._paths, self._left_out = comparable_runs(
            self.runs_dir, self.source.run_dir, self.source.checkpoint
        )
        others = [p for p in self._paths if p != mine]
        with self.prevent(Select.Changed):
            select._allow_blank = not others  # Select has no public setter; set_options reads it
            from attnlab.study.listing import listed_name

            labels = run_labels([listed_name(Path(p)) for p in others], 36)
            select.set_options(list(zip(labels, others, strict=True)))
            if others:
                select.value = others[0]
        self.start()

    @on(Select.Changed, "#cmp-run")
    @on(Select.Changed, "#cmp-method")
    def _changed(self) -> None:
        self.start()

    def start(self) -> None:
        run_b = self.query_one("#cmp-run", Select).value
        method = str(self.query_one("#cmp-method", Select).value)
        if run_b is Select.NULL or not run_b:
            self._status(self._nothing_to_compare())
            return
        if not has_checkpoint(str(run_b)):
            self._status(f"{Path(str(run_b)).name} has no checkpoint yet")
            return
        self._pending = (str(run_b), method)
        self._status(f"comparing with {Path(str(run_b)).name} ({method}) …")
        self.compute(Path(str(run_b)), method, COMPARES.issue())

    def _nothing_to_compare(self) -> str:
        if not self._left_out:
            return "no second run to compare with: train another one"
        name, reason = self._left_out[0]
        more = f" (and {len(self._left_out) - 1} more)" if len(self._left_out) > 1 else ""
        return (
            f"[$warning]no run to compare with: B must have A's task and vocabularies; "
            f"{_escape(name)}{more}: {_escape(reason)}[/]"
        )

    # Not exclusive (that leaves the old thread running): COMPARES runs one at a time, and an
    # answer to an earlier choice is dropped by its request (run B, method) in _done.
    @work(thread=True, exit_on_error=False, group="compare")
    def compute(self, run_b: Path, method: str, number: int | None = None) -> None:
        request = (str(run_b), method)
        number = COMPARES.issue() if number is None else number
        outcome = COMPARES.run(number, lambda: self._report(run_b, method))
        if not outcome.skipped:  # skipped: a newer choice came while it waited
            self.post_message(CompareDone(request, outcome.value, outcome.error, number))

    def _report(self, run_b: Path, method: str) -> dict[str, Any]:
        from attnlab.errors import AttnlabError
        from attnlab.interpret.reports import compare_report, scoring_dataset
        from attnlab.runs import load_checkpoint

        src = self.source
        a = load_checkpoint(checkpoint_path(src.run_dir, src.checkpoint))
        b = load_checkpoint(run_b)
        example = None
        if not src.text:
            examples = list(scoring_dataset(a, a.config).splits.split(src.split))
            if not 0 <= src.index < len(examples):
                raise AttnlabError(
                    f"sample {src.index} is out of range [0, "
                    f"{len(examples) - 1}] for the {src.split} split"
                )
            example = examples[src.index]
        return compare_report(a, b, src.text, example, method, "cpu", src.decoder, src.beam)

    @on(CompareDone)
    def _done(self, message: CompareDone) -> None:
        if message.request != self._pending or COMPARES.stale(message.number):
            return  # an earlier choice's answer
        if message.report is None:
            self._status(f"[$error]✗ {_escape(message.error)}[/]")
            return
        self.report = report = message.report
        a, b, scale = shown_maps(report)
        source = report["source"]
        # a signed side's diverging scale: ±(the larger max |w| of the two maps as shown)
        ends = [float(np.abs(m).max()) for m in (a, b) if m.size]
        for key, matrix in (("a", a), ("b", b)):
            self.query_one(f"#cmp-{key}", AttentionHeatmap).set_matrix(
                matrix,
                report[key]["rows"],
                source,
                normalisation=side_kind(report, key),
                vmax=max(ends, default=1.0),
            )
        for key in ("a", "b"):
            hyp = " ".join(report[key]["hyp"])
            self.query_one(f"#cmp-{key}-label", Static).update(
                f"[b]{key.upper()}[/] {_escape(Path(report[key]['checkpoint']).parent.parent.name)}"
                f" → {_escape(hyp)}"
            )
        unit = "weights 0..1" if scale == 1.0 else f"÷ {scale:.3g} (the larger maximum)"
        kinds = kinds_text(report)
        search = report.get("search", "greedy")
        self._status(
            f"{search} search (as Inspect) · one colour scale: {unit} · "
            f"{alignment_line(report)}{kinds}{self._left_out_note()}"
        )
        self.query_one("#cmp-diff", Static).update(self._difference(report))

    @staticmethod
    def _difference(report: dict[str, Any]) -> Any:
        if not report["same_target"]:
            return (
                "the two runs produced different target tokens: no A − B map and no "
                "Jensen-Shannon divergence per row"
            )
        from attnlab.viz.diverging import render_diverging

        js, note = report["js"], report.get("js_note") or ""
        if js is None:  # a signed side: A − B still means something, JS does not
            title = f"A − B · JS —: {note}"
            notes = ["JS —" for _ in report["a"]["rows"]]
        else:
            title = f"A − B · JS per row (bits), mean {sum(js) / max(len(js), 1):.3f}"
            title += f" ({note})" if note else ""
            notes = [f"JS {x:.3f}" for x in js]
        return render_diverging(
            report["difference"], report["a"]["rows"], report["source"], title, notes
        )

    def _left_out_note(self) -> str:
        n = len(self._left_out)
        if not n:
            return ""
        return f" · {n} run{'s' if n > 1 else ''} left out (other task or vocabularies)"

    def _status(self, text: str) -> None:
        self.query_one("#cmp-status", Static).update(text)

    def action_close(self) -> None:
        self.dismiss(None)


def comparable_runs(
    runs_dir: Path, run_a: Path, checkpoint: str
) -> tuple[list[str], list[tuple[str, str]]]:
    """The runs (paths, newest first) with a checkpoint whose task, vocabularies and tokenizers
    match run A's (``attnlab.interpret.compare.incomparable_reason``), A's own included, and
    the (name, reason) of each one left out."""
    from attnlab.errors import AttnlabError
    from attnlab.interpret.compare import incomparable_reason
    from attnlab.runs import read_meta
    from attnlab.study.listing import lab_runs, listed_name
    from attnlab.tui.inspect_engine import checkpoint_path as resolved

    def dataset_meta(run: Path, tag: str) -> dict[str, Any]:
        return read_meta(resolved(run, tag))["dataset"]

    try:
        runs = [r.path for r in lab_runs(runs_dir)]  # study runs too (issue 44)
    except Exception:  # a half-written run directory must not break the screen
        runs = []
    try:
        mine = dataset_meta(run_a, checkpoint)
    except (AttnlabError, OSError) as err:
        return [], [(run_a.name, str(err))]
    kept: list[str] = []
    left_out: list[tuple[str, str]] = []
    for run in runs:
        if not has_checkpoint(run):
            continue
        try:
            reason = incomparable_reason(mine, dataset_meta(run, "best"))
        except (AttnlabError, OSError) as err:
            reason = str(err)
        if reason:
            left_out.append((listed_name(run), reason))
        else:
            kept.append(str(run))
    return kept, left_out


def _escape(text: str) -> str:
    return text.replace("[", r"\[")
