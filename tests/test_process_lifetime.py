"""No process outlives what started it: the ranks of ``attnlab train --nproc 2`` end when
their launcher or torchrun is killed with SIGKILL (Linux PR_SET_PDEATHSIG plus a watcher),
``last`` stays loadable, and a killed rank is one ``error:`` line naming it. Every process
a test starts is reaped in ``finally`` (the ranks too, found by their run directory)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.train import distributed
from attnlab.train.torchrun_entry import describe_failure

ROOT = Path(__file__).resolve().parents[1]
TINY = (
    "data.train_size=64",
    "data.dev_size=8",
    "data.test_size=8",
    "data.max_len=8",
    "model.hidden=16",
    "model.emb=8",
    "train.batch_size=16",
    "train.samples=0",
    "train.eval_sentences=8",
    "train.log_every=1",
    "train.device=cpu",
    "train.max_steps=100000",
    "train.eval_every=2",  # a `last` checkpoint early: the kill must leave it loadable
)


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _processes_naming(text: str) -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, command line)} of this user's processes whose argv contains text."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if text in argv and int(entry.name) != os.getpid():
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            found[int(entry.name)] = (ppid, argv)
    return found


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _reap(marker: str, launcher: subprocess.Popen) -> None:
    for pid in _processes_naming(marker):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if launcher.poll() is None:
        launcher.kill()
    launcher.communicate(timeout=30)


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    argv = [sys.executable, "-m", "attnlab", "train", "--nproc", "2", "--out", str(tmp_path)]
    argv += ["--run-name", "r", "--quiet", *[a for s in TINY for a in ("--set", s)]]
    launcher = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    run_dir = tmp_path / "r"

    def saved() -> bool:
        events = run_dir / "events.jsonl"
        return events.is_file() and '"type": "checkpoint"' in events.read_text()

    assert _wait_for(saved, 150), "no checkpoint within 150 s"
    return launcher, run_dir


def _ranks(marker: str) -> dict[int, tuple[int, str]]:
    return {
        pid: info
        for pid, info in _processes_naming(marker).items()
        if "torchrun_entry" not in info[1] and "--nproc" not in info[1]
    }


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["launcher", "torchrun"])
def test_every_rank_ends_within_seconds_of_its_launchers_kill_9(tmp_path, victim):
    from attnlab.runs import read_checkpoint

    marker = str(tmp_path)
    launcher, run_dir = _start(tmp_path)
    try:
        assert len(_ranks(marker)) == 2
        if victim == "launcher":
            os.kill(launcher.pid, signal.SIGKILL)
        else:
            (torchrun,) = [p for p, i in _processes_naming(marker).items() if "torchrun" in i[1]]
            os.kill(torchrun, signal.SIGKILL)
        gone = _wait_for(lambda: not _ranks(marker), distributed.ORPHAN_GRACE_S + 10)
        left = _ranks(marker)
    finally:
        _reap(marker, launcher)
    assert gone, f"ranks outlived their {victim}: {left}"
    _, meta = read_checkpoint(run_dir / "checkpoints" / "last")  # intact, loadable
    assert meta["step"] >= 1


@pytest.mark.slow
def test_a_killed_rank_is_one_error_line_naming_it(tmp_path):
    marker = str(tmp_path)
    launcher, run_dir = _start(tmp_path)
    try:
        ranks = _ranks(marker)
        victim = max(ranks)
        rank = int(_environ(victim)["RANK"])
        os.kill(victim, signal.SIGKILL)
        _, err = launcher.communicate(timeout=60)
    finally:
        _reap(marker, launcher)
    assert launcher.returncode != 0
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and f"rank {rank} (pid {victim}) died of SIGKILL" in errors[0]
    assert "Traceback" not in err, err[-3000:]


def test_describe_failure_names_a_signal_death_only():
    line = describe_failure(1, -9, 4242, "SIGKILL")
    assert line is not None and line.startswith("error: rank 1 (pid 4242) died of SIGKILL")
    assert describe_failure(0, 1, 4242, "") is None  # the rank printed its own error line


def test_the_launchers_scratch_folders_of_dead_launchers_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owned_dead = tmp_path / f"{distributed.SCRATCH_PREFIX}dead"
    owned_live = tmp_path / f"{distributed.PRESET_SCRATCH_PREFIX}live"
    old_unowned = tmp_path / f"{distributed.SCRATCH_PREFIX}old"
    new_unowned = tmp_path / f"{distributed.SCRATCH_PREFIX}new"
    for folder in (owned_dead, owned_live, old_unowned, new_unowned):
        folder.mkdir()
    (owned_dead / "owner").write_text(f"{dead.pid}\n")
    (owned_live / "owner").write_text(f"{dead.pid} {os.getpid()}\n")
    past = time.time() - distributed.UNOWNED_SCRATCH_MAX_AGE_S - 60
    os.utime(old_unowned, (past, past))
    removed = distributed.sweep_launcher_scratch(tmp_path)
    assert sorted(removed) == sorted([owned_dead, old_unowned])
    assert owned_live.is_dir() and new_unowned.is_dir()


def test_a_process_that_asked_for_a_death_signal_gets_it_when_its_parent_dies(tmp_path):
    """The prctl itself: a parent starts a child that asks for SIGTERM at its parent's
    death and then sleeps; SIGKILL to the parent ends the child at once."""
    child_code = (
        "import sys, time\n"
        "from attnlab.train.distributed import set_parent_death_signal\n"
        "assert set_parent_death_signal()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    parent_code = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=_env()
    )
    child = None
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "ready"
        parent.kill()
        parent.wait(timeout=10)
        assert _wait_for(lambda: not Path(f"/proc/{child}").exists() or _zombie(child), 10)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait(timeout=10)
        if child is not None and Path(f"/proc/{child}").exists():
            os.kill(child, signal.SIGKILL)


def _environ(pid: int) -> dict[str, str]:
    raw = (Path("/proc") / str(pid) / "environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_threads_beyond_the_cores_is_one_error_line():
    from attnlab.errors import AttnlabError

    cores = len(os.sched_getaffinity(0))
    distributed.check_threads(cores)
    distributed.check_threads(0)
    with pytest.raises(AttnlabError, match=rf"train.threads={cores + 1} exceeds the {cores}"):
        distributed.check_threads(cores + 1)


def test_train_threads_beyond_the_cores_is_refused_before_a_run_directory(tmp_path):
    from click.testing import CliRunner

    from attnlab.cli import cli

    cores = len(os.sched_getaffinity(0))
    argv = [
        "train",
        "--out",
        str(tmp_path),
        "--device",
        "cpu",
        "--set",
        f"train.threads={cores + 1}",
    ]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: train.threads={cores + 1} exceeds the {cores} CPU cores here; "
        f"use 0..{cores} (0 = torch's default)"
    ]
    assert not any(tmp_path.iterdir())  # no run directory left that shows as error
