"""The ``attnlab`` command line (click). Every command has ``--help``.

Exit codes: 0 on success; 2 with one line ``error: ...`` on stderr for a user mistake
(AttnlabError, a bad flag or argument), never a traceback; 130 when training was
interrupted (Ctrl+C / SIGTERM; the ``last`` checkpoint is saved); 1 when training stopped on
an error (e.g. a non-finite loss). torch and the engine are imported inside the commands, so
``attnlab --help`` and the lab start quickly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from attnlab import __version__
from attnlab.attention_map import BOS_LABEL, MODEL_KEYS, AttentionMap, axes_text, target_rows
from attnlab.cli_data import data as _data_group
from attnlab.cli_inspect import COMMANDS as _inspect_commands
from attnlab.errors import AttnlabError
from attnlab.events import Checkpoint, Done, Error, Eval, Event, Start, Step, as_event

DEFAULT_PRESET = "reverse-bahdanau"


# A torchrun worker's view of its job, from torchrun's environment (no torch import: these
# decide things before the seconds-long imports).
TORCHRUN_SIGNAL_GRACE_S = 2.0  # = attnlab.train.distributed.SIGNAL_GRACE_S


def _primary_process() -> bool:
    return os.environ.get("RANK", "0") in ("", "0")


def _torchrun_worker() -> bool:
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
    except ValueError:
        return False


def _say(line: str) -> None:
    """A line on stderr; under torchrun only rank 0 speaks (the others say the same)."""
    if _primary_process():
        click.echo(line, err=True)


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


class AttnlabGroup(click.Group):
    """A click group whose ``main`` turns user mistakes into one line and exit code 2."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(
                args, prog_name or "attnlab", complete_var, standalone_mode=False, **extra
            )
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.NoArgsIsHelpError as err:  # a group called bare: show its help
            click.echo(err.ctx.get_help() if err.ctx is not None else err.format_message())
            code = 0
        except click.UsageError as err:
            hint = f" (see {err.ctx.command_path} --help)" if err.ctx is not None else ""
            _say(f"error: {_one_line(err.format_message())}{hint}")
            code = 2
        except click.ClickException as err:
            _say(f"error: {_one_line(err.format_message())}")
            code = err.exit_code
        except AttnlabError as err:
            _say(f"error: {_one_line(str(err))}")
            code = 2
        except (click.Abort, KeyboardInterrupt):
            _say("interrupted")
            code = 130
        if os.environ.get("WORLD_SIZE"):  # a data-parallel rank (torchrun)
            from attnlab.train.distributed import exit_worker, report_exit

            code = report_exit(code)
            if standalone_mode:
                exit_worker(code)
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(name="attnlab", cls=AttnlabGroup, invoke_without_command=True)
@click.version_option(__version__, prog_name="attnlab")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """attnlab: a terminal lab for attention in sequence-to-sequence models.

    With no command, opens the lab (the Textual app).
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        from attnlab.tui.app import run_app
    except ImportError as err:
        click.echo(
            f"the lab is not available in this installation ({err}); try attnlab --help", err=True
        )
        ctx.exit(1)
        return
    run_app()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (also ``python -m attnlab``, how the lab starts training)."""
    from attnlab.allocator import retain_freed_memory

    retain_freed_memory()  # this process owns its allocator: decode/train steps reuse pages
    cli.main(args=argv, prog_name="attnlab")


# -- shared options ------------------------------------------------------------------------------

DECODE_FLAGS: list[tuple[str, str, Any, str]] = [
    # (flag, config key, type, help)
    ("--decoder", "decoder", str, "decoding strategy (attnlab decoders; default: from the flags)"),
    ("--beam", "beam", int, "beam size (1 = greedy)"),
    ("--alpha", "alpha", float, "length penalty exponent α (GNMT ((5+|Y|)/6)^α)"),
    ("--beta", "beta", float, "coverage penalty weight β"),
    ("--groups", "groups", int, "diverse beam search groups"),
    ("--diversity", "diversity", float, "Hamming diversity strength λ"),
    ("--temperature", "temperature", float, "sampling temperature"),
    ("--top-k", "top_k", int, "sample from the k most likely tokens (0 = off)"),
    ("--top-p", "top_p", float, "nucleus sampling mass (1 = off)"),
    ("--seed", "seed", int, "sampling seed: the same seed draws the same samples"),
    ("--nbest", "nbest", int, "hypotheses to print per sentence"),
    (
        "--max-len-ratio",
        "max_len_ratio",
        float,
        "maximum output length as a ratio of source length",
    ),
    ("--batch-size", "batch_size", int, "sentences per decoding batch (0 = fill --batch-rows)"),
    (
        "--batch-rows",
        "batch_rows",
        int,
        "decoder rows per step when --batch-size is 0 (sentences × beam)",
    ),
    ("--mbr-candidates", "mbr_candidates", int, "MBR: candidates per sentence"),
    ("--mbr-source", "mbr_source", str, "MBR: candidates from sample or beam"),
    ("--mbr-utility", "mbr_utility", str, "MBR: utility chrf or bleu"),
]


