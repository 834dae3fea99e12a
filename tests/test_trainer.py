"""The trainer in-process on a tiny config: events, checkpoints, control file, NaN, resume."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace

import pytest
import torch

from attnlab.events import iter_events, iter_typed_events
from attnlab.runs import load_checkpoint, read_json, read_tensors, write_control
from attnlab.train.trainer import Trainer


def _types(run_dir):
    return [e["type"] for e in iter_events(run_dir)]


def test_a_tiny_run_writes_the_documented_events_and_checkpoints(tmp_path, tiny_config):
    seen = []
    summary = Trainer(tiny_config, tmp_path / "run", on_event=seen.append, device="cpu").run()
    run_dir = tmp_path / "run"
    events = list(iter_events(run_dir))
    # The callback sees exactly what the log holds: typed events, whose JSON is each line.
    assert [e.to_json() for e in seen] == events
    assert seen == list(iter_typed_events(run_dir))
    assert events[0]["type"] == "start" and events[0]["params"] == summary["params"] > 0
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "finished"
    assert summary["reason"] == "finished" and summary["step"] == 6 and summary["exit_code"] == 0
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4, 5, 6]
    assert all(e["tokens_per_s"] > 0 and e["tf_ratio"] == 1.0 and e["loss"] > 0 for e in steps)
    # padding: the batch's padded share of source+target cells, a fraction in [0, 1)
    assert all(0.0 <= e["padding"] < 1.0 for e in steps)
    # #44: mean throughput = all tokens / all stepping seconds, the seconds being each window's
    # tokens over its own rate; the done event carries the same mean.
    before = [0] + [e["tokens"] for e in steps[:-1]]
    windows = [e["tokens"] - a for a, e in zip(before, steps, strict=True)]
    seconds = sum(n / e["tokens_per_s"] for n, e in zip(windows, steps, strict=True))
    assert steps[-1]["mean_tokens_per_s"] == pytest.approx(steps[-1]["tokens"] / seconds, rel=1e-2)
    assert events[-1]["tokens_per_s"] == pytest.approx(steps[-1]["mean_tokens_per_s"], abs=0.1)
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [3, 6]
    keys = {
        "loss",
        "ppl",
        "bleu",
        "chrf",
        "exact_match",
        "alignment_accuracy",
        "bleu_by_length",
        "best",
    }
    assert keys <= set(evals[0])
    assert evals[0]["best"] is True
    samples = [e for e in events if e["type"] == "sample"]
    assert len(samples) == 4  # train.samples = 2 per eval
    for s in samples:
        assert len(s["attention"]) == len(s["hyp"]) and all(
            len(r) == len(s["src"]) for r in s["attention"]
        )
    tags = [(e["tag"], e["step"]) for e in events if e["type"] == "checkpoint"]
    assert ("best", 3) in tags and ("last", 6) in tags
    assert (run_dir / "config.toml").is_file()
    assert load_checkpoint(run_dir / "checkpoints" / "last").step == 6


def test_control_file_stop_saves_last_and_ends_with_stopped(tmp_path, tiny_config):
    run_dir = tmp_path / "run"

    def on_event(event):
        if event["type"] == "step" and event["step"] == 2:
            write_control(run_dir, "stop")

    config = replace(tiny_config, train=replace(tiny_config.train, max_steps=50, eval_every=50))
    summary = Trainer(config, run_dir, on_event=on_event, device="cpu").run()
    assert summary["reason"] == "stopped" and summary["exit_code"] == 0
    assert summary["step"] == 2
    assert read_json(run_dir / "checkpoints" / "last" / "meta.json")["step"] == 2
    done = list(iter_events(run_dir))[-1]
    assert done["type"] == "done" and done["reason"] == "stopped"


def test_garbage_in_the_control_file_is_ignored_not_fatal(tmp_path, tiny_config):
    # The trainer read RUN/control as UTF-8: a stray binary write killed the run with a
    # UnicodeDecodeError. Like any unknown word, it is now ignored.
    run_dir = tmp_path / "run"

    def on_event(event):
        if event["type"] == "step" and event["step"] == 2:
            (run_dir / "control").write_bytes(b"\xff\xfe\x00stop")

    summary = Trainer(tiny_config, run_dir, on_event=on_event, device="cpu").run()
    assert (summary["reason"], summary["step"]) == ("finished", 6)


def test_pause_resume_and_save_commands(tmp_path, tiny_config):
    run_dir = tmp_path / "run"

    def on_event(event):
        if event["type"] == "step" and event["step"] == 1:
            write_control(run_dir, "pause")
        elif event["type"] == "control" and event["command"] == "pause":
            write_control(run_dir, "resume")
        elif event["type"] == "step" and event["step"] == 4:
            write_control(run_dir, "save")

    config = replace(tiny_config, train=replace(tiny_config.train, eval_every=100))
    summary = Trainer(config, run_dir, on_event=on_event, device="cpu").run()
    assert summary["reason"] == "finished" and summary["step"] == 6
    events = list(iter_events(run_dir))
    commands = [(e["command"], e["step"]) for e in events if e["type"] == "control"]
    assert commands == [("pause", 1), ("resume", 1)]
    saves = [e["step"] for e in events if e["type"] == "checkpoint" and e["tag"] == "last"]
    assert saves[0] == 4


def test_in_process_control_stop(tmp_path, tiny_config):
    holder = {}

    def on_event(event):
        if event["type"] == "step" and event["step"] == 3:
            holder["trainer"].control("stop")

    trainer = Trainer(
        replace(tiny_config, train=replace(tiny_config.train, max_steps=40)),
        tmp_path / "r",
        on_event=on_event,
        device="cpu",
    )
    holder["trainer"] = trainer
    assert trainer.run()["reason"] == "stopped"
    assert trainer.step == 3


def test_non_finite_loss_stops_with_an_error_and_keeps_the_last_good_checkpoint(
    tmp_path, tiny_config, monkeypatch
):
    import attnlab.train.trainer as trainer_module

    real = trainer_module.token_loss_sum
    calls = {"n": 0}

    def poisoned(logits, targets, label_smoothing=0.0):
        calls["n"] += 1
        loss = real(logits, targets, label_smoothing)
        return loss * float("nan") if calls["n"] >= 5 else loss

    monkeypatch.setattr(trainer_module, "token_loss_sum", poisoned)
    run_dir = tmp_path / "run"
    config = replace(tiny_config, train=replace(tiny_config.train, max_steps=20, eval_every=3))
    summary = Trainer(config, run_dir, device="cpu").run()
    assert summary["reason"] == "error" and summary["exit_code"] == 1
    events = list(iter_events(run_dir))
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "nan" and errors[0]["step"] == 5
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "error"
    meta = read_json(run_dir / "checkpoints" / "last" / "meta.json")
    assert meta["step"] == 3  # the eval at step 3 saved it; nothing after the NaN
    weights, _ = read_tensors(run_dir / "checkpoints" / "last" / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_resume_continues_exactly_where_the_run_stopped(tmp_path, tiny_config):
    straight = tmp_path / "straight"
    nine = replace(tiny_config, train=replace(tiny_config.train, max_steps=9, eval_every=3))
    Trainer(nine, straight, device="cpu").run()

    split = tmp_path / "split"
    six = replace(nine, train=replace(nine.train, max_steps=6))
    Trainer(six, split, device="cpu").run()
    summary = Trainer(nine, split, device="cpu", resume=True).run()
    assert summary["step"] == 9 and summary["reason"] == "finished"

    starts = [e for e in iter_events(split) if e["type"] == "start"]
    assert [(s["step"], s["resumed"]) for s in starts] == [(0, False), (6, True)]
    steps = [e["step"] for e in iter_events(split) if e["type"] == "step"]
    assert steps == list(range(1, 10))

    a, _ = read_tensors(straight / "checkpoints" / "last" / "model.safetensors")
    b, _ = read_tensors(split / "checkpoints" / "last" / "model.safetensors")
    assert set(a) == set(b)
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key
    loss_a = [e["loss"] for e in iter_events(straight) if e["type"] == "step"]
    loss_b = [e["loss"] for e in iter_events(split) if e["type"] == "step"]
    assert loss_a == pytest.approx(loss_b, rel=1e-5)


def _token_weighted_loss(run_dir):
    """Σ window loss × window tokens over the step events: the run's summed training loss."""
    total, before = 0.0, 0
    for e in iter_events(run_dir):
        if e["type"] == "step":
            total += e["loss"] * (e["tokens"] - before)
            before = e["tokens"]
    return total, before


