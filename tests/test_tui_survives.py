"""The lab survives bad event logs and deleted run directories, and cleans up its scratch dirs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _tui_support import lab_config, ready, run_events, until, write_events, write_run
from textual.widgets import DataTable, Select

from attnlab import launch as launcher
from attnlab.launch import TrainingProcess, remove_scratch_dirs, sweep_scratch_dirs
from attnlab.tui.app import make_app
from attnlab.tui.follow import FAILED, FINISHED, RUNNING, STARTING, RunFollower
from attnlab.tui.views.runs import RunsView
from attnlab.tui.views.train import TrainView

SIZE = (100, 30)
BAD_LINES = (
    "\n".join(["\udcff", "[1, 2]", '{"type": "step", "step": null}', '"x"', '{"step": 3}']) + "\n"
)


def _append(run_dir: Path, data: bytes) -> None:
    with open(run_dir / "events.jsonl", "ab") as handle:
        handle.write(data)


def _bad_bytes() -> bytes:
    return BAD_LINES.encode("utf-8", "surrogateescape")  # line 1 is the invalid byte 0xff


@pytest.fixture
def scratch_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp folder, for this test only (scratch dirs land and are looked for here)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    monkeypatch.setattr(launcher, "_STARTED", [])
    return root


def _scratch_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("attnlab-lab-*"))


# -- the follower ------------------------------------------------------------------------------


def test_follower_skips_bad_lines_and_logs_one_warning(tmp_path: Path) -> None:
    events = run_events(steps=20, eval_every=10, done=None)
    write_events(tmp_path, events[:3])
    _append(tmp_path, _bad_bytes())
    write_events(tmp_path, events[3:])
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.state == RUNNING and follower.skipped == 5
    assert follower.curves.train_step == [5, 10, 15, 20] and follower.curves.eval_step == [10, 20]
    warnings = [line for line in follower.log if line.startswith("warning:")]
    assert warnings == [f"warning: {follower.warning()}"]
    assert (
        "skipped 5 malformed lines (line 4: invalid UTF-8; line 5: not a JSON object (list)"
        in warnings[0]
    )
    follower.poll()  # nothing new: no second warning
    assert sum(line.startswith("warning:") for line in follower.log) == 1
    _append(tmp_path, b'{"type": "done", "step": "20"}\n')  # one more bad line: the count moves
    write_events(tmp_path, [{"type": "done", "step": 20, "reason": "finished"}])
    follower.poll()
    assert follower.state == FINISHED and follower.skipped == 6
    assert "skipped 6 malformed lines" in follower.log[-1]


def test_follower_copes_with_mistyped_fields(tmp_path: Path) -> None:
    config = {"train": "not a table"}
    write_events(
        tmp_path,
        [
            {"type": "start", "step": 0, "config": config, "max_steps": "many", "params": [1]},
            {"type": "step", "step": 2, "loss": "low", "lr": 0.5},
            {"type": "eval", "step": 2, "bleu_by_length": [{"bleu": "x"}], "bleu": 3.0},
            {"type": "sample", "step": 2, "src": ["a"], "hyp": [1], "attention": [[0.5], [1, 2]]},
            {"type": "done", "step": 2, "reason": 5, "best": "yes"},
        ],
    )
    follower = RunFollower(tmp_path)
    follower.poll()
    assert (follower.max_steps, follower.params, follower.lr) == (0, 0, 0.5)
    assert follower.loss != follower.loss  # NaN: the mistyped loss was dropped
    assert follower.curves.bleu == [3.0] and follower.curves.bleu_by_length == []
    assert follower.samples[0].hyp == [] and follower.samples[0].attention is None
    assert follower.state == FINISHED and follower.done_reason == "finished" and follower.best == {}
    assert "ignored" in follower.warning()


def test_follower_reports_a_deleted_run_directory_and_stops(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "r", run_events(steps=10, eval_every=100, done=None))
    follower = RunFollower(run_dir)
    follower.poll()
    assert follower.state == RUNNING
    shutil.rmtree(run_dir)
    follower.poll()
    assert follower.deleted and follower.finished and follower.state == FAILED
    assert follower.error == f"run directory {run_dir} was deleted; no longer following it"
    assert follower.log[-1].endswith(follower.error)
    write_run(tmp_path, "r")  # re-created later: not followed any more
    assert follower.poll() == [] and follower.state == FAILED


def test_a_finished_run_deleted_afterwards_keeps_its_outcome(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "r", run_events(steps=10, eval_every=100, done="finished"))
    follower = RunFollower(run_dir)
    follower.poll()
    shutil.rmtree(run_dir)
    follower.poll()
    assert follower.deleted and follower.state == FINISHED and follower.error == ""
    assert follower.log[-1].endswith("was deleted; no longer following it")


def test_follower_reports_a_replaced_run_directory(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "r", run_events(steps=10, eval_every=100, done=None))
    follower = RunFollower(run_dir)
    follower.poll()
    shutil.rmtree(run_dir)
    write_run(tmp_path, "r", run_events(steps=5, eval_every=100, done=None))  # a new, shorter log
    follower.poll()
    assert follower.deleted and follower.state == FAILED and "was replaced" in follower.error


def test_follower_waits_for_a_run_directory_that_does_not_exist_yet(tmp_path: Path) -> None:
    follower = RunFollower(tmp_path / "later")
    follower.poll()
    assert follower.state == STARTING and not follower.deleted  # the child has not created it yet
    write_run(tmp_path, "later", run_events(steps=10, eval_every=100, done=None))
    follower.poll()
    assert follower.state == RUNNING and not follower.deleted


# -- stopping a child, scratch directories ---------------------------------------------------


def test_terminate_sends_sigterm_then_kills_after_the_grace(
    tmp_path: Path, scratch_root: Path
) -> None:
    ready_file = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"
    )
    process = TrainingProcess.start(
        lab_config(),
        tmp_path / "runs",
        "stubborn",
        command=lambda p, r, n: [sys.executable, "-c", code, str(ready_file)],
    )
    try:
        for _ in range(600):
            if ready_file.exists():
                break
            process.wait(timeout=0.05)
        process.terminate(grace_s=60)  # SIGTERM: ignored by this child
        assert process.wait(timeout=0.5) is None and process.running
        process.terminate(grace_s=0)  # the grace is over: SIGKILL
        assert process.wait(timeout=10) == -signal.SIGKILL
    finally:
        process.kill()
    polite = TrainingProcess.start(
        lab_config(),
        tmp_path / "runs",
        "polite",
        command=lambda p, r, n: [sys.executable, "-c", "import time; time.sleep(60)"],
    )
    polite.terminate()
    assert polite.wait(timeout=10) == -signal.SIGTERM


def test_scratch_dirs_are_removed_unless_a_child_may_still_read_its_preset(
    tmp_path: Path, scratch_root: Path
) -> None:
    done = TrainingProcess.start(
        lab_config(),
        tmp_path / "runs",
        "done",
        command=lambda p, r, n: [sys.executable, "-c", "pass"],
    )
    sleeping = TrainingProcess.start(
        lab_config(),
        tmp_path / "runs",
        "sleeping",
        command=lambda p, r, n: [sys.executable, "-c", "import time; time.sleep(60)"],
    )
    try:
        done.wait(timeout=30)
        assert len(_scratch_dirs(scratch_root)) == 2
        remove_scratch_dirs()
        # The finished child's dir is gone; the running one has not written config.toml yet.
        assert _scratch_dirs(scratch_root) == [sleeping._scratch]
        (tmp_path / "runs" / "sleeping").mkdir(parents=True)
        (tmp_path / "runs" / "sleeping" / "config.toml").write_text('name = "sleeping"\n')
        remove_scratch_dirs()
        assert _scratch_dirs(scratch_root) == []
    finally:
        sleeping.kill()


def test_the_sweep_removes_scratch_dirs_of_labs_that_are_gone(scratch_root: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)  # exited and reaped: no such process now
    stale, live, unowned = (scratch_root / f"attnlab-lab-{n}" for n in ("stale", "live", "new"))
    for d in (stale, live, unowned):
        d.mkdir()
    (stale / "owner").write_text(f"{dead_pid} {dead_pid}\n")
    (live / "owner").write_text(f"{dead_pid} {os.getpid()}\n")  # its child still runs
    (scratch_root / "unrelated").mkdir()
    assert sweep_scratch_dirs() == [stale]
    assert sorted(p.name for p in scratch_root.iterdir()) == [
        "attnlab-lab-live",
        "attnlab-lab-new",
        "unrelated",
    ]


# -- the lab (Pilot) ---------------------------------------------------------------------------


async def test_the_lab_follows_a_run_with_bad_lines_and_still_lists_it(tmp_path: Path) -> None:
    events = run_events(steps=20, eval_every=10, done=None)
    run_dir = write_run(tmp_path, "messy", events[:3])
    _append(run_dir, _bad_bytes())
    app = make_app(tmp_path, config=lab_config(), poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(run_dir)
        log = app.query_one("#event-log")
        await until(pilot, lambda: any("skipped 5 malformed lines" in line for line in log.lines))
        # The trainer goes on writing (another bad line, then good ones): the lab keeps up.
        _append(run_dir, b"[3, 4]\n")
        write_events(run_dir, [*events[3:], {"type": "done", "step": 20, "reason": "finished"}])
        await until(pilot, lambda: train.follower.state == FINISHED)
        assert app.query_one("#samples", DataTable).row_count == 2
        assert any("skipped 6 malformed lines" in line for line in log.lines)
        assert "finished" in str(app.query_one("#train-status").content)
        # Runs, Inspect and Export still list it.
        await pilot.press("4")
        runs = app.query_one(RunsView)
        runs.refresh_runs(force=True)
        assert [r.path.name for r in runs.runs] == ["messy"] and runs.runs[0].skipped_lines == 6
        # ... and its status line carries the reader's warning (the run's first one).
        line = app.query_one("#runs-status")
        status = str(line.content)
        assert runs.runs[0].warnings and "⚠ messy: skipped 6 malformed lines" in status
        # Without the per-line details it fits the line (they were cut off at 80 columns);
        # the whole warning is the line's tooltip.
        shown = status.split("[/]")[0].replace("[$warning]", "")
        note = shown[shown.index("⚠") :]
        assert note == "⚠ messy: skipped 6 malformed lines", note  # fits beside "N runs in runs"
        assert line.tooltip == runs.runs[0].warnings[0]
        await pilot.press("5")
        await pilot.pause()
        assert app.query_one("#export-run", Select).value == str(run_dir)
        assert app.query_one("#insp-run", Select).value == str(run_dir)
        assert app.is_running


async def test_a_run_directory_deleted_while_training_stops_the_child(tmp_path: Path) -> None:
    # A stand-in trainer: creates its run directory, logs a start event, then trains "forever".
    code = (
        "import json, os, sys, time; d = sys.argv[1]; os.makedirs(d)\n"
        "open(os.path.join(d, 'config.toml'), 'w').write('name = \"x\"\\n')\n"
        "with open(os.path.join(d, 'events.jsonl'), 'w') as f:\n"
        "    f.write(json.dumps({'type': 'start', 'time': 0, 'step': 0, 'max_steps': 9}) + '\\n')\n"
        "time.sleep(60)\n"
    )

    def forever(preset: Path, runs_dir: Path, name: str) -> list[str]:
        return [sys.executable, "-c", code, str(runs_dir / name)]

    finished: list[TrainView.RunFinished] = []
    app = make_app(tmp_path, config=lab_config(), command_factory=forever, poll_seconds=0.05)

    def hook(message: object) -> None:
        if isinstance(message, TrainView.RunFinished):
            finished.append(message)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "t")
        train = app.query_one(TrainView)
        await until(pilot, lambda: train.follower is not None and train.follower.state == RUNNING)
        run_dir = train.process.run_dir
        shutil.rmtree(run_dir)
        await until(pilot, lambda: bool(finished))  # the child was stopped, the run ended
        assert finished[0].state == FAILED and train.process.poll() == -signal.SIGTERM
        status = str(app.query_one("#train-status").content)
        assert "was deleted" in status and "running" not in status
        assert any("was deleted" in line for line in app.query_one("#event-log").lines)
        assert not train.active
        assert "was deleted" in train.control("stop")  # not "interrupted before the run started"
        await pilot.press("x")
        assert not run_dir.exists()  # nothing re-created it


async def test_the_lab_removes_its_scratch_dirs_when_it_exits(
    tmp_path: Path, scratch_root: Path
) -> None:
    code = (
        "import json, os, sys; d = sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
        "with open(os.path.join(d, 'events.jsonl'), 'w') as f:\n"
        "    f.write(json.dumps({'type': 'start', 'time': 0, 'step': 0}) + '\\n')\n"
        "    done = {'type': 'done', 'time': 0, 'step': 0, 'reason': 'finished'}\n"
        "    f.write(json.dumps(done) + '\\n')\n"
    )

    def quick(preset: Path, runs_dir: Path, name: str) -> list[str]:
        return [sys.executable, "-c", code, str(runs_dir / name)]

    finished: list[object] = []
    app = make_app(tmp_path / "runs", config=lab_config(), command_factory=quick, poll_seconds=0.05)

    def hook(message: object) -> None:
        if isinstance(message, TrainView.RunFinished):
            finished.append(message)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await ready(app, pilot)
        await pilot.press("escape", "t")
        await until(pilot, lambda: bool(finished))
        assert len(_scratch_dirs(scratch_root)) == 1  # the child's preset and stderr
        await pilot.press("ctrl+q")
    assert _scratch_dirs(scratch_root) == []
    assert json.loads(
        (next((tmp_path / "runs").iterdir()) / "events.jsonl").read_text().splitlines()[-1]
    )["reason"]


def test_follower_follows_the_log_a_trainer_started_again(tmp_path: Path) -> None:
    """events.jsonl deleted while the run writes it: the trainer (EventLog) starts a new log
    with a note; the lab follows that instead of calling the run deleted (and stopping it)."""
    from attnlab.events import EventLog

    run_dir = tmp_path / "r"
    log = EventLog(run_dir)
    log.emit("start", 0, name="r", max_steps=10)
    for step in range(1, 6):
        log.emit("step", step, loss=2.0 / step)
    follower = RunFollower(run_dir)
    follower.poll()
    assert follower.step == 5
    (run_dir / "events.jsonl").unlink()
    log.emit("step", 6, loss=0.3)
    follower.poll()  # the new log is shorter than what was read: started again, not deleted
    assert not follower.deleted and follower.state == RUNNING
    assert "following the new log" in follower.log[-1]
    log.emit("done", 6, reason="finished")
    log.close()
    follower.poll()
    assert follower.step == 6 and follower.state == FINISHED and not follower.deleted


async def test_a_fifo_as_a_runs_event_log_neither_freezes_the_lab_nor_hides_it(
    tmp_path: Path,
) -> None:
    """A FIFO as events.jsonl froze the whole lab: its main thread blocked in open(). Now the
    Runs tab lists the run with a warning, and following it says why nothing is read."""
    write_run(tmp_path, "good")
    fifo_run = write_run(tmp_path, "fifo")
    (fifo_run / "events.jsonl").unlink()
    os.mkfifo(fifo_run / "events.jsonl")
    app = make_app(tmp_path, config=lab_config(), poll_seconds=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        runs = app.query_one(RunsView)
        runs.refresh_runs(force=True)
        await pilot.pause()
        assert sorted(r.path.name for r in runs.runs) == ["fifo", "good"]
        (fifo,) = [r for r in runs.runs if r.path.name == "fifo"]
        assert any("is a FIFO, not a regular file" in w for w in fifo.warnings)
        await pilot.press("2")
        train = app.query_one(TrainView)
        train.follow_run(fifo_run)
        log = app.query_one("#event-log")
        await until(pilot, lambda: any("is a FIFO" in line for line in log.lines))