def decode_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The decoding flags (issue 4), each mapping onto a ``decode.*`` key."""
    func = click.option(
        "--sample", is_flag=True, default=False, help="sample instead of searching"
    )(func)
    for flag, _key, kind, help_text in reversed(DECODE_FLAGS):
        func = click.option(flag, type=kind, default=None, help=f"{help_text} (decode.*)")(func)
    return func


def decode_overrides(values: dict[str, Any]) -> list[str]:
    out = [
        f"decode.{key}={values[key]}"
        for _flag, key, _kind, _help in DECODE_FLAGS
        if values.get(key) is not None
    ]
    if values.get("sample"):
        out.append("decode.sample=true")
    if (values.get("sample") or values.get("decoder") == "sampling") and values.get("nbest"):
        out.append(f"decode.num_samples={values['nbest']}")  # --nbest N draws N samples
    return out


# The run's stored keys that choose a search: `--decoder NAME` resets those NAME does not read
# to DecodeConfig's defaults, unless the command line sets them too.
SEARCH_SELECTORS = ("sample", "beam", "groups", "nbest")


def _pop_decode(kwargs: dict[str, Any]) -> list[str]:
    """The decoding flags as ``decode.*`` overrides of a loaded run's config.

    ``--decoder NAME`` replaces the run's stored choice of search: a run trained with, say,
    ``decode.sample = true`` is scored with ``--decoder greedy`` (the search of its eval
    events) instead of failing on a contradiction the command line cannot remove.
    Contradicting flags on the command line itself stay an error.
    """
    keys = [key for _flag, key, _kind, _help in DECODE_FLAGS] + ["sample"]
    values = {k: kwargs.pop(k, None) for k in keys}
    overrides = decode_overrides(values)
    name = values.get("decoder")
    if name:
        from attnlab.config import DecodeConfig
        from attnlab.decode.search import DECODERS

        if name in DECODERS:
            reads = {param.key for param in DECODERS.get(name).factory.spec.params}
            defaults = DecodeConfig()
            resets = [
                f"decode.{key}={str(getattr(defaults, key)).lower()}"  # False -> false
                for key in SEARCH_SELECTORS
                if not values.get(key) and key not in reads
            ]
            overrides = [*resets, *overrides]
    return overrides


DEVICE_CHOICE = click.Choice(["auto", "cpu", "cuda", "mps"])


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _compact(n: int) -> str:
    """511138 -> 511k, 20518405 -> 20.5M."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if n >= 1000 else str(n)


# -- train -----------------------------------------------------------------------------------------


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
            TextColumn("{task.fields[tps]} tok/s"),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("dev BLEU {task.fields[bleu]}"),
            console=_console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(
            "train", total=max_steps, completed=start_step, loss="–", tps="–", bleu="–", eta="–"
        )

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
        if self.progress is None:
            if isinstance(typed, Error):  # --quiet still says why training stopped
                click.echo(f"error: {_one_line(typed.message)}", err=True)
            return
        if self._stopped:
            return
        if isinstance(typed, Step):
            self.progress.update(
                self.task,
                completed=typed.step,
                loss=_fmt(typed.loss, 4),
                tps=_fmt(typed.tokens_per_s, 0),
                eta=_duration(self.eta_s(typed.step)),
            )
        elif isinstance(typed, Eval):
            self.progress.update(self.task, completed=typed.step, bleu=_fmt(typed.bleu))
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
        ("tokens/s", _fmt(summary.get("tokens_per_s"), 0)),
        ("best step", _fmt(best.get("step"))),
        ("best chosen by", _fmt(best.get("chosen_by"))),
        ("dev BLEU", _fmt(best.get("bleu"))),
        ("dev chrF", _fmt(best.get("chrf"))),
        ("dev exact match", _fmt(best.get("exact_match"), 3)),
        ("dev loss / ppl", f"{_fmt(best.get('loss'), 4)} / {_fmt(best.get('ppl'), 3)}"),
    ]
    if best.get("alignment_accuracy") is not None:
        rows.append(("dev alignment accuracy", _fmt(best["alignment_accuracy"], 3)))
    for key, value in rows:
        table.add_row(key, str(value))
    return table


class DeferredSignals:
    """SIGINT/SIGTERM while ``train`` starts up: remembered as a flag, never lost.

    Python's default handler raises KeyboardInterrupt wherever the main thread is, and in
    the start-up imports that can be inside code that swallows it: Cython's memoryview
    set-up, run when lxml.etree is imported (sacrebleu imports it), registers its types with
    ``collections.abc`` under a bare ``try: ... except: pass``. A Ctrl+C that arrived while
    lxml loaded was dropped there and the run trained to the end (1 start in 5). The flag is
    checked between start-up stages and handed to the Trainer, whose handlers take over.
    A second signal raises at once, unless it comes within ``grace`` seconds of the first
    (a torchrun worker gets each Ctrl+C twice).
    """

    def __init__(self, grace: float = 0.0) -> None:
        self.hit = False
        self.trainer: Any = None
        self.grace = grace
        self._first_at: float | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> DeferredSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        again, self.hit = self.hit, True
        if self._first_at is None:
            self._first_at = now
        if self.trainer is not None:
            self.trainer.interrupt()
        if again and now - self._first_at >= self.grace:
            raise KeyboardInterrupt  # a second Ctrl+C: do not wait for the next check

    def check(self) -> None:
        if self.hit:
            raise KeyboardInterrupt

    def restore(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)