@pytest.mark.parametrize("how", ["signal", "stop"])
def test_an_interrupted_window_is_logged_not_lost(tmp_path, tiny_config, monkeypatch, how):
    # log_every=4: the interruption lands inside the window 5..8. Its loss and tokens used to
    # be dropped, so the resumed run reported fewer tokens (and tokens/s) than it trained.
    import signal

    import attnlab.train.trainer as trainer_module

    config = replace(
        tiny_config, train=replace(tiny_config.train, max_steps=12, eval_every=12, log_every=4)
    )
    straight = tmp_path / "straight"
    Trainer(config, straight, device="cpu").run()

    run_dir = tmp_path / "split"
    real, calls, holder = trainer_module.make_batch, {"n": 0}, {}

    def make_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 7:  # before step 7 is trained: interrupted at step 6
            if how == "signal":
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                holder["trainer"].control("stop")
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "make_batch", make_batch)
    holder["trainer"] = Trainer(config, run_dir, device="cpu")
    summary = holder["trainer"].run()
    assert (summary["reason"], summary["step"]) == (
        "interrupted" if how == "signal" else "stopped",
        6,
    )
    monkeypatch.setattr(trainer_module, "make_batch", real)
    Trainer(config, run_dir, device="cpu", resume=True).run()

    steps = [e["step"] for e in iter_events(run_dir) if e["type"] == "step"]
    assert steps == [1, 4, 6, 7, 8, 12]  # 6: the window 5..6 as it stopped; 7: first after resume
    loss_a, tokens_a = _token_weighted_loss(straight)
    loss_b, tokens_b = _token_weighted_loss(run_dir)
    assert tokens_b == tokens_a  # every trained token counted once
    assert loss_b == pytest.approx(loss_a, rel=1e-5)  # every step's loss in some window


