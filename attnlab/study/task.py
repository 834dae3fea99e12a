"""One run of a study, start to score: train (or resume) in a child process, then score it in
another. The same function runs under the local executor (a thread per worker) and in a Dask
worker, so a run behaves the same wherever it runs.

Every child is ``python -m attnlab ...``: its own interpreter, so a crash, an OOM or a CUDA
error ends one run, never the study; on Linux each child asks for SIGTERM when the thread that
started it dies (PR_SET_PDEATHSIG), so no run outlives its runner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.parent_death import set_parent_death_signal

# What became of a run (RunOutcome.state).
SCORED = "scored"
FAILED = "failed"
INTERRUPTED = "interrupted"
SKIPPED = "skipped"  # running elsewhere (its lock is held)


@dataclass(frozen=True)
class RunTask:
    """Everything a worker needs to train and score one cell × seed; plain data (Dask sends
    it to other machines)."""

    study_dir: str
    run_name: str
    cell: str
    seed: int
    preset: str
    overrides: tuple[str, ...]
    split: str
    checkpoint: str
    threads: int = 1
    device: str | None = None

    @property
    def run_dir(self) -> Path:
        return Path(self.study_dir) / self.run_name


@dataclass
class RunOutcome:
    run_name: str
    cell: str
    seed: int
    state: str  # SCORED | FAILED | INTERRUPTED | SKIPPED
    error: str = ""  # one line, for FAILED / INTERRUPTED / SKIPPED
    trained: bool = False  # False: an earlier invocation's run, only scored (or nothing to do)
    resumed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Children:
    """The child processes of this runner, so that Ctrl+C reaches every one of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.add(proc)
            stopping = self.stopping
        if stopping:  # started while a stop was being sent
            _signal(proc, signal.SIGINT)

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def interrupt(self) -> None:
        """SIGINT to every child: a trainer finishes its step, saves ``last`` and exits 130."""
        with self._lock:
            self.stopping = True
            procs = list(self._procs)
        for proc in procs:
            _signal(proc, signal.SIGINT)

    def kill(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            _signal(proc, signal.SIGKILL)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    set_parent_death_signal(signal.SIGTERM)


def child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _run_child(argv: list[str], env: dict[str, str], children: Children | None) -> tuple[int, str]:
    """Run one child to its end; (exit code, its last meaningful stderr line)."""
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,  # the terminal's Ctrl+C goes to the runner, which forwards it
            preexec_fn=_die_with_parent,
        )
        if children is not None:
            children.add(proc)
        try:
            code = proc.wait()
        finally:
            if children is not None:
                children.discard(proc)
        stderr.seek(0)
        tail = stderr.read()[-20000:].decode("utf-8", errors="replace")
    return code, error_line(tail)


