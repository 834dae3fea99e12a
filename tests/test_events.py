"""The one event reader (attnlab.train.events.EventReader) and its users outside the lab:
malformed lines are skipped and counted, a partial last line waits, file content never raises."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.cli import cli
from attnlab.errors import AttnlabError
from attnlab.runs import list_runs, require_run_dir, summarize_run
from attnlab.train.events import EventLog, EventReader, check_event, read_event_log, read_events

START = {"type": "start", "time": 1.0, "step": 0, "name": "r", "params": 1234}
EVAL = {"type": "eval", "time": 2.0, "step": 10, "split": "dev", "bleu": 12.5, "exact_match": 0.25}


def _line(event: dict) -> bytes:
    return (json.dumps(event) + "\n").encode()


def _write(run_dir: Path, data: bytes) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "events.jsonl"
    with open(path, "ab") as handle:
        handle.write(data)
    return path


# Each is one complete line that is not a well-shaped event, and why it is refused.
MALFORMED = {
    "invalid UTF-8": (b'{"type": "step", "step": 1, "loss": "\xff\xfe"}', "invalid UTF-8"),
    "array": (b"[1, 2]", "not a JSON object (list)"),
    "string": (b'"step"', "not a JSON object (str)"),
    "number": (b"42", "not a JSON object (int)"),
    "null": (b"null", "not a JSON object (NoneType)"),
    "not JSON": (b'{"type": "step", "step": 1,', "not valid JSON"),
    "step null": (b'{"type": "step", "step": null}', '"step" is not a non-negative integer (null)'),
    "step string": (b'{"type": "step", "step": "x"}', '"step" is not a non-negative integer ("x")'),
    "step float": (b'{"type": "step", "step": 1.5}', '"step" is not a non-negative integer (1.5)'),
    "step bool": (b'{"type": "step", "step": true}', '"step" is not a non-negative integer (true)'),
    "step negative": (b'{"type": "step", "step": -3}', '"step" is not a non-negative integer (-3)'),
    "step missing": (
        b'{"type": "step", "loss": 1.0}',
        '"step" is not a non-negative integer (null)',
    ),
    "type missing": (b'{"step": 3}', 'no string "type"'),
    "type number": (b'{"type": 7, "step": 3}', 'no string "type"'),
    "deep nesting": (b"[" * 100_000, "not valid JSON"),
    "huge int": (b'{"type": "step", "step": 1' + b"0" * 5000 + b"}", "not valid JSON"),
    "stray CR": (b'{"type": "step",\r "step": 1', "not valid JSON"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_line_is_skipped_counted_and_named(tmp_path: Path, name: str) -> None:
    bad, why = MALFORMED[name]
    path = _write(tmp_path, _line(START) + bad + b"\n" + _line(EVAL))
    reader = EventReader(tmp_path)
    events = reader.read()
    assert events == [START, EVAL]  # the good lines around it, untouched
    assert reader.skipped == 1 and reader.problems == [f"line 2: {why}"]
    assert reader.offset == path.stat().st_size and reader.pending == 0
    assert reader.warning() == f"{path}: skipped 1 malformed line (line 2: {why})"
    assert reader.read() == [] and reader.skipped == 1  # consumed once, counted once


def test_wrong_typed_fields_are_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    step = {"type": "step", "step": 5, "loss": "x", "lr": 0.1, "tokens_per_s": None}
    sample = {
        "type": "sample",
        "step": 5,
        "index": 0,
        "src": ["a", "b"],
        "ref": ["b"],
        "hyp": [1],
        "attention": [[0.5, 0.5], [1.0]],
    }
    done = {"type": "done", "step": 5, "reason": "finished", "best": [1, 2], "time": "noon"}
    evl = {
        "type": "eval",
        "step": 5,
        "bleu": "high",
        "bleu_by_length": [{"bucket": "1-5", "bleu": "x"}],
    }
    _write(tmp_path, b"".join(_line(e) for e in (step, sample, done, evl)))
    events, reader = read_event_log(tmp_path)
    assert events == [
        {"type": "step", "step": 5, "lr": 0.1, "tokens_per_s": None},  # null = non-finite: kept
        {"type": "sample", "step": 5, "index": 0, "src": ["a", "b"], "ref": ["b"]},
        {"type": "done", "step": 5, "reason": "finished"},
        {"type": "eval", "step": 5},
    ]
    assert reader.skipped == 0 and reader.dropped == 1 + 2 + 2 + 2
    assert "ignored 7 fields of the wrong type" in reader.warning()


def test_unknown_types_and_fields_pass_through() -> None:
    event = {"type": "future", "step": 1, "anything": {"x": [1]}}
    assert check_event(event) == (event, "", 0)
    rectangular = {"type": "sample", "step": 1, "attention": [[1, 0.0], [0.5, 0.5]], "src": []}
    assert check_event(rectangular) == (rectangular, "", 0)


def test_a_partial_last_line_is_not_consumed_until_its_newline(tmp_path: Path) -> None:
    first = _line(START)
    half = b'{"type": "eval", "step": 10, "split": "dev", '
    path = _write(tmp_path, first + half)
    reader = EventReader(tmp_path)
    assert reader.read() == [START]
    assert reader.offset == len(first) and reader.pending == len(half)
    assert reader.read() == [] and reader.offset == len(first)  # still waiting, nothing skipped
    _write(tmp_path, b'"bleu": 12.5}\n')
    assert reader.read() == [{"type": "eval", "step": 10, "split": "dev", "bleu": 12.5}]
    assert reader.offset == path.stat().st_size and reader.pending == 0 and reader.skipped == 0
    # A partial line that turns out malformed is counted once, when it is complete.
    _write(tmp_path, b"[1, ")
    assert reader.read() == [] and reader.skipped == 0
    _write(tmp_path, b"2]\n")
    assert (
        reader.read() == []
        and reader.skipped == 1
        and reader.problems == ["line 3: not a JSON object (list)"]
    )


def test_the_offset_api_keeps_working(tmp_path: Path) -> None:
    _write(tmp_path, _line(START) + b"\xff\n" + _line(EVAL) + b'{"type"')
    events, offset = read_events(tmp_path)
    assert events == [START, EVAL]
    assert read_events(tmp_path, offset) == ([], offset)
    assert read_events(tmp_path / "missing") == ([], 0)


def test_a_writer_restarted_after_a_torn_line_does_not_glue_its_events_to_it(
    tmp_path: Path,
) -> None:
    _write(tmp_path, _line(START) + b'{"type": "step", "st')  # killed mid-line
    log = EventLog(tmp_path)
    log.emit("start", 3, resumed=True)
    log.close()
    events, reader = read_event_log(tmp_path)
    assert [(e["type"], e["step"]) for e in events] == [("start", 0), ("start", 3)]
    assert reader.skipped == 1


def test_an_unreadable_log_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").mkdir()  # reading it fails with an OS error
    reader = EventReader(tmp_path)
    assert reader.read() == [] and reader.skipped == 0
    assert "cannot read it" in reader.warning()


def _complete_lines(data: bytes) -> list[bytes]:
    """The reference: complete, non-blank lines (split on \\n only), independent of the reader."""
    return [line for line in data[: data.rfind(b"\n") + 1].split(b"\n")[:-1] if line.strip()]


_LINES = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [_line(START), _line(EVAL), b"\n", b"\r", b"[1, 2]\n", b'{"type": "step", "step": null}\n']
    ),
    st.builds(
        lambda e: _line(e),
        st.fixed_dictionaries({"type": st.text(max_size=5), "step": st.integers(-2, 9)}),
    ),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunks=st.lists(_LINES, max_size=12))
def test_random_bytes_never_raise_and_chunked_reads_match_one_read(
    tmp_path_factory, chunks: list[bytes]
) -> None:
    run_dir = tmp_path_factory.mktemp("fuzz")
    incremental = EventReader(run_dir)
    seen: list[dict] = []
    for chunk in chunks:  # the writer appends a chunk, the follower polls
        _write(run_dir, chunk)
        seen += incremental.read()
        assert incremental.offset <= (run_dir / "events.jsonl").stat().st_size
    data = b"".join(chunks)
    whole, reader = read_event_log(run_dir)
    assert seen == whole
    assert incremental.skipped == reader.skipped and incremental.dropped == reader.dropped
    assert len(whole) + reader.skipped == len(_complete_lines(data))
    assert reader.offset == data.rfind(b"\n") + 1 and reader.pending == len(data) - reader.offset
    assert all(isinstance(e["type"], str) and isinstance(e["step"], int) for e in whole)


# -- the run list and `attnlab runs` ---------------------------------------------------------


def _bad_run(root: Path, name: str = "bad") -> Path:
    run_dir = root / name
    lines = [
        _line(START),
        b'{"type": "step", "step": 4, "tokens_per_s": \xff}',
        b"[1, 2]",
        b'{"type": "step", "step": null, "loss": 1.0}',
        b'{"type": "step", "step": "x"}',
        _line({"type": "step", "step": 10, "loss": 2.0, "tokens_per_s": 321.0, "elapsed_s": 3.0}),
        _line(EVAL),
        _line({"type": "done", "step": 10, "reason": "finished", "elapsed_s": 4.0}),
    ]
    _write(run_dir, b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
    return run_dir


def test_summarize_run_skips_bad_lines_and_says_so(tmp_path: Path) -> None:
    run_dir = _bad_run(tmp_path)
    summary = summarize_run(run_dir)
    assert (summary.params, summary.steps, summary.best_bleu, summary.best_exact_match) == (
        1234,
        10,
        12.5,
        0.25,
    )
    assert (summary.tokens_per_s, summary.wall_s, summary.status) == (321.0, 4.0, "finished")
    assert summary.skipped_lines == 4
    assert summary.warnings == [
        f"{run_dir / 'events.jsonl'}: skipped 4 malformed lines (line 2: invalid UTF-8; "
        "line 3: not a JSON object (list); "
        'line 4: "step" is not a non-negative integer (null), ...)'
    ]


def test_a_truncated_last_line_counts_once_the_run_has_ended(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    _write(
        run_dir,
        _line(START) + _line({"type": "done", "step": 0, "reason": "stopped"}) + b'{"type": "ste',
    )
    summary = summarize_run(run_dir)
    assert summary.status == "stopped" and summary.skipped_lines == 1
    assert "line 3: truncated (no newline)" in summary.warnings[0]
    running = tmp_path / "s"
    _write(running, _line(START) + b'{"type": "ste')  # being written: not a problem yet
    assert summarize_run(running).skipped_lines == 0 and summarize_run(running).warnings == []


def test_list_runs_survives_bad_configs_and_logged_pids(tmp_path: Path) -> None:
    _bad_run(tmp_path, "a")
    (tmp_path / "a" / "config.toml").write_bytes(b'name = "\xff"\n')
    b = tmp_path / "b"
    (b).mkdir()
    (b / "config.toml").write_text('data = 5\nmodel = "x"\nname = "b"\n')
    _write(b, _line({**START, "pid": 2**40, "host": os.uname().nodename}))
    runs = {r.path.name: r for r in list_runs(tmp_path)}
    assert set(runs) == {"a", "b"}
    assert "config.toml" in runs["a"].warnings[0] and runs["a"].status == "finished"
    assert runs["b"].status == "error" and runs["b"].warnings == []  # that pid cannot be alive


def test_cli_runs_with_bad_lines_shows_the_table_and_a_warning(tmp_path: Path) -> None:
    _bad_run(tmp_path, "bad-run")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "bad-run" in result.output and "finished" in result.output and "12.5" in result.output
    assert "Traceback" not in result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "bad-run/events.jsonl: skipped 4 malformed lines" in warnings[0]


# -- a deleted run directory is not re-created by the trainer --------------------------------


def test_require_run_dir_refuses_a_run_dir_without_config(tmp_path: Path) -> None:
    with pytest.raises(AttnlabError, match="run directory was deleted"):
        require_run_dir(tmp_path / "gone")
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "config.toml").write_text('name = "here"\n')
    require_run_dir(tmp_path / "here")


def test_the_trainer_does_not_recreate_a_run_dir_deleted_under_it(
    tmp_path: Path, tiny_config
) -> None:
    from attnlab.train.trainer import Trainer

    run_dir = tmp_path / "run"

    def delete_it(event: dict) -> None:
        if event["type"] == "step" and event["step"] == 1:
            shutil.rmtree(run_dir)

    config = replace(tiny_config, train=replace(tiny_config.train, max_steps=6, eval_every=3))
    with pytest.raises(AttnlabError, match="run directory was deleted"):
        Trainer(config, run_dir, on_event=delete_it, device="cpu").run()
    assert not run_dir.exists()


def test_inspection_fields_of_eval_are_type_checked() -> None:
    good = {
        "type": "eval", "step": 4, "aer": 0.25, "alignment_accuracy_by_layer": [0.5, None],
        "attention_entropy": {"cross": [[1.0, 0.5], [0.7, None]], "enc_self": []},
    }
    assert check_event(good) == (good, "", 0)
    bad = {
        "type": "eval", "step": 4, "aer": "0.25", "alignment_accuracy_by_layer": [0.5, "x"],
        "attention_entropy": {"cross": [1.0, 0.5]}, "bleu": 3.0,
    }
    kept, why, dropped = check_event(bad)
    assert why == "" and dropped == 3
    assert kept == {"type": "eval", "step": 4, "bleu": 3.0}