@cli.command()
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
    training runs in N processes under torchrun (DistributedDataParallel); ``torchrun ... -m
    attnlab train ...`` works directly too.
    """
    # First: start-up imports take seconds. A torchrun worker gets a terminal's Ctrl+C twice
    # (directly and forwarded by torchrun): a repeat within the grace is the same request.
    signals = DeferredSignals(grace=TORCHRUN_SIGNAL_GRACE_S if _torchrun_worker() else 0.0)
    signals.install()
    try:
        result = _train(
            preset, overrides, out, run_name, device, seed, quiet, resume_dir, nproc, signals
        )
    finally:
        signals.restore()
    if isinstance(result, int):  # the --nproc launcher: rank 0's exit code
        ctx.exit(result)
    summary = result
    if not _primary_process():  # ranks other than 0 print nothing
        pass
    elif quiet:
        best = summary.get("best") or {}
        click.echo(
            f"{summary['reason']}: step {summary['step']}, dev BLEU {_fmt(best.get('bleu'))}, "
            f"exact match {_fmt(best.get('exact_match'), 3)}, {summary['wall_s']:.1f} s"
        )
    else:
        _console().print(_summary_table(summary))
    if summary["exit_code"]:
        ctx.exit(summary["exit_code"])


def _train(
    preset: str | None,
    overrides: tuple[str, ...],
    out: Path,
    run_name: str | None,
    device: str | None,
    seed: int | None,
    quiet: bool,
    resume_dir: Path | None,
    nproc: int | None,
    signals: DeferredSignals,
) -> dict[str, Any] | int:
    """The trainer's summary; with train.nproc > 1 outside torchrun, the launcher's exit code."""
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.runs import read_config

    extra = list(overrides)
    if seed is not None:
        extra.append(f"train.seed={seed}")
    if device is not None:
        extra.append(f"train.device={device}")
    if nproc is not None:
        extra.append(f"train.nproc={nproc}")
    if resume_dir is not None:
        if preset is not None or run_name is not None:
            raise AttnlabError(
                "--resume continues an existing run; it takes no --preset or --run-name (use --set)"
            )
        config = read_config(resume_dir)
    else:
        config = load_preset(preset or DEFAULT_PRESET)
    if extra:
        config = apply_overrides(config, extra)
    if config.train.nproc > 1 and not _torchrun_worker():
        return _launch_parallel(config, resume_dir, out, run_name, extra, quiet, signals)
    from attnlab.train import distributed  # torch: seconds

    signals.check()
    # Under torchrun: join the job; rank 0 makes (and locks) the run directory.
    info = distributed.init(config.train.device) if _torchrun_worker() else distributed.current()
    try:
        return _train_here(config, resume_dir, out, run_name, quiet, signals, info)
    finally:
        distributed.teardown()


def _run_name(config: Any, run_name: str | None) -> tuple[str, str]:
    """The new run's name (not yet checked) and what to call it in an error."""
    if run_name is not None:
        return run_name, "--run-name"
    from attnlab.naming import run_name_for  # one rule with the lab: TASK-ARCH-VARIANTS-stamp

    return run_name_for(config), "run name"


def _launch_parallel(
    config: Any,
    resume_dir: Path | None,
    out: Path,
    run_name: str | None,
    extra: list[str],
    quiet: bool,
    signals: DeferredSignals,
) -> int:
    """``attnlab train`` again in train.nproc processes under torchrun (see distributed).
    Mistakes are refused here, in one line; rank 0 of the job makes and locks the run
    directory (and removes it again if the run never starts)."""
    import tempfile

    from attnlab.config import dumps_toml
    from attnlab.runs import check_new_run_dir, check_run_dir_free
    from attnlab.train import distributed

    distributed.check_nproc(config.train.nproc, config.train.device)
    if resume_dir is not None:
        run_dir = resume_dir
        check_run_dir_free(run_dir)
        _check_resume(run_dir, config)
        sets = [arg for item in extra for arg in ("--set", item)]
        args = ["train", "--resume", str(resume_dir), *sets]
    else:
        run_dir = check_new_run_dir(out, *_run_name(config, run_name))
        args = ["train", "--out", str(out), "--run-name", run_dir.name]
    click.echo(f"run directory: {run_dir} ({config.train.nproc} processes)")
    if quiet:
        args.append("--quiet")
    signals.check()
    with tempfile.TemporaryDirectory(prefix="attnlab-preset-") as scratch:
        if resume_dir is None:  # the resolved experiment, overrides included
            preset = Path(scratch) / f"{config.name}.toml"
            preset.write_text(dumps_toml(config), encoding="utf-8")
            args += ["--preset", str(preset)]
        return distributed.launch(
            config.train.nproc,
            args,
            run_dir,
            new_run=resume_dir is None,
            interrupted=lambda: signals.hit,
        )


