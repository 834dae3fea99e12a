"""Checkpoints written whole: crash at every point of a save, mixed steps refused, ENOSPC,
file modes under a umask, bad meta/trainer-state files, export --force, and the slow
kill -9 fault-injection run."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import attnlab.runs.atomic as atomic  # where _write_fd is called
import attnlab.runs.checkpoints as checkpoints  # where a save renames, writes and removes
from attnlab.cli import cli
from attnlab.errors import AttnlabError
from attnlab.events import EventLog, iter_events
from attnlab.runs import (
    WriteError,
    export_checkpoint,
    load_checkpoint,
    prepare_checkpoints,
    read_checkpoint,
    read_trainer_state,
    save_checkpoint,
    write_config,
)
from attnlab.train.trainer import Trainer

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _model_and_meta(config):
    from attnlab.data.dataset import load_dataset
    from attnlab.nn.model import build_model, count_parameters

    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    return model, dataset.meta(), count_parameters(model)


def _save(run_dir, config, model, meta, params, step, tag="last"):
    """A checkpoint whose weights are stamped with ``step`` (every parameter = step)."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(step))
    state = (
        {"opt.0.exp_avg": torch.full((3,), float(step))},
        {"step": step, "optimizer": {"param_groups": [], "scalars": {}}},
    )
    return save_checkpoint(
        run_dir,
        tag,
        model,
        config,
        meta,
        step,
        {"bleu": float(step)},
        params,
        trainer_state=state if tag == "last" else None,
    )


def _loaded_step(run_dir):
    """The step of RUN's last checkpoint, checking every file agrees and the weights match."""
    tensors, meta = read_checkpoint(run_dir / "checkpoints" / "last")
    weights, state, state_tensors = read_trainer_state(run_dir)
    step = meta["step"]
    assert state["step"] == step
    assert all(torch.all(t == float(step)) for t in tensors.values())  # not a mix of two saves
    assert torch.all(state_tensors["opt.0.exp_avg"] == float(step))
    return step


def _scratch(run_dir):
    return sorted(
        p.name for p in (run_dir / "checkpoints").iterdir() if p.name not in ("best", "last")
    )


class Crash(BaseException):
    """A kill -9: after it, the dying process does nothing more on disk."""


def _crash_at(monkeypatch, k):
    """Make the k-th disk operation of a save 'kill' the process: it and every later rename,
    write and rmtree of attnlab.runs.checkpoints are skipped (no cleanup runs after a kill)."""
    calls = {"n": 0, "dead": False}
    real = {"rename": os.rename, "write": checkpoints._write_new_file, "rmtree": shutil.rmtree}

    def guarded(name):
        def op(*args, **kwargs):
            if calls["dead"]:
                return None
            if calls["n"] == k:
                calls["dead"] = True
                raise Crash
            calls["n"] += 1
            return real[name](*args, **kwargs)

        return op

    monkeypatch.setattr(checkpoints.os, "rename", guarded("rename"))
    monkeypatch.setattr(checkpoints, "_write_new_file", guarded("write"))
    monkeypatch.setattr(checkpoints.shutil, "rmtree", guarded("rmtree"))
    return calls


def test_a_crash_at_any_point_of_a_save_leaves_the_old_or_the_new_checkpoint(
    tmp_path, tiny_config, monkeypatch
):
    model, meta, params = _model_and_meta(tiny_config)
    outcomes = set()
    for k in range(20):
        run_dir = tmp_path / f"run{k}"
        _save(run_dir, tiny_config, model, meta, params, 1)
        with monkeypatch.context() as patch:
            calls = _crash_at(patch, k)
            with contextlib.suppress(Crash):
                _save(run_dir, tiny_config, model, meta, params, 2)
        if not calls["dead"]:
            break  # k is past the last operation of a save: all points were covered
        step = _loaded_step(run_dir)  # readable as is, before any recovery
        assert step in (1, 2)
        outcomes.add(step)
        prepare_checkpoints(run_dir)  # what the next start does
        assert _loaded_step(run_dir) == step and _scratch(run_dir) == []
        _save(run_dir, tiny_config, model, meta, params, 3)  # and the next save
        assert _loaded_step(run_dir) == 3 and _scratch(run_dir) == []
    else:
        pytest.fail("a save took more than 20 disk operations")
    assert k >= 6 and outcomes == {1, 2}  # 4 files + 2 renames + rmtree; both outcomes occur


