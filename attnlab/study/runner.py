"""Run a study: every cell × seed as an ordinary run directory under ``OUT/<study>/``.

Executors:
- ``local``: N workers on this machine, each training one run at a time in a child process
  with ``train.threads`` threads (N × threads ≤ cores, so the machine is not oversubscribed);
- ``dask``: the same tasks submitted to a Dask distributed cluster (``--scheduler ADDRESS``);
  OUT must be a path every worker sees.

A rerun skips scored runs, scores finished ones and resumes interrupted ones. A run that fails
is recorded with its one-line error and the study goes on. Ctrl+C interrupts every child (each
saves ``last``) and leaves every run resumable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.study.lock import lock_study
from attnlab.study.outcomes import OUTCOMES_FILE, read_outcomes, record_outcome
from attnlab.study.spec import Cell, Study, run_name
from attnlab.study.task import (
    FAILED,
    INTERRUPTED,
    SCORED,
    SKIPPED,
    Children,
    RunOutcome,
    RunTask,
    execute,
)
from attnlab.study.tune import TUNE_SPLIT, CellTuning, load_tuning, tune_dir, tune_run_name

STUDY_FILE = "study.json"
EXECUTORS = ("local", "dask")
DEFAULT_OUT = Path("runs") / "studies"


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def plan_workers(workers: int | None, threads: int | None) -> tuple[int, int]:
    """(workers, threads per run): the default fills the cores with 1-thread runs."""
    cores = available_cores()
    if threads is not None and threads < 1:
        raise AttnlabError(f"train.threads={threads}: a study needs at least 1 thread per run")
    threads = threads or 1
    if workers is None:
        workers = max(1, cores // threads)
    if workers < 1:
        raise AttnlabError(f"--workers {workers}: expected at least 1")
    return workers, threads


def study_dir(study: Study, out: Path) -> Path:
    return Path(out) / study.name


def tasks_of(
    study: Study,
    out: Path,
    threads: int,
    device: str | None = None,
    chosen: dict[str, tuple[str, ...]] | None = None,
) -> list[RunTask]:
    """One task per cell × seed, seed-major (every cell's first seed before any second seed,
    so a study stopped early still has every cell). A tuned study passes ``chosen`` (cell ->
    its tuned overrides): a cell without a choice yet has no task."""
    directory = study_dir(study, out)
    return [
        RunTask(
            study_dir=str(directory.resolve()),
            run_name=run_name(cell, seed),
            cell=cell.name,
            seed=seed,
            preset=study.preset,
            overrides=tuple(study.run_overrides(cell, seed, (chosen or {}).get(cell.name, ()))),
            split=study.split,
            checkpoint=study.checkpoint,
            threads=threads,
            device=device,
        )
        for seed in study.seeds
        for cell in study.cells
        if chosen is None or cell.name in chosen
    ]


def tune_tasks_of(
    study: Study, out: Path, threads: int, device: str | None = None
) -> list[RunTask]:
    """Every tuning run: cell × candidate × tune seed, scored on dev (seed-major, then
    candidate: a stopped search has every cell's first seed of each candidate first)."""
    tune = study.tune
    if tune is None:
        return []
    directory = tune_dir(study_dir(study, out)).resolve()
    return [
        RunTask(
            study_dir=str(directory),
            run_name=tune_run_name(cell.name, index, seed),
            cell=cell.name,
            seed=seed,
            preset=study.preset,
            overrides=tuple(study.run_overrides(cell, seed, tune.overrides(combo))),
            split=TUNE_SPLIT,
            checkpoint=study.checkpoint,
            threads=threads,
            device=device,
        )
        for seed in tune.seeds
        for index, combo in enumerate(tune.candidates())
        for cell in study.cells
    ]


def total_runs(study: Study) -> int:
    return len(study.cells) * (len(study.seeds) + (study.tune.runs_per_cell if study.tune else 0))


# Set by the runner for each invocation (--threads, --device), not part of what a run is.
RUNNER_KEYS = (("train", "threads"), ("train", "device"))


def settings_change(
    study: Study,
    cell: Cell,
    seed: int,
    run_dir: Path,
    sections: tuple[str, ...] | None = None,
    chosen: tuple[str, ...] = (),
) -> tuple[str, Any, Any] | None:
    """The first ``(key, trained value, study's value)`` where an existing run directory was
    made with other settings than the study now gives that run (in ``sections``, default all),
    or None."""
    from attnlab.config import SECTIONS, to_dict
    from attnlab.runs import read_config

    saved = to_dict(read_config(run_dir))
    wanted = to_dict(study.config_of(cell, seed, chosen))
    for section in sections or tuple(SECTIONS):
        for key in sorted(set(saved[section]) | set(wanted[section])):
            if (section, key) in RUNNER_KEYS:
                continue
            old, new = saved[section].get(key), wanted[section].get(key)
            if old != new:
                return f"{section}.{key}", old, new
    return None


def check_existing_runs(
    study: Study, directory: Path, chosen: dict[str, tuple[str, ...]] | None = None
) -> None:
    """Refuse a rerun whose settings differ from runs already in the study directory, before
    anything starts. A finished run must match exactly: it would be skipped and tabulated (a
    smoke run's ``--set train.max_steps=20`` followed by the full study would report the
    20-step runs). An unfinished run is resumed, and ``attnlab train --resume`` applies new
    ``train.*`` / ``decode.*`` keys; any other change is refused here. One line names the run,
    the key and both values. A tuned study is checked in two steps: its tuning runs first
    (``chosen`` None), then, once the settings are chosen, the study's runs."""
    planned: list[tuple[Path, Cell, int, tuple[str, ...]]] = []
    if study.tune is not None and chosen is None:
        tuned = tune_dir(directory)
        for index, combo in enumerate(study.tune.candidates()):
            for seed in study.tune.seeds:
                for cell in study.cells:
                    run = tuned / tune_run_name(cell.name, index, seed)
                    planned.append((run, cell, seed, study.tune.overrides(combo)))
    else:
        for seed in study.seeds:
            for cell in study.cells:
                if chosen is None or cell.name in chosen:
                    sets = (chosen or {}).get(cell.name, ())
                    planned.append((directory / run_name(cell, seed), cell, seed, sets))
    _check_planned(study, planned)


def _check_planned(study: Study, planned: list[tuple[Path, Cell, int, tuple[str, ...]]]) -> None:
    from attnlab.config import SECTIONS
    from attnlab.study.task import run_status

    resumable = ("train", "decode")
    for run_dir, cell, seed, sets in planned:
        if not (run_dir / "config.toml").is_file():
            continue
        finished = run_status(run_dir) == "finished"
        sections = None if finished else tuple(s for s in SECTIONS if s not in resumable)
        change = settings_change(study, cell, seed, run_dir, sections, sets)
        if change is not None:
            key, old, new = change
            raise AttnlabError(
                f"{run_dir}: {'trained' if finished else 'begun'} with "
                f"{key}={_value_text(old)}, but the study now gives it "
                f"{key}={_value_text(new)}; a study directory holds one setting per run: "
                f"use another --out, or remove {run_dir} to train it again"
            )


def _budget(study: Study) -> dict[str, Any]:
    """What every run (tuning or not) trains for: the protocol's equal budget."""
    config = study.config_of(study.cells[0], study.seeds[0])
    return {"max_steps": config.train.max_steps, "batch_size": config.train.batch_size}


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "(empty)" if value in ("", None) else str(value)


def write_study_record(study: Study, directory: Path) -> None:
    """``study.json``: the resolved study (what ``study show`` and the lab read)."""
    from attnlab.runs import atomic_write_json

    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "name": study.name,
        "description": study.description,
        "source": study.source,
        "preset": study.preset,
        "set": list(study.overrides),
        "seeds": list(study.seeds),
        "split": study.split,
        "checkpoint": study.checkpoint,
        "metrics": list(study.metrics),
        "baseline": study.baseline,
        "cells": [
            {"name": c.name, "set": list(c.overrides), "baseline": study.baselines[c.name]}
            for c in study.cells
        ],
    }
    if study.tune is not None:
        record["tune"] = {**study.tune.to_dict(), "budget": _budget(study)}
    atomic_write_json(directory / STUDY_FILE, record)