def _train_here(
    config: Any,
    resume_dir: Path | None,
    out: Path,
    run_name: str | None,
    quiet: bool,
    signals: DeferredSignals,
    info: Any,
) -> dict[str, Any]:
    """Set up (the locked run directory: rank 0's under DDP), train, return the summary."""
    from attnlab.runs import lock_run_dir, new_run_dir, remove_unstarted_run
    from attnlab.train.distributed import EXIT_FILE_ENV

    lock: Any = None  # rank 0's alone: the other ranks would wait on it

    def make_run_dir() -> Path:  # on rank 0; the others learn the path from it
        nonlocal lock
        if resume_dir is not None:
            lock = lock_run_dir(resume_dir)
            return resume_dir
        path, lock = new_run_dir(out, *_run_name(config, run_name))
        return path

    run_dir = info.primary_value(make_run_dir)
    trainer: Any = None
    try:
        start_step = 0
        if resume_dir is not None:
            start_step = info.primary_value(lambda: _check_resume(run_dir, config))
        quiet = quiet or not info.is_primary  # ranks other than 0 print nothing
        if info.is_primary and not os.environ.get(EXIT_FILE_ENV):  # the launcher said it already
            click.echo(f"run directory: {run_dir}")
        signals.check()
        from attnlab.train.trainer import Trainer  # torch, sacrebleu: seconds

        signals.check()
        trainer = Trainer(config, run_dir, resume=resume_dir is not None, lock=lock)
        signals.trainer = trainer
        if signals.hit:
            trainer.interrupt()
        with TrainProgress(config.train.max_steps, start_step, quiet) as progress:
            trainer.on_event = progress.on_event
            return trainer.run()
    except BaseException:
        # Failed or interrupted before its first step (a missing corpus, Ctrl+C during the
        # imports): a new run leaves nothing behind, never a directory that looks alive.
        started = trainer is not None and trainer.started
        if lock is not None and resume_dir is None and not started:
            remove_unstarted_run(run_dir, lock)
        raise
    finally:
        if lock is not None:
            lock.release()


def _check_resume(run_dir: Path, config: Any) -> int:
    """The step ``--resume`` continues from; refuses a config whose architecture or
    vocabularies differ from the checkpoint's (its weights would not fit)."""
    from attnlab.experiment import shaping_change
    from attnlab.runs import META_FILE, checkpoint_dir, read_json

    path = checkpoint_dir(run_dir, "last") / META_FILE
    if not path.is_file():
        return 0  # the trainer reports a run without a resumable checkpoint
    meta = read_json(path)
    saved = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(saved, dict):
        raise AttnlabError(f"{path}: config is not a table")
    change = shaping_change(saved, config, source=str(path))
    if change is not None:
        key, old, new = change
        raise AttnlabError(
            f"--resume {run_dir}: {key} is {new!r} but the checkpoint was trained with {old!r} "
            "(changed in config.toml or by --set); a resumed run keeps its model.* and "
            "vocabulary keys (train.* and decode.* may change)"
        )
    step = int(meta.get("step", 0))
    if config.train.max_steps < step:  # would train nothing and write the smaller max_steps
        raise AttnlabError(
            f"--resume {run_dir}: train.max_steps={config.train.max_steps} is below the "
            f"checkpoint's step {step}; to train on, --set train.max_steps=N with N > {step}"
        )
    return step


# -- eval / translate -----------------------------------------------------------------------------


def _load(run: Path, device: str | None) -> tuple[Any, Any]:
    from attnlab.device import resolve_device
    from attnlab.runs import load_checkpoint

    torch_device = resolve_device(device or "auto")
    return load_checkpoint(run, device=torch_device), torch_device


@cli.command("eval")
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.option("--split", type=click.Choice(["dev", "test"]), default="dev", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the metrics as one JSON object")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@click.option(
    "--max-sentences",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="score only the first N sentences (0 = all; training scores train.eval_sentences of dev)",
)
@click.option(
    "--gold-alignments",
    "gold_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Pharaoh file (i-j sure, i?j possible; one line per sentence of --split): report AER",
)
@click.option(
    "--alignment-order",
    type=click.Choice(["src-tgt", "tgt-src"]),
    default="src-tgt",
    show_default=True,
    help="what i and j in i-j index (0-based): source-target or target-source",
)
@decode_options
def eval_command(
    run: Path,
    split: str,
    as_json: bool,
    device: str | None,
    max_sentences: int,
    gold_path: Path | None,
    alignment_order: str,
    **flags: Any,
) -> None:
    """Score a run (its best checkpoint), a checkpoint directory or an exported file on a split."""
    from attnlab.data.dataset import load_dataset
    from attnlab.evaluate import evaluate_split, with_checkpoint_vocabularies
    from attnlab.experiment import apply_overrides
    from attnlab.nn.archs import normalisations_of
    from attnlab.runs import jsonable

    loaded, torch_device = _load(run, device)
    config = apply_overrides(loaded.config, _pop_decode(flags))
    dataset = with_checkpoint_vocabularies(load_dataset(config.data), loaded)
    result = evaluate_split(
        loaded.model,
        dataset,
        split,
        config.decode,
        device=torch_device,
        max_sentences=max_sentences,
        normalisations=normalisations_of(config),
    )
    result.pop("samples", None)
    result["checkpoint"] = str(loaded.path)
    result["step"] = loaded.step
    if gold_path is not None:
        from attnlab.cli_inspect import gold_alignment_result

        # the same first --max-sentences sentences the rest of the report scores
        result["gold_alignments"] = gold_alignment_result(
            loaded, dataset, split, gold_path, alignment_order, torch_device, max_sentences
        )
    if as_json:
        click.echo(json.dumps(jsonable(result), ensure_ascii=False, allow_nan=False))
        return
    from rich.table import Table

    table = Table(
        title=f"attnlab eval: {loaded.path} ({split}, step {loaded.step})", show_header=False
    )
    table.add_column("metric", style="bold")
    table.add_column("value", overflow="fold")  # wrap, never cut, the BLEU signature
    for key, digits in (
        ("n", 0),
        ("bleu", 2),
        ("chrf", 2),
        ("exact_match", 4),
        ("loss", 4),
        ("ppl", 3),
        ("alignment_accuracy", 4),
    ):
        if result.get(key) is not None:
            table.add_row(key, _fmt(result[key], digits))
    if result.get("aer") is not None:
        table.add_row("aer", _fmt(result["aer"], 4))
    gold = result.get("gold_alignments")
    if gold is not None:
        table.add_row("AER (gold file, last layer)", _fmt(gold["aer"], 4))
        shift = gold.get("shift_att")
        if shift is not None and shift["aer"] is not None:
            table.add_row(f"AER (Shift-Att, layer {shift['layer']})", _fmt(shift["aer"], 4))
    table.add_row("BLEU signature", result.get("bleu_signature", ""))
    console = _console()
    console.print(table)
    buckets = Table(title="BLEU by source length")
    for column in ("bucket", "n", "bleu"):
        buckets.add_column(column, justify="right")
    for row in result["bleu_by_length"]:
        buckets.add_row(row["bucket"], str(row["n"]), _fmt(row["bleu"]))
    console.print(buckets)


