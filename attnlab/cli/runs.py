"""``attnlab runs`` and ``attnlab export``: list the runs of a folder with their best dev
metrics (as many columns as the terminal fits), and write a run as one .safetensors file."""

from __future__ import annotations

from pathlib import Path

import click

from attnlab.cli.common import Choice, compact, fmt, rich_console
from attnlab.cli.ct2 import export_ct2
from attnlab.errors import AttnlabError
from attnlab.exporters.ct2_check import OFFERED_QUANTIZATIONS as QUANTIZATIONS
from attnlab.viz.text import fold_warnings


@click.command()
@click.argument(
    "directory", required=False, default="runs", type=click.Path(file_okay=False, path_type=Path)
)
@click.option(
    "--verbose", "-v", is_flag=True, help="list every run's warning (default: the first, folded)"
)
def runs(directory: Path, verbose: bool) -> None:
    """Runs in DIRECTORY (default runs) with their best dev metrics."""
    from rich import box
    from rich.table import Table

    from attnlab.runs import list_runs

    if not directory.is_dir():
        raise AttnlabError(f"{directory}: no such directory")
    found = list_runs(directory)
    console = rich_console()
    rows = [
        {
            "run": r.path.name,
            "task": str(r.task),
            "model": f"{_abbrev(r.arch)}/{r.attention}",
            "params": compact(r.params),
            "steps": _cell(r.steps),
            "BLEU": _cell(r.best_bleu, 1),
            "chrF": _cell(r.best_chrf, 1),
            "EM": _cell(r.best_exact_match, 2),
            "loss": _cell(r.best_loss, 3),
            "tok/s": _cell(r.tokens_per_s, 0),
            "status": str(r.status),
        }
        for r in found
    ]
    # A language model is scored by its dev loss (no BLEU): the column shows when one is listed.
    lm_listed = any(r.best_bleu is None and r.best_loss is not None for r in found)
    columns, _ = _runs_columns(rows, console.width if console.is_terminal else None, lm_listed)
    if not console.is_terminal:  # piped: every column, nothing abbreviated (docs/cli.md)
        console.width = max(console.width, sum(_widths(rows, columns)) + 1)
    table = Table(title=f"runs in {directory}", box=box.SIMPLE_HEAD)
    for column in columns:
        numeric = column in ("params", "steps", "BLEU", "chrF", "EM", "loss", "tok/s")
        # the run name folds onto a second line rather than being cut: it must stay copyable
        table.add_column(
            column,
            justify="right" if numeric else "left",
            no_wrap=column != "run",
            overflow="fold" if column == "run" else "ellipsis",
            min_width=len(column) if column != "run" else None,
        )
    for cells in rows:
        table.add_row(*(cells[c] for c in columns))
    console.print(table)
    # After the table: skipped log lines, an unreadable config.toml. Folded as the lab's Runs
    # tab folds them (a folder of 600 broken runs is one line, not 600 before the table's end).
    warned = [(r.path.name, warning) for r in found for warning in r.warnings]
    if verbose or len(warned) == 1:
        for _, warning in warned:
            click.echo(f"warning: {warning}", err=True)
    elif warned:
        click.echo(f"{fold_warnings(warned)} (--verbose lists them)", err=True)
    if not found and any((directory / name).is_file() for name in ("config.toml", "events.jsonl")):
        parent = directory.resolve().parent
        click.echo(
            f"note: {directory} is a run directory itself; its runs folder is {parent} "
            f"(attnlab runs {parent})",
            err=True,
        )


def _widths(rows: list[dict[str, str]], columns: list[str]) -> list[int]:
    """Each column's widest cell or header plus padding and separator."""
    return [max([len(c), *(len(r[c]) for r in rows)]) + 3 for c in columns]


RUNS_CELL = 12  # widest number cell of ``attnlab runs``


def _cell(value: float | int | None, digits: int = 2) -> str:
    """``fmt`` for the runs table, at most RUNS_CELL characters: a damaged log's 1e308 BLEU or
    30-digit step reads 1e+308 instead of one wide cell pushing the column off the table
    for every run."""
    text = fmt(value, digits)
    return text if len(text) <= RUNS_CELL else f"{value:.3g}"