@dataclass
class Progress:
    """Counts for a progress bar; ``on_change`` is called after every change."""

    total: int
    done: int = 0
    failed: int = 0
    interrupted: int = 0
    skipped: int = 0  # running in another process (its lock is held)
    started_at: float = field(default_factory=time.monotonic)
    timed: list[float] = field(default_factory=list)  # wall seconds of runs trained here

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.interrupted + self.skipped

    def eta_s(self, workers: int) -> float | None:
        """Seconds left: the mean time of the runs trained here × the runs left ÷ workers;
        None until one run has been timed."""
        if not self.timed:
            return None
        left = self.total - self.finished
        return sum(self.timed) / len(self.timed) * left / max(1, workers)


@dataclass
class StudyResult:
    outcomes: list[RunOutcome]
    interrupted: bool = False

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.state == FAILED]


Callback = Callable[[RunOutcome, Progress], None]


def _record(progress: Progress, outcome: RunOutcome, seconds: float) -> None:
    if outcome.state == SCORED:
        progress.done += 1
    elif outcome.state == FAILED:
        progress.failed += 1
    elif outcome.state == SKIPPED:
        progress.skipped += 1
    else:
        progress.interrupted += 1
    if outcome.trained and outcome.state == SCORED:
        progress.timed.append(seconds)


