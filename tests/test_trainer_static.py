"""The trainer's static-shape, sync-free and CUDA-graph settings on a tiny config (CPU; the
CUDA-only checks skip without a device)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attnlab.events import iter_events
from attnlab.experiment import apply_overrides
from attnlab.runs import read_tensors
from attnlab.train.trainer import Trainer


def _steps(run_dir):
    return [e for e in iter_events(run_dir) if e["type"] == "step"]


def _weights(run_dir):
    return read_tensors(run_dir / "checkpoints" / "last" / "model.safetensors")[0]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_bucket_padded_training_equals_unpadded_training(tmp_path, tiny_config, arch):
    """train.pad_buckets=on pads every batch to a bucket shape on the CPU too: the same
    losses and weights as unpadded training (no dropout: its masks depend on the shape),
    with the larger padding share logged."""
    overrides = ["model.dropout=0", "train.eval_every=1000", "train.batch_size=12"]
    if arch == "transformer":
        overrides += ["model.arch=transformer", "model.d_model=16", "model.heads=2"]
        overrides += ["model.ff=32", "model.enc_layers=1", "model.dec_layers=1"]
    base = apply_overrides(tiny_config, overrides)
    for setting in ("off", "on"):
        config = replace(base, train=replace(base.train, pad_buckets=setting, pad_multiple=8))
        assert Trainer(config, tmp_path / setting, device="cpu").run()["reason"] == "finished"
    off, on = _steps(tmp_path / "off"), _steps(tmp_path / "on")
    assert [e["step"] for e in on] == [e["step"] for e in off]
    for a, b in zip(on, off, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["tokens"] == b["tokens"]  # real target tokens, not padded positions
        assert a["padding"] > b["padding"]
    on_w, off_w = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    for key, value in off_w.items():
        if key.endswith("k_proj.bias"):  # its exact gradient is 0 (softmax is shift-invariant):
            continue  # AdamW scales float rounding there up to lr-sized steps either way
        torch.testing.assert_close(on_w[key], value, rtol=1e-4, atol=1e-5, msg=key)


# -- the sync-free step -----------------------------------------------------------------------


def test_logged_loss_and_tokens_are_the_per_step_values_summed(tmp_path, tiny_config, monkeypatch):
    """The window's loss sums on the device and is read at the log only: each step event's loss
    equals the per-step summed losses (read on the host the old way, each step) over the
    window's target tokens (counted here from the batches), and ``tokens`` is their total."""
    from attnlab.data.vocab import PAD_ID

    per_step = []
    original = Trainer._train_step

    def recording(self, batch, tokens, ratio):
        loss_sum, norm = original(self, batch, tokens, ratio)
        per_step.append((float(loss_sum), int((batch.tgt_out != PAD_ID).sum())))
        return loss_sum, norm

    monkeypatch.setattr(Trainer, "_train_step", recording)
    config = apply_overrides(
        tiny_config, ["train.max_steps=7", "train.log_every=3", "train.eval_every=1000"]
    )
    Trainer(config, tmp_path / "run", device="cpu").run()
    steps = _steps(tmp_path / "run")
    assert [e["step"] for e in steps] == [1, 3, 6, 7]
    assert len(per_step) == 7
    start = 0
    for event in steps:
        window = per_step[start : event["step"]]
        expected = sum(loss for loss, _ in window) / sum(n for _, n in window)
        assert event["loss"] == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert event["tokens"] == sum(n for _, n in per_step[: event["step"]])
        assert event["grad_norm"] is not None and event["grad_norm"] > 0
        start = event["step"]


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
TRANSFORMER = [
    "model.arch=transformer",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
    "model.dropout=0",
    "train.eval_every=1000",
]


@cuda
@pytest.mark.parametrize("graphs_setting", ["off", "on"])
def test_a_cuda_training_step_never_syncs_with_the_host(
    tmp_path, tiny_config, monkeypatch, graphs_setting
):
    """Every step runs under torch.cuda.set_sync_debug_mode("error") (a host sync in it
    raises), but the first (allocator and cuBLAS set-up) and, with graphs, a step that captures
    a new shape (capturing synchronises by design)."""
    from attnlab.train.graphs import StepGraphs

    original = Trainer._update
    strict_steps = []

    def strict(self, batch, n_tokens, ratio):
        graphs = self.step_graphs
        new_shape = graphs is not None and StepGraphs.key(batch) not in graphs.graphs
        if self.step == 0 or new_shape:
            return original(self, batch, n_tokens, ratio)
        strict_steps.append(self.step)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return original(self, batch, n_tokens, ratio)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(Trainer, "_update", strict)
    config = apply_overrides(
        tiny_config,
        [*TRANSFORMER, f"train.cuda_graphs={graphs_setting}", "train.log_every=100"],
    )
    config = apply_overrides(config, ["train.max_steps=10"])
    summary = Trainer(config, tmp_path / "run", device="cuda").run()
    assert summary["reason"] == "finished" and len(strict_steps) >= 5
    notes = [e for e in iter_events(tmp_path / "run") if e["type"] == "note"]
    assert notes == []  # graphs on: captured, not fallen back


