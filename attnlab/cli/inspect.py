"""``attnlab heads``, ``compare`` and ``average`` (issue 15), plus the inspection helpers
behind ``eval --gold-alignments`` and ``translate --show-alignment / --export``
(attnlab/cli/evaluate.py calls them)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import (
    DEVICE_CHOICE,
    Choice,
    export_option,
    load_run,
    max_sentences_option,
    out_file_option,
    rich_console,
)
from attnlab.errors import AttnlabError
from attnlab.interpret.reports import compare_report, heads_report, scoring_dataset

EXPORT_SUFFIXES = (".svg", ".html")  # attnlab.viz.export (imported lazily: rich)


# -- eval --gold-alignments ------------------------------------------------------------------


def gold_alignment_result(
    loaded: Any,
    dataset: Any,
    split: str,
    path: Path,
    order: str,
    device: Any,
    max_sentences: int = 0,
) -> dict[str, Any]:
    from attnlab.interpret.alignment import read_pharaoh
    from attnlab.interpret.gold import gold_alignment_report

    golds = read_pharaoh(path, order)
    examples = list(dataset.splits.split(split))
    if max_sentences > 0:
        examples, golds = examples[:max_sentences], golds[:max_sentences]
    from attnlab.nn.archs import arch_spec

    spec = arch_spec(loaded.config.model.arch)
    layered = spec is not None and bool(spec.cross_layers)  # a decoder: shift-att applies
    report = gold_alignment_report(
        loaded.model, dataset, examples, golds, device, layered, str(path), order
    )
    return {"file": str(path), "order": order, **report}


# -- translate --show-alignment / --export ----------------------------------------


def alignment_rows(matrix: Any, rows: list[str], cols: list[str]) -> list[dict[str, Any]]:
    from attnlab.interpret.alignment import alignment_table

    return [dataclasses.asdict(r) for r in alignment_table(matrix, rows, cols)]


def alignment_renderable(table: list[dict[str, Any]], title: str) -> Any:
    from rich.table import Table
    from rich.text import Text

    out = Table(title=title)
    for column, justify in (
        ("target", "left"),
        ("source", "left"),
        ("index", "right"),
        ("weight", "right"),
    ):
        out.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in table:
        out.add_row(
            Text(row["target"]),
            Text(row["source"]),
            str(row["source_index"]),
            f"{row['weight']:.3f}",
        )
    return out


def check_export_path(path: Path | None) -> None:
    if path is not None and path.suffix.lower() not in EXPORT_SUFFIXES:
        raise AttnlabError(f"{path}: --export writes .svg or .html; valid suffixes: .svg, .html")


class TeeConsole:
    """Prints to the real console and to a recording colour console of the same width (the
    export shows what a colour terminal shows, even when stdout is piped)."""

    def __init__(self, console: Any):
        from attnlab.viz.export import recording_console

        self.console = console
        self.recording = recording_console(console.width)
        self.is_terminal, self.no_color = True, False  # what the recording shows

    def print(self, *objects: Any, **options: Any) -> None:
        self.console.print(*objects, **options)
        self.recording.print(*objects, **options)


def save_recording(console: Any, path: Path, title: str) -> None:
    """What the recording console printed, as SVG or HTML (attnlab.viz.export)."""
    from attnlab.viz.export import save_recording as save

    save(console, path, title)


# -- heads -------------------------------------------------------------------------------------


def heads_renderables(report: dict[str, Any]) -> list[Any]:
    from rich.table import Table

    out = []
    for role, layers in report["importance"].items():
        table = Table(
            title=f"head importance: {role} (Michel et al. 2019, ℓ2-normalised per layer)"
        )
        table.add_column("layer", justify="right")
        for h in range(len(layers[0]) if layers else 0):
            table.add_column(f"head {h}", justify="right")
        for index, scores in enumerate(layers):
            table.add_row(str(index), *(f"{s:.3f}" for s in scores))
        out.append(table)
    if report["curve"]:
        table = Table(title=f"pruning curve ({report['split']}, {report['n']} sentences)")
        for column in ("masked", "head", "BLEU", "loss"):
            table.add_column(column, justify="right")
        for point in report["curve"]:
            head = "–" if point["head"] is None else "{} L{} H{}".format(*point["head"])
            table.add_row(
                str(point["masked"]), head, f"{point['bleu']:.2f}", f"{point['loss']:.4f}"
            )
        out.append(table)
    return out


@click.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.option("--split", type=Choice(["dev", "test"]), default="dev", show_default=True)
@max_sentences_option(
    200, "sentences scored for the importance and at each point of the curve (0 = all)"
)
@click.option("--no-curve", is_flag=True, help="importance only (no pruning curve)")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON object")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
def heads(
    run: Path, split: str, max_sentences: int, no_curve: bool, as_json: bool, device: str | None
) -> None:
    """Head importance (|∂L/∂ξ_h| of a head gate) and the pruning curve: dev BLEU with the k
    least important heads masked, k = 0 … all. Masks are run-time gates: no weight changes."""
    loaded, torch_device = load_run(run, device)
    dataset = scoring_dataset(loaded, loaded.config)
    report = heads_report(loaded, dataset, split, max_sentences, torch_device, curve=not no_curve)
    if as_json:
        from attnlab.runs import jsonable

        click.echo(json.dumps(jsonable(report), ensure_ascii=False, allow_nan=False))
        return
    console = rich_console()
    for renderable in heads_renderables(report):
        console.print(renderable)


# -- compare -----------------------------------------------------------------------------------


def kinds_line(report: dict[str, Any]) -> str | None:
    """The header line ``A: signed · B: softmax`` when a side is not softmax (else None)."""
    kinds = report.get("normalisation") or {}
    if all(kinds.get(key, "softmax") == "softmax" for key in ("a", "b")):
        return None
    return " · ".join(f"{key.upper()}: {kinds.get(key, 'softmax')}" for key in ("a", "b"))


def js_row_notes(report: dict[str, Any]) -> list[str]:
    """Per-row JS notes of the A − B table; "JS —" on every row where JS is undefined."""
    if report["js"] is None:
        return ["JS —" for _ in report["a"]["rows"]]
    return [f"JS {x:.3f}" for x in report["js"]]


def compare_renderables(report: dict[str, Any], plain: bool = False) -> list[Any]:
    """What ``attnlab compare`` prints; ``plain`` (a pipe, NO_COLOR): the A and B maps as
    numbers (weights x 100), as ``translate --show-attention | cat`` prints them."""
    from rich.text import Text

    from attnlab.viz.diverging import render_diverging
    from attnlab.viz.heatmap import render_heatmap, render_plain_heatmap

    out: list[Any] = [Text(f"search: {report.get('search', 'greedy')} (both runs)")]
    kinds = kinds_line(report)
    if kinds is not None:  # the header says both kinds; each side is drawn by its own
        out.append(f"row normalisation: {kinds}")
    for key in ("a", "b"):
        side = report[key]
        title = f"{key.upper()}: {side['checkpoint']} ({report['method']}, {side['where']})"
        kind = side.get("normalisation", "softmax")
        out.append(Text(""))  # A's and B's headers never run together
        if plain:
            out.append(
                Text(render_plain_heatmap(side["map"], side["rows"], report["source"], title, kind))
            )
        else:
            out.append(
                render_heatmap(
                    side["map"],
                    side["rows"],
                    report["source"],
                    vmax=report["vmax"] or None,
                    title=title,
                    normalisation=kind,
                )
            )
        if side["aer"] is not None:
            out.append(
                f"{key.upper()}: alignment accuracy {side['alignment_accuracy']:.3f}, "
                f"AER {side['aer']:.3f} ({report['method']}, {side['where']})"
            )
    if report["same_target"]:
        note = report.get("js_note") or ""
        out.append(
            render_diverging(
                report["difference"],
                report["a"]["rows"],
                report["source"],
                title=f"A − B ({report['a']['where']})"
                + (f" (JS: {note})" if note and report["js"] is not None else ""),
                row_notes=js_row_notes(report),
            )
        )
        if report["js"] is None:
            out.append(note)
    else:
        out.append(
            "the two models produced different target tokens: no A − B map and no JS per row"
        )
    return out


@click.command()
@click.argument("run_a", type=click.Path(path_type=Path), metavar="RUN_A")
@click.argument("run_b", type=click.Path(path_type=Path), metavar="RUN_B")
@click.argument("sentence", required=False, default="")
@click.option(
    "--index",
    type=click.IntRange(min=0),
    default=None,
    help="use sample INDEX of --split instead of a typed sentence (gold alignments, if any)",
)
@click.option(
    "--split",
    type=Choice(["dev", "test"]),
    default=None,
    help="the split of --index (default dev) or of --significance (default test)",
)
@click.option(
    "--significance",
    is_flag=True,
    help="paired tests of B against A on --split: BLEU/chrF paired bootstrap and approximate "
    "randomisation (as sacrebleu), exact match exact McNemar",
)
@click.option(
    "--method",
    type=Choice(["raw", "rollout", "relevancy", "gradient", "norm"]),
    default="raw",
    show_default=True,
    help="which map to compare",
)
@click.option("--json", "as_json", is_flag=True, help="print the comparison as one JSON object")
@export_option("also write what is printed to FILE.svg or FILE.html")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
def compare(
    run_a: Path,
    run_b: Path,
    sentence: str,
    index: int | None,
    split: str | None,
    significance: bool,
    method: str,
    as_json: bool,
    export_path: Path | None,
    device: str | None,
) -> None:
    """Two models, one sentence: both maps on one colour scale, A − B where the target tokens
    agree, Jensen-Shannon divergence per target row, alignment accuracy / AER with gold.
    With --significance: both models on a whole split and the paired tests of B against A."""
    check_export_path(export_path)
    if significance:
        if sentence.strip() or index is not None:
            raise AttnlabError("--significance scores a whole split: give no SENTENCE or --index")
        _significance(run_a, run_b, split or "test", as_json, device)
        return
    split = split or "dev"
    if (index is None) == (not sentence.strip()):
        raise AttnlabError(
            "give either a SENTENCE or --index N (a sample of --split), not both or neither"
        )
    a, torch_device = load_run(run_a, device)
    b, _ = load_run(run_b, device)
    example = None
    if index is not None:
        examples = list(scoring_dataset(a, a.config).splits.split(split))
        if not 0 <= index < len(examples):
            raise AttnlabError(
                f"--index {index} is out of range [0, {len(examples) - 1}] for the {split} split"
            )
        example = examples[index]
    report = compare_report(a, b, sentence, example, method, torch_device)
    if as_json:
        from attnlab.runs import jsonable

        click.echo(json.dumps(jsonable(report), ensure_ascii=False, allow_nan=False))
        return
    console = rich_console()
    plain = not console.is_terminal or console.no_color  # blank colour cells: print numbers
    for renderable in compare_renderables(report, plain):
        console.print(renderable, soft_wrap=plain)  # piped lines are never folded
    if export_path is not None:  # the file shows what a colour terminal shows
        recording = TeeConsole(console).recording
        for renderable in compare_renderables(report):
            recording.print(renderable)
        save_recording(recording, export_path, "attnlab compare")


def _significance(run_a: Path, run_b: Path, split: str, as_json: bool, device: str | None) -> None:
    from attnlab.stats import format_p
    from attnlab.study.significance import paired_report

    a, torch_device = load_run(run_a, device)
    b, _ = load_run(run_b, device)
    report = paired_report(a, b, split, torch_device)
    if as_json:
        from attnlab.runs import jsonable

        click.echo(json.dumps(jsonable(report), ensure_ascii=False, allow_nan=False))
        return
    from rich.table import Table

    table = Table(title=f"B against A on {split} ({report['n']} sentences, paired; A = baseline)")
    for column in ("metric", "test", "A", "B", "B − A", "p"):
        table.add_column(column, justify="left" if column in ("metric", "test") else "right")
    for row in report["tests"]:
        digits = 3 if row["metric"] == "exact_match" else 2
        table.add_row(
            row["metric"],
            row["test"],
            f"{row['a']:.{digits}f}",
            f"{row['b']:.{digits}f}",
            f"{row['difference']:+.{digits}f}",
            format_p(row["p_value"]),
        )
    console = rich_console()
    console.print(f"A: {report['a']['checkpoint']} (step {report['a']['step']})", highlight=False)
    console.print(f"B: {report['b']['checkpoint']} (step {report['b']['step']})", highlight=False)
    console.print(table)
    for row in report["tests"]:
        if row["test"] != "approximate randomisation":
            console.print(f"- {row['metric']}: {row['method']}", highlight=False, markup=False)
    console.print(
        f"- seed {report['seed']}; the BLEU/chrF p-values equal sacrebleu's --paired-bs / "
        "--paired-ar on the same files (eval --hyps/--refs writes them)",
        highlight=False,
        markup=False,
    )


# -- average -----------------------------------------------------------------------------------


@click.command()
@click.argument("run", type=click.Path(file_okay=False, path_type=Path), metavar="RUN")
@click.option("--last", type=int, required=True, help="how many of the newest step-* checkpoints")
@out_file_option("the .safetensors bundle to write (eval / translate load it)", required=True)
@click.option("--force", is_flag=True, help="replace --out if it already exists")
def average(run: Path, last: int, out_file: Path, force: bool) -> None:
    """Average the N newest checkpoints/step-* copies (train.keep_last = N keeps them)."""
    from attnlab.interpret.average import average_checkpoints

    if not run.is_dir():
        raise AttnlabError(f"{run}: no such run directory")
    path, steps = average_checkpoints(run, last, out_file, force=force)
    click.echo(f"averaged steps {', '.join(map(str, steps))} into {path}")


COMMANDS = (heads, compare, average)