def test_a_failed_rename_is_rolled_back_at_once(tmp_path, tiny_config, monkeypatch):
    model, meta, params = _model_and_meta(tiny_config)
    run_dir = tmp_path / "run"
    _save(run_dir, tiny_config, model, meta, params, 1)
    real = os.rename

    def second_rename_fails(src, dst):  # new -> last fails; the roll-back old -> last works
        if ".last.tmp-" in Path(src).name:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst)

    monkeypatch.setattr(checkpoints.os, "rename", second_rename_fails)
    with pytest.raises(WriteError, match="Input/output error"):
        _save(run_dir, tiny_config, model, meta, params, 2)
    monkeypatch.undo()
    assert (run_dir / "checkpoints" / "last").is_dir()
    assert _loaded_step(run_dir) == 1 and _scratch(run_dir) == []


def test_a_mixed_checkpoint_is_refused_on_load_and_resume(tmp_path, tiny_config):
    model, meta, params = _model_and_meta(tiny_config)
    run_dir = tmp_path / "run"
    _save(run_dir, tiny_config, model, meta, params, 1)
    old = {
        name: (run_dir / "checkpoints" / "last" / name).read_bytes()
        for name in ("meta.json", "trainer_state.json", "trainer_state.safetensors")
    }
    _save(run_dir, tiny_config, model, meta, params, 2)
    last = run_dir / "checkpoints" / "last"
    for name, data in old.items():  # what the old per-file saves could leave after a kill
        (last / name).write_bytes(data)
    expected = "mixes steps (meta.json step 1, model.safetensors step 2"
    with pytest.raises(AttnlabError, match=r"mixes steps \(meta\.json step 1, model") as err:
        load_checkpoint(last)
    assert expected in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(AttnlabError, match="trainer_state.json step 1"):
        read_trainer_state(run_dir)
    with pytest.raises(AttnlabError, match="mixes steps"):
        export_checkpoint(run_dir, tmp_path / "x.safetensors", which="last")


def test_enospc_during_a_save_keeps_the_previous_checkpoint(tmp_path, tiny_config, monkeypatch):
    model, meta, params = _model_and_meta(tiny_config)
    run_dir = tmp_path / "run"
    _save(run_dir, tiny_config, model, meta, params, 1)
    monkeypatch.setattr(atomic, "_write_fd", lambda fd, data: (_ for _ in ()).throw(ENOSPC))
    with pytest.raises(WriteError) as err:
        _save(run_dir, tiny_config, model, meta, params, 2)
    message = str(err.value)
    assert str(run_dir / "checkpoints" / "last" / "model.safetensors") in message
    assert "No space left on device" in message
    monkeypatch.undo()
    assert _loaded_step(run_dir) == 1 and _scratch(run_dir) == []


def test_enospc_during_training_ends_the_run_with_an_io_error_event(
    tmp_path, tiny_config, monkeypatch
):
    run_dir = tmp_path / "run"
    real, full = atomic._write_fd, {"now": False}

    def disk_fills_after_the_first_last(event):
        full["now"] = full["now"] or (event["type"] == "checkpoint" and event["tag"] == "last")

    def write(fd, data):
        if full["now"]:
            raise ENOSPC
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_fd", write)
    summary = Trainer(
        tiny_config, run_dir, on_event=disk_fills_after_the_first_last, device="cpu"
    ).run()
    assert (summary["reason"], summary["exit_code"]) == ("error", 1)  # as run-directory.md says
    monkeypatch.undo()
    events = list(iter_events(run_dir))
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "io"
    assert "No space left on device" in errors[0]["message"]
    # the first write after the disk fills is step 3's attention snapshot (written after the
    # checkpoints, so they are whole): the error names that file
    assert str(run_dir / "attention_history" / "step-00000003") in errors[0]["message"]
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "error"
    assert load_checkpoint(run_dir / "checkpoints" / "last").step == 3
    assert _scratch(run_dir) == []


def test_enospc_in_the_cli_is_one_line_and_exit_2(tmp_path, tiny_sets, monkeypatch):
    monkeypatch.setattr(atomic, "_write_fd", lambda fd, data: (_ for _ in ()).throw(ENOSPC))
    result = CliRunner().invoke(
        cli, ["train", "--out", str(tmp_path), "--run-name", "r", "--quiet", *tiny_sets]
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0]
    assert "Traceback" not in result.output