ROLES = MODEL_KEYS  # --role word -> the model's attentions key
METHODS = ("raw", "rollout", "relevancy", "gradient", "norm")  # attnlab.interpret.attribution


@cli.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.argument("text", nargs=-1)
@click.option("--show-attention", is_flag=True, help="print each hypothesis's attention map")
@click.option(
    "--show-alignment",
    is_flag=True,
    help="print each target row's arg-max source token and weight (from the map --method picks)",
)
@click.option(
    "--role",
    type=click.Choice(list(ROLES)),
    default="cross",
    show_default=True,
    help="which attention --show-attention prints (Transformers have all three)",
)
@click.option("--layer", type=int, default=None, help="0-based layer (default: the last)")
@click.option("--head", type=int, default=None, help="0-based head (default: the head average)")
@click.option(
    "--method",
    type=click.Choice(list(METHODS)),
    default="raw",
    show_default=True,
    help="raw attention or an attribution of it (cross only; rollout / relevancy span all "
    "layers and heads, gradient / norm take --layer and --head)",
)
@click.option(
    "--export",
    "export_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="also write what is printed to FILE.svg or FILE.html (in colour)",
)
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@decode_options
def translate(
    run: Path,
    text: tuple[str, ...],
    show_attention: bool,
    show_alignment: bool,
    role: str,
    layer: int | None,
    head: int | None,
    method: str,
    export_path: Path | None,
    device: str | None,
    **flags: Any,
) -> None:
    """Translate TEXT (or each line of stdin) with a run or checkpoint."""
    from attnlab.cli_inspect import check_export_path
    from attnlab.experiment import apply_overrides

    check_export_path(export_path)
    MapChoice(role, layer, head, method).check()
    loaded, torch_device = _load(run, device)
    config = apply_overrides(loaded.config, _pop_decode(flags))
    if role != "cross" and loaded.config.model.arch != "transformer":
        raise AttnlabError(
            f"--role {role}: a {loaded.config.model.arch} model has only "
            "cross-attention; valid: --role cross"
        )
    lines = list(text) if text else [line.rstrip("\n") for line in sys.stdin]
    need_maps = show_attention or show_alignment
    results = _translate_lines(loaded, lines, config.decode, torch_device, need_maps)
    choice = MapChoice(role, layer, head, method)
    # Every map before any output: a bad --layer/--head is one line, not a half-printed run.
    maps = [
        [_chosen_map(loaded, toks, hyp, tokens, choice, torch_device) for hyp, tokens in nbest]
        if need_maps
        else []
        for toks, nbest in results
    ]
    console: Any = _console()
    if export_path is not None:  # also record what is printed, as a colour terminal shows it
        from attnlab.cli_inspect import TeeConsole

        console = TeeConsole(console)
    detailed = config.decode.nbest > 1 or config.decode.beam > 1
    for line, (_source_tokens, nbest), chosen in zip(lines, results, maps, strict=True):
        if not nbest:
            console.print("")
            continue
        texts = [loaded.dataset.detokenize_target(tokens) for _hyp, tokens in nbest]
        if detailed:
            from attnlab.viz.nbest import render_nbest

            console.print(render_nbest([hyp for hyp, _ in nbest], texts, title=line))
        elif export_path is not None:
            console.print(texts[0], markup=False, highlight=False)
        else:
            click.echo(texts[0])
        _print_maps(console, chosen, detailed, show_attention, show_alignment)
    if export_path is not None:
        from attnlab.cli_inspect import save_recording

        save_recording(console.recording, export_path, "attnlab translate")


def _translate_lines(
    loaded: Any, lines: list[str], decode_cfg: Any, device: Any, need_attention: bool
) -> list[tuple[list[str], list[tuple[Any, list[str]]]]]:
    """Decode every non-empty line (length-sorted batches).

    Per line: (source tokens, [(hyp, tokens)]).
    """
    import torch

    from attnlab.decode.search import decode_sorted
    from attnlab.evaluate import target_text

    tokenized = [loaded.dataset.tokenize_source(line) for line in lines]
    results: list[tuple[list[str], list[tuple[Any, list[str]]]]] = [
        (toks, []) for toks in tokenized
    ]
    todo = [i for i, toks in enumerate(tokenized) if toks]
    sources = [loaded.src_vocab.encode(tokenized[i]) for i in todo]
    need = need_attention or decode_cfg.beta > 0
    with torch.no_grad():
        nbests = decode_sorted(
            loaded.model, sources, decode_cfg, need, device, to_text=target_text(loaded.dataset)
        )
    for i, nbest in zip(todo, nbests, strict=True):
        chosen = nbest[: decode_cfg.nbest]
        results[i] = (tokenized[i], [(h, loaded.tgt_vocab.decode(h.tokens)) for h in chosen])
    return results


