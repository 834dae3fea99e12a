"""train.keep_last step copies: written whole like any checkpoint, kept (and repaired) by
prepare_checkpoints, and read by `attnlab average` through the step-checking readers."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.errors import AttnlabError
from attnlab.runs import (
    META_FILE,
    MODEL_FILE,
    keep_step_checkpoint,
    prepare_checkpoints,
    step_checkpoints,
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny RNN run that kept step-3 and step-6 (train.keep_last = 2)."""
    from conftest import TINY_OVERRIDES

    root = tmp_path_factory.mktemp("keep")
    sets = [a for item in (*TINY_OVERRIDES, "train.keep_last=2") for a in ("--set", item)]
    argv = ["train", "--out", str(root), "--run-name", "r", "--quiet", *sets]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return root / "r"


@pytest.fixture
def run(trained, tmp_path):
    copy = tmp_path / "r"
    shutil.copytree(trained, copy)
    return copy


def names(run):
    return sorted(p.name for p in (run / "checkpoints").iterdir())


def test_training_keeps_the_newest_copies_only(run):
    assert [s for s, _ in step_checkpoints(run)] == [3, 6]
    assert names(run) == ["best", "last", "step-3", "step-6"]
    for step, directory in step_checkpoints(run):
        assert json.loads((directory / META_FILE).read_text())["step"] == step
        assert sorted(p.name for p in directory.iterdir()) == [META_FILE, MODEL_FILE]


def test_a_new_copy_retires_the_oldest_and_leaves_no_scratch(run):
    keep_step_checkpoint(run, 9, 2)  # last/ still holds step 6: the copy carries step 6's files
    assert names(run) == ["best", "last", "step-6", "step-9"]
    assert keep_step_checkpoint(run, 10, 0) is None
    assert names(run) == ["best", "last", "step-6", "step-9"]


def test_a_failed_copy_leaves_the_kept_ones_untouched(run, monkeypatch):
    import attnlab.runs.checkpoints as checkpoints  # where a save writes its files
    from attnlab.runs import WriteError

    real = checkpoints._write_new_file

    def fail_on_meta(path, data):
        if path.name == META_FILE:
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(checkpoints, "_write_new_file", fail_on_meta)
    with pytest.raises(WriteError, match="No space left"):
        keep_step_checkpoint(run, 9, 1)
    assert names(run) == ["best", "last", "step-3", "step-6"]  # nothing retired, no scratch


def test_prepare_checkpoints_keeps_copies_and_repairs_a_killed_one(run):
    ckpts = run / "checkpoints"
    (ckpts / ".step-9.tmp-1-deadbeef").mkdir()  # a killed copy's scratch
    shutil.copytree(ckpts / "step-6", ckpts / ".step-6.old-1-deadbeef")  # stale beside step-6
    shutil.move(ckpts / "step-3", ckpts / ".step-3.old-1-cafef00d")  # killed between renames
    prepare_checkpoints(run)
    assert names(run) == ["best", "last", "step-3", "step-6"]


def average(run, out, *extra):
    return CliRunner().invoke(cli, ["average", str(run), "--last", "2", "--out", str(out), *extra])


def test_average_refuses_to_overwrite_without_force(run, tmp_path):
    out = tmp_path / "avg.safetensors"
    assert average(run, out).exit_code == 0
    again = average(run, out)
    assert again.exit_code == 2 and again.output.startswith("error: ")
    assert "already exists; pass --force" in again.output
    assert average(run, out, "--force").exit_code == 0


def test_average_force_never_writes_over_a_file_of_the_run(run, tmp_path):
    """#43 item 1's audit: ``average --out RUN/checkpoints/last/model.safetensors --force``
    replaced the run's own weights with the average."""
    weights = run / "checkpoints" / "last" / "model.safetensors"
    before = weights.read_bytes()
    result = average(run, weights, "--force")
    assert result.exit_code == 2 and result.output.startswith("error: "), result.output
    assert "is a file of the run or study directory" in result.output
    assert weights.read_bytes() == before


def test_average_refuses_a_copy_of_mixed_steps(run, tmp_path):
    ckpts = run / "checkpoints"
    shutil.copy(ckpts / "step-3" / MODEL_FILE, ckpts / "step-6" / MODEL_FILE)
    result = average(run, tmp_path / "avg.safetensors")
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert "mixes steps" in result.output and "step-6" in result.output
    assert not (tmp_path / "avg.safetensors").exists()


def test_average_refuses_a_copy_whose_name_is_not_its_step(run, tmp_path):
    ckpts = run / "checkpoints"
    shutil.copytree(ckpts / "step-6", ckpts / "step-7")  # files carry step 6
    result = average(run, tmp_path / "avg.safetensors")
    assert result.exit_code == 2
    assert "holds step 6, not the step 7 of its name" in result.output


def test_average_reads_nothing_but_step_copies(run):
    with pytest.raises(AttnlabError, match="end in .safetensors"):
        from attnlab.interpret.average import average_checkpoints

        average_checkpoints(run, 1, run / "avg.bin")


def test_average_takes_buffers_from_the_newest_copy_and_averages_the_parameters(tmp_path):
    """Performer's ω (a buffer, redrawn in training) is a random draw: the average keeps the
    newest copy's, since a mean of draws is not one; every parameter is the float64 mean."""
    import torch
    from _tiny import TINY_TRANSFORMER
    from conftest import TINY_OVERRIDES

    from attnlab.interpret.average import average_checkpoints
    from attnlab.runs import read_checkpoint, read_tensors

    extra = ("model.self_attention=performer", "model.performer.redraw=1", "train.keep_last=2")
    sets = [a for item in (*TINY_OVERRIDES, *TINY_TRANSFORMER, *extra) for a in ("--set", item)]
    argv = ["train", "--out", str(tmp_path), "--run-name", "p", "--quiet", *sets]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    run = tmp_path / "p"
    (_, older), (_, newest) = step_checkpoints(run)
    a, _ = read_checkpoint(older)
    b, _ = read_checkpoint(newest)
    omegas = [key for key in b if key.endswith(".omega")]
    assert omegas and all(not torch.equal(a[key], b[key]) for key in omegas)  # redrawn between
    out, steps = average_checkpoints(run, 2, tmp_path / "avg.safetensors")
    avg, _ = read_tensors(out)
    assert steps == [3, 6]
    for key, value in avg.items():
        if key in omegas:
            assert torch.equal(value, b[key]), key
        else:
            assert torch.equal(value, ((a[key].double() + b[key].double()) / 2).to(value.dtype))


@pytest.mark.parametrize("key", ["src_vocab", "tgt_vocab"])
def test_average_refuses_copies_whose_vocabularies_differ_at_one_size(run, tmp_path, key):
    """Same size, other tokens (two tokens swapped): averaging them mixed the rows of
    different tokens into a model of neither, with exit 0."""
    meta_file = run / "checkpoints" / "step-3" / META_FILE
    meta = json.loads(meta_file.read_text())
    vocab = meta["dataset"][key]
    vocab[4], vocab[5] = vocab[5], vocab[4]
    meta_file.write_text(json.dumps(meta))
    result = average(run, tmp_path / "avg.safetensors")
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
    assert f"step-3: its {key} differs from step-6's (id 4: " in result.output
    assert not (tmp_path / "avg.safetensors").exists()