def test_enospc_while_training_in_the_cli_is_one_line_and_exit_1(tmp_path, tiny_sets, monkeypatch):
    """The line was printed twice (the Error event, then the raised error) and the exit code
    was 2, while run-directory.md maps the "error" done reason to 1."""
    real, calls = atomic._write_fd, {"n": 0}

    def write(fd, data):  # config.toml and the first checkpoint's files fit; then the disk is full
        calls["n"] += 1
        if calls["n"] > 4:
            raise ENOSPC
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_fd", write)
    result = CliRunner().invoke(
        cli, ["train", "--out", str(tmp_path), "--run-name", "r", "--quiet", *tiny_sets]
    )
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "No space left on device" in errors[0], result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_run_file_follows_the_umask(tmp_path, tiny_config, umask):
    model, meta, params = _model_and_meta(tiny_config)
    old = os.umask(umask)
    try:
        run_dir = tmp_path / "run"
        write_config(run_dir, tiny_config)
        log = EventLog(run_dir)
        log.emit("start", 0)
        log.close()
        _save(run_dir, tiny_config, model, meta, params, 1)
        _save(run_dir, tiny_config, model, meta, params, 2)  # replaced: the swap keeps modes
        _save(run_dir, tiny_config, model, meta, params, 2, tag="best")
        out = export_checkpoint(run_dir, tmp_path / "bundle" / "m.safetensors")
    finally:
        os.umask(old)
    files = [
        run_dir / "config.toml",
        run_dir / "events.jsonl",
        out,
        *(run_dir / "checkpoints" / "last").iterdir(),
        *(run_dir / "checkpoints" / "best").iterdir(),
    ]
    dirs = [run_dir / "checkpoints", run_dir / "checkpoints" / "last", out.parent]
    assert len(files) == 9
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path
    for path in dirs:
        assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask, path


@pytest.fixture
def tiny_run(tmp_path, tiny_config):
    model, meta, params = _model_and_meta(tiny_config)
    run_dir = tmp_path / "run"
    _save(run_dir, tiny_config, model, meta, params, 4)
    return run_dir


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_meta_config_that_disagrees_with_the_weights_names_the_key(tiny_run, tiny_config):
    last = tiny_run / "checkpoints" / "last"
    assert tiny_config.model.hidden == 16 and tiny_config.model.emb == 8
    _edit_json(last / "meta.json", lambda m: m["config"]["model"].update(hidden=12))
    with pytest.raises(AttnlabError) as err:
        load_checkpoint(last)
    assert (
        str(err.value)
        == f"checkpoint {last}: model.hidden=12 in meta.json does not match its weights (16)"
    )
    _edit_json(last / "meta.json", lambda m: m["config"]["model"].update(hidden=16, emb=4))
    with pytest.raises(
        AttnlabError, match=r"model\.emb=4 in meta\.json does not match its weights \(8\)"
    ):
        load_checkpoint(last)
    _edit_json(last / "meta.json", lambda m: m["config"]["model"].update(emb=8, layers=2))
    with pytest.raises(
        AttnlabError, match=r"model\.layers=2 in meta\.json does not match its weights \(1\)"
    ):
        load_checkpoint(last)
    _edit_json(
        last / "meta.json",
        lambda m: (
            m["config"]["model"].update(layers=1),
            m["dataset"]["tgt_vocab"].append("extra"),
        ),
    )
    with pytest.raises(
        AttnlabError, match=r"dataset\.tgt_vocab in meta\.json has \d+ entries but its weights have"
    ):
        load_checkpoint(last)


