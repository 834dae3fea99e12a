"""Running studies end to end: tiny runs in child processes, scores equal to ``attnlab eval``,
reruns skip and resume, a failing cell is recorded, Ctrl+C leaves runs resumable, Dask."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _tiny import TINY_OVERRIDES
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.errors import AttnlabError
from attnlab.runs import summarize_run
from attnlab.study.runner import read_outcomes, run_study
from attnlab.study.score import read_score
from attnlab.study.spec import load_study

TINY = [*TINY_OVERRIDES, "train.samples=0"]


def _study_file(tmp_path: Path, cells: str, seeds: int = 2, extra: str = "") -> Path:
    sets = ", ".join(f'"{item}"' for item in TINY)
    path = tmp_path / "tiny.toml"
    path.write_text(
        f'name = "tiny"\npreset = "reverse-bahdanau"\nseeds = {seeds}\nset = [{sets}]\n'
        f"{extra}{cells}",
        encoding="utf-8",
    )
    return path


GRID = '[grid]\n"model.attention" = ["bahdanau", "none"]\n'


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    return env


def test_a_study_trains_scores_and_a_rerun_trains_nothing(tmp_path: Path) -> None:
    study = load_study(_study_file(tmp_path, GRID))
    out = tmp_path / "out"
    result, directory = run_study(study, out, workers=2)
    assert sorted(o.run_name for o in result.outcomes) == [
        "bahdanau-s1",
        "bahdanau-s2",
        "none-s1",
        "none-s2",
    ]
    assert all(o.state == "scored" and o.trained for o in result.outcomes)
    for run in ("bahdanau-s1", "none-s2"):
        assert summarize_run(directory / run).status == "finished"
    # The score file is `attnlab eval RUN --split test --json` of the same checkpoint.
    score = read_score(directory / "none-s2")
    assert score is not None and score["checkpoint"] == "checkpoints/best"
    printed = CliRunner().invoke(
        cli, ["eval", str(directory / "none-s2"), "--split", "test", "--json"]
    )
    assert printed.exit_code == 0, printed.output
    evaluated = json.loads(printed.output)
    for key in ("bleu", "chrf", "exact_match", "loss", "n", "step", "bleu_by_length"):
        assert score[key] == evaluated[key], key
    # its cost: training's figures as the run recorded them, the rest measured again
    for key in ("parameters", "train_tokens_per_s", "train_peak_memory_mb"):
        assert score["cost"][key] == evaluated["cost"][key] is not None, key
    sentences = score["sentences"]
    assert len(sentences["hyps"]) == len(sentences["refs"]) == evaluated["n"]
    assert sum(sentences["exact"]) / evaluated["n"] == pytest.approx(evaluated["exact_match"])
    # The seed reached each run's config: two seeds, two different models.
    assert read_score(directory / "none-s1")["loss"] != score["loss"]
    again, _ = run_study(study, out, workers=2)
    assert all(o.state == "scored" and not o.trained for o in again.outcomes)


def test_a_failing_cell_is_recorded_with_its_error_and_the_study_goes_on(tmp_path: Path) -> None:
    cells = GRID + (
        '[[cells]]\nname = "broken"\n'
        'set = ["data.task=corpus", "data.path=no-such-corpus-folder"]\n'
    )
    study = load_study(_study_file(tmp_path, cells, seeds=1))
    result, directory = run_study(study, tmp_path / "out", workers=2)
    states = {o.run_name: o for o in result.outcomes}
    assert states["bahdanau-s1"].state == "scored"
    assert states["none-s1"].state == "scored"
    assert states["broken-s1"].state == "failed"
    assert "no-such-corpus-folder" in states["broken-s1"].error
    assert "\n" not in states["broken-s1"].error
    assert read_outcomes(directory)["broken-s1"]["state"] == "failed"


def test_ctrl_c_stops_every_run_resumable_and_a_rerun_finishes_them(tmp_path: Path) -> None:
    path = _study_file(tmp_path, GRID)
    long_budget = ["--set", "train.max_steps=100000", "--set", "train.eval_every=100000"]
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnlab",
            "study",
            "run",
            str(path),
            "--out",
            str(out),
            "--workers",
            "2",
            "--seeds",
            "1",
            *long_budget,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 120
        runs = [out / "tiny" / "bahdanau-s1", out / "tiny" / "none-s1"]

        def stepping(run: Path) -> bool:
            events = run / "events.jsonl"
            return events.is_file() and '"type": "step"' in events.read_text(errors="replace")

        while not all(stepping(run) for run in runs):
            assert time.monotonic() < deadline, "the runs never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr.decode()
    assert b"resumable" in stderr
    for run in runs:
        assert summarize_run(run).status == "interrupted"
        assert (run / "checkpoints" / "last" / "meta.json").is_file()
    # No child outlives the study.
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert left.strip() == ""
    # A rerun (a finite budget now: a resumed run may change train.* keys) resumes both.
    reached = max(summarize_run(run).steps for run in runs)
    study = load_study(path, seeds=1, extra=(f"train.max_steps={reached + 3}",))
    result, _ = run_study(study, out, workers=2)
    assert all(o.state == "scored" and o.resumed for o in result.outcomes), result.outcomes


def test_the_dask_executor_runs_the_same_study_on_a_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    study = load_study(_study_file(tmp_path, '[grid]\n"model.attention" = ["none"]\n'))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        result, directory = run_study(
            study, tmp_path / "out", executor="dask", scheduler=cluster.scheduler_address
        )
    assert sorted((o.run_name, o.state) for o in result.outcomes) == [
        ("none-s1", "scored"),
        ("none-s2", "scored"),
    ]
    assert read_score(directory / "none-s1") is not None


def test_a_dask_worker_that_dies_mid_run_is_reported_and_leaves_a_resumable_run(
    tmp_path: Path,
) -> None:
    distributed = pytest.importorskip("distributed")
    import threading

    import dask

    study = load_study(
        _study_file(tmp_path, '[grid]\n"model.attention" = ["none"]\n', seeds=1),
        extra=("train.max_steps=100000", "train.eval_every=100000"),
    )
    run = tmp_path / "out" / "tiny" / "none-s1"
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        with distributed.Client(cluster) as client:
            worker_pids = list(client.run(os.getpid).values())

        def kill_the_worker_once_training() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                events = run / "events.jsonl"
                if events.is_file() and '"type": "step"' in events.read_text(errors="replace"):
                    break
                time.sleep(0.2)
            for pid in worker_pids:
                os.kill(pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_the_worker_once_training)
        killer.start()
        result, _ = run_study(
            study, tmp_path / "out", executor="dask", scheduler=cluster.scheduler_address
        )
        killer.join()
    (outcome,) = result.outcomes
    assert outcome.state == "failed"
    assert "Dask worker" in outcome.error and "rerun the study" in outcome.error
    # The trainer got SIGTERM with its worker (PR_SET_PDEATHSIG): it saves `last` and stops,
    # or, killed before it could, leaves no checkpoint; either way nothing is left running
    # and a rerun of the study finishes the run.
    deadline = time.monotonic() + 60
    while summarize_run(run).status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert summarize_run(run).status in ("interrupted", "stopped", "error")
    reached = summarize_run(run).steps
    again = load_study(
        _study_file(tmp_path, '[grid]\n"model.attention" = ["none"]\n', seeds=1),
        extra=(f"train.max_steps={reached + 3}",),
    )
    result, _ = run_study(again, tmp_path / "out", workers=1)
    assert [o.state for o in result.outcomes] == ["scored"]


def _task(tmp_path: Path, name: str = "a-s1"):
    from attnlab.study.task import RunTask

    return RunTask(str(tmp_path / "study"), name, "a", 1, "reverse-bahdanau", (), "test", "best")


def test_a_lock_race_is_skipped_never_failed(tmp_path: Path, monkeypatch) -> None:
    """Issue #43 item 6: a child refused because another process trains the run."""
    from attnlab.study import task as task_module

    refusal = (
        f"error: {tmp_path}/study/a-s1 is being trained by pid 4242; wait for it to end or "
        "stop it (a run directory has one trainer at a time)"
    )
    monkeypatch.setattr(
        task_module, "_run_child", lambda argv, env, children: (2, task_module.error_line(refusal))
    )
    outcome = task_module.execute(_task(tmp_path))
    assert outcome.state == "skipped", outcome
    assert "lock" in outcome.error