@dataclasses.dataclass(frozen=True)
class MapChoice:
    """Which map ``translate`` prints: the attention of --role at --layer/--head, or --method's
    attribution of the cross-attention (rollout / relevancy span every layer and head)."""

    role: str = "cross"
    layer: int | None = None
    head: int | None = None
    method: str = "raw"

    def check(self) -> None:
        if self.method == "raw":
            return
        if self.role != "cross":
            raise AttnlabError(
                f"--method {self.method} explains target tokens by source tokens: "
                "it needs --role cross (or --method raw for self-attention)"
            )
        if self.method in ("rollout", "relevancy") and (self.layer, self.head) != (None, None):
            raise AttnlabError(
                f"--method {self.method} combines every layer and head; "
                "--layer/--head apply to --method raw, gradient or norm"
            )


def _check_index(flag: str, value: int | None, count: int) -> None:
    if value is not None and not 0 <= value < count:
        raise AttnlabError(
            f"{flag} {value}: this model has {count} "
            f"{flag[2:]}{'s' if count != 1 else ''}; valid: 0..{count - 1}"
        )


def _print_maps(
    console: Any,
    maps: list[Any],
    detailed: bool,
    show_attention: bool,
    show_alignment: bool,
) -> None:
    """Each hypothesis's chosen map (``_chosen_map``'s, None where not kept) as a heatmap and /
    or its arg-max alignment table."""
    from attnlab.cli_inspect import alignment_renderable, alignment_rows

    for rank, chosen in enumerate(maps, start=1):
        if chosen is None:
            continue
        matrix, rows, cols, title, kind, selected = chosen
        title = title if not detailed else f"hypothesis {rank}: {title}"
        if show_attention:
            _print_heatmap(console, matrix, rows, cols, title, kind, selected)
        if show_alignment:
            table = alignment_rows(matrix, rows, cols)
            console.print(alignment_renderable(table, f"alignment from {title}"))


def _chosen_map(
    loaded: Any,
    source_tokens: list[str],
    hyp: Any,
    tokens: list[str],
    choice: MapChoice,
    device: Any,
) -> tuple[Any, list[str], list[str], str, str, Any] | None:
    """(matrix, row tokens, column tokens, title, normalisation, selected cells or None) of
    ``choice`` for one hypothesis; attribution maps (--method) are scores with no row sum
    ("unnormalised", or "signed" where one is negative) and have no selected cells (only nsa's
    self-attention maps do)."""
    if choice.method == "raw":
        from attnlab.nn.archs import normalisation_of

        maps, selected = _role_maps(loaded, source_tokens, hyp, choice.role, device)
        if maps is None:
            return None
        kind = normalisation_of(loaded.config, choice.role)
        chosen = _map_of(
            maps, tokens, source_tokens, hyp, choice.role, choice.layer, choice.head, kind, selected
        )
        return (
            chosen.matrix,
            chosen.rows,
            chosen.cols,
            chosen.title(),
            chosen.normalisation,
            chosen.selected_matrix,
        )
    from attnlab.cli_inspect import method_map
    from attnlab.interpret.reports import map_kind

    cross = hyp.attention_layers
    n_layers, n_heads = (int(cross.shape[0]), int(cross.shape[1])) if cross is not None else (1, 1)
    _check_index("--layer", choice.layer, n_layers)
    _check_index("--head", choice.head, n_heads)
    layer = n_layers - 1 if choice.layer is None else choice.layer
    matrix = method_map(loaded, source_tokens, hyp, choice.method, layer, choice.head)
    rows = target_rows(tokens, hyp.finished)[: matrix.shape[0]]
    cols = list(source_tokens)[: matrix.shape[1]]
    if choice.method in ("rollout", "relevancy"):
        where = "all layers and heads"
    else:
        # norm sums the heads inside the norm (‖Σ_h α_h f_h(x)‖), gradient averages them
        every = "heads summed in ‖·‖" if choice.method == "norm" else "head average"
        which = every if choice.head is None else f"head {choice.head}/{n_heads}"
        where = f"layer {layer}/{n_layers}, {which}"
    title = f"{choice.method} ({axes_text('cross')}), {where}"
    shown = matrix[: len(rows), : len(cols)]
    # scores, not weights: no row sum of 1 (signed where one is negative, as compare reads them)
    kind = map_kind(loaded.config, choice.method, shown)
    return shown, rows, cols, title, kind, None