def test_scheduled_sampling_ratio_is_logged(tmp_path, tiny_config):
    config = replace(
        tiny_config,
        train=replace(tiny_config.train, tf_schedule="linear", max_steps=4, eval_every=4),
    )
    Trainer(config, tmp_path / "run", device="cpu").run()
    ratios = [e["tf_ratio"] for e in iter_events(tmp_path / "run") if e["type"] == "step"]
    assert ratios == pytest.approx([1 - i / 4 for i in range(4)])
    assert all(math.isfinite(r) for r in ratios)


def test_early_stopping_after_patience_evals_without_improvement(tmp_path, tiny_config):
    # After a handful of steps the tiny model reverses nothing exactly: exact match stays 0.0,
    # so the second eval brings no improvement in train.metric and patience 1 stops the run
    # there. The best checkpoint still follows the tie-breaker (the lower dev loss).
    config = replace(
        tiny_config,
        train=replace(
            tiny_config.train, max_steps=30, eval_every=3, patience=1, metric="exact_match"
        ),
    )
    summary = Trainer(config, tmp_path / "run", device="cpu").run()
    evals = [e for e in iter_events(tmp_path / "run") if e["type"] == "eval"]
    assert [e["exact_match"] for e in evals] == [0.0, 0.0]
    assert summary["reason"] == "early-stop" and summary["step"] == 6 and summary["exit_code"] == 0
    assert evals[1]["loss"] < evals[0]["loss"]  # training lowers the dev loss
    assert [e["best"] for e in evals] == [True, True]
    best = [
        e["step"]
        for e in iter_events(tmp_path / "run")
        if e["type"] == "checkpoint" and e["tag"] == "best"
    ]
    assert best == [3, 6]
    assert summary["best"]["chosen_by"] == "loss (tie in exact_match)"


def test_a_stop_written_during_set_up_is_honoured_and_a_stale_one_ignored(tmp_path, tiny_config):
    stale = tmp_path / "stale"
    stale.mkdir()
    write_control(stale, "stop")  # left over from an earlier session, an hour ago
    hour_ago = time.time() - 3600
    os.utime(stale / "control", (hour_ago, hour_ago))
    config = replace(tiny_config, train=replace(tiny_config.train, max_steps=4, eval_every=4))
    assert Trainer(config, stale, device="cpu").run()["reason"] == "finished"

    fresh = tmp_path / "fresh"
    trainer = Trainer(config, fresh, device="cpu")
    write_control(fresh, "stop")  # the controller was quicker than the trainer's set-up
    summary = trainer.run()
    assert summary["reason"] == "stopped" and summary["step"] == 0
    assert read_json(fresh / "checkpoints" / "last" / "meta.json")["step"] == 0
    assert not (fresh / "control").exists()  # consumed, so a --resume starts clean


