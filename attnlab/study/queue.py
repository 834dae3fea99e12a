"""A study made from one experiment: every attention variant of one slot × N seeds (the lab's
"queue every variant × N seeds"), written as a study file and run by ``attnlab study run`` in a
child process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from attnlab.config import ExperimentConfig, dumps_toml, safe_name

SCRATCH_PREFIX = "attnlab-study-"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def variant_study_text(
    preset_file: Path, name: str, key: str, variants: Sequence[str], seeds: int, baseline: str
) -> str:
    """A study file: the experiment in ``preset_file`` with ``key`` over ``variants``."""
    values = ", ".join(_toml_string(v) for v in variants)
    return (
        f"name = {_toml_string(name)}\n"
        f"description = {_toml_string(f'every {key} variant × {seeds} seeds, from the lab')}\n"
        f"preset = {_toml_string(str(preset_file))}\n"
        f"seeds = {seeds}\n"
        f"baseline = {_toml_string(baseline)}\n"
        f"[grid]\n{_toml_string(key)} = [{values}]\n"
    )


def write_variant_study(
    config: ExperimentConfig, key: str, variants: Sequence[str], seeds: int, baseline: str
) -> Path:
    """The study file (and its preset) in a fresh scratch folder; returns the study file."""
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    preset = scratch / "experiment.toml"
    preset.write_text(dumps_toml(config), encoding="utf-8")
    name = safe_name(f"{config.name}-{key.split('.')[-1]}-x{seeds}")
    study = scratch / f"{name}.toml"
    study.write_text(
        variant_study_text(preset, name, key, variants, seeds, baseline), encoding="utf-8"
    )
    return study


def start_study(study_file: Path, out: Path, workers: int | None = None) -> subprocess.Popen[bytes]:
    """``python -m attnlab study run FILE --out OUT`` in its own session (the terminal's Ctrl+C
    does not reach it); its output goes to ``study.log`` beside the study file."""
    argv = [sys.executable, "-m", "attnlab", "study", "run", str(study_file), "--out", str(out)]
    if workers:
        argv += ["--workers", str(workers)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(Path(study_file).with_suffix(".log"), "wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )


def stop_study(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT: the runner interrupts every run (each saves ``last``, resumable) and exits."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