def _timed(task: RunTask, children: Children | None) -> tuple[RunOutcome, float]:
    start = time.monotonic()
    return execute(task, children), time.monotonic() - start


def run_local(
    tasks: list[RunTask],
    workers: int,
    on_outcome: Callback | None = None,
    progress: Progress | None = None,
) -> StudyResult:
    """N worker threads, each running one child at a time. KeyboardInterrupt interrupts every
    child, waits for them to save, and returns with ``interrupted`` set."""
    progress = progress or Progress(total=len(tasks))
    children = Children()
    outcomes: list[RunOutcome] = []
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnlab-study")
    pending: dict[Future[tuple[RunOutcome, float]], RunTask] = {}
    queue: Iterator[RunTask] = iter(tasks)
    interrupted = False

    def fill() -> None:
        while len(pending) < workers and not children.stopping:
            task = next(queue, None)
            if task is None:
                return
            pending[pool.submit(_timed, task, children)] = task

    def collect(done: set[Future[tuple[RunOutcome, float]]]) -> None:
        for future in done:
            task = pending.pop(future)
            try:
                outcome, seconds = future.result()
            except Exception as err:  # a bug in the runner's own code: record it, go on
                outcome = RunOutcome(task.run_name, task.cell, task.seed, FAILED, str(err))
                seconds = 0.0
            outcomes.append(outcome)
            _record(progress, outcome, seconds)
            if on_outcome is not None:
                on_outcome(outcome, progress)

    try:
        fill()
        while pending:
            try:
                done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                raise
            collect(done)
            fill()
    except KeyboardInterrupt:
        interrupted = True
        children.interrupt()
        while pending:  # every child saves and exits; a second Ctrl+C kills them
            try:
                done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                collect(done)
            except KeyboardInterrupt:
                children.kill()
    finally:
        pool.shutdown(wait=True)
    return StudyResult(outcomes, interrupted)