def _role_maps(
    loaded: Any, source_tokens: list[str], hyp: Any, role: str, device: Any
) -> tuple[Any, Any]:
    """([L, H, rows, cols] weights of ``role`` for one hypothesis (None when not kept), the
    same-shaped selected cells of a block-sparse variant (nsa) or None).

    Cross-attention comes from decoding itself; the self-attentions from one teacher-forced
    pass over the hypothesis (the same maps the decoder computed, all at once)."""
    if role == "cross":
        cross = hyp.attention_layers
        return (cross.float() if cross is not None else None), None
    import torch

    from attnlab.nn.seq2seq import BOS_ID, PAD_ID

    src = torch.tensor([loaded.src_vocab.encode(source_tokens)], device=device)
    tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]], device=device)
    with torch.no_grad():
        out = loaded.model(src, src != PAD_ID, tgt_in, need_weights=True)
    weights, selected = out.attentions.get(ROLES[role]), out.selected.get(ROLES[role])
    if weights is None:
        return None, None
    return weights[0].float().cpu(), (selected[0].cpu() if selected is not None else None)


def _map_of(
    maps: Any,
    tokens: list[str],
    source_tokens: list[str],
    hyp: Any,
    role: str,
    layer: int | None,
    head: int | None,
    normalisation: str = "softmax",
    selected: Any = None,
) -> AttentionMap:
    """The [rows, cols] map chosen by --layer/--head (labelled, titled) from [L, H, rows, cols]
    (with ``selected``, the same-shaped mask of nsa's selected cells, reduced alike)."""
    n_layers, n_heads = maps.shape[:2]
    _check_index("--layer", layer, n_layers)
    _check_index("--head", head, n_heads)
    if role == "cross":
        labelled = AttentionMap.for_target(
            maps, tokens, hyp.finished, source_tokens, role, normalisation=normalisation
        )
    elif role == "enc-self":
        labelled = AttentionMap(
            maps, source_tokens, source_tokens, role, "none", normalisation, selected
        )
    else:  # dec-self: the decoder's inputs attend to each other
        inputs = [BOS_LABEL, *tokens]
        labelled = AttentionMap(maps, inputs, inputs, role, "none", normalisation, selected)
    return labelled.select(layer, head).fitted()


def _print_heatmap(
    console: Any,
    matrix: Any,
    rows: list[str],
    cols: list[str],
    title: str,
    normalisation: str = "softmax",
    selected: Any = None,
) -> None:
    from attnlab.viz.heatmap import render_heatmap, render_plain_heatmap

    kind = {"normalisation": normalisation, "selected": selected}
    recording = getattr(console, "recording", None)  # --export: a TeeConsole
    if recording is not None:  # the file shows what a colour terminal shows
        width = recording.width
        recording.print(render_heatmap(matrix, rows, cols, title=title, max_width=width, **kind))
        console = console.console
    # Without colours (a pipe, a file, NO_COLOR) cells would be blank: print the numbers.
    if not console.is_terminal or console.no_color:
        click.echo(render_plain_heatmap(matrix, rows, cols, title=title, **kind))
        return
    console.print(render_heatmap(matrix, rows, cols, title=title, max_width=console.width, **kind))


# -- registries and runs ------------------------------------------------------------------------


@cli.command()
def variants() -> None:
    """Every registered attention variant: roles, formula and hyper-parameters."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.nn.attention import ATTENTION

    table = Table(title="attention variants")
    for column in ("name", "roles", "formula", "hyper-parameters"):
        table.add_column(column, overflow="fold")
    for entry in ATTENTION.entries():
        spec = entry.meta
        hparams = ", ".join(
            f"{h.name}={h.default}"
            + (
                f" [{'' if h.low is None else f'{h.low:g}'}"
                f"..{'' if h.high is None else f'{h.high:g}'}]"
                if h.low is not None or h.high is not None
                else ""
            )
            for h in spec.hparams
        )
        # Text, not markup: formulas such as "tanh(W_a [s_t; h_j])" contain brackets.
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    entry.name,
                    ", ".join(sorted(spec.roles)),
                    spec.formula,
                    hparams or "–",
                )
            )
        )
    _console().print(table)


@cli.command()
def decoders() -> None:
    """Every registered decoding strategy: what it does and the decode.* keys it reads."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.decode.search import DECODERS
    from attnlab.decode.strategy import COMMON_PARAMS

    shared = ", ".join(p.key for p in COMMON_PARAMS)
    table = Table(
        title="decoders (--decoder NAME or decode.decoder)",
        caption=f"all also read decode.{{{shared}}}",
    )
    for column in ("name", "description", "returns", "decode.* keys"):
        table.add_column(column, overflow="fold")
    for entry in DECODERS.entries():
        spec = entry.meta
        returns = ("n-best" if spec.nbest else "1-best") + (", attention" if spec.attention else "")
        keys = ", ".join(p.describe() for p in spec.params)
        cells = (entry.name, spec.description, returns, keys or "–")
        table.add_row(*(Text(cell) for cell in cells))
    _console().print(table)


