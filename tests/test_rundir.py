"""Run-directory lifecycle (issue 11, items 7-9): names that stay inside --out, one trainer
per run directory, no ghost directories, Ctrl+C during start-up, resume guards."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.cli.train import TrainProgress
from attnlab.config import ExperimentConfig, check_name
from attnlab.runs import LOCK_FILE, list_runs, summarize_run

# Two steps on 50 pairs: a real run in about a second.
FAST = [
    "--set",
    "train.max_steps=2",
    "--set",
    "data.train_size=50",
    "--set",
    "data.dev_size=8",
    "--set",
    "train.eval_every=2",
    "--set",
    "model.hidden=16",
    "--set",
    "model.emb=8",
    "--set",
    "train.samples=0",
]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    return lines[0]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# -- 7. run names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (["--run-name", "../../x"], "../../x"),
        (["--run-name", "ABS"], "ABS"),
        (["--preset", "EVIL"], "../../.."),
        (["--set", "name=../.."], "../.."),
        (["--run-name", ".."], ".."),
        (["--run-name", "."], "."),
        (["--run-name", "a/b"], "a/b"),
        (["--run-name", ""], ""),
    ],
)
def test_a_run_name_that_is_not_one_component_is_refused(tmp_path, monkeypatch, args, value):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    evil = tmp_path / "evil.toml"
    evil.write_text('name = "../../.."\n')
    absolute = str(tmp_path / "abs")
    args = [{"ABS": absolute, "EVIL": str(evil)}.get(a, a) for a in args]
    value = absolute if value == "ABS" else value
    monkeypatch.chdir(work)
    before = tree(tmp_path)
    result = invoke("train", "--out", "out", "--quiet", *args, *FAST)
    assert result.exit_code == 2, result.output
    line = error_line(result.output)
    assert repr(value) in line and "one path component" in line
    if "--preset" in args:
        assert str(evil) in line  # names the preset file
    assert tree(tmp_path) == before  # nothing created, inside or outside --out


def test_check_name_rule():
    for good in ("run", "a.b_c-1", "..x", "x" * 128):
        assert check_name(good, "t") == good
    for bad in ("", ".", "..", "a/b", "/abs", "a b", "x" * 129, "é"):
        with pytest.raises(Exception, match="not a valid run name"):
            check_name(bad, "t")


def test_the_lab_builds_valid_run_names_and_presets(tmp_path):
    from attnlab.launch import TrainingProcess, run_name_for

    odd = ExperimentConfig(name="../my preset")
    odd = odd.replace(model=replace(odd.model, attention="../a b/c"))
    name = run_name_for(odd, tmp_path, now=0)
    assert check_name(name, "t") == name and (tmp_path / name).parent == tmp_path
    long = odd.replace(model=replace(odd.model, attention="y" * 300))
    assert check_name(run_name_for(long, tmp_path, now=0), "t")

    seen: list[str] = []

    def fake(preset: Path, runs_dir: Path, run_name: str) -> list[str]:
        seen.append(preset.read_text())
        return [sys.executable, "-c", "pass"]

    process = TrainingProcess.start(odd, tmp_path, command=fake)
    process.wait(30)
    first = seen[0].splitlines()[0]
    assert first == 'name = "..-my-preset"'  # "/" and " " replaced: one valid component
    assert check_name(first.split('"')[1], "t")  # the child's load_preset accepts it


# -- 8. one trainer per run directory --------------------------------------------------------


def hold_lock(run_dir: Path) -> int:
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def test_a_second_trainer_of_a_run_directory_is_refused(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    fd = hold_lock(run_dir)
    try:
        result = invoke(
            "train", "--out", str(tmp_path / "runs"), "--run-name", "r", "--quiet", *FAST
        )
        assert result.exit_code == 2, result.output
        expected = f"error: {run_dir} is being trained by pid {os.getpid()}"
        assert error_line(result.output).startswith(expected)
        assert tree(run_dir) == {LOCK_FILE}  # nothing written by the refused trainer
        assert summarize_run(run_dir).status == "running"  # the lock probe sees the holder
    finally:
        os.close(fd)
    assert summarize_run(run_dir).status == "error"  # holder gone without a done event


def test_resume_takes_the_lock_too_and_refuses_an_architecture_change(tmp_path):
    runs = tmp_path / "runs"
    assert invoke("train", "--out", str(runs), "--run-name", "r", "--quiet", *FAST).exit_code == 0
    run_dir = runs / "r"
    events = (run_dir / "events.jsonl").read_text()

    fd = hold_lock(run_dir)
    try:
        result = invoke("train", "--resume", str(run_dir), "--quiet", "--set", "train.max_steps=3")
        assert result.exit_code == 2
        assert f"is being trained by pid {os.getpid()}" in error_line(result.output)
    finally:
        os.close(fd)

    result = invoke("train", "--resume", str(run_dir), "--quiet", "--set", "model.hidden=32")
    assert result.exit_code == 2
    line = error_line(result.output)
    assert "model.hidden is 32 but the checkpoint was trained with 16" in line

    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace('tokenizer = "whitespace"', 'tokenizer = "char"'))
    line = error_line(invoke("train", "--resume", str(run_dir), "--quiet").output)
    assert "data.tokenizer is 'char'" in line
    config.write_text(config.read_text().replace('tokenizer = "char"', 'tokenizer = "whitespace"'))
    assert (run_dir / "events.jsonl").read_text() == events  # refusals wrote nothing

    # train.* (and dropout, which has no weights) may change.
    result = invoke(
        "train",
        "--resume",
        str(run_dir),
        "--quiet",
        "--set",
        "train.max_steps=3",
        "--set",
        "model.dropout=0.2",
    )
    assert result.exit_code == 0, result.output
    assert "finished: step 3" in result.output
    assert summarize_run(run_dir).status == "finished"


# -- 9. no ghost run directories -------------------------------------------------------------


def test_a_bad_value_creates_no_run_directory(tmp_path):
    result = invoke(
        "train", "--out", str(tmp_path), "--run-name", "r", "--set", "model.dropout=nan"
    )
    assert result.exit_code == 2
    assert error_line(result.output) == "error: model.dropout=nan must be a finite number"
    assert not any(tmp_path.iterdir())


def test_a_crash_during_set_up_leaves_no_run_directory(tmp_path, monkeypatch):
    import attnlab.nn.model

    def broken(*args, **kwargs):
        raise RuntimeError("boom in build_model")

    monkeypatch.setattr(attnlab.nn.model, "build_model", broken)
    with pytest.raises(RuntimeError, match="boom"):  # a programming error stays loud
        invoke("train", "--out", str(tmp_path), "--run-name", "r", "--quiet", *FAST)
    assert not any(tmp_path.iterdir())
    assert list_runs(tmp_path) == []


def test_a_run_killed_during_set_up_is_not_shown_running(tmp_path):
    run_dir = tmp_path / "killed"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text('name = "killed"\n')
    (run_dir / "events.jsonl").write_text("")  # no start event
    (run_dir / LOCK_FILE).write_text("999999\n")  # its holder is gone: the lock is free
    assert [(r.path.name, r.status) for r in list_runs(tmp_path)] == [("killed", "error")]


def test_quiet_prints_the_reason_of_an_error_event(capsys):
    progress = TrainProgress(10, 0, quiet=True)
    message = "loss became nan between steps 1 and 3"
    progress.on_event({"type": "error", "step": 3, "message": message})
    progress.on_event({"type": "step", "step": 3, "loss": 1.0, "tokens_per_s": 1.0})
    captured = capsys.readouterr()
    assert captured.err == "error: loss became nan between steps 1 and 3\n" and captured.out == ""


@pytest.mark.slow
def test_ctrl_c_during_start_up_exits_130_and_leaves_nothing(tmp_path):
    """SIGINT while the trainer's imports (torch, sacrebleu -> lxml) load: once in 5 tries it
    was swallowed and the run trained to the end with exit 0."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rng = random.Random(0)
    for attempt, delay in enumerate([0.0, *(rng.uniform(0.0, 0.3) for _ in range(3))]):
        name = f"r{attempt}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnlab",
                "train",
                "--out",
                str(tmp_path),
                "--run-name",
                name,
                "--quiet",
                *FAST,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        first = proc.stdout.readline()  # printed just before the slow imports
        assert first.startswith("run directory:"), first
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (delay, out, err)
        assert "finished" not in out and err.strip().splitlines()[-1] == "interrupted", (out, err)
        assert not (tmp_path / name).exists(), (delay, list((tmp_path / name).iterdir()))
    assert list_runs(tmp_path) == []


@pytest.mark.parametrize(
    ("data", "task"),
    [
        ({"task": "reverse"}, "reverse"),
        ({"task": "corpus", "path": "../shared/corpora/multi30k"}, "multi30k"),
        ({"task": "corpus", "path": "/data/europarl.v7/"}, "europarl.v7"),
        ({"task": "corpus", "path": "pairs/de-en.tsv"}, "de-en"),
        ({"task": "corpus", "path": "", "src_file": "a.de", "tgt_file": "a.en"}, "corpus"),
    ],
)
def test_run_names_tell_corpora_apart(data, task):
    from dataclasses import replace

    from attnlab.config import ExperimentConfig
    from attnlab.naming import experiment_name

    config = ExperimentConfig(name="x")
    config = config.replace(data=replace(config.data, **data))
    assert experiment_name(config) == f"{task}-rnn-bahdanau"