def test_ctrl_c_reaching_a_child_that_is_still_starting_is_interrupted(
    tmp_path: Path, monkeypatch
) -> None:
    """Issue #43 item 10: it was recorded as failed (training exited with code -9)."""
    from attnlab.study import task as task_module

    children = task_module.Children()

    def starting_child(argv, env, kids):
        kids.interrupt()  # Ctrl+C arrives while the child imports; a second one kills it
        return -9, ""

    monkeypatch.setattr(task_module, "_run_child", starting_child)
    outcome = task_module.execute(_task(tmp_path), children)
    assert outcome.state == "interrupted", outcome
    assert "rerun" in outcome.error


def test_a_second_runner_of_a_running_study_is_refused_naming_its_pid(tmp_path: Path) -> None:
    path = _study_file(tmp_path, GRID, seeds=1)
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from attnlab.study.lock import lock_study\n"
            "lock = lock_study(sys.argv[1])\nprint('locked', flush=True)\ntime.sleep(60)\n",
            str(out / "tiny"),
        ],
        stdout=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        result = CliRunner().invoke(cli, ["study", "run", str(path), "--out", str(out)])
        assert result.exit_code == 2, result.output
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"pid {holder.pid}" in errors[0], result.output
        assert "already running" in errors[0]
        with pytest.raises(AttnlabError, match=f"pid {holder.pid}"):
            run_study(load_study(path), out)  # the engine refuses too, before any run
        assert not (out / "tiny" / "bahdanau-s1").exists()
    finally:
        holder.kill()
        holder.wait()


