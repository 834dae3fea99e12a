"""Start training in a child process and talk to it through its run directory.

Training never runs on the UI loop: the lab writes the experiment to a temporary TOML file
and runs ``python -m attnlab train --preset FILE --out RUNS --run-name NAME --quiet``. A crash,
OOM or CUDA error kills only the child. The child reads one word from ``RUN/control``
(``pause``, ``resume``, ``save``, ``stop``) at every step; the lab follows ``RUN/events.jsonl``.
Pure logic (no textual), so it is tested without the app.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.config import NAME_MAX, ExperimentConfig, dumps_toml, safe_name

CONTROL_FILE = "control"
CONTROL_WORDS = ("pause", "resume", "save", "stop")


def run_name_for(config: ExperimentConfig, runs_dir: Path, now: float | None = None) -> str:
    """A new run directory name: ``<task>-<arch>-<attention>-<YYYYmmdd-HHMMSS>`` (+ ``-2``...),
    always a valid run name (attnlab.config.check_name)."""
    m = config.model
    attention = m.attention if m.arch == "rnn" else f"{m.self_attention}-{m.cross_attention}"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    prefix = safe_name(f"{config.data.task}-{m.arch}-{attention}")[: NAME_MAX - 24]
    base = f"{prefix}-{stamp}"  # room left for the stamp and a "-N" suffix
    name, n = base, 1
    while (runs_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def train_command(preset_file: Path, runs_dir: Path, run_name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--preset",
        str(preset_file),
        "--out",
        str(runs_dir),
        "--run-name",
        run_name,
        "--quiet",
    ]


def write_control(run_dir: Path, word: str) -> None:
    """Ask the trainer to pause / resume / save / stop (atomic: temp file + os.replace)."""
    if word not in CONTROL_WORDS:
        raise ValueError(f"control word must be one of {CONTROL_WORDS}, got {word!r}")
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{CONTROL_FILE}.tmp"
    tmp.write_text(word + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / CONTROL_FILE)


@dataclass
class TrainingProcess:
    """One child training process and where its output goes."""

    config: ExperimentConfig
    runs_dir: Path
    run_name: str
    command: list[str] = field(default_factory=list)
    _proc: subprocess.Popen[bytes] | None = None
    _scratch: Path | None = None

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / self.run_name

    @classmethod
    def start(
        cls,
        config: ExperimentConfig,
        runs_dir: Path,
        run_name: str | None = None,
        command: Callable[[Path, Path, str], Sequence[str]] | None = None,
        env: dict[str, str] | None = None,
    ) -> TrainingProcess:
        """Write the preset file and start the child. ``command(preset, runs_dir, name)``
        replaces the default ``python -m attnlab train ...`` argv (tests start a child that dies)."""
        runs_dir = Path(runs_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        name = run_name or run_name_for(config, runs_dir)
        scratch = Path(tempfile.mkdtemp(prefix="attnlab-lab-"))
        preset = scratch / f"{name}.toml"
        # The child validates the preset's name (the default run-name prefix): keep it valid.
        named = config.replace(name=safe_name(config.name))
        preset.write_text(dumps_toml(named), encoding="utf-8")
        argv = list((command or train_command)(preset, runs_dir, name))
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        with open(scratch / "stderr.log", "wb") as stderr:  # the child keeps its own handle
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=child_env,
                # Its own session: Ctrl+C in the lab's terminal does not reach the child, and
                # "keep running in the background" survives the lab quitting.
                start_new_session=True,
            )
        return cls(config, runs_dir, name, argv, proc, scratch)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def poll(self) -> int | None:
        """The exit code, or None while the child runs."""
        return self._proc.poll() if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def control(self, word: str) -> None:
        write_control(self.run_dir, word)

    def stderr_tail(self, max_lines: int = 5) -> list[str]:
        """The last lines the child wrote to stderr (its traceback or one-line error)."""
        if self._scratch is None:
            return []
        path = self._scratch / "stderr.log"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[-max_lines:]

    def wait(self, timeout: float | None = None) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def interrupt(self) -> None:
        """SIGINT: the trainer finishes its step, saves ``last`` and exits (like Ctrl+C)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        """Last resort when a stop request is not honoured."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