def test_two_changed_keys_name_the_tensor_and_both_shapes(tiny_run):
    last = tiny_run / "checkpoints" / "last"
    _edit_json(last / "meta.json", lambda m: m["config"]["model"].update(hidden=12, emb=4))
    with pytest.raises(
        AttnlabError, match=r"tensor \S+ is shape \[\d+(, \d+)*\] in the weights but shape"
    ):
        load_checkpoint(last)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda m: m.update(config=[1, 2]),
            'meta.json: field "config" must be a table (JSON object), got a list',
        ),
        (
            lambda m: m.pop("dataset"),
            'meta.json: field "dataset" must be a table (JSON object), got missing',
        ),
        (lambda m: m.update(step="abc"), 'meta.json: field "step" "abc" is not a step count'),
    ],
)
def test_a_malformed_meta_json_is_one_line(tiny_run, edit, needle):
    last = tiny_run / "checkpoints" / "last"
    _edit_json(last / "meta.json", edit)
    with pytest.raises(AttnlabError) as err:
        load_checkpoint(last)
    assert str(err.value) == f"{last}/{needle}" or str(err.value).startswith(f"{last}/{needle}")


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda s: s.pop("optimizer"), 'field "optimizer" (the optimiser state) is missing'),
        (lambda s: s.update(step="abc"), 'field "step" "abc" is not a step count'),
        (lambda s: s.update(epoch=1.5), 'field "epoch" 1.5 is not a step count'),
        # These were tracebacks (TypeError / ValueError) in the middle of a resume:
        (lambda s: s.update(best_value="x"), 'field "best_value" "x" is not a number or null'),
        (
            lambda s: s.update(best_metrics=[1]),
            'field "best_metrics" [1] is not a JSON object or null',
        ),
        (
            lambda s: s.update(lr_schedule={"plateau_scale": "x"}),
            'field "lr_schedule.plateau_scale" "x" is not a number',
        ),
        (
            lambda s: s.update(python_random=[1, 2]),
            'field "python_random" is not a Python random state',
        ),
    ],
)
def test_a_malformed_trainer_state_is_one_line(tiny_run, edit, needle):
    path = tiny_run / "checkpoints" / "last" / "trainer_state.json"
    _edit_json(path, edit)
    with pytest.raises(AttnlabError) as err:
        read_trainer_state(tiny_run)
    assert str(err.value).startswith(f"{path}: {needle}"), str(err.value)


def test_resume_after_an_architecture_change_names_the_key(tmp_path, tiny_config):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    wider = replace(
        tiny_config,
        model=replace(tiny_config.model, hidden=24),
        train=replace(tiny_config.train, max_steps=9),
    )
    with pytest.raises(
        AttnlabError, match=r"architecture changed .*model\.hidden=24 \(checkpoint: 16\)"
    ):
        Trainer(wider, run_dir, device="cpu", resume=True).run()
    faster = replace(tiny_config, train=replace(tiny_config.train, max_steps=9, lr=1e-3))
    assert Trainer(faster, run_dir, device="cpu", resume=True).run()["step"] == 9  # not shapes


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _one_error(result):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
        result.output
    )
    return lines[0]


def test_export_never_replaces_a_file_without_force(tiny_run, tmp_path):
    out = tmp_path / "m.safetensors"
    out.write_bytes(b"precious")
    line = _one_error(_invoke("export", tiny_run, "--out", out, "--checkpoint", "last"))
    assert line == f"error: {out}: already exists; pass --force to replace it"
    assert out.read_bytes() == b"precious"
    result = _invoke("export", tiny_run, "--out", out, "--checkpoint", "last", "--force")
    assert result.exit_code == 0 and load_checkpoint(out).step == 4


def test_export_force_never_writes_over_a_runs_checkpoint_or_replaces_a_symlink(tiny_run, tmp_path):
    """#43 item 1's audit: ``--out RUN/checkpoints/last/model.safetensors --force`` replaced
    the run's own weights; a symlink was replaced by a file, its target never written."""
    weights = tiny_run / "checkpoints" / "last" / "model.safetensors"
    before = weights.read_bytes()
    args = ("--checkpoint", "last", "--force")
    line = _one_error(_invoke("export", tiny_run, "--out", weights, *args))
    assert "is a file of the run or study directory" in line and str(weights) in line
    assert weights.read_bytes() == before
    target = tmp_path / "kept" / "m.safetensors"
    target.parent.mkdir()
    target.write_bytes(b"old")
    link = tmp_path / "link.safetensors"
    link.symlink_to(target)
    result = _invoke("export", tiny_run, "--out", link, "--checkpoint", "last", "--force")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and load_checkpoint(target).step == 4


def test_export_to_an_unwritable_path_is_one_line(tiny_run):
    line = _one_error(_invoke("export", tiny_run, "--out", "/proc/x.safetensors"))
    assert line.startswith("error: /proc/x.safetensors: cannot write (")
    line = _one_error(_invoke("export", tiny_run, "--out", "/proc/x"))
    assert "must end in .safetensors" in line


