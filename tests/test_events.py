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
from attnlab.events import EventLog, EventReader, check_event, read_event_log, read_events
from attnlab.runs import list_runs, require_run_dir, summarize_run

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
    # `attnlab export --tensorboard` died on it (ValueError: Value out of range)
    "step beyond int64": (
        b'{"type": "step", "step": 9223372036854775808}',
        '"step" is beyond int64 (9223372036854775808)',
    ),
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


def test_non_finite_numbers_are_wrong_values_not_scores(tmp_path: Path) -> None:
    # The writer never writes NaN/Infinity (allow_nan=False, null instead), but json.loads
    # accepts them and 1e999 overflows to inf: a damaged line must not become "best chrF inf".
    raw = (
        b'{"type": "eval", "step": 20, "split": "dev", "bleu": NaN, "chrf": 1e999, '
        b'"loss": -Infinity, "exact_match": 0.5}\n'
        b'{"type": "sample", "step": 20, "index": 0, "attention": [[0.5, NaN]]}\n'
    )
    run_dir = tmp_path / "r"
    _write(run_dir, _line(START) + _line(EVAL) + raw)
    events, reader = read_event_log(run_dir)
    assert events[2] == {"type": "eval", "step": 20, "split": "dev", "exact_match": 0.5}
    assert events[3] == {"type": "sample", "step": 20, "index": 0}
    assert reader.dropped == 4 and "ignored 4 fields of the wrong type" in reader.warning()
    summary = summarize_run(run_dir)
    assert (summary.best_bleu, summary.best_chrf) == (12.5, None)


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


@pytest.mark.parametrize(
    ("field", "value"),
    [("bleu", 1e308), ("bleu", -3.0), ("chrf", 100.5), ("exact_match", 25.0), ("aer", -0.1)],
)
def test_a_score_outside_its_range_is_ignored(tmp_path: Path, field: str, value: float) -> None:
    # sacrebleu's BLEU and chrF lie in [0, 100], exact match / alignment accuracy / AER in
    # [0, 1]: anything else is a damaged line and must not become the run's "best".
    run_dir = tmp_path / "r"
    bad = {"type": "eval", "step": 20, "split": "dev", field: value}
    _write(run_dir, _line(START) + _line(EVAL) + _line(bad))
    events, reader = read_event_log(run_dir)
    assert events[2] == {"type": "eval", "step": 20, "split": "dev"} and reader.dropped == 1
    summary = summarize_run(run_dir)
    assert (summary.best_bleu, summary.best_exact_match) == (12.5, 0.25)
    edge = {"type": "eval", "step": 30, "bleu": 100.0, "chrf": 0.0, "exact_match": 1.0}
    _write(run_dir, _line(edge))
    assert read_event_log(run_dir)[0][3] == edge  # the ends of the ranges are scores


def test_a_huge_number_in_one_log_keeps_every_column_at_80(tmp_path: Path) -> None:
    _bad_run(tmp_path, "good")
    huge = {"type": "eval", "step": 10**18, "split": "dev", "bleu": 1e308, "chrf": 40.0}
    done = {"type": "step", "step": 10**18, "tokens_per_s": 1e300}
    _write(tmp_path / "huge", _line(START) + _line(huge) + _line(done))
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if " run " in line).split()
    assert {"steps", "BLEU", "chrF", "EM", "tok/s", "status"} <= set(header)
    rows = {line.split()[0]: line.split() for line in lines[4:6]}
    status = header.index("status") - len(header)  # the task cell is empty: count from the end
    steps, bleu = header.index("steps") - len(header), header.index("BLEU") - len(header)
    speed = header.index("tok/s") - len(header)
    assert (rows["good"][steps], rows["good"][bleu]) == ("10", "12.5")  # not hidden by the other
    assert (rows["huge"][steps], rows["huge"][speed]) == ("1e+18", "1e+300")
    assert rows["huge"][bleu] == "–"  # not a BLEU at all: ignored (see the next test)
    assert rows["good"][status] == "finished"


def test_runs_of_a_run_directory_points_to_its_parent(tmp_path: Path) -> None:
    run_dir = _bad_run(tmp_path, "r")  # a run directory, given where the runs folder goes
    result = CliRunner().invoke(cli, ["runs", str(run_dir)])
    assert result.exit_code == 0 and "Traceback" not in result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    parent = run_dir.resolve().parent
    assert notes == [
        f"note: {run_dir} is a run directory itself; its runs folder is {parent} "
        f"(attnlab runs {parent})"
    ]
    assert not any(line.startswith("note: ") for line in _runs_output(tmp_path))