RUNS_ORDER = (
    "run",
    "task",
    "model",
    "params",
    "steps",
    "BLEU",
    "chrF",
    "EM",
    "loss",
    "tok/s",
    "status",
)
# Most telling first; what does not fit the terminal is left out. The run name is never cut
# (a name copied from this table must work as ``attnlab eval runs/NAME``): the model column
# goes before it would, and a name wider than the terminal wraps.
RUNS_PRIORITY = (
    "run",
    "loss",
    "BLEU",
    "chrF",
    "EM",
    "status",
    "model",
    "tok/s",
    "steps",
    "task",
    "params",
)


def _runs_columns(
    rows: list[dict[str, str]], width: int | None, with_loss: bool = False
) -> tuple[list[str], int]:
    """The ``attnlab runs`` columns that fit ``width`` (by priority; all of them when None, as
    for piped output) and the run-name width (always the longest name). The dev ``loss``
    column only ``with_loss`` (a language model is listed)."""
    order = [c for c in RUNS_ORDER if with_loss or c != "loss"]
    priority = [c for c in RUNS_PRIORITY if with_loss or c != "loss"]

    def need(column: str) -> int:  # content or header, plus padding and separator (3)
        return max([len(column), *(len(r[column]) for r in rows)]) + 3

    run_width = need("run") - 3
    if width is None:
        return order, run_width
    used = 1 + run_width + 3  # 1: the table's outer edge
    chosen = ["run"]
    for column in priority[1:]:
        if used + need(column) <= width:
            chosen.append(column)
            used += need(column)
    return [c for c in order if c in chosen], run_width


@click.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN")
@click.option(
    "--out",
    "out_file",
    default=None,
    type=click.Path(path_type=Path),
    help="the .safetensors file to write (default exports/RUN-CHECKPOINT.safetensors), or "
    "with --format ctranslate2 the model directory",
)
@click.option(
    "--checkpoint", "which", type=Choice(["best", "last"]), default="best", show_default=True
)
@click.option("--force", is_flag=True, help="replace --out if it already exists")
@click.option(
    "--format",
    "export_format",
    type=Choice(["safetensors", "ctranslate2"]),
    default="safetensors",
    show_default=True,
    help="ctranslate2: a CTranslate2 Transformer directory (needs attnlab[ctranslate2])",
)
@click.option(
    "--quantization",
    type=Choice(QUANTIZATIONS),
    default=None,
    help="--format ctranslate2: the weights' type (default float32)",
)
@click.option(
    "--tensorboard",
    "tb_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="write events.jsonl as TensorBoard event files into DIR (needs tensorboardX); "
    "without --out nothing else is written",
)
def export(
    run: Path,
    out_file: Path | None,
    which: str,
    force: bool,
    export_format: str,
    quantization: str | None,
    tb_dir: Path | None,
) -> None:
    """Write one self-contained .safetensors file (weights + config, vocabularies, metrics),
    or with --format ctranslate2 a CTranslate2 model directory (docs/export.md)."""
    from attnlab.runs import default_export_path, export_checkpoint, export_source

    if not run.exists():
        raise AttnlabError(f"{run}: no such run directory")
    if quantization is not None and export_format != "ctranslate2":
        raise AttnlabError(
            f"--quantization {quantization} applies to --format ctranslate2; a .safetensors "
            "export keeps the trained weights"
        )
    if tb_dir is not None:
        from attnlab.tensorboard_export import export_tensorboard

        counts = export_tensorboard(run, tb_dir)
        click.echo(f"wrote {counts['scalars']} scalars and {counts['texts']} texts to {tb_dir}")
        if out_file is None:  # --tensorboard alone: the event files only
            return
    if export_format == "ctranslate2":
        export_ct2(run, out_file, which, quantization, force)
        return
    _directory, used = export_source(run, which)
    if out_file is None:
        out_file = default_export_path(run, used if used != "checkpoint" else which)
    path = export_checkpoint(run, out_file, which, force=force)
    if used != which and used == "last":
        click.echo(f"note: {run} has no {which} checkpoint yet; exported last", err=True)
    click.echo(f'exported {path}; use it with: attnlab translate {path} "..."')


COMMANDS = (runs, export)


def _abbrev(arch: str) -> str:
    """The architecture's short name in the run list (its registry entry's ``abbrev``)."""
    from attnlab.nn.archs import arch_spec

    spec = arch_spec(arch)
    return spec.abbrev if spec is not None and spec.abbrev else arch