def test_enospc_during_export_leaves_nothing_and_keeps_an_old_file(tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "m.safetensors"
    export_checkpoint(tiny_run, out, which="last")
    before = out.read_bytes()
    monkeypatch.setattr(atomic, "_write_fd", lambda fd, data: (_ for _ in ()).throw(ENOSPC))
    line = _one_error(_invoke("export", tiny_run, "--out", out, "--checkpoint", "last", "--force"))
    assert line == f"error: {out}: cannot write (No space left on device); nothing was replaced"
    fresh = tmp_path / "new.safetensors"
    _one_error(_invoke("export", tiny_run, "--out", fresh, "--checkpoint", "last"))
    monkeypatch.undo()
    assert out.read_bytes() == before and not fresh.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors", "run"]


def test_stale_export_temporaries_are_removed_by_the_next_export(tiny_run, tmp_path):
    dead = 2**22 + 12345  # above the default pid_max: no such process
    stale = tmp_path / f".m.safetensors.{dead}-0123abcd.tmp"
    legacy = tmp_path / ".m.safetensors.k2j3_x9.tmp"  # mkstemp's name before this change
    live = tmp_path / f".m.safetensors.{os.getppid()}-0123abcd.tmp"  # a running export's
    for path in (stale, legacy, live):
        path.write_bytes(b"x" * 1000)
    export_checkpoint(tiny_run, tmp_path / "m.safetensors", which="last")
    assert not stale.exists() and not legacy.exists() and live.exists()


def test_stale_checkpoint_temporaries_are_removed_at_the_next_start(tmp_path, tiny_config):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    dead = 2**22 + 12345
    root = run_dir / "checkpoints"
    (root / f".last.tmp-{dead}-0123abcd").mkdir()
    (root / f".best.old-{dead}-0123abcd").mkdir()
    (root / "last" / ".model.safetensors.k2j3_x9.tmp").write_bytes(b"x")  # the old per-file kind
    (run_dir / f".config.toml.{dead}-0123abcd.tmp").write_bytes(b"x")
    more = replace(tiny_config, train=replace(tiny_config.train, max_steps=7))
    Trainer(more, run_dir, device="cpu", resume=True).run()
    assert _scratch(run_dir) == []
    assert sorted(p.name for p in (root / "last").iterdir()) == [
        "meta.json",
        "model.safetensors",
        "trainer_state.json",
        "trainer_state.safetensors",
    ]
    assert not any(p.name.endswith(".tmp") for p in run_dir.iterdir())


@pytest.mark.slow
def test_kill_9_inside_checkpoint_saves_always_leaves_a_resumable_checkpoint(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    script = root / "benchmarks" / "fault_injection.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            "--timed",
            "3",
            "--random",
            "0",
            "--seed",
            "3",
            "--json",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])["timed"]
    assert figures["n"] == 3 and figures["inside_save"] == 3  # every kill landed inside a save
    # a kill inside the very first save leaves no checkpoint yet; --resume then starts over
    assert figures["loadable"] + figures["no_checkpoint_yet"] == 3
    assert figures["same_losses"] == figures["clean_after_resume"] == 3