@cuda
def test_cuda_graph_training_equals_eager_training(tmp_path, tiny_config):
    """The replayed graphs train as the eager step does (float32, no dropout, no autocast),
    the warm-up updates of each capture undone."""
    base = apply_overrides(tiny_config, [*TRANSFORMER, "train.amp=false", "train.max_steps=8"])
    for setting in ("off", "on"):
        config = apply_overrides(base, [f"train.cuda_graphs={setting}", "train.pad_buckets=on"])
        assert Trainer(config, tmp_path / setting, device="cuda").run()["reason"] == "finished"
    on, off = _steps(tmp_path / "on"), _steps(tmp_path / "off")
    for a, b in zip(on, off, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    on_w, off_w = _weights(tmp_path / "on"), _weights(tmp_path / "off")
    for key, value in off_w.items():
        if not key.endswith("k_proj.bias"):  # see test_bucket_padded_training_equals_unpadded
            torch.testing.assert_close(on_w[key], value, rtol=1e-3, atol=1e-4, msg=key)


# -- train.cuda_graphs on the CPU ---------------------------------------------------------------


def test_cuda_graphs_on_without_cuda_trains_eagerly_with_one_note(tmp_path, tiny_config, capsys):
    config = apply_overrides(tiny_config, ["model.dropout=0", "train.eval_every=1000"])
    for setting in ("auto", "on"):
        run = apply_overrides(config, [f"train.cuda_graphs={setting}"])
        assert Trainer(run, tmp_path / setting, device="cpu").run()["reason"] == "finished"
    notes = [e for e in iter_events(tmp_path / "on") if e["type"] == "note"]
    assert len(notes) == 1
    assert (
        "train.cuda_graphs=on" in notes[0]["message"] and "training eagerly" in notes[0]["message"]
    )
    assert capsys.readouterr().err.count("note: train.cuda_graphs=on") == 1
    assert [e for e in iter_events(tmp_path / "auto") if e["type"] == "note"] == []
    on_w, auto_w = _weights(tmp_path / "on"), _weights(tmp_path / "auto")
    assert all(torch.equal(on_w[k], auto_w[k]) for k in auto_w)


def test_a_step_that_cannot_be_captured_falls_back_to_eager_with_one_note(
    tmp_path, tiny_config, monkeypatch, capsys
):
    """The graph path on the CPU as far as it goes: the graph optimiser (fused, capturable,
    tensor learning rate) steps, the capture fails at the first step, training goes on eagerly,
    said once; the weights equal an eager run's on the plain optimiser."""
    from attnlab.train import graphs

    attempts = []

    def failing_run(self, batch, tokens):
        attempts.append(self.key(batch))
        raise graphs.CaptureFailed(RuntimeError("operation not permitted when stream is capturing"))

    monkeypatch.setattr(graphs.StepGraphs, "run", failing_run)
    config = apply_overrides(
        tiny_config,
        [
            "model.dropout=0",
            "train.eval_every=1000",
            "train.schedule=warmup-inverse-sqrt",
            "train.warmup=3",
        ],
    )
    config = apply_overrides(config, ["train.warmup=3", "train.pad_buckets=on"])
    Trainer(config, tmp_path / "eager", device="cpu").run()
    monkeypatch.setattr(graphs, "decide", lambda *args: (True, None))
    assert Trainer(config, tmp_path / "graphs", device="cpu").run()["reason"] == "finished"
    assert len(attempts) == 1
    notes = [e for e in iter_events(tmp_path / "graphs") if e["type"] == "note"]
    assert len(notes) == 1 and "CUDA graph capture failed" in notes[0]["message"]
    assert "not permitted" in notes[0]["message"]
    assert capsys.readouterr().err.count("note: CUDA graph capture failed") == 1
    graphed, eager = _weights(tmp_path / "graphs"), _weights(tmp_path / "eager")
    for key, value in eager.items():
        torch.testing.assert_close(graphed[key], value, rtol=1e-5, atol=1e-6, msg=key)
    # The graph optimiser's checkpoint (a tensor learning rate) resumes as a number.
    from attnlab.runs import read_trainer_state

    _, state, _ = read_trainer_state(tmp_path / "graphs")
    assert all(isinstance(g["lr"], float) for g in state["optimizer"]["param_groups"])


@pytest.mark.parametrize("first, then", [("graphs", "eager"), ("eager", "graphs")])
def test_graph_optimiser_and_plain_optimiser_resume_each_others_checkpoints(
    tmp_path, tiny_config, monkeypatch, first, then
):
    """A run saved with the graph optimiser (tensor learning rate, capturable) resumes with the
    plain one and the other way round, and continues as the run that never stopped."""
    from attnlab.train import graphs

    def no_capture(self, batch, tokens):
        raise graphs.CaptureFailed(RuntimeError("not on this device"))

    monkeypatch.setattr(graphs.StepGraphs, "run", no_capture)
    config = apply_overrides(
        tiny_config,
        [
            "model.dropout=0",
            "train.eval_every=1000",
            "train.schedule=warmup-inverse-sqrt",
            "train.warmup=3",
        ],
    )
    eight = apply_overrides(config, ["train.max_steps=8"])
    Trainer(eight, tmp_path / "straight", device="cpu").run()
    real_decide = graphs.decide

    def mode(kind):
        decide = (lambda *args: (True, None)) if kind == "graphs" else real_decide
        monkeypatch.setattr(graphs, "decide", decide)

    mode(first)
    Trainer(apply_overrides(config, ["train.max_steps=5"]), tmp_path / "split", device="cpu").run()
    mode(then)
    summary = Trainer(eight, tmp_path / "split", device="cpu", resume=True).run()
    assert summary["step"] == 8 and summary["reason"] == "finished"
    straight, split = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    for key, value in straight.items():
        torch.testing.assert_close(split[key], value, rtol=1e-5, atol=1e-6, msg=key)
