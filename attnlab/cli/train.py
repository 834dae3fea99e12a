"""``attnlab train``: parse the flags, call the engine's ``start_or_resume`` and show it
(the run directory line, a live progress bar, the summary table or one result line)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import DEVICE_CHOICE, fmt, one_line, rich_console
from attnlab.events import Checkpoint, Done, Error, Eval, Event, Start, Step, as_event
from attnlab.train.session import DEFAULT_PRESET, RunRequest, start_or_resume
from attnlab.train.signals import PEER_LOST_KIND, primary_process, under_launcher


class TrainProgress:
    """Live rich progress bar fed by the trainer's events.

    The bar moves on every step event (the trainer logs the first step at once) and the ETA
    comes from the step rate since the start, not from rich's sliding speed window, which
    shows ``-:--:--`` when events arrive less often than its sampling period.
    """

    def __init__(self, max_steps: int, start_step: int, quiet: bool, clock: Any = time.monotonic):
        self.quiet = quiet
        self.max_steps = max_steps
        self.start_step = start_step
        self.clock = clock
        self.started = clock()
        self.progress = None
        self.task = None
        self._stopped = False
        if quiet:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("mean {task.fields[tps]} tok/s"),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("dev {task.fields[score]}"),
            console=rich_console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(
            "train",
            total=max_steps,
            completed=start_step,
            loss="–",
            tps="–",
            score="BLEU –",
            eta="–",
        )
        self.metric = ""  # the task's first declared metric (an LM's loss); "": BLEU

    def __enter__(self) -> TrainProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Draw the bar's last state once and release the terminal (idempotent)."""
        if self.progress is not None and not self._stopped:
            self._stopped = True
            self.progress.stop()

    def eta_s(self, step: int) -> float | None:
        """Seconds left at the step rate since the start (None before the first step)."""
        done = step - self.start_step
        if done <= 0:
            return None
        return max(self.max_steps - step, 0) * (self.clock() - self.started) / done

    def on_event(self, event: Event | dict[str, Any]) -> None:
        """The trainer's callback (typed events; a dict is read as its JSON)."""
        typed = as_event(event)
        if typed is None:
            return
        if isinstance(typed, Start) and typed.dropped_pairs:
            click.echo(
                f"note: dropped {typed.dropped_pairs} training pairs longer than "
                "data.train_max_tokens tokens",
                err=True,
            )
        if isinstance(typed, Error) and typed.kind == PEER_LOST_KIND and under_launcher():
            return  # under `train --nproc` the launcher names the rank that died, in one line
        if self.progress is None:
            if isinstance(typed, Error):  # --quiet still says why training stopped
                click.echo(f"error: {one_line(typed.message)}", err=True)
            return
        if self._stopped:
            return
        if isinstance(typed, Start):
            self.metric = typed.metrics[0] if typed.metrics else ""  # the task's first metric
            if self.metric:
                self.progress.update(self.task, score=f"{self.metric} –")
        if isinstance(typed, Step):
            self.progress.update(
                self.task,
                completed=typed.step,
                loss=fmt(typed.loss, 4),
                tps=fmt(_mean_tps(typed), 0),
                eta=_duration(self.eta_s(typed.step)),
            )
        elif isinstance(typed, Eval):
            score = (
                f"{self.metric} {fmt(typed.metric(self.metric), 4)}"
                if self.metric
                else f"BLEU {fmt(typed.bleu)}"
            )
            self.progress.update(self.task, completed=typed.step, score=score)
        elif isinstance(typed, (Checkpoint, Done)):
            self.progress.update(self.task, completed=typed.step)
        elif isinstance(typed, Error):
            self.progress.console.print(f"[red]error:[/red] {typed.message}")


def _duration(seconds: float | None) -> str:
    """``75`` -> ``0:01:15``; None -> ``–`` (not known yet)."""
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _device_text(summary: dict[str, Any]) -> str:
    """``cpu (1 thread) × 2 processes`` for a data-parallel run (tokens/s are global)."""
    world = summary.get("world_size") or 1
    return f"{summary['device']} × {world} processes" if world > 1 else str(summary["device"])