def _rewrite_weights(path, edit):
    """Edit a checkpoint's weights in place, keeping its metadata (its step stamp)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("gone", ["meta.json", "trainer_state.json"])
def test_resume_refuses_a_last_checkpoint_that_lost_a_file(tmp_path, tiny_config, gone):
    # Saves swap whole directories in, so such a `last` was damaged by hand; resuming used to
    # start over at step 0, overwrite its weights and log a second history into events.jsonl.
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    last = run_dir / "checkpoints" / "last"
    (last / gone).unlink()
    weights = (last / "model.safetensors").read_bytes()
    log = (run_dir / "events.jsonl").read_bytes()
    more = replace(tiny_config, train=replace(tiny_config.train, max_steps=9))
    with pytest.raises(AttnlabError) as err:
        Trainer(more, run_dir, device="cpu", resume=True).run()
    assert str(err.value).startswith(f"cannot resume {run_dir}: {last} has no {gone} ")
    assert (last / "model.safetensors").read_bytes() == weights
    assert (run_dir / "events.jsonl").read_bytes() == log


def test_resume_with_a_damaged_tensor_names_it(tmp_path, tiny_config):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    last = run_dir / "checkpoints" / "last"
    name = sorted(load_checkpoint(last).model.state_dict())[0]
    _rewrite_weights(last / "model.safetensors", lambda t: t.pop(name))
    with pytest.raises(AttnlabError) as err:
        Trainer(tiny_config, run_dir, device="cpu", resume=True).run()
    message = str(err.value)
    assert f"tensor {name} is absent in {last} but shape [" in message, message
    assert "vocabularies" not in message and "architecture changed" not in message


@pytest.mark.parametrize("damage", ["missing", "reshaped", "extra"])
def test_export_refuses_weights_that_eval_would_refuse(tiny_run, tmp_path, damage):
    last = tiny_run / "checkpoints" / "last"
    name = sorted(load_checkpoint(last).model.state_dict())[0]
    edits = {
        "missing": lambda t: t.pop(name),
        "reshaped": lambda t: t.__setitem__(name, torch.zeros(3, 3)),
        "extra": lambda t: t.__setitem__("stray.weight", torch.zeros(2)),
    }
    _rewrite_weights(last / "model.safetensors", edits[damage])
    with pytest.raises(AttnlabError) as refused:
        load_checkpoint(last)
    out = tmp_path / "m.safetensors"
    line = _one_error(_invoke("export", tiny_run, "--out", out, "--checkpoint", "last"))
    assert line == f"error: {refused.value}"  # the same line as eval / translate give
    assert not out.exists()


def test_export_of_a_file_says_what_export_takes(tiny_run, tmp_path):
    bundle = tmp_path / "m.safetensors"
    export_checkpoint(tiny_run, bundle, which="last")
    text = tmp_path / "notes.txt"
    text.write_text("a run? no\n")
    for path in (bundle, text):
        line = _one_error(_invoke("export", path, "--out", tmp_path / "again.safetensors"))
        assert line == (
            f"error: {path}: is a file; export takes a run directory or a checkpoint directory "
            "(an exported .safetensors file is already self-contained)"
        )


def test_eval_json_stays_json_when_a_score_is_not_finite(tiny_run):
    # Finite weights near float32's largest overflow to a NaN loss; --json printed the bare
    # NaN token, which strict JSON parsers (jq, JSON.parse) refuse. (NaN weights themselves
    # are refused on loading: test_non_finite_weights_are_refused_on_loading.)
    last = tiny_run / "checkpoints" / "last"
    _rewrite_weights(
        last / "model.safetensors",
        lambda t: t.update({k: torch.full_like(v, 3e38) for k, v in t.items()}),
    )
    result = _invoke("eval", last, "--json", "--max-sentences", "4")
    assert result.exit_code == 0, result.output

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    metrics = json.loads(result.output, parse_constant=refuse)
    assert metrics["loss"] is None and metrics["ppl"] is None and metrics["n"] == 4


def test_the_eval_table_at_80_columns_shows_the_whole_bleu_signature(tiny_run):
    last = tiny_run / "checkpoints" / "last"
    result = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["eval", str(last), "--json"])
    signature = json.loads(result.output)["bleu_signature"]
    table = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["eval", str(last)])
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80
    squashed = "".join(table.output.replace("│", "").split())
    assert f"BLEUsignature{signature}" in squashed, table.output


def test_a_meta_json_that_is_not_utf8_is_one_line(tiny_run):
    # read_json caught JSONDecodeError only: a damaged meta.json raised UnicodeDecodeError.
    best = tiny_run / "checkpoints" / "last"
    (best / "meta.json").write_bytes(b'{"step": 4, "x": "\xff"}')
    line = _one_error(_invoke("eval", tiny_run / "checkpoints" / "last"))
    assert line == f"error: {best / 'meta.json'}: invalid JSON (not UTF-8 at byte 18)"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda m: m["dataset"].update(src_vocab=5),
            "dataset metadata is invalid: src_vocab: a vocabulary must be a list of token strings",
        ),
        (
            lambda m: m["dataset"].update(tgt_vocab=[*m["dataset"]["tgt_vocab"], 7]),
            "dataset metadata is invalid: tgt_vocab: a vocabulary must be a list of token strings",
        ),
        (  # a repeated token shifted every later id: silently wrong output before
            lambda m: m["dataset"]["src_vocab"].__setitem__(5, m["dataset"]["src_vocab"][4]),
            "dataset metadata is invalid: src_vocab: token '{tok}' appears twice (ids 4 and 5)",
        ),
        (  # a special token past id 3 was dropped, shifting the ids after it
            lambda m: m["dataset"]["tgt_vocab"].__setitem__(6, "<pad>"),
            "dataset metadata is invalid: tgt_vocab: token '<pad>' appears twice (ids 0 and 6)",
        ),
        (
            lambda m: m.update(metrics=[1]),
            'field "metrics" must be a table (JSON object), got a list',
        ),
        (lambda m: m.update(params="many"), 'field "params" "many" is not an integer'),
    ],
)
def test_a_meta_json_of_the_wrong_shape_is_one_line_naming_it(tiny_run, edit, needle):
    # Each of these raised TypeError / ValueError out of load_checkpoint (a traceback).
    last = tiny_run / "checkpoints" / "last"
    tok = json.loads((last / "meta.json").read_text())["dataset"]["src_vocab"][4]
    _edit_json(last / "meta.json", edit)
    line = _one_error(_invoke("eval", last))
    assert line == f"error: {last / 'meta.json'}: {needle.format(tok=tok)}"


def test_a_python_random_state_of_the_wrong_size_is_one_line(tmp_path, tiny_config):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    path = run_dir / "checkpoints" / "last" / "trainer_state.json"
    _edit_json(path, lambda s: s.update(python_random=[3, [1, 2, 3], None]))
    with pytest.raises(AttnlabError) as err:
        Trainer(tiny_config, run_dir, device="cpu", resume=True).run()
    assert str(err.value).startswith(f'{path}: field "python_random" is not a Python random')


def _rewrite_state_tensors(run_dir, edit):
    _rewrite_weights(run_dir / "checkpoints" / "last" / "trainer_state.safetensors", edit)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        # The first three were tracebacks (KeyError at the first step, TypeError, RuntimeError);
        # the reshaped moment was broadcast by AdamW into a NaN dev loss.
        (lambda t: t.pop("opt.0.exp_avg"), "the optimiser state of parameter 0 differs"),
        (lambda t: t.update({"rng.cpu": torch.zeros(5)}), "rng.cpu is not a torch RNG state"),
        (lambda t: t.update({"opt.0.step": torch.ones(2)}), "opt.0.step is shape [2], not one"),
        (lambda t: t.update({"opt.0.exp_avg": torch.zeros(3)}), "opt.0.exp_avg is shape [3] but"),
        (
            lambda t: t.update({"opt.99.exp_avg": torch.zeros(3)}),
            "optimiser state for parameter 99, but",
        ),
    ],
)
def test_optimiser_tensors_that_do_not_fit_are_one_line(tmp_path, tiny_config, edit, needle):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    _rewrite_state_tensors(run_dir, edit)
    more = replace(tiny_config, train=replace(tiny_config.train, max_steps=9))
    with pytest.raises(AttnlabError) as err:
        Trainer(more, run_dir, device="cpu", resume=True).run()
    path = run_dir / "checkpoints" / "last" / "trainer_state.safetensors"
    assert str(err.value).startswith(f"{path}: {needle}"), str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_on_loading(tiny_run, value):
    """NaN weights evaluated to loss nan and BLEU 0 with exit 0; saving refuses them, so
    loading does too (eval, export, translate, resume all load through the same check)."""
    last = tiny_run / "checkpoints" / "last"
    name = {}

    def poison(tensors):
        key = sorted(k for k, v in tensors.items() if v.is_floating_point())[0]
        name["key"] = key
        tensors[key].view(-1)[:3] = value

    _rewrite_weights(last / "model.safetensors", poison)
    for command in ("eval", "export"):
        line = _one_error(
            _invoke(command, last)
            if command == "eval"
            else _invoke(
                "export", tiny_run, "--checkpoint", "last", "--out", tiny_run / "x.safetensors"
            )
        )
        assert line == (
            f"error: checkpoint {last}: tensor {name['key']} holds 3 non-finite values "
            "(NaN or infinity); weights must be finite (use another checkpoint, or retrain)"
        )


def _relabel(path, edit):
    """Rewrite a safetensors header in place (the bytes stay): what a crafted file does."""
    import struct

    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    edit(header, len(data))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_a_header_whose_dtype_lies_is_refused(tiny_run):
    """F32 relabelled I32 (same bytes) loaded and evaluated to a loss of 3.7e10."""
    last = tiny_run / "checkpoints" / "last"
    name = {}

    def lie(header, _size):
        key = sorted(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32")[0]
        header[key]["dtype"] = "I32"
        name["key"] = key

    _relabel(last / "model.safetensors", lie)
    line = _one_error(_invoke("eval", last))
    assert line == (
        f"error: checkpoint {last}: tensor {name['key']} is int32 in the weights but float32 in "
        "the model meta.json builds (a damaged or altered file)"
    )


def test_a_crafted_huge_zero_byte_tensor_is_one_line_within_seconds(tiny_run):
    """An extra [0, 2^30] tensor (zero bytes) sent the mismatch explanation into building a
    GRU of hidden size 2^30: eval, export and the lab's Inspect spun for minutes."""
    import time

    last = tiny_run / "checkpoints" / "last"

    def extra(header, size):
        header["zz.extra"] = {"dtype": "F32", "shape": [0, 2**30], "data_offsets": [size, size]}

    _relabel(last / "model.safetensors", extra)
    began = time.monotonic()
    line = _one_error(_invoke("eval", last))
    assert time.monotonic() - began < 10
    assert line == (
        f"error: checkpoint {last}: tensor zz.extra is shape [0, 1073741824] in the weights but "
        "absent in the model meta.json builds"
    )