def test_device_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    from attnlab import device as device_module
    from attnlab.errors import AttnlabError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module, "_mps_available", lambda: False)
    assert device_module.resolve_device("auto").type == "cpu"
    with pytest.raises(AttnlabError, match="no CUDA device"):
        device_module.resolve_device("cuda")
    with pytest.raises(AttnlabError, match='did you mean "cuda"'):
        device_module.resolve_device("cdua")
    monkeypatch.setattr(device_module, "_mps_available", lambda: True)
    assert device_module.resolve_device("auto").type == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device_module.resolve_device("auto").type == "cuda"


@pytest.mark.parametrize("arch", ["rnn", "transformer", "decoder-only", "lm"])
def test_every_eval_event_equals_attnlab_eval_of_the_checkpoint_saved_at_that_step(tmp_path, arch):
    """The trainer's real optimizer (fused AdamW on CPU) between evals; each eval event must be
    what a fresh ``attnlab eval`` of the checkpoint written at that step reports, exactly."""
    import json
    import shutil

    from click.testing import CliRunner

    from attnlab.cli import cli
    from attnlab.config import ExperimentConfig
    from attnlab.experiment import apply_overrides

    overrides = [
        "data.train_size=400",
        "data.dev_size=40",
        "data.max_len=8",
        "model.hidden=32",
        "model.emb=16",
        "train.max_steps=40",
        "train.batch_size=32",
        "train.eval_every=10",
        "train.lr=0.01",
        "train.samples=0",
        "train.eval_sentences=30",
        f"model.arch={arch}",
    ]
    if arch == "transformer":
        overrides += ["model.layers=1", "model.heads=2", "model.ff=32"]
    if arch in ("decoder-only", "lm"):
        overrides += ["model.dec_layers=2", "model.d_model=32", "model.heads=2", "model.ff=32"]
    keys = ("bleu", "chrf", "exact_match", "loss")
    if arch == "lm":  # a decoder-only language model on a text file: its fixed dev windows
        text = tmp_path / "text.txt"
        text.write_text("".join(f"line {i % 37} of {i % 11}.\n" for i in range(300)))
        overrides[-1] = "model.arch=decoder-only"
        overrides += [f"data.path={text}", "data.task=lm", "data.tokenizer=char"]
        overrides += ["data.block_size=24", "data.dev_windows=30", "data.dev_fraction=0.3"]
        keys = ("loss", "perplexity", "bits_per_token", "n", "tokens")
    config = apply_overrides(ExperimentConfig(name="evalcheck"), overrides)
    run_dir = tmp_path / "run"
    snapshots: dict[int, object] = {}

    def on_event(event):
        if event["type"] == "checkpoint" and event["tag"] == "last":
            snapshots[event["step"]] = shutil.copytree(
                event["path"], tmp_path / f"step-{event['step']}"
            )

    Trainer(config, run_dir, on_event=on_event, device="cpu").run()
    evals = [e for e in iter_events(run_dir) if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [10, 20, 30, 40]
    assert len({e[keys[0]] for e in evals}) > 1  # the model changed between evals
    for event in evals:
        assert event["n"] == 30  # train.eval_sentences of the 40 dev sentences (LM: windows)
        snapshot = str(snapshots[event["step"]])
        result = CliRunner().invoke(cli, ["eval", snapshot, "--max-sentences", "30", "--json"])
        assert result.exit_code == 0, result.output
        fresh = json.loads(result.output)
        assert fresh["step"] == event["step"]
        for key in keys:
            assert fresh[key] == event[key], (event["step"], key, fresh[key], event[key])


def test_weights_that_turn_non_finite_in_the_last_update_before_an_eval_are_never_saved(
    tmp_path, tiny_config, monkeypatch
):
    """The loss of steps 4–6 is finite (computed before each update), but step 6's update
    leaves inf in the weights: the step-6 eval must not overwrite the good step-3 checkpoints."""
    import attnlab.train.trainer as trainer_module

    real_make = trainer_module.make_optimizer

    def make_optimizer(model, cfg):
        optimizer = real_make(model, cfg)
        real_step, count = optimizer.step, {"n": 0}

        def step(*args, **kwargs):
            out = real_step(*args, **kwargs)
            count["n"] += 1
            if count["n"] == 6:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("inf"))
            return out

        optimizer.step = step
        return optimizer

    monkeypatch.setattr(trainer_module, "make_optimizer", make_optimizer)
    run_dir = tmp_path / "run"
    config = replace(
        tiny_config, train=replace(tiny_config.train, max_steps=9, eval_every=3, log_every=3)
    )
    summary = Trainer(config, run_dir, device="cpu").run()
    assert summary["reason"] == "error" and summary["exit_code"] == 1
    errors = [e for e in iter_events(run_dir) if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["kind"] == "nan" and "step 3" in errors[0]["message"]
    for tag in ("last", "best"):
        assert read_json(run_dir / "checkpoints" / tag / "meta.json")["step"] == 3
        weights, _ = read_tensors(run_dir / "checkpoints" / tag / "model.safetensors")
        assert all(torch.isfinite(w).all() for w in weights.values())


def test_cpu_and_cuda_out_of_memory_are_both_kind_oom():
    from attnlab.train.trainer import is_out_of_memory

    try:
        torch.empty(10**15)  # the CPU allocator's own error (a RuntimeError)
    except RuntimeError as err:
        assert is_out_of_memory(err)
    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_a_tiny_run_trains_on_each_device(tmp_path, tiny_config, device):
    """End to end on the device (CUDA: bf16 autocast, pinned batches); the checkpoint's
    weights are finite and score the same dev loss as the eval event logged."""
    summary = Trainer(tiny_config, tmp_path / "run", device=device.type).run()
    assert summary["reason"] == "finished" and summary["step"] == tiny_config.train.max_steps
    assert summary["device"].startswith(device.type)
    start = next(e for e in iter_events(tmp_path / "run") if e["type"] == "start")
    assert start["device"].startswith(device.type) and start["world_size"] == 1
    steps = [e for e in iter_events(tmp_path / "run") if e["type"] == "step"]
    assert all(math.isfinite(e["loss"]) and e["world_size"] == 1 for e in steps)
    loaded = load_checkpoint(tmp_path / "run" / "checkpoints" / "last", device=device)
    assert next(loaded.model.parameters()).device.type == device.type
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())