def test_outcome_writes_from_many_threads_keep_every_run(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from attnlab.study.outcomes import record_outcome

    names = [f"r{i}" for i in range(40)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: record_outcome(tmp_path, n, "scored", ""), names))
    assert sorted(read_outcomes(tmp_path)) == sorted(names)


def test_a_tiny_tuned_study_end_to_end(tmp_path: Path) -> None:
    """2 candidates × 1 cell, one tune seed and one study seed: 3 real tiny runs."""
    path = _study_file(
        tmp_path,
        '[grid]\n"model.attention" = ["bahdanau"]\n'
        '[tune]\n"train.lr" = [1e-3, 3e-2]\nselect = "loss"\ntune_seeds = 1\n',
        seeds=1,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["study", "run", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "study tiny: 1 cells × 1 seeds + 2 tuning runs = 3 runs"
    directory = out / "tiny"
    scores = [read_score(directory / "tune" / f"bahdanau-c{i}-s10001") for i in (1, 2)]
    assert all(s is not None and s["split"] == "dev" for s in scores)
    best = min((0, 1), key=lambda i: (scores[i]["loss"], i))  # loss: lower is better
    data = json.loads(CliRunner().invoke(cli, ["study", "show", str(directory), "--json"]).output)
    tune = data["rows"][0]["tune"]
    assert tune["chosen"] == {"train.lr": [1e-3, 3e-2][best]} and tune["edge"] is True
    main = read_score(directory / "bahdanau-s1")
    assert main is not None and main["split"] == "test"
    again = CliRunner().invoke(cli, ["study", "run", str(path), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert summarize_run(directory / "bahdanau-s1").status == "finished"


def test_a_rerun_clears_only_what_attnlab_wrote_of_a_run_that_saved_no_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    """#43 item 1's audit: the study deleted the run folder whole (shutil.rmtree) before
    training it afresh, with whatever the user kept there."""
    from attnlab.study import task as task_module

    launched: list[list[str]] = []
    monkeypatch.setattr(
        task_module, "_run_child", lambda argv, env, kids: (launched.append(argv), (1, "x"))[1]
    )
    task = _task(tmp_path)
    run_dir = Path(task.run_dir)
    # A begun run (config, log, lock, an empty checkpoints folder) holding the user's notes.
    (run_dir / "checkpoints").mkdir(parents=True)
    for name in ("config.toml", "events.jsonl", ".lock"):
        (run_dir / name).write_text("", encoding="utf-8")
    (run_dir / "notes.txt").write_text("mine", encoding="utf-8")
    outcome = task_module.execute(task)
    assert outcome.state == "failed" and "notes.txt" in outcome.error, outcome
    assert launched == []  # nothing trained into a folder holding the user's files
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    assert (run_dir / "notes.txt").read_text(encoding="utf-8") == "mine"
    # A symlink in the run's place is refused, its target untouched.
    (run_dir / "notes.txt").unlink()
    run_dir.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.toml").write_text("", encoding="utf-8")
    run_dir.symlink_to(elsewhere)
    outcome = task_module.execute(task)
    assert outcome.state == "failed" and "symlink" in outcome.error and launched == []
    assert (elsewhere / "config.toml").is_file()
    # Only attnlab's files: cleared and trained afresh.
    run_dir.unlink()
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "events.jsonl").write_text("", encoding="utf-8")
    task_module.execute(task)
    assert len(launched) == 1 and "--resume" not in launched[0] and not run_dir.exists()
