"""attnlab.train.graphs on the CPU: the setting's decisions, the graph optimiser (fused,
capturable, learning rate as a tensor) against the plain one, the undoing of warm-up steps."""

from __future__ import annotations

import pytest
import torch

from attnlab.config import ExperimentConfig, ModelConfig, TrainConfig
from attnlab.train import graphs
from attnlab.train.schedules import LRSchedule
from attnlab.train.trainer import make_optimizer

CUDA = torch.device("cuda")  # a device object only: nothing here runs on it


def _config(arch: str = "transformer", **train) -> ExperimentConfig:
    return ExperimentConfig(model=ModelConfig(arch=arch), train=TrainConfig(**train))


@pytest.mark.parametrize(
    "config, device, world, reason",
    [
        (_config(), CUDA, 1, None),
        (_config(), torch.device("cpu"), 1, "CUDA graphs need a CUDA device"),
        (_config(compile=True), CUDA, 1, "train.compile is on"),
        (_config(pad_buckets="off"), CUDA, 1, "train.pad_buckets=off"),
        (_config(), CUDA, 2, "DDP"),
        (_config(tf_schedule="linear"), CUDA, 1, "train.tf_schedule=linear"),
        (_config("rnn"), CUDA, 1, "RNN encoder packs"),
    ],
)
def test_refusal_names_what_keeps_a_run_from_capturing(config, device, world, reason):
    got = graphs.refusal(config, device, world)
    assert got is None if reason is None else reason in got


@pytest.mark.parametrize(
    "setting, device, expected",
    [
        ("auto", CUDA, (True, None)),
        ("on", CUDA, (True, None)),
        ("off", CUDA, (False, None)),
        ("auto", torch.device("cpu"), (False, None)),  # quietly eager where graphs cannot run
    ],
)
def test_decide_follows_the_setting(setting, device, expected):
    assert graphs.decide(_config(cuda_graphs=setting), device, 1) == expected


def test_decide_says_why_when_graphs_were_asked_for_and_cannot_run():
    on, note = graphs.decide(_config(cuda_graphs="on"), torch.device("cpu"), 1)
    assert not on and note.startswith("train.cuda_graphs=on but CUDA graphs need a CUDA device")
    assert note.endswith("training eagerly") and "\n" not in note


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)
    ).double()


@pytest.mark.parametrize("schedule", ["warmup-inverse-sqrt", "cosine"])
def test_graph_optimiser_with_a_tensor_learning_rate_equals_the_plain_optimiser(schedule):
    """Fused capturable AdamW whose learning rate is a tensor the schedule writes into gives
    the parameters of the trainer's optimiser with the rate set as a float, step by step
    (float64, a schedule that changes the rate every step, weight decay, clipping)."""
    cfg = TrainConfig(
        lr=0.05, schedule=schedule, warmup=3, max_steps=8, weight_decay=0.01, betas=(0.8, 0.95)
    )
    plain_model, graph_model = _model(), _model()
    plain = make_optimizer(plain_model, cfg)
    graphed = graphs.make_graph_optimizer(list(graph_model.parameters()), cfg, torch.device("cpu"))
    assert isinstance(graphed.param_groups[0]["lr"], torch.Tensor)
    assert graphed.param_groups[0]["capturable"] and graphed.param_groups[0]["fused"]
    lr_schedule = LRSchedule(cfg)
    gen = torch.Generator().manual_seed(1)
    rates = set()
    for step in range(cfg.max_steps):
        x = torch.randn(6, 5, dtype=torch.float64, generator=gen)
        target = torch.randn(6, 3, dtype=torch.float64, generator=gen)
        rate = lr_schedule.lr(step)
        rates.add(rate)
        for model, optimizer in ((plain_model, plain), (graph_model, graphed)):
            graphs.set_lr(optimizer, rate)
            optimizer.zero_grad(set_to_none=True)
            ((model(x) - target) ** 2).sum().backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), 0.5)
            optimizer.step()
        for a, b in zip(plain_model.parameters(), graph_model.parameters(), strict=True):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    assert len(rates) > 3  # the schedule did move the rate
    assert float(graphed.param_groups[0]["lr"]) == pytest.approx(rate)


def test_warm_up_updates_are_undone_in_place():
    """What a capture's warm-up changes (weights, AdamW state it created or moved, the random
    state) is put back in the same tensors, and a fresh state is zeros, as AdamW starts."""
    model = _model()
    cfg = TrainConfig(lr=0.1)
    optimizer = graphs.make_graph_optimizer(list(model.parameters()), cfg, torch.device("cpu"))
    runner = graphs.StepGraphs(lambda *a: None, model, optimizer)
    x = torch.randn(4, 5, dtype=torch.float64)

    def update():
        optimizer.zero_grad(set_to_none=True)
        model(x).sum().backward()
        optimizer.step()

    before = [p.detach().clone() for p in model.parameters()]
    addresses = [p.data_ptr() for p in model.parameters()]
    saved = runner._snapshot()
    update()
    update()
    drawn = torch.rand(3)
    runner._restore(saved)
    assert [p.data_ptr() for p in model.parameters()] == addresses
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    for state in optimizer.state.values():
        assert all(torch.all(v == 0) for v in state.values() if isinstance(v, torch.Tensor))
    assert torch.equal(torch.rand(3), drawn)  # the random stream is where it was
    # A state that existed before the warm-up is restored to its values, not zeroed.
    update()
    after_one = {k: v.clone() for s in optimizer.state.values() for k, v in s.items()}
    params_one = [p.detach().clone() for p in model.parameters()]
    saved = runner._snapshot()
    update()
    runner._restore(saved)
    restored = {k: v for s in optimizer.state.values() for k, v in s.items()}
    assert all(torch.equal(restored[k], v) for k, v in after_one.items())
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), params_one, strict=True))


def test_a_graph_run_checkpoint_keeps_the_resuming_optimisers_kind():
    """A state saved by a graphed run (capturable, tensor rate stored as a number) loads into
    an eager optimiser as an eager one, and vice versa, with the saved learning rate."""
    from attnlab.runs.state import optimizer_from_tensors, optimizer_to_tensors

    cfg = TrainConfig(lr=0.1)
    model = _model()
    graphed = graphs.make_graph_optimizer(list(model.parameters()), cfg, torch.device("cpu"))
    graphs.set_lr(graphed, 0.025)
    tensors, info = optimizer_to_tensors(graphed.state_dict())
    assert info["param_groups"][0]["lr"] == 0.025 and info["param_groups"][0]["capturable"]
    eager = make_optimizer(model, cfg)
    loaded = graphs.keep_graph_flags(eager, optimizer_from_tensors(tensors, info))
    eager.load_state_dict(loaded)
    assert eager.param_groups[0]["capturable"] is False and eager.param_groups[0]["lr"] == 0.025
    tensors, info = optimizer_to_tensors(eager.state_dict())
    again = graphs.make_graph_optimizer(list(model.parameters()), cfg, torch.device("cpu"))
    rate = again.param_groups[0]["lr"]
    again.load_state_dict(graphs.keep_graph_flags(again, optimizer_from_tensors(tensors, info)))
    assert again.param_groups[0]["capturable"] is True
    lr = again.param_groups[0]["lr"]  # a tensor still (torch copies it), with the saved rate
    assert isinstance(lr, torch.Tensor) and lr.device == rate.device and float(lr) == 0.025
