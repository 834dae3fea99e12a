"""Outputs a user names are written as coreutils write them: regular files and new paths
atomically, devices and FIFOs through (the node stays), symlinks at their target; folders and
files of a run directory are refused; a failed write is an error, never exit 0."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.runs import WriteError, write_output_text


def _is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(200):  # the reader has opened its end once a non-blocking open succeeds
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            break
        except OSError:
            threading.Event().wait(0.01)
    write_output_text(fifo, "hello\n")
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert b"".join(got).endswith(b"hello\n")


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(WriteError, match="cannot write"):
        write_output_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_null_stays_a_device_and_dev_full_is_an_error():
    write_output_text(Path("/dev/null"), "discarded\n")
    assert _is_char_device("/dev/null")
    with pytest.raises(WriteError, match="No space"):
        write_output_text(Path("/dev/full"), "x\n")
    assert _is_char_device("/dev/full")


def test_a_symlink_writes_its_target_and_stays_a_link(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_output_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(WriteError, match="is a folder"):
        write_output_text(tmp_path, "x")


def test_a_file_of_a_run_directory_is_never_overwritten(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    events = run / "events.jsonl"
    events.write_text('{"type": "start"}\n')
    (run / "config.toml").write_text('name = "run"\n')
    for victim in (events, run / "config.toml"):
        with pytest.raises(WriteError, match="run or study directory"):
            write_output_text(victim, "hyps\n", "--refs")
    assert events.read_text() == '{"type": "start"}\n'
    write_output_text(run / "hyps.txt", "a new file beside the run is fine\n")
    assert (run / "hyps.txt").exists()


def test_a_full_device_on_the_command_line_is_one_line_and_a_non_zero_exit():
    args = ["data", "export", "reverse", "--split", "dev", "--out", "/dev/full", "--force"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.output.strip().startswith("error:") and "No space" in result.output
    assert _is_char_device("/dev/full")