def run_dask(
    tasks: list[RunTask],
    scheduler: str,
    on_outcome: Callback | None = None,
    progress: Progress | None = None,
) -> StudyResult:
    """The same tasks on a Dask distributed cluster; a worker that dies mid-run is reported
    as a failed run (its run directory stays resumable: rerun the study)."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise AttnlabError(
            "--executor dask needs Dask distributed: pip install 'attnlab[cluster]'"
        ) from None
    progress = progress or Progress(total=len(tasks))
    outcomes: list[RunOutcome] = []
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as err:
        raise AttnlabError(f"--scheduler {scheduler}: cannot connect: {err}") from None
    interrupted = False
    with client:
        futures = {
            client.submit(
                _timed, task, None, key=f"attnlab-{task.run_name}-{time.time_ns()}", pure=False
            ): task
            for task in tasks
        }
        try:
            for future in as_completed(futures):
                task = futures[future]
                try:
                    outcome, seconds = future.result()
                except Exception as err:  # KilledWorker, a lost connection
                    outcome = RunOutcome(
                        task.run_name,
                        task.cell,
                        task.seed,
                        FAILED,
                        f"the Dask worker running it failed ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''}); rerun the study "
                        "to resume it",
                    )
                    seconds = 0.0
                outcomes.append(outcome)
                _record(progress, outcome, seconds)
                if on_outcome is not None:
                    on_outcome(outcome, progress)
        except KeyboardInterrupt:
            interrupted = True
            client.cancel(list(futures))  # a cancelled task's child gets SIGTERM and saves
    return StudyResult(outcomes, interrupted)


def run_study(
    study: Study,
    out: Path = DEFAULT_OUT,
    workers: int | None = None,
    threads: int | None = None,
    executor: str = "local",
    scheduler: str | None = None,
    device: str | None = None,
    on_outcome: Callback | None = None,
) -> tuple[StudyResult, Path]:
    """Every run of the study under its lock (a second runner of the same study is refused,
    naming the pid). A tuned study first runs every tuning run, chooses each cell's setting
    from their dev scores, then runs the study's seeds at it."""
    if executor not in EXECUTORS:
        raise AttnlabError(f"--executor {executor}: valid: {', '.join(EXECUTORS)}")
    if executor == "dask" and not scheduler:
        raise AttnlabError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
    workers, threads = plan_workers(workers, threads)
    directory = study_dir(study, out)
    progress = Progress(total=total_runs(study))

    def run(tasks: list[RunTask], prefix: str) -> StudyResult:
        def keep(outcome: RunOutcome, progress: Progress) -> None:
            record_outcome(directory, prefix + outcome.run_name, outcome.state, outcome.error)
            if on_outcome is not None:
                on_outcome(outcome, progress)

        if executor == "dask":
            assert scheduler is not None
            return run_dask(tasks, scheduler, keep, progress)
        return run_local(tasks, workers, keep, progress)

    with lock_study(directory):
        check_existing_runs(study, directory)  # before the record: it must describe these runs
        write_study_record(study, directory)
        chosen = None
        tuning = StudyResult([])
        if study.tune is not None:
            tuning = run(tune_tasks_of(study, out, threads, device), "tune/")
            if tuning.interrupted:
                return tuning, directory
            chosen = chosen_overrides(study, directory)
            check_existing_runs(study, directory, chosen)
        result = run(tasks_of(study, out, threads, device, chosen), "")
    result.outcomes = tuning.outcomes + result.outcomes
    return result, directory


def study_tuning(study: Study, directory: Path) -> dict[str, CellTuning]:
    """Each cell's tuning from its runs' dev score files (never the test split)."""
    assert study.tune is not None
    return load_tuning(directory, study.tune, [c.name for c in study.cells])


def chosen_overrides(study: Study, directory: Path) -> dict[str, tuple[str, ...]]:
    """cell -> the overrides of its chosen candidate (cells not chosen yet are absent)."""
    assert study.tune is not None
    return {
        cell: study.tune.overrides(t.chosen.combo)
        for cell, t in study_tuning(study, directory).items()
        if t.chosen is not None
    }


def load_record(directory: Path) -> dict[str, Any]:
    from attnlab.runs import read_json

    path = Path(directory) / STUDY_FILE
    if not path.is_file():
        raise AttnlabError(f"{directory}: not a study directory (no {STUDY_FILE})")
    record = read_json(path)
    if not isinstance(record, dict) or not isinstance(record.get("cells"), list):
        raise AttnlabError(f"{path}: not a study record (no cells)")
    return record


__all__ = [
    "DEFAULT_OUT",
    "OUTCOMES_FILE",
    "read_outcomes",
    "EXECUTORS",
    "INTERRUPTED",
    "Progress",
    "StudyResult",
    "check_existing_runs",
    "load_record",
    "plan_workers",
    "run_study",
    "tasks_of",
]