CRAFTED_JSON = [
    ("[" * 100_000 + "]" * 100_000, "invalid JSON (nested too deeply)"),  # RecursionError
    ('{"step": ' + "9" * 5000 + "}", "invalid JSON (Exceeds the limit (4300 digits)"),
]


@pytest.mark.parametrize(("content", "needle"), CRAFTED_JSON)
def test_a_crafted_meta_json_is_one_line_for_every_reader(tiny_run, content, needle):
    last = tiny_run / "checkpoints" / "last"
    (last / "meta.json").write_text(content)
    for args in (
        ("eval", last),
        ("export", tiny_run, "--checkpoint", "last", "--out", tiny_run / "x.safetensors"),
    ):
        line = _one_error(_invoke(*args))
        assert line.startswith(f"error: {last / 'meta.json'}: {needle}"), line


@pytest.mark.parametrize(("content", "needle"), CRAFTED_JSON)
def test_a_crafted_trainer_state_json_is_one_line_on_resume(tmp_path, tiny_config, content, needle):
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    path = run_dir / "checkpoints" / "last" / "trainer_state.json"
    path.write_text(content)
    with pytest.raises(AttnlabError) as err:
        Trainer(tiny_config, run_dir, device="cpu", resume=True).run()
    assert str(err.value).startswith(f"{path}: {needle}")


