"""``attnlab study run`` and ``attnlab study show``: a grid of configurations × seeds, each an
ordinary run directory, and its table with confidence intervals and significance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import Choice, rich_console, say
from attnlab.errors import AttnlabError

EXECUTOR_CHOICE = Choice(["local", "dask"])


@click.group("study")
def study() -> None:
    """Compare configurations over seeds: run a study file, show its table."""


@study.command("run")
@click.argument("study_file", metavar="FILE|NAME")
@click.option(
    "--workers",
    type=click.IntRange(1, 4096),
    default=None,
    help="runs at once (local executor; default: cores ÷ threads per run)",
)
@click.option(
    "--threads",
    type=click.IntRange(1, 1024),
    default=None,
    help="CPU threads per run (train.threads; default 1)",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs") / "studies",
    show_default=True,
    help="parent of the study directory (with dask: a path every worker sees)",
)
@click.option("--seeds", type=click.IntRange(1, 1000), default=None, help="seeds 1..N instead")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="override every run's config (repeatable), e.g. train.max_steps=50",
)
@click.option("--executor", type=EXECUTOR_CHOICE, default="local", show_default=True)
@click.option("--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler address")
@click.option("--device", default=None, help="every run's train.device (cpu, cuda, ...)")
@click.option(
    "--max-runs",
    type=click.IntRange(1),
    default=None,
    help="refuse a study of more runs than this (default 10000)",
)
@click.option(
    "--tune",
    "tune_mode",
    type=Choice(["on", "off"]),
    default="on",
    show_default=True,
    help="off: ignore the file's [tune] and train every cell at the file's settings",
)
@click.pass_context
def run_command(
    ctx: click.Context,
    study_file: str,
    workers: int | None,
    threads: int | None,
    out: Path,
    seeds: int | None,
    overrides: tuple[str, ...],
    executor: str,
    scheduler: str | None,
    device: str | None,
    max_runs: int | None,
    tune_mode: str,
) -> None:
    """Train and score every cell × seed of a study (a .toml file, or a name from studies/).

    A rerun skips scored runs and resumes interrupted ones; a failed run is recorded with its
    error and the study goes on; Ctrl+C stops every run, each resumable. Prints the table.
    """
    from attnlab.study.lock import check_study_free
    from attnlab.study.runner import (
        check_existing_runs,
        plan_workers,
        run_study,
        study_dir,
        total_runs,
    )
    from attnlab.study.spec import MAX_RUNS, load_study

    def counted(name: str, cells: int, seeds: int, runs: int) -> None:
        # Printed before any cell is checked: a big grid says how big it is at once.
        tuning = "" if runs == cells * seeds else f" + {runs - cells * seeds} tuning runs"
        click.echo(f"study {name}: {cells} cells × {seeds} seeds{tuning} = {runs} runs")

    spec = load_study(
        study_file,
        seeds=seeds,
        extra=overrides,
        max_runs=max_runs or MAX_RUNS,
        on_count=counted,
        tune=tune_mode == "on",
    )
    check_study_free(study_dir(spec, out))  # another runner of this study: one line, its pid
    check_existing_runs(spec, study_dir(spec, out))  # a refusal comes before the banner
    if executor == "local":
        workers, threads = plan_workers(workers, threads)
    total = total_runs(spec)
    where = (
        f"{workers} worker(s), {threads or 1} thread(s) each"
        if executor == "local"
        else (f"Dask scheduler {scheduler}")
    )
    click.echo(f"  in {out / spec.name} ({where})")
    with _ProgressBar(total, workers or 1) as bar:
        result, directory = run_study(
            spec,
            out,
            workers=workers,
            threads=threads,
            executor=executor,
            scheduler=scheduler,
            device=device,
            on_outcome=bar.update,
        )
    for outcome in result.failed:
        say(f"failed: {outcome.run_name}: {outcome.error}")
    if result.interrupted:
        say(f"interrupted: every run is resumable; rerun `attnlab study run {study_file}` to go on")
        ctx.exit(130)
    _print_table(directory, "text")
    if result.failed:
        ctx.exit(1)


class _ProgressBar:
    """One line: runs done, failed, ETA (rich; plain lines when not a terminal)."""

    def __init__(self, total: int, workers: int) -> None:
        self.total, self.workers = total, workers
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _ProgressBar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        console = rich_console(stderr=True)
        if console.is_terminal:
            self._progress = Progress(
                TextColumn("runs"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                console=console,
            )
            self._progress.start()
            self._task = self._progress.add_task("study", total=self.total, detail="")
        return self

    def update(self, outcome: Any, progress: Any) -> None:
        finished = progress.finished
        eta = progress.eta_s(self.workers)
        detail = f"failed {progress.failed}" + (f", ETA {_clock(eta)}" if eta is not None else "")
        if self._progress is not None:
            self._progress.update(self._task, completed=finished, detail=detail)
        else:
            click.echo(
                f"[{finished}/{self.total}] {outcome.run_name}: {outcome.state}"
                + (f" ({outcome.error})" if outcome.error else "")
                + f"; {detail}",
                err=True,
            )

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@study.command("show")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="every figure as one JSON object")
@click.option("--markdown", is_flag=True, help="the tables as Markdown")
@click.option(
    "--randomization",
    is_flag=True,
    help="BLEU/chrF also by approximate randomisation (sacrebleu --paired-ar, 10000 trials; "
    "seconds per comparison)",
)
def show_command(directory: Path, as_json: bool, markdown: bool, randomization: bool) -> None:
    """A study's table: mean ± 95 % t interval over seeds, Δ vs the baseline and its tests."""
    if as_json and markdown:
        raise AttnlabError("--json and --markdown: choose one")
    kind = "json" if as_json else "markdown" if markdown else "text"
    _print_table(directory, kind, randomization)


