"""The lab's pure logic: following events, launching/controlling a child, diagnostics, menus."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from _tui_support import lab_config, run_events, write_events

from attnlab.errors import AttnlabError
from attnlab.launch import TrainingProcess, run_name_for
from attnlab.runs import write_control
from attnlab.tui.diagnostics import alignment_accuracy, diagnose, row_entropy
from attnlab.tui.follow import (
    FAILED,
    FINISHED,
    PAUSED,
    RUNNING,
    STOPPED,
    RunFollower,
    format_duration,
)
from attnlab.tui.menus import check_field, config_from_form, key_in_message

# -- following events.jsonl ------------------------------------------------------------------


def test_follower_builds_curves_and_samples_from_a_hand_written_log(tmp_path: Path) -> None:
    write_events(tmp_path, run_events(steps=40, eval_every=20, done=None))
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.state == RUNNING
    assert follower.max_steps == 30  # from the start event's config
    c = follower.curves
    assert c.train_step == [5, 10, 15, 20, 25, 30, 35, 40]
    assert c.train_loss[0] == pytest.approx(3.0 * 0.9)
    assert c.eval_step == [20, 40]
    assert c.bleu == [30.0, 60.0]
    assert c.exact_match == pytest.approx([20.0, 40.0])  # logged as a fraction, plotted in percent
    assert [b["bucket"] for b in c.bleu_by_length] == ["1-5", "6-10"]
    # The samples table holds the last eval's samples only.
    assert [s.index for s in follower.samples] == [0, 1]
    assert follower.samples[0].correct and not follower.samples[1].correct
    assert follower.checkpoints == {"best": "checkpoints/best"}


def test_follower_reads_only_new_events_and_waits_for_a_partial_line(tmp_path: Path) -> None:
    events = run_events(steps=10, eval_every=100, done=None)
    write_events(tmp_path, events[:2], partial='{"type": "step", "step": 10, "lo')
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.curves.train_step == [5]
    (tmp_path / "events.jsonl").open("a").write('ss": 1.5, "elapsed_s": 1.0}\n')
    follower.poll()
    assert follower.curves.train_step == [5, 10]
    assert follower.loss == 1.5
    follower.poll()  # nothing new: nothing appended twice
    assert follower.curves.train_step == [5, 10]


@pytest.mark.parametrize(
    ("reason", "state"),
    [("finished", FINISHED), ("early-stop", FINISHED), ("stopped", STOPPED), ("error", FAILED)],
)
def test_done_reason_sets_the_final_state(tmp_path: Path, reason: str, state: str) -> None:
    write_events(tmp_path, run_events(steps=10, eval_every=100, done=reason))
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.state == state and follower.finished


def test_error_event_is_kept_for_the_status_line(tmp_path: Path) -> None:
    write_events(tmp_path, [{"type": "error", "step": 7, "message": "loss is NaN", "kind": "nan"}])
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.state == FAILED and follower.error == "loss is NaN"
    assert "ERROR (nan): loss is NaN" in follower.log[-1]


def test_pause_acknowledgement_and_eta(tmp_path: Path) -> None:
    events = run_events(steps=10, eval_every=100, done=None)
    write_events(tmp_path, [*events, {"type": "control", "step": 10, "command": "pause"}])
    follower = RunFollower(tmp_path)
    follower.poll()
    assert follower.state == PAUSED
    # 10 of 30 steps in 1.0 s -> 20 steps left at 0.1 s each.
    assert follower.eta_s() == pytest.approx(2.0)
    assert (
        format_duration(75) == "1:15"
        and format_duration(3700) == "1:01:40"
        and format_duration(None) == "--:--"
    )


# -- launching and controlling the child -----------------------------------------------------


def test_write_control_is_one_word_and_rejects_others(tmp_path: Path) -> None:
    write_control(tmp_path / "run", "stop")
    assert (tmp_path / "run" / "control").read_text() == "stop\n"
    with pytest.raises(ValueError):
        write_control(tmp_path / "run", "explode")


def test_run_names_do_not_collide(tmp_path: Path) -> None:
    config = lab_config()
    first = run_name_for(config, tmp_path, now=0)
    (tmp_path / first).mkdir()
    second = run_name_for(config, tmp_path, now=0)
    assert first.startswith("reverse-rnn-bahdanau-") and second == f"{first}-2"


def test_child_that_dies_reports_its_exit_code_and_stderr(tmp_path: Path) -> None:
    def dying(preset: Path, runs_dir: Path, name: str) -> list[str]:
        assert preset.read_text().startswith("name = ")  # the experiment was written for the child
        return [
            sys.executable,
            "-c",
            "import sys; sys.stderr.write('CUDA error: out of memory\\n'); sys.exit(3)",
        ]

    process = TrainingProcess.start(lab_config(), tmp_path, "doomed", command=dying)
    assert process.wait(timeout=30) == 3
    assert process.poll() == 3 and not process.running
    assert process.stderr_tail() == ["CUDA error: out of memory"]


# -- diagnostics -----------------------------------------------------------------------------


def test_row_entropy_matches_the_formula() -> None:
    weights = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    expected = [
        math.log(2),
        0.0,
        -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5)),
    ]
    assert row_entropy(weights) == pytest.approx(expected)


def test_diagnostics_flag_uniform_rows_and_eos_sinks() -> None:
    uniform = np.full((3, 4), 0.25)
    d = diagnose(uniform, ["a", "b", "c", "</s>"])
    assert d.mean_entropy == pytest.approx(math.log(4)) and d.uniform_entropy == pytest.approx(
        math.log(4)
    )
    assert d.eos_mass == pytest.approx(0.25)
    assert any("uniform" in w for w in d.warnings())
    sink = np.array([[0.1, 0.9], [0.2, 0.8]])
    assert diagnose(sink, ["x", "</s>"]).eos_mass == pytest.approx(0.85)
    assert any("</s>" in w for w in diagnose(sink, ["x", "</s>"]).warnings())


def test_diagonal_dominance_and_all_masked_rows() -> None:
    w = np.array([[0.7, 0.3, 0.0], [0.1, 0.8, 0.1], [0.6, 0.0, 0.4]])
    d = diagnose(w)
    assert d.diagonal == pytest.approx((0.7 + 0.8 + 0.4) / 3)
    assert d.diagonal_argmax == pytest.approx(2 / 3)
    padded = np.array([[0.5, 0.5], [0.0, 0.0]])  # the zero row (all keys masked) is left out
    assert diagnose(padded).mean_entropy == pytest.approx(math.log(2))


def test_alignment_accuracy_counts_argmax_on_gold() -> None:
    w = np.array([[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]])  # third row (</s>) has no gold
    assert alignment_accuracy(w, [1, 0]) == 1.0
    assert alignment_accuracy(w, [0, 0]) == 0.5
    assert alignment_accuracy(w, []) is None


# -- the Setup form -> config ------------------------------------------------------------------


def test_form_values_become_a_validated_config() -> None:
    config = config_from_form(
        lab_config(),
        {"model.hidden": "32", "train.lr": "0.01", "model.attention": "luong-general"},
        {},
    )
    assert (
        config.model.hidden == 32
        and config.train.lr == 0.01
        and config.model.attention == "luong-general"
    )


def test_invalid_form_values_give_one_line_errors_naming_the_key() -> None:
    assert "model.hidden" in check_field("model.hidden", "abc")
    assert "out of range" in check_field("train.teacher_forcing", "1.5")
    assert check_field("train.max_steps", "100") is None
    with pytest.raises(AttnlabError) as err:
        config_from_form(lab_config(), {"data.min_len": "9", "data.max_len": "4"}, {})
    assert "\n" not in str(err.value)
    assert key_in_message(str(err.value)) == "data.min_len"