def test_a_step_beyond_int64_in_meta_json_is_one_line(tiny_run):
    last = tiny_run / "checkpoints" / "last"
    _edit_json(last / "meta.json", lambda m: m.update(step=2**64))
    line = _one_error(_invoke("eval", last))
    assert line == (
        f'error: {last / "meta.json"}: field "step" a number is not a step count '
        "(an integer in [0, 2^63 - 1])"
    )


@pytest.mark.parametrize("name", ["model.safetensors", "meta.json"])
def test_a_fifo_in_a_checkpoint_is_one_line_not_a_hang(tiny_run, name):
    import os

    last = tiny_run / "checkpoints" / "last"
    (last / name).unlink()
    os.mkfifo(last / name)  # no writer: a plain open() waits forever
    line = _one_error(_invoke("eval", last))
    assert line.endswith(
        f"{last / name}: is a FIFO, not a regular file; attnlab reads only regular files"
    )


def test_data_settings_that_do_not_load_name_the_meta_json(tiny_run):
    last = tiny_run / "checkpoints" / "last"
    _edit_json(last / "meta.json", lambda m: m["config"]["data"].update(task="corpus"))
    line = _one_error(_invoke("eval", last))
    assert line.startswith(f"error: {last / 'meta.json'}: its data settings do not load: ")
    assert line.endswith(
        'data.task="corpus" needs data.path (a folder or a .tsv file) or '
        "data.src_file + data.tgt_file"
    )