def test_compile_failure_falls_back_to_eager_with_one_note(
    tmp_path, tiny_config, monkeypatch, capsys
):
    """train.compile: a model torch.compile cannot handle trains eagerly, said once."""
    calls = []

    def broken_compile(module, *args, **kwargs):
        def compiled(*a, **k):
            calls.append(1)
            raise RuntimeError("backend exploded\nsecond line")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    config = replace(tiny_config, train=replace(tiny_config.train, compile=True))
    summary = Trainer(config, tmp_path / "run").run()
    assert summary["reason"] == "finished" and calls == [1]  # tried once, then eager
    notes = [e for e in iter_events(tmp_path / "run") if e["type"] == "note"]
    assert len(notes) == 1 and "backend exploded" in notes[0]["message"]
    assert "second line" not in notes[0]["message"]
    err = capsys.readouterr().err
    assert err.count("note: torch.compile failed") == 1


def test_a_loss_that_cannot_compile_falls_back_to_eager_with_one_note(
    tmp_path, tiny_config, monkeypatch, capsys
):
    """train.compile compiles the loss too: if only the loss fails at its call, training goes
    on eagerly (model and loss) from that step, said once, with the weights of compile off."""

    def compile_(fn, *args, **kwargs):
        if getattr(fn, "__name__", "") != "token_loss_sum":
            return fn

        def broken(*a, **k):
            raise RuntimeError("loss backend exploded")

        return broken

    monkeypatch.setattr(torch, "compile", compile_)
    config = replace(tiny_config, train=replace(tiny_config.train, compile=True, eval_every=1000))
    assert Trainer(config, tmp_path / "on").run()["reason"] == "finished"
    notes = [e for e in iter_events(tmp_path / "on") if e["type"] == "note"]
    assert len(notes) == 1 and "loss backend exploded" in notes[0]["message"]
    assert capsys.readouterr().err.count("note: torch.compile failed") == 1
    Trainer(replace(config, train=replace(config.train, compile=False)), tmp_path / "off").run()
    on, _ = read_tensors(tmp_path / "on" / "checkpoints" / "last" / "model.safetensors")
    off, _ = read_tensors(tmp_path / "off" / "checkpoints" / "last" / "model.safetensors")
    assert all(torch.equal(on[k], off[k]) for k in on)


