"""Start or resume one training run: the one function behind ``attnlab train``.

The command line, the lab (whose child process runs ``python -m attnlab train``) and the
study runner all call ``start_or_resume``. It resolves the experiment (preset or resumed run,
then overrides), refuses mistakes in one line, and then either launches the same training in
train.nproc processes under torchrun or trains here: it makes and locks the run directory
(rank 0's under DDP), checks a resume, runs the Trainer and removes a new run directory again
when training never started. What is shown (the run directory line, a progress bar) is the
caller's, through callbacks. Heavy imports (torch, sacrebleu) happen inside, after the signal
handlers are in place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from attnlab.errors import AttnlabError
from attnlab.train.signals import (
    TORCHRUN_SIGNAL_GRACE_S,
    DeferredSignals,
    torchrun_worker,
)

DEFAULT_PRESET = "reverse-bahdanau"


@dataclass(frozen=True)
class RunRequest:
    """What to train: a new run from ``preset`` (or DEFAULT_PRESET) in ``out``, or a resume of
    ``resume_dir``; ``overrides`` are ``SECTION.KEY=VALUE`` strings. ``worker_args`` are added
    to each torchrun worker's ``attnlab train`` command line (e.g. ``--quiet``)."""

    preset: str | None = None
    overrides: tuple[str, ...] = ()
    out: Path = Path("runs")
    run_name: str | None = None
    device: str | None = None
    seed: int | None = None
    nproc: int | None = None
    resume_dir: Path | None = None
    worker_args: tuple[str, ...] = ()


class EventSink(Protocol):
    """Receives the trainer's events (a progress bar, a log)."""

    def on_event(self, event: Any) -> None: ...


# (max_steps, start_step, primary) -> a context manager around training yielding the sink;
# ``primary`` is False on torchrun ranks other than 0 (those show nothing).
ProgressFactory = Callable[[int, int, bool], AbstractContextManager[EventSink]]
# (run directory, processes): said once, by the process that made or locked it.
RunDirCallback = Callable[[Path, int], None]


def start_or_resume(
    request: RunRequest,
    on_run_dir: RunDirCallback | None = None,
    progress: ProgressFactory | None = None,
) -> dict[str, Any] | int:
    """The trainer's summary; with train.nproc > 1 outside torchrun, the launcher's exit code
    (rank 0's). Raises AttnlabError for a user mistake and KeyboardInterrupt when interrupted
    before the trainer took over its signals."""
    # First: start-up imports take seconds. A torchrun worker gets a terminal's Ctrl+C twice
    # (directly and forwarded by torchrun): a repeat within the grace is the same request.
    signals = DeferredSignals(grace=TORCHRUN_SIGNAL_GRACE_S if torchrun_worker() else 0.0)
    signals.install()
    try:
        return _start(request, signals, on_run_dir, progress)
    finally:
        signals.restore()


def _start(
    request: RunRequest,
    signals: DeferredSignals,
    on_run_dir: RunDirCallback | None,
    progress: ProgressFactory | None,
) -> dict[str, Any] | int:
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.runs import read_config

    extra = list(request.overrides)
    if request.seed is not None:
        extra.append(f"train.seed={request.seed}")
    if request.device is not None:
        extra.append(f"train.device={request.device}")
    if request.nproc is not None:
        extra.append(f"train.nproc={request.nproc}")
    if request.resume_dir is not None:
        if request.preset is not None or request.run_name is not None:
            raise AttnlabError(
                "--resume continues an existing run; it takes no --preset or --run-name (use --set)"
            )
        config = read_config(request.resume_dir)
    else:
        config = load_preset(request.preset or DEFAULT_PRESET)
    if extra:
        config = apply_overrides(config, extra)
    if config.train.nproc > 1 and not torchrun_worker():
        return _launch_parallel(config, request, extra, signals, on_run_dir)
    from attnlab.train import distributed  # torch: seconds

    distributed.check_threads(config.train.threads)
    signals.check()
    # Under torchrun: join the job; rank 0 makes (and locks) the run directory.
    info = distributed.init(config.train.device) if torchrun_worker() else distributed.current()
    try:
        return _train_here(config, request, signals, info, on_run_dir, progress)
    finally:
        distributed.teardown()