@cli.command()
def presets() -> None:
    """Every preset with its one-line description."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.config import PRESETS_DIR, load_toml, preset_names

    table = Table(title=f"presets ({PRESETS_DIR})")
    table.add_column("name", style="bold")
    table.add_column("description")
    for name in preset_names():
        raw = load_toml(PRESETS_DIR / f"{name}.toml")
        table.add_row(Text(name), Text(str(raw.get("description", ""))))
    _console().print(table)


@cli.command()
@click.argument(
    "directory", required=False, default="runs", type=click.Path(file_okay=False, path_type=Path)
)
def runs(directory: Path) -> None:
    """Runs in DIRECTORY (default runs) with their best dev metrics."""
    from rich import box
    from rich.table import Table

    from attnlab.runs import list_runs
    from attnlab.viz.text import run_labels

    if not directory.is_dir():
        raise AttnlabError(f"{directory}: no such directory")
    found = list_runs(directory)
    console = _console()
    rows = [
        {
            "run": r.path.name,
            "task": str(r.task),
            "model": f"{'tfm' if r.arch == 'transformer' else r.arch}/{r.attention}",
            "params": _compact(r.params),
            "steps": _cell(r.steps),
            "BLEU": _cell(r.best_bleu, 1),
            "chrF": _cell(r.best_chrf, 1),
            "EM": _cell(r.best_exact_match, 2),
            "tok/s": _cell(r.tokens_per_s, 0),
            "status": str(r.status),
        }
        for r in found
    ]
    columns, run_width = _runs_columns(rows, console.width)
    table = Table(title=f"runs in {directory}", box=box.SIMPLE_HEAD)
    for column in columns:
        numeric = column in ("params", "steps", "BLEU", "chrF", "EM", "tok/s")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    for cells, label in zip(rows, run_labels([r["run"] for r in rows], run_width), strict=True):
        cells["run"] = label
        table.add_row(*(cells[c] for c in columns))
    console.print(table)
    for r in found:  # after the table: skipped log lines, an unreadable config.toml
        for warning in r.warnings:
            click.echo(f"warning: {warning}", err=True)
    if not found and any((directory / name).is_file() for name in ("config.toml", "events.jsonl")):
        parent = directory.resolve().parent
        click.echo(
            f"note: {directory} is a run directory itself; its runs folder is {parent} "
            f"(attnlab runs {parent})",
            err=True,
        )


RUNS_CELL = 12  # widest number cell of ``attnlab runs``


def _cell(value: float | int | None, digits: int = 2) -> str:
    """``_fmt`` for the runs table, at most RUNS_CELL characters: a damaged log's 1e308 BLEU or
    30-digit step reads 1e+308 instead of one wide cell pushing the column off the table
    for every run."""
    text = _fmt(value, digits)
    return text if len(text) <= RUNS_CELL else f"{value:.3g}"


RUNS_ORDER = ("run", "task", "model", "params", "steps", "BLEU", "chrF", "EM", "tok/s", "status")
# Most telling first; what does not fit the terminal is left out (the run name is cut in the
# middle down to RUNS_MIN_NAME characters before any metric goes).
RUNS_PRIORITY = (
    "run",
    "model",
    "BLEU",
    "chrF",
    "EM",
    "status",
    "tok/s",
    "steps",
    "task",
    "params",
    "+run",
)  # "+run": then the run name grows to RUNS_FULL_NAME
RUNS_MIN_NAME, RUNS_FULL_NAME = 16, 30


def _runs_columns(rows: list[dict[str, str]], width: int) -> tuple[list[str], int]:
    """The ``attnlab runs`` columns that fit ``width`` (by priority) and the run-name width."""

    def need(column: str) -> int:  # content or header, plus padding and separator (3)
        return max([len(column), *(len(r[column]) for r in rows)]) + 3

    longest = need("run") - 3
    run_width = min(longest, RUNS_MIN_NAME)
    used = 1 + run_width + 3  # 1: the table's outer edge
    chosen = ["run"]
    for column in RUNS_PRIORITY[1:]:
        if column == "+run":
            grow = min(longest, RUNS_FULL_NAME) - run_width
            run_width += max(min(grow, width - used), 0)
            used += max(min(grow, width - used), 0)
        elif used + need(column) <= width:
            chosen.append(column)
            used += need(column)
    run_width += max(min(longest - run_width, width - used), 0)  # what is left over
    return [c for c in RUNS_ORDER if c in chosen], run_width


@cli.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN")
@click.option(
    "--out",
    "out_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="the .safetensors file to write (default exports/RUN-CHECKPOINT.safetensors)",
)
@click.option(
    "--checkpoint", "which", type=click.Choice(["best", "last"]), default="best", show_default=True
)
@click.option("--force", is_flag=True, help="replace --out if it already exists")
@click.option(
    "--tensorboard",
    "tb_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="write events.jsonl as TensorBoard event files into DIR (needs tensorboardX); "
    "without --out nothing else is written",
)
def export(run: Path, out_file: Path | None, which: str, force: bool, tb_dir: Path | None) -> None:
    """Write one self-contained .safetensors file (weights + config, vocabularies, metrics)."""
    from attnlab.runs import default_export_path, export_checkpoint, export_source

    if not run.exists():
        raise AttnlabError(f"{run}: no such run directory")
    if tb_dir is not None:
        from attnlab.tensorboard_export import export_tensorboard

        counts = export_tensorboard(run, tb_dir)
        click.echo(f"wrote {counts['scalars']} scalars and {counts['texts']} texts to {tb_dir}")
        if out_file is None:  # --tensorboard alone: the event files only
            return
    _directory, used = export_source(run, which)
    if out_file is None:
        out_file = default_export_path(run, used if used != "checkpoint" else which)
    path = export_checkpoint(run, out_file, which, force=force)
    if used != which and used == "last":
        click.echo(f"note: {run} has no {which} checkpoint yet; exported last", err=True)
    click.echo(f'exported {path}; use it with: attnlab translate {path} "..."')


cli.add_command(_data_group)  # attnlab data stats ...: its own module
for _command in _inspect_commands:  # heads, compare, average (issue 15): their own module
    cli.add_command(_command)