def test_compiled_training_equals_eager_when_compile_is_the_identity(
    tmp_path, tiny_config, monkeypatch
):
    """With compile on, the trainer steps through the compiled callables of the model and of
    the loss (here wrappers that call the original): the same weights as compile off."""
    called = []

    def identity_compile(fn, *args, **kwargs):
        def compiled(*a, **k):
            called.append(getattr(fn, "__name__", type(fn).__name__))
            return fn(*a, **k)

        return compiled

    monkeypatch.setattr(torch, "compile", identity_compile)
    config = replace(tiny_config, train=replace(tiny_config.train, compile=True, eval_every=1000))
    Trainer(config, tmp_path / "on").run()
    steps = config.train.max_steps
    assert called.count("token_loss_sum") == steps and len(called) == 2 * steps
    Trainer(replace(config, train=replace(config.train, compile=False)), tmp_path / "off").run()
    on, _ = read_tensors(tmp_path / "on" / "checkpoints" / "last" / "model.safetensors")
    off, _ = read_tensors(tmp_path / "off" / "checkpoints" / "last" / "model.safetensors")
    assert on.keys() == off.keys() and all(torch.equal(on[k], off[k]) for k in on)


def test_a_run_killed_inside_its_first_save_resumes_from_the_start(tmp_path, tiny_config):
    """No checkpoint yet (the kill fell inside the first save): --resume starts over and clears
    the killed save's scratch directory even when its PID now belongs to a live process."""
    import shutil

    straight = tmp_path / "straight"
    Trainer(tiny_config, straight, device="cpu").run()
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    shutil.rmtree(run_dir / "checkpoints")
    scratch = run_dir / "checkpoints" / f".last.tmp-{os.getppid()}-0123abcd"  # a live PID
    scratch.mkdir(parents=True)
    (scratch / "model.safetensors").write_bytes(b"half")
    summary = Trainer(tiny_config, run_dir, device="cpu", resume=True).run()
    assert summary["reason"] == "finished" and summary["step"] == 6
    assert not scratch.exists()
    assert load_checkpoint(run_dir / "checkpoints" / "last").step == 6

    def losses(directory):
        return [e["loss"] for e in iter_events(directory) if e["type"] == "step"]

    assert losses(run_dir)[-6:] == losses(straight)  # the second session repeats the run exactly


def test_eval_events_under_amp_equal_a_float32_attnlab_eval(tmp_path, tiny_config, monkeypatch):
    """``train.amp`` (bf16 autocast on CUDA) is for the training steps only: the eval event
    must still equal ``attnlab eval`` of the saved checkpoint, which runs in float32. CPU
    bf16 autocast stands in for CUDA's here, so the check runs without a GPU."""
    import contextlib
    import json

    from click.testing import CliRunner

    from attnlab.cli import cli
    from attnlab.experiment import apply_overrides

    @contextlib.contextmanager
    def cpu_amp(device, enabled):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            yield

    monkeypatch.setattr("attnlab.train.trainer.autocast", cpu_amp)
    config = apply_overrides(
        tiny_config, ["train.amp=true", "train.max_steps=3", "train.samples=0"]
    )
    Trainer(config, tmp_path / "run", device="cpu").run()
    (event,) = [e for e in iter_events(tmp_path / "run") if e["type"] == "eval"]
    last = str(tmp_path / "run" / "checkpoints" / "last")
    result = CliRunner().invoke(cli, ["eval", last, "--max-sentences", str(event["n"]), "--json"])
    assert result.exit_code == 0, result.output
    fresh = json.loads(result.output)
    assert fresh["step"] == event["step"] == 3
    for key in ("loss", "bleu", "chrf", "exact_match"):
        assert fresh[key] == event[key], (key, fresh[key], event[key])