def new_run_name(config: Any, run_name: str | None) -> tuple[str, str]:
    """The new run's name (not yet checked) and what to call it in an error."""
    if run_name is not None:
        return run_name, "--run-name"
    from attnlab.naming import run_name_for  # one rule with the lab: TASK-ARCH-VARIANTS-stamp

    return run_name_for(config), "run name"


def _launch_parallel(
    config: Any,
    request: RunRequest,
    extra: list[str],
    signals: DeferredSignals,
    on_run_dir: RunDirCallback | None,
) -> int:
    """``attnlab train`` again in train.nproc processes under torchrun (see distributed).
    Mistakes are refused here, in one line; rank 0 of the job makes and locks the run
    directory (and removes it again if the run never starts)."""
    import tempfile

    from attnlab.config import dumps_toml
    from attnlab.runs import check_new_run_dir, check_run_dir_free
    from attnlab.train import distributed

    distributed.check_nproc(config.train.nproc, config.train.device)
    distributed.check_threads(config.train.threads)
    resume_dir = request.resume_dir
    if resume_dir is not None:
        run_dir = resume_dir
        check_run_dir_free(run_dir)
        check_resume(run_dir, config)
        sets = [arg for item in extra for arg in ("--set", item)]
        args = ["train", "--resume", str(resume_dir), *sets]
    else:
        out = request.out
        run_dir = check_new_run_dir(out, *new_run_name(config, request.run_name))
        args = ["train", "--out", str(out), "--run-name", run_dir.name]
    if on_run_dir is not None:
        on_run_dir(run_dir, config.train.nproc)
    args += request.worker_args
    signals.check()
    with tempfile.TemporaryDirectory(prefix=distributed.PRESET_SCRATCH_PREFIX) as scratch:
        # Ours while we live: a launcher killed with SIGKILL leaves it to the next one's sweep.
        owner = Path(scratch) / distributed.SCRATCH_OWNER_FILE
        owner.write_text(f"{os.getpid()}\n", encoding="utf-8")
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
    request: RunRequest,
    signals: DeferredSignals,
    info: Any,
    on_run_dir: RunDirCallback | None,
    progress: ProgressFactory | None,
) -> dict[str, Any]:
    """Set up (the locked run directory: rank 0's under DDP), train, return the summary."""
    from attnlab.runs import lock_run_dir, new_run_dir, remove_unstarted_run
    from attnlab.train.distributed import EXIT_FILE_ENV

    resume_dir = request.resume_dir
    lock: Any = None  # rank 0's alone: the other ranks would wait on it

    def make_run_dir() -> Path:  # on rank 0; the others learn the path from it
        nonlocal lock
        if resume_dir is not None:
            lock = lock_run_dir(resume_dir)
            return resume_dir
        path, lock = new_run_dir(request.out, *new_run_name(config, request.run_name))
        return path

    from attnlab.data.corpus import check_source_paths

    check_source_paths(config.data)  # a missing corpus: one line, no run directory announced
    run_dir = info.primary_value(make_run_dir)
    trainer: Any = None
    try:
        start_step = 0
        if resume_dir is not None:
            start_step = info.primary_value(lambda: check_resume(run_dir, config))
        # the launcher said it already
        if on_run_dir is not None and info.is_primary and not os.environ.get(EXIT_FILE_ENV):
            on_run_dir(run_dir, 1)
        signals.check()
        from attnlab.train.trainer import Trainer  # torch, sacrebleu: seconds

        signals.check()
        trainer = Trainer(config, run_dir, resume=resume_dir is not None, lock=lock)
        signals.trainer = trainer
        if signals.hit:
            trainer.interrupt()
        if progress is None:
            return trainer.run()
        with progress(config.train.max_steps, start_step, info.is_primary) as sink:
            trainer.on_event = sink.on_event
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


def check_resume(run_dir: Path, config: Any) -> int:
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