def _print_table(directory: Path, kind: str, randomization: bool = False) -> None:
    from attnlab.runs import jsonable
    from attnlab.study.render import (
        COST_TITLE,
        bucket_rows,
        cost_rows,
        markdown,
        p_value_columns,
        p_value_rows,
        stacked_rows,
        tune_rows,
    )
    from attnlab.study.table import load_table

    if not Path(directory).is_dir():
        raise AttnlabError(f"{directory}: no such study directory")
    table = load_table(directory, randomization=randomization)
    if kind == "json":
        click.echo(json.dumps(jsonable(table.to_dict()), ensure_ascii=False, allow_nan=False))
        return
    if kind == "markdown":
        click.echo(markdown(table))
        return
    from rich.table import Table

    console = rich_console()
    main = Table(title=f"study {table.name} ({table.split}, {table.checkpoint} checkpoint)")
    columns, body = stacked_rows(table)
    for i, column in enumerate(columns):
        main.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for cells in body:
        main.add_row(*cells)
    console.print(main)
    columns, body = cost_rows(table)
    if body:
        costs = Table(title=COST_TITLE)
        for i, column in enumerate(columns):
            costs.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for cells in body:
            costs.add_row(*cells)
        console.print(costs)
    columns, body = bucket_rows(table)
    if len(columns) > 1:
        buckets = Table(title="BLEU by source length (mean ± 95 % t half-width)")
        for i, column in enumerate(columns):
            buckets.add_column(column, justify="left" if i == 0 else "right")
        for cells in body:
            buckets.add_row(*cells)
        console.print(buckets)
    p_rows = p_value_rows(table)
    if p_rows:
        tests = Table(title="p-values against the baseline (Holm-adjusted)")
        names = ["cell", "baseline", "metric", "over seeds", "over sentences"]
        if len(p_value_columns(table)) > len(names):
            names.append("approx. randomisation")
        for i, column in enumerate(names):
            tests.add_column(column, justify="right" if i >= 3 else "left")
        for cells in p_rows:
            tests.add_row(*cells)
        console.print(tests)
    columns, body = tune_rows(table)
    if body:
        curve = Table(title=f"tuning on dev ({table.tune['select']}, mean ± 95 % t half-width)")
        for i, column in enumerate(columns):
            curve.add_column(column, justify="right" if i in (2, 3) else "left")
        for cells in body:
            curve.add_row(*cells)
        console.print(curve)
    for note in table.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    for failure in table.failures:
        console.print(
            f"failed: {failure['run']}: {failure.get('error') or failure['status']}",
            markup=False,
            highlight=False,
        )
    for text in table.methods.values():
        console.print(f"- {text}", markup=False, highlight=False)


COMMANDS = (study,)