def _summary_table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="attnlab train: summary", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    best = summary.get("best") or {}
    rows = [
        ("run", summary["run_dir"]),
        ("ended", summary["reason"]),
        ("steps", summary["step"]),
        ("params", f"{summary['params']:,}"),
        ("device", _device_text(summary)),
        ("wall time", f"{summary['wall_s']:.1f} s"),
        ("mean tokens/s", fmt(summary.get("tokens_per_s"), 0)),
        ("best step", fmt(best.get("step"))),
        ("best chosen by", fmt(best.get("chosen_by"))),
    ]
    if best.get("bits_per_token") is not None:  # a language model's metrics
        rows += [
            ("dev loss (nats/token)", fmt(best.get("loss"), 4)),
            ("dev perplexity", fmt(best.get("perplexity"), 3)),
            ("dev bits/token", fmt(best.get("bits_per_token"), 4)),
        ]
    else:
        rows += [
            ("dev BLEU", fmt(best.get("bleu"))),
            ("dev chrF", fmt(best.get("chrf"))),
            ("dev exact match", fmt(best.get("exact_match"), 3)),
            ("dev loss / ppl", f"{fmt(best.get('loss'), 4)} / {fmt(best.get('ppl'), 3)}"),
        ]
    if best.get("alignment_accuracy") is not None:
        rows.append(("dev alignment accuracy", fmt(best["alignment_accuracy"], 3)))
    for key, value in rows:
        table.add_row(key, str(value))
    return table


@click.command()
@click.option(
    "--preset",
    default=None,
    metavar="NAME|FILE",
    help=f"preset name or TOML file (default {DEFAULT_PRESET})",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="override a config key (repeatable), e.g. model.attention=luong-general",
)
@click.option(
    "--out",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="parent directory of run directories",
)
@click.option(
    "--run-name",
    default=None,
    help="run directory name: letters, digits, . _ - (default TASK-ARCH-VARIANTS-YYYYmmdd-HHMMSS)",
)
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@click.option("--seed", type=int, default=None, help="random seed (train.seed)")
@click.option(
    "--quiet", is_flag=True, help="no progress bar; print the run directory and one result line"
)
@click.option(
    "--resume",
    "resume_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    metavar="RUN",
    help="continue RUN from its last checkpoint (--set may change "
    "train.* and decode.* keys, e.g. train.max_steps)",
)
@click.option(
    "--nproc",
    type=click.IntRange(1, 1024),
    default=None,
    help="data-parallel processes (torchrun + DDP; train.nproc): up to GPUs or cores",
)
@click.pass_context
def train(
    ctx: click.Context,
    preset: str | None,
    overrides: tuple[str, ...],
    out: Path,
    run_name: str | None,
    device: str | None,
    seed: int | None,
    quiet: bool,
    resume_dir: Path | None,
    nproc: int | None,
) -> None:
    """Train a model and write a run directory (config, events, checkpoints).

    One trainer per run directory (a lock on RUN/.lock). A run that fails or is interrupted
    before its first step leaves no directory behind. With --nproc N (or train.nproc) the same
    training runs in N processes under torchrun (DistributedDataParallel); "torchrun ... -m
    attnlab train ..." works directly too.
    """
    request = RunRequest(
        preset=preset,
        overrides=overrides,
        out=out,
        run_name=run_name,
        device=device,
        seed=seed,
        nproc=nproc,
        resume_dir=resume_dir,
        worker_args=("--quiet",) if quiet else (),
    )

    def progress(max_steps: int, start_step: int, primary: bool) -> TrainProgress:
        return TrainProgress(max_steps, start_step, quiet or not primary)  # rank > 0: silent

    result = start_or_resume(request, on_run_dir=_say_run_dir, progress=progress)
    if isinstance(result, int):  # the --nproc launcher: rank 0's exit code
        ctx.exit(result)
    summary = result
    if not primary_process():  # ranks other than 0 print nothing
        pass
    elif quiet:
        best = summary.get("best") or {}
        # "error: ..." is the one line that says what went wrong (on stderr); the summary of
        # such a run must not read as a second one.
        label = "ended on an error" if summary["reason"] == "error" else summary["reason"]
        scores = (
            f"dev loss {fmt(best.get('loss'), 4)}, bits/token {fmt(best.get('bits_per_token'), 4)}"
            if best.get("bits_per_token") is not None  # a language model
            else f"dev BLEU {fmt(best.get('bleu'))}, exact match {fmt(best.get('exact_match'), 3)}"
        )
        click.echo(f"{label}: step {summary['step']}, {scores}, {summary['wall_s']:.1f} s")
    else:
        rich_console().print(_summary_table(summary))
    if summary["exit_code"]:
        ctx.exit(summary["exit_code"])


def _say_run_dir(run_dir: Path, processes: int) -> None:
    more = f" ({processes} processes)" if processes > 1 else ""
    click.echo(f"run directory: {run_dir}{more}")


COMMANDS = (train,)


def _mean_tps(step: Step) -> float | None:
    """The run's mean throughput so far (#44: one speed per run), the window's for old logs."""
    return step.tokens_per_s if step.mean_tokens_per_s is None else step.mean_tokens_per_s