def _runs_output(directory: Path) -> list[str]:
    return CliRunner().invoke(cli, ["runs", str(directory)]).output.splitlines()


def test_cli_runs_with_bad_lines_shows_the_table_and_a_warning(tmp_path: Path) -> None:
    _bad_run(tmp_path, "bad-run")
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "bad-run" in result.output and "finished" in result.output and "12.5" in result.output
    assert "Traceback" not in result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "bad-run/events.jsonl: skipped 4 malformed lines" in warnings[0]


def test_cli_runs_folds_many_runs_warnings_into_one_line_and_lists_them_with_verbose(
    tmp_path: Path,
) -> None:
    """#43 item 13: 30 broken runs are one folded line after the table (as the lab's Runs tab
    shows them), not 30 lines; --verbose lists each in full."""
    names = [f"r{i:02d}" for i in range(30)]
    for name in names:
        _bad_run(tmp_path, name)
    first = list_runs(tmp_path)[0].path.name
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(cli, ["runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    folded = [line for line in lines if "malformed" in line]
    assert folded == [f"⚠ {first}: skipped 4 malformed lines (+29 more) (--verbose lists them)"]
    assert lines.index(folded[0]) > max(i for i, line in enumerate(lines) if "finished" in line)
    verbose = runner.invoke(cli, ["runs", str(tmp_path), "--verbose"])
    assert verbose.exit_code == 0, verbose.output
    listed = [line for line in verbose.output.splitlines() if line.startswith("warning:")]
    assert len(listed) == 30 and "⚠" not in verbose.output
    assert {line.split("/events.jsonl")[0].rsplit("/", 1)[-1] for line in listed} == set(names)


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


# -- typed events ------------------------------------------------------------------------------

from attnlab.train import events as ev  # noqa: E402

# One event of every type with every declared field set to something other than its default,
# written as today's trainer writes it: the expected JSON is spelled out by hand (key order
# included), independent of the dataclasses.
TYPED_CASES: list[tuple[ev.Event, dict]] = [
    (
        ev.Start(
            0,
            time=1.5,
            run_dir="runs/r",
            name="r",
            config={"train": {"max_steps": 9}},
            params=1234,
            device="cpu (1 thread)",
            resumed=True,
            max_steps=9,
            roles={"arch": "rnn", "cross": "bahdanau"},
            pid=42,
            host="vm",
            dropped_pairs=3,
            world_size=2,
        ),
        {
            "type": "start",
            "time": 1.5,
            "step": 0,
            "run_dir": "runs/r",
            "name": "r",
            "config": {"train": {"max_steps": 9}},
            "params": 1234,
            "device": "cpu (1 thread)",
            "resumed": True,
            "max_steps": 9,
            "roles": {"arch": "rnn", "cross": "bahdanau"},
            "pid": 42,
            "host": "vm",
            "dropped_pairs": 3,
            "world_size": 2,
        },
    ),
    (
        ev.Step(
            5,
            time=2.0,
            loss=1.25,
            lr=0.002,
            tokens_per_s=900.5,
            mean_tokens_per_s=850.25,
            tf_ratio=0.5,
            grad_norm=None,
            elapsed_s=3.0,
            tokens=640,
            padding=0.125,
            world_size=2,
        ),
        {
            "type": "step",
            "time": 2.0,
            "step": 5,
            "loss": 1.25,
            "lr": 0.002,
            "tokens_per_s": 900.5,
            "mean_tokens_per_s": 850.25,
            "tf_ratio": 0.5,
            "grad_norm": None,
            "elapsed_s": 3.0,
            "tokens": 640,
            "padding": 0.125,
            "world_size": 2,
        },
    ),
    (
        ev.Eval(
            10,
            time=3.0,
            split="test",
            n=16,
            loss=2.5,
            ppl=12.18,
            bleu=12.5,
            chrf=30.0,
            bleu_signature="b|sig",
            chrf_signature="c|sig",
            bleu_lc=13.0,
            bleu_lc_signature="lc|sig",
            exact_match=0.25,
            alignment_accuracy=0.75,
            aer=0.25,
            bleu_by_length=[{"bucket": "1-10", "n": 16, "bleu": 12.5}],
            attention_entropy={"cross": [[0.5, 1.0]]},
            alignment_accuracy_by_layer=[0.75],
            best=True,
            elapsed_s=4.0,
        ),
        {
            "type": "eval",
            "time": 3.0,
            "step": 10,
            "split": "test",
            "n": 16,
            "loss": 2.5,
            "ppl": 12.18,
            "bleu": 12.5,
            "chrf": 30.0,
            "bleu_signature": "b|sig",
            "chrf_signature": "c|sig",
            "bleu_lc": 13.0,
            "bleu_lc_signature": "lc|sig",
            "exact_match": 0.25,
            "alignment_accuracy": 0.75,
            "aer": 0.25,
            "bleu_by_length": [{"bucket": "1-10", "n": 16, "bleu": 12.5}],
            "attention_entropy": {"cross": [[0.5, 1.0]]},
            "alignment_accuracy_by_layer": [0.75],
            "best": True,
            "elapsed_s": 4.0,
        },
    ),
    (
        ev.Sample(
            10,
            time=3.1,
            index=1,
            src=["a", "b"],
            ref=["b", "a"],
            hyp=["b"],
            attention=[[0.25, 0.75]],
        ),
        {
            "type": "sample",
            "time": 3.1,
            "step": 10,
            "index": 1,
            "src": ["a", "b"],
            "ref": ["b", "a"],
            "hyp": ["b"],
            "attention": [[0.25, 0.75]],
        },
    ),
    (
        ev.Checkpoint(10, time=3.2, tag="best", path="runs/r/checkpoints/best"),
        {
            "type": "checkpoint",
            "time": 3.2,
            "step": 10,
            "tag": "best",
            "path": "runs/r/checkpoints/best",
        },
    ),
    (
        ev.Error(11, time=3.3, message="loss became nan", kind="nan"),
        {"type": "error", "time": 3.3, "step": 11, "message": "loss became nan", "kind": "nan"},
    ),
    (
        ev.Done(
            11,
            time=3.4,
            reason=ev.DoneReason.EARLY_STOP,
            best={"bleu": 12.5, "step": 10},
            elapsed_s=5.0,
            tokens_per_s=None,
        ),
        {
            "type": "done",
            "time": 3.4,
            "step": 11,
            "reason": "early-stop",
            "best": {"bleu": 12.5, "step": 10},
            "elapsed_s": 5.0,
            "tokens_per_s": None,
        },
    ),
    (
        ev.Control(4, time=1.9, command=ev.ControlCommand.PAUSE),
        {"type": "control", "time": 1.9, "step": 4, "command": "pause"},
    ),
    (
        ev.Note(0, time=1.6, message="torch.compile failed; training eagerly"),
        {
            "type": "note",
            "time": 1.6,
            "step": 0,
            "message": "torch.compile failed; training eagerly",
        },
    ),
]


def test_the_cases_cover_every_event_type() -> None:
    assert sorted(type(event).TYPE for event, _ in TYPED_CASES) == sorted(ev.EVENT_TYPES)


@pytest.mark.parametrize("event, expected", TYPED_CASES, ids=[e.type for e, _ in TYPED_CASES])
def test_every_event_type_round_trips_to_json_and_back(event: ev.Event, expected: dict) -> None:
    assert event.to_json() == expected
    assert list(event.to_json()) == list(expected)  # the key order written today
    assert event.to_line() == json.dumps(expected, ensure_ascii=False)
    assert ev.Event.from_json(event.to_json()) == event
    assert ev.Event.from_json(event.to_line()) == event  # from a line (str) ...
    assert ev.Event.from_json(event.to_line().encode() + b"\n") == event  # ... or its bytes
    again = ev.Event.from_json(expected)
    assert type(again) is type(event) and again.to_json() == expected


def test_the_keyword_form_builds_the_same_event(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    seen: list = []
    log.on_event = seen.append
    by_words = log.emit("checkpoint", 10, tag="best", path="p")
    by_object = log.emit(ev.Checkpoint(10, tag="best", path="p"))
    log.close()
    assert type(by_words) is ev.Checkpoint and seen == [by_words, by_object]
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [e.to_json() for e in seen]
    keys = ["type", "time", "step", "tag", "path"]
    assert [list(json.loads(line)) for line in lines] == [keys, keys]
    with pytest.raises(ValueError, match="unknown event type"):
        log.emit("bogus", 1)


def test_unknown_fields_and_types_survive_a_read_and_a_write() -> None:
    # Fields of newer writers (or other branches).
    line = {
        "type": "eval",
        "time": 3.0,
        "step": 10,
        "split": "dev",
        "bleu": 12.5,
        "head_importance": [1.5, 0.25],
        "gold_aer": 0.125,
        "best": True,
    }
    event = ev.Event.from_json(line)
    assert isinstance(event, ev.Eval) and event.bleu == 12.5 and event.best is True
    assert event.extra == {"head_importance": [1.5, 0.25], "gold_aer": 0.125}
    assert event.metric("gold_aer") == 0.125 and event.metric("bleu") == 12.5
    assert event.metric("nothing") is None
    out = event.to_json()
    assert {k: out[k] for k in line} == line  # every given field written back, unchanged
    assert ev.Event.from_json(event.to_line()) == event
    # A start event with a field this version does not know, and a type it does not know.
    start = ev.Event.from_json({"type": "start", "step": 0, "gpu_name": "H200", "params": 5})
    assert isinstance(start, ev.Start) and start.extra == {"gpu_name": "H200"}
    assert start.to_json()["gpu_name"] == "H200"
    future = {"type": "future", "time": 1.0, "step": 2, "kind": "x", "anything": {"x": [1]}}
    unknown = ev.Event.from_json(future)
    assert isinstance(unknown, ev.Unknown) and unknown.type == "future"
    assert unknown.to_json() == future and list(unknown.to_json()) == list(future)


def test_from_json_is_tolerant_like_the_reader() -> None:
    for bad, _ in MALFORMED.values():
        assert ev.Event.from_json(bad) is None  # the reader's malformed lines: None, no raise
    step = ev.Event.from_json({"type": "step", "step": 5, "loss": "x", "lr": 0.1})
    assert isinstance(step, ev.Step) and step.loss is None and step.lr == 0.1  # default
    done = ev.Event.from_json({"type": "done", "step": 5, "reason": 5, "best": [1]})
    assert isinstance(done, ev.Done) and done.reason is None and done.best == {}
    newer = ev.Event.from_json({"type": "done", "step": 5, "reason": "preempted"})
    assert isinstance(newer, ev.Done) and newer.reason == "preempted"  # kept as text
    assert ev.run_status(newer.reason) == "preempted" and ev.exit_code("preempted") == 1
    control = ev.Event.from_json({"type": "control", "step": 1, "command": "resume"})
    assert isinstance(control, ev.Control) and control.command is ev.ControlCommand.RESUME


def test_events_answer_the_old_dict_lookups_for_old_callbacks() -> None:
    step = ev.Step(3, loss=1.5, extra={"later": 1})
    assert step["type"] == "step" and step["step"] == 3 and step["loss"] == 1.5
    assert step.get("later") == 1 and step.get("missing", "d") == "d"
    assert ev.Control(1, command=ev.ControlCommand.STOP)["command"] == "stop"


# The run status of each done reason, by hand (the lab's Runs view and `attnlab runs`).
EXPECTED_STATUS = {
    "finished": ("finished", 0),
    "early-stop": ("finished", 0),
    "stopped": ("stopped", 0),
    "interrupted": ("interrupted", 130),
    "error": ("error", 1),
}


@pytest.mark.parametrize("reason", list(ev.DoneReason))
def test_the_done_reason_to_status_mapping_is_total(reason: ev.DoneReason) -> None:
    assert reason in ev.DONE_STATUS and reason in ev.DONE_EXIT_CODES
    assert isinstance(reason.status, ev.RunStatus)
    assert (reason.status.value, reason.exit_code) == EXPECTED_STATUS[reason.value]
    assert ev.run_status(reason.value) == reason.status  # from the text on disk too
    assert ev.exit_code(reason.value) == reason.exit_code


def test_every_done_reason_is_expected_and_every_status_reachable() -> None:
    assert {r.value for r in ev.DoneReason} == set(EXPECTED_STATUS)
    # running and incomplete come from the lock and the start event, not a done reason
    reached = set(ev.DONE_STATUS.values()) | {ev.RunStatus.RUNNING, ev.RunStatus.INCOMPLETE}
    assert reached == set(ev.RunStatus)


def test_control_words_are_one_enum_and_write_control_is_the_one_writer(tmp_path: Path) -> None:
    from attnlab import launch as launcher
    from attnlab.runs import write_control
    from attnlab.train.distributed import CONTROL_CODES, CONTROL_WORDS

    assert launcher.write_control is write_control
    assert [c.value for c in ev.ControlCommand] == ["pause", "resume", "save", "stop"]
    assert set(CONTROL_CODES) == {None, *ev.ControlCommand}
    assert len(set(CONTROL_CODES.values())) == len(CONTROL_CODES)  # codes are one-to-one
    assert all(CONTROL_WORDS[CONTROL_CODES[c]] is c for c in ev.ControlCommand)
    for command in ev.ControlCommand:
        write_control(tmp_path / "run", command.value)
        assert (tmp_path / "run" / "control").read_text() == f"{command.value}\n"
    for bad in ("explode", "interrupt", "PAUSE "):
        with pytest.raises(AttnlabError, match="unknown control command .*valid: pause, resume"):
            write_control(tmp_path / "run", bad)
    assert (tmp_path / "run" / "control").read_text() == "stop\n"  # left as it was


# An events.jsonl as the trainer writes it today (before typed events): the typed readers
# read it the same, and writing what they read gives back the same bytes.
OLD_LOG = b"".join(
    line.encode() + b"\n"
    for line in [
        '{"type": "start", "time": 100.0, "step": 0, "run_dir": "runs/old", "name": "old", '
        '"config": {"model": {"arch": "rnn", "attention": "luong-dot"}, '
        '"train": {"max_steps": 20}}, '
        '"params": 4321, "device": "cpu (1 thread)", "resumed": false, "max_steps": 20, '
        '"roles": {"arch": "rnn", "cross": "luong-dot"}, "pid": 2147483647, "host": "elsewhere", '
        '"dropped_pairs": 0, "world_size": 1}',
        '{"type": "step", "time": 101.0, "step": 10, "loss": 2.5, "lr": 0.002, '
        '"tokens_per_s": 1500.5, "tf_ratio": 1.0, "grad_norm": 0.75, "elapsed_s": 1.0, '
        '"tokens": 1500, "padding": 0.125, "world_size": 1}',
        '{"type": "eval", "time": 102.0, "step": 10, "split": "dev", "n": 16, "loss": 2.25, '
        '"ppl": 9.49, "bleu": 20.5, "chrf": 40.25, "bleu_signature": "s", "chrf_signature": "c", '
        '"bleu_lc": 21.0, "bleu_lc_signature": "l", "exact_match": 0.5, '
        '"alignment_accuracy": null, '
        '"bleu_by_length": [{"bucket": "1-10", "n": 16, "bleu": 20.5}], '
        '"best": true, "elapsed_s": 1.5}',
        '{"type": "sample", "time": 102.1, "step": 10, "index": 0, "src": ["a", "b"], '
        '"ref": ["b", "a"], "hyp": ["b", "a"], "attention": [[0.25, 0.75], [0.5, 0.5]]}',
        '{"type": "checkpoint", "time": 102.2, "step": 10, "tag": "best", "path": "runs/old/b"}',
        '{"type": "control", "time": 102.3, "step": 12, "command": "pause"}',
        '{"type": "control", "time": 105.3, "step": 12, "command": "resume"}',
        '{"type": "step", "time": 106.0, "step": 20, "loss": 2.0, "lr": 0.001, '
        '"tokens_per_s": 1600.0, "tf_ratio": 1.0, "grad_norm": null, "elapsed_s": 2.5, '
        '"tokens": 3000, "padding": 0.25, "world_size": 1}',
        '{"type": "eval", "time": 106.5, "step": 20, "split": "dev", "n": 16, "loss": 2.5, '
        '"ppl": 12.18, "bleu": 18.0, "chrf": 41.0, "bleu_signature": "s", "chrf_signature": "c", '
        '"bleu_lc": 18.5, "bleu_lc_signature": "l", "exact_match": 0.25, '
        '"alignment_accuracy": null, "bleu_by_length": [], "best": false, "elapsed_s": 3.0}',
        '{"type": "checkpoint", "time": 106.6, "step": 20, "tag": "last", "path": "runs/old/l"}',
        '{"type": "done", "time": 106.7, "step": 20, "reason": "stopped", '
        '"best": {"bleu": 20.5, "step": 10}, "elapsed_s": 3.25, "tokens_per_s": 1550.0}',
    ]
)


def test_an_old_event_log_reads_the_same(tmp_path: Path) -> None:
    from attnlab.tui.follow import STOPPED, RunFollower

    run_dir = tmp_path / "old"
    _write(run_dir, OLD_LOG)
    events, reader = ev.read_typed_log(run_dir)
    assert reader.skipped == 0 and reader.dropped == 0
    assert [e.type for e in events] == [
        "start",
        "step",
        "eval",
        "sample",
        "checkpoint",
        "control",
        "control",
        "step",
        "eval",
        "checkpoint",
        "done",
    ]
    # Byte-compatible: what the typed events write is each line as it was.
    assert b"".join(e.to_line().encode() + b"\n" for e in events) == OLD_LOG
    start, done = events[0], events[-1]
    assert isinstance(start, ev.Start) and start.roles == {"arch": "rnn", "cross": "luong-dot"}
    assert isinstance(done, ev.Done) and done.reason is ev.DoneReason.STOPPED

    summary = summarize_run(run_dir)  # `attnlab runs` / the Runs view
    assert (summary.params, summary.steps, summary.status) == (4321, 20, "stopped")
    assert (summary.best_bleu, summary.best_chrf, summary.best_exact_match) == (20.5, 41.0, 0.5)
    # #44: the done event's mean over training time, not the last window's 1600
    assert (summary.tokens_per_s, summary.wall_s) == (1550.0, 3.25)
    assert summary.attention == "luong-dot" and summary.warnings == []

    follower = RunFollower(run_dir)  # the lab's Train view
    assert [e.type for e in follower.poll()] == [e.type for e in events]
    assert follower.state == STOPPED and follower.done_reason == "stopped"
    assert (follower.name, follower.params) == ("old", 4321)
    assert (follower.max_steps, follower.step) == (20, 20)
    assert follower.curves.train_step == [10, 20] and follower.curves.train_loss == [2.5, 2.0]
    assert follower.curves.eval_step == [10, 20] and follower.curves.bleu == [20.5, 18.0]
    assert follower.curves.exact_match == [50.0, 25.0]
    assert follower.last_eval is not None and follower.last_eval.bleu == 18.0
    assert follower.best == {"bleu": 20.5, "step": 10}  # the done event's
    assert [(s.src, s.hyp, s.correct) for s in follower.samples] == [(["a", "b"], ["b", "a"], True)]
    assert follower.checkpoints == {"best": "runs/old/b", "last": "runs/old/l"}
    assert follower.elapsed_s == 3.25
    assert follower.world_size == 1  # an old log has no world_size: one process
    assert [line for line in follower.log if "acknowledged" in line] == [
        "step     12  pause acknowledged",
        "step     12  resume acknowledged",
    ]


def test_the_cli_progress_reads_typed_events_and_dicts_alike(capsys) -> None:
    from attnlab.cli.train import TrainProgress

    progress = TrainProgress(max_steps=10, start_step=0, quiet=True)
    progress.on_event(ev.Start(0, dropped_pairs=2))
    progress.on_event({"type": "error", "step": 3, "message": "boom\nmore"})
    progress.on_event(ev.Error(4, message="disk full"))
    progress.on_event({"type": "error", "step": "bad"})  # malformed: ignored
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("note: dropped 2 training pairs longer than")
    assert err[1].startswith("error: boom") and err[2] == "error: disk full" and len(err) == 3


def test_inspection_fields_of_eval_are_type_checked() -> None:
    good = {
        "type": "eval",
        "step": 4,
        "aer": 0.25,
        "alignment_accuracy_by_layer": [0.5, None],
        "attention_entropy": {"cross": [[1.0, 0.5], [0.7, None]], "enc_self": []},
    }
    assert check_event(good) == (good, "", 0)
    bad = {
        "type": "eval",
        "step": 4,
        "aer": "0.25",
        "alignment_accuracy_by_layer": [0.5, "x"],
        "attention_entropy": {"cross": [1.0, 0.5]},
        "bleu": 3.0,
    }
    kept, why, dropped = check_event(bad)
    assert why == "" and dropped == 3
    assert kept == {"type": "eval", "step": 4, "bleu": 3.0}


# An eval line as the trainer writes it since the interpretability fields (evaluate_split's
# key order; alignment_accuracy_by_layer only with gold alignments), spelled out by hand.
EVAL_HEAD = (
    '{"type": "eval", "time": 5.0, "step": 8, "split": "dev", "n": 4, "loss": 1.5, '
    '"ppl": 4.48, "bleu": 10.0, "chrf": 20.0, "bleu_signature": "s", "chrf_signature": "c", '
    '"bleu_lc": 10.5, "bleu_lc_signature": "l", "exact_match": 0.25, '
)
EVAL_LINES = {
    "no gold": EVAL_HEAD + '"alignment_accuracy": null, "aer": null, "bleu_by_length": [], '
    '"attention_entropy": {"enc_self": [[0.5, 0.25]], "cross": [[1.0, null]]}, '
    '"best": true, "elapsed_s": 2.0}',
    "gold": EVAL_HEAD + '"alignment_accuracy": 0.75, "aer": 0.25, "bleu_by_length": [], '
    '"attention_entropy": {"cross": [[1.0, 0.5], [0.25, 0.5]]}, '
    '"alignment_accuracy_by_layer": [0.5, 0.75], "best": false, "elapsed_s": 2.0}',
    "gold, no sentences": EVAL_HEAD + '"alignment_accuracy": null, "aer": null, '
    '"bleu_by_length": [], "attention_entropy": {}, "alignment_accuracy_by_layer": null, '
    '"best": false, "elapsed_s": 2.0}',
}


@pytest.mark.parametrize("case", list(EVAL_LINES))
def test_eval_inspection_fields_are_typed_and_written_back_byte_identical(case: str) -> None:
    line = EVAL_LINES[case]
    event = ev.Event.from_json(line)
    assert isinstance(event, ev.Eval) and event.extra == {}  # all of them known fields
    assert event.to_line() == line  # same keys, same order, nulls kept as nulls
    raw = json.loads(line)
    assert event.aer == raw["aer"]
    assert event.attention_entropy == raw["attention_entropy"]
    assert event.alignment_accuracy_by_layer == raw.get("alignment_accuracy_by_layer")
    # The trainer's keyword form (evaluate_split's dict, then best and elapsed_s) writes it too.
    values = {k: v for k, v in raw.items() if k not in ("type", "time", "step")}
    built = ev.make_event("eval", 8, **values)
    built.time = 5.0
    assert built.to_line() == line and built == event


def test_eval_inspection_fields_are_optional() -> None:
    # Absent (an older writer): read as None and not written; set later: written in place.
    event = ev.Event.from_json({"type": "eval", "step": 2, "bleu": 1.0, "best": False})
    assert isinstance(event, ev.Eval)
    assert (event.aer, event.attention_entropy, event.alignment_accuracy_by_layer) == (
        None,
        None,
        None,
    )
    assert not {"aer", "attention_entropy", "alignment_accuracy_by_layer"} & set(event.to_json())
    event.aer = 0.5
    keys = list(event.to_json())
    assert keys.index("alignment_accuracy") + 1 == keys.index("aer")
    # Mistyped (check_event drops them): their default, not written.
    bad = ev.Event.from_json({"type": "eval", "step": 2, "aer": "x", "attention_entropy": [1]})
    assert isinstance(bad, ev.Eval) and bad.aer is None and bad.attention_entropy is None
    assert "aer" not in bad.to_json() and "attention_entropy" not in bad.to_json()


def test_the_lab_says_how_many_processes_train_a_ddp_run(tmp_path: Path) -> None:
    from attnlab.tui.follow import RunFollower

    run_dir = tmp_path / "ddp"
    events = [
        ev.Start(0, name="ddp", params=1000, device="cpu (1 thread)", world_size=2),
        ev.Step(5, loss=2.0, lr=1e-3, tokens_per_s=900.0, world_size=2),
    ]
    _write(run_dir, b"".join(e.to_line().encode() + b"\n" for e in events))
    follower = RunFollower(run_dir)
    follower.poll()
    assert follower.world_size == 2
    assert any(
        line.endswith("1,000 parameters on cpu (1 thread) × 2 processes") for line in follower.log
    )


# -- bounded reading, special files, a log deleted while written (issue 31) -----------------


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunks=st.lists(_LINES, max_size=12))
def test_reading_in_tiny_chunks_gives_what_one_read_gives(
    tmp_path_factory, chunks: list[bytes]
) -> None:
    """READ_CHUNK of 3 bytes puts every line boundary inside and across chunks."""
    import attnlab.events.log as log_module

    run_dir = tmp_path_factory.mktemp("chunks")
    _write(run_dir, b"".join(chunks))
    whole, reader = read_event_log(run_dir)
    original = log_module.READ_CHUNK
    log_module.READ_CHUNK = 3
    try:
        small, small_reader = read_event_log(run_dir)
    finally:
        log_module.READ_CHUNK = original
    assert small == whole
    assert (small_reader.offset, small_reader.pending) == (reader.offset, reader.pending)
    assert (small_reader.skipped, small_reader.line) == (reader.skipped, reader.line)


def test_an_over_long_line_is_skipped_and_counted_without_being_held(
    tmp_path: Path, monkeypatch
) -> None:
    import attnlab.events.log as log_module

    monkeypatch.setattr(log_module, "MAX_LINE_BYTES", 80)
    monkeypatch.setattr(log_module, "READ_CHUNK", 16)
    step = {"type": "step", "step": 1}
    _write(tmp_path, _line(START) + b"x" * 100 + b"\n" + _line(step) + b"y" * 200)
    reader = EventReader(tmp_path)
    first = reader.read()
    assert [e["type"] for e in first] == ["start", "step"]
    # the unfinished 200-byte line is past the limit: skipped at once, not re-read each poll
    assert reader.skipped == 2 and reader.pending == 0
    assert reader.problems == ["line 2: longer than 80 bytes", "line 4: longer than 80 bytes"]
    assert reader.offset == (tmp_path / "events.jsonl").stat().st_size
    _write(tmp_path, b"y" * 50 + b"\n" + _line({"type": "done", "step": 1, "reason": "finished"}))
    assert [e["type"] for e in reader.read()] == ["done"]
    assert reader.skipped == 2 and reader.line == 5


def test_a_sparse_giant_log_is_read_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:
    """A 2 GB sparse events.jsonl cost `attnlab runs` and the lab 2.1 GB; here 256 MB of
    zeros with a 1 MB line limit are read with a peak of a few MB."""
    import tracemalloc

    import attnlab.events.log as log_module

    monkeypatch.setattr(log_module, "MAX_LINE_BYTES", 1 << 20)
    path = _write(tmp_path, _line(START))
    with open(path, "ab") as handle:
        handle.truncate(handle.tell() + (256 << 20))
    _write(tmp_path, b"\n" + _line({"type": "step", "step": 3}))
    tracemalloc.start()
    try:
        events, reader = read_event_log(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e["type"] for e in events] == ["start", "step"] and reader.skipped == 1
    assert peak < 16 << 20, f"peak {peak / 2**20:.0f} MB"


def test_a_fifo_as_the_log_is_a_warning_not_a_hang(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "events.jsonl")  # no writer: a plain open() waits forever
    reader = EventReader(tmp_path)
    assert reader.read() == []
    assert reader.warning().endswith(
        "cannot read it (is a FIFO, not a regular file; attnlab reads only regular files)"
    )
    with pytest.raises(AttnlabError, match="is a FIFO, not a regular file"):
        EventLog(tmp_path)  # the writer refuses it too (its open would block as well)


def test_a_log_deleted_while_written_starts_again_with_a_note(tmp_path: Path) -> None:
    """The trainer kept writing into the unlinked file and exited 0: every later event was
    lost and `attnlab runs` showed an error run with 0 steps."""
    log = EventLog(tmp_path)
    log.emit("start", 0, name="r", params=10)
    log.emit("step", 1, loss=2.0)
    (tmp_path / "events.jsonl").unlink()
    log.emit("step", 2, loss=1.5)
    log.emit("done", 2, reason="finished")
    log.close()
    events, reader = read_event_log(tmp_path)
    assert [e["type"] for e in events] == ["note", "step", "done"] and reader.skipped == 0
    assert events[0]["step"] == 2 and "events.jsonl was deleted or replaced" in events[0]["message"]
    assert log.restarted == 1
    summary = summarize_run(tmp_path)
    assert (summary.status, summary.steps) == ("finished", 2)


def test_a_log_replaced_by_a_fifo_keeps_writing_to_its_file(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.emit("start", 0, name="r")
    path = tmp_path / "events.jsonl"
    path.rename(tmp_path / "moved.jsonl")
    os.mkfifo(path)
    log.emit("step", 1, loss=2.0)  # no hang: the FIFO is not opened blocking
    log.close()
    assert b'"step"' in (tmp_path / "moved.jsonl").read_bytes()


def test_attnlab_runs_lists_runs_whose_files_are_fifos_without_hanging(tmp_path: Path) -> None:
    """A FIFO as events.jsonl, config.toml or .lock blocked `attnlab runs` (and the lab's UI
    thread) in open(); each is now a warning on its run while the others are listed."""
    good = _bad_run(tmp_path, "good")
    for name in ("events.jsonl", "config.toml", ".lock"):
        run_dir = tmp_path / f"fifo-{name.strip('.')}"
        _write(run_dir, _line(START))
        (run_dir / "config.toml").write_text('name = "x"\n')
        target = run_dir / name
        target.unlink(missing_ok=True)
        os.mkfifo(target)
    runs = {run.path.name: run for run in list_runs(tmp_path)}
    assert set(runs) == {"good", "fifo-events.jsonl", "fifo-config.toml", "fifo-lock"}
    assert any("FIFO" in w for w in runs["fifo-events.jsonl"].warnings)
    assert any("FIFO" in w for w in runs["fifo-config.toml"].warnings)
    assert runs[good.name].steps == 10