@pytest.mark.parametrize("stored", [["decode.sample=true"], ["decode.beam=3", "decode.nbest=2"]])
def test_eval_event_of_a_run_stored_with_another_search_is_attnlab_eval_decoder_greedy(
    tmp_path, tiny_config, stored
):
    """Training evaluates greedily whatever ``[decode]`` says; ``attnlab eval --decoder
    greedy`` reproduces the event although the run's stored config selects another search
    (before: "decode.decoder=greedy contradicts decode.sample=true", with no flag to drop it)."""
    import json

    from click.testing import CliRunner

    from attnlab.cli import cli
    from attnlab.experiment import apply_overrides

    config = apply_overrides(tiny_config, [*stored, "train.max_steps=3", "train.samples=0"])
    Trainer(config, tmp_path / "run", device="cpu").run()
    (event,) = [e for e in iter_events(tmp_path / "run") if e["type"] == "eval"]
    args = ["eval", str(tmp_path / "run"), "--max-sentences", str(event["n"]), "--json"]
    result = CliRunner().invoke(cli, [*args, "--decoder", "greedy"])
    assert result.exit_code == 0, result.output
    fresh = json.loads(result.output)
    for key in ("loss", "bleu", "chrf", "exact_match"):
        assert fresh[key] == event[key], (key, fresh[key], event[key])
    # a contradiction on the command line itself is still refused in one line
    result = CliRunner().invoke(cli, [*args, "--decoder", "greedy", "--beam", "4"])
    assert result.exit_code != 0 and "contradicts decode.beam=4" in result.output


def test_the_device_line_counts_threads_in_words():
    """The start event's device: "cpu (1 thread)", "cpu (2 threads)"."""
    from attnlab.device import describe

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert describe(torch.device("cpu")) == "cpu (1 thread)"
        torch.set_num_threads(2)
        assert describe(torch.device("cpu")) == "cpu (2 threads)"
    finally:
        torch.set_num_threads(before)


def test_an_unknown_control_word_leaves_a_note(tmp_path, tiny_config):
    """An unknown word was dropped with no trace: the run's log now says what was ignored."""
    run_dir = tmp_path / "run"

    def on_event(event):
        if event["type"] == "step" and event["step"] == 2:
            (run_dir / "control").write_text("explode\n")

    summary = Trainer(tiny_config, run_dir, on_event=on_event, device="cpu").run()
    assert (summary["reason"], summary["step"]) == ("finished", 6)
    notes = [e for e in iter_events(run_dir) if e["type"] == "note"]
    assert [n["message"] for n in notes] == [
        f"control: unknown word 'explode' in {run_dir / 'control'} ignored; "
        "valid: pause, resume, save, stop"
    ]


@pytest.mark.parametrize("kind", ["sparse", "fifo"])
def test_a_giant_or_fifo_control_file_is_read_without_bound_or_block(tmp_path, tiny_config, kind):
    """A 3 GB sparse RUN/control took the trainer past 8.5 GB (it was read whole); a FIFO
    there hung it in open(). The first 64 bytes are read, and only from a regular file."""
    import os
    import resource

    run_dir = tmp_path / "run"

    def on_event(event):
        if event["type"] == "step" and event["step"] == 2:
            path = run_dir / "control"
            if kind == "sparse":
                with open(path, "wb") as handle:
                    handle.truncate(3 << 30)
            else:
                os.mkfifo(path)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary = Trainer(tiny_config, run_dir, on_event=on_event, device="cpu").run()
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert (summary["reason"], summary["step"]) == ("finished", 6)
    assert grew_mb < 500, f"peak memory grew by {grew_mb:.0f} MB"
    notes = [e["message"] for e in iter_events(run_dir) if e["type"] == "note"]
    if kind == "fifo":
        assert notes == [
            f"control: {run_dir / 'control'}: is a FIFO, not a regular file; attnlab reads only "
            "regular files; ignored"
        ]


def test_resume_with_a_symlinked_last_removes_the_link_not_its_target(tmp_path, tiny_config):
    """checkpoints/last a symlink: the save moved the link aside as .last.old-PID-*, rmtree
    refused it (a symlink), the error was ignored and the link stayed behind."""
    run_dir = tmp_path / "run"
    Trainer(tiny_config, run_dir, device="cpu").run()
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "last").rename(checkpoints / "kept-last")
    (checkpoints / "last").symlink_to("kept-last")
    longer = replace(tiny_config, train=replace(tiny_config.train, max_steps=8))
    summary = Trainer(longer, run_dir, device="cpu", resume=True).run()
    assert (summary["reason"], summary["step"]) == ("finished", 8)
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.startswith(".")) == []
    assert (checkpoints / "last").is_dir() and not (checkpoints / "last").is_symlink()
    assert load_checkpoint(checkpoints / "last").step == 8
    assert load_checkpoint(checkpoints / "kept-last").step == 6  # the target is untouched