def error_line(stderr_text: str) -> str:
    """The line that says what went wrong: the last ``error:`` line, else a traceback's last
    line, else the last non-empty line."""
    lines = [line.strip() for line in stderr_text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line.removeprefix("error:").strip()
    return lines[-1] if lines else ""


def run_status(run_dir: Path) -> str | None:
    """The run's status (attnlab runs' word), or None when it does not exist yet."""
    from attnlab.runs import summarize_run

    if not (run_dir / "config.toml").is_file():
        return None
    return summarize_run(run_dir).status


def _has_last(run_dir: Path) -> bool:
    return (run_dir / "checkpoints" / "last" / "meta.json").is_file()


def clear_unsaved_run(run_dir: Path) -> str | None:
    """Remove what attnlab wrote of a run that never saved a checkpoint, so that it trains
    afresh: its config, event log, lock, control file, checkpoint and attention-history
    folders, study score and their scratch files; then the folder. Anything else in it is the
    user's and is kept: the refusal (one line naming it) is returned and nothing is trained.
    A symlink or a non-folder in the run's place is refused untouched. None when cleared."""
    from attnlab.runs import (
        CHECKPOINTS,
        CONFIG_FILE,
        CONTROL_FILE,
        EVENTS_FILE,
        LOCK_FILE,
        remove_stale_temps,
    )
    from attnlab.runs.checkpoints import remove_entry
    from attnlab.runs.history import HISTORY_DIR
    from attnlab.study.score import SCORE_FILE

    if not run_dir.exists() and not run_dir.is_symlink():
        return None
    if run_dir.is_symlink() or not run_dir.is_dir():
        return f"{run_dir} is not a run folder attnlab made (a symlink or a file); move it away"
    ours = (CONFIG_FILE, EVENTS_FILE, CONTROL_FILE, LOCK_FILE, CHECKPOINTS, HISTORY_DIR, SCORE_FILE)
    for name in ours:
        remove_entry(run_dir / name)
        remove_stale_temps(run_dir, name)
    try:
        others = sorted(entry.name for entry in run_dir.iterdir())
        if not others:
            run_dir.rmdir()
            return None
    except OSError as err:
        return f"{run_dir}: cannot clear the unsaved run ({err.strerror})"
    shown = ", ".join(others[:3]) + (f" (+{len(others) - 3} more)" if len(others) > 3 else "")
    return (
        f"{run_dir} holds files attnlab did not write ({shown}); they were kept and the run "
        "was not trained: move them away and rerun the study"
    )


def _lost_lock_race(run_dir: Path, line: str) -> bool:
    """The child was refused because another process trains the run (rundir's one-line
    refusal, or the lock still held): not this study's failure."""
    from attnlab.runs.rundir import run_dir_locked

    return "is being trained by pid" in line or run_dir_locked(run_dir) is True


def execute(task: RunTask, children: Children | None = None) -> RunOutcome:
    """Train (new or resumed, as the run directory says) and score one run."""
    from attnlab.study.score import read_score, score_problem

    outcome = RunOutcome(task.run_name, task.cell, task.seed, SCORED)
    run_dir = task.run_dir
    if read_score(run_dir) is not None and run_status(run_dir) == "finished":
        return outcome  # done by an earlier invocation
    env = child_env(task.threads)
    status = run_status(run_dir)
    if status == "running":
        outcome.state, outcome.error = SKIPPED, "running in another process (its lock is held)"
        return outcome
    if status != "finished":
        if children is not None and children.stopping:
            outcome.state, outcome.error = INTERRUPTED, "not started (the study was stopped)"
            return outcome
        sets = [
            arg
            for item in (*task.overrides, f"train.threads={task.threads}")
            for arg in ("--set", item)
        ]
        device = ["--device", task.device] if task.device else []
        if status is not None and _has_last(run_dir):
            argv = [
                sys.executable,
                "-m",
                "attnlab",
                "train",
                "--resume",
                str(run_dir),
                "--quiet",
                *device,
                *sets,
            ]
            outcome.resumed = True
        else:
            refusal = clear_unsaved_run(run_dir)  # began but never saved a checkpoint
            if refusal is not None:
                outcome.state, outcome.error = FAILED, refusal
                return outcome
            argv = [
                sys.executable,
                "-m",
                "attnlab",
                "train",
                "--preset",
                task.preset,
                "--out",
                task.study_dir,
                "--run-name",
                task.run_name,
                "--quiet",
                *device,
                *sets,
            ]
        outcome.trained = True
        code, line = _run_child(argv, env, children)
        status = run_status(run_dir)
        stopped = children is not None and children.stopping and status != "finished"
        if code == 130 or (code == 0 and status in ("interrupted", "stopped")) or stopped:
            # Ctrl+C reached the child (even one still starting, killed by a second Ctrl+C
            # before it could save): interrupted, and the rerun retries it.
            outcome.state = INTERRUPTED
            outcome.error = "interrupted; rerun the study to resume it"
            return outcome
        if code != 0 and _lost_lock_race(run_dir, line):
            outcome.state = SKIPPED
            outcome.error = "running in another process (its lock is held)"
            return outcome
        if code != 0 or status != "finished":
            outcome.state = FAILED
            outcome.error = line or f"training exited with code {code}"
            return outcome
    argv = [
        sys.executable,
        "-m",
        "attnlab.study.score",
        str(run_dir),
        "--split",
        task.split,
        "--checkpoint",
        task.checkpoint,
    ]
    if task.device:
        argv += ["--device", task.device]
    code, line = _run_child(argv, env, children)
    if code != 0 or read_score(run_dir) is None:
        if children is not None and children.stopping:
            outcome.state, outcome.error = INTERRUPTED, "interrupted while scoring"
        else:
            outcome.state = FAILED
            why = line or (score_problem(run_dir) if code == 0 else None) or f"exit code {code}"
            outcome.error = f"scoring failed: {why}"
    return outcome
