"""Data-parallel training (torchrun + DDP, gloo on CPU): batch-plan sharding (fast) and
2-process runs (slow): equivalence with one process, a synchronised stop, uneven shards,
resume with another process count."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.events import iter_events, read_events
from attnlab.train.distributed import (
    Dist,
    check_nproc,
    cpu_threads_per_rank,
    shard_plan,
    torchrun_argv,
)

# -- sharding (fast) -------------------------------------------------------------------------


@pytest.mark.parametrize("n_batches", [1, 2, 5, 8, 9, 17])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_plan_gives_every_rank_the_same_steps_and_each_batch_once(n_batches, world):
    shares = [shard_plan(n_batches, world, rank) for rank in range(world)]
    steps = {len(share) for share in shares}
    assert len(steps) == 1  # every rank takes as many steps: no rank waits for the others
    (n_steps,) = steps
    if n_batches >= world:
        assert n_steps == n_batches // world  # the remainder (< world batches) is dropped
        taken = sorted(i for share in shares for i in share)
        assert taken == list(range(n_steps * world))  # each kept plan batch exactly once
    else:
        assert n_steps == 1  # fewer batches than ranks: one step, wrapping around
        assert [share[0] for share in shares] == [r % n_batches for r in range(world)]


def test_shard_plan_global_step_is_n_consecutive_plan_batches():
    world = 3
    shares = [shard_plan(10, world, rank) for rank in range(world)]
    for step in range(3):
        assert [shares[rank][step] for rank in range(world)] == [
            3 * step,
            3 * step + 1,
            3 * step + 2,
        ]


def test_shard_plan_resumes_mid_epoch_with_another_world_size():
    # Two processes consumed plan batches 0..3 (2 global steps); one process goes on at 4.
    assert shard_plan(7, 1, 0, start=4) == [4, 5, 6]
    assert shard_plan(7, 2, 0, start=4) == [4] and shard_plan(7, 2, 1, start=4) == [5]
    assert shard_plan(7, 2, 0, start=6) == []  # one batch left for two ranks: next epoch
    assert shard_plan(0, 2, 0) == []


def test_cpu_threads_per_rank_share_the_cores():
    assert cpu_threads_per_rank(2, cores=16) == 8
    assert cpu_threads_per_rank(3, cores=16) == 5
    assert cpu_threads_per_rank(4, cores=2) == 1  # never 0


def test_one_process_dist_is_a_no_op():
    alone = Dist()
    assert not alone.active and alone.is_primary
    assert alone.sync_step(4, True, 123) == (4, True, 123)
    loss = torch.tensor(2.5)
    assert alone.all_reduce_sum(loss) is loss
    assert alone.primary_only(lambda: 7) == 7
    assert alone.primary_first(lambda: "data") == "data"
    assert alone.broadcast_object({"a": 1}) == {"a": 1}


def test_nproc_beyond_the_cores_is_one_error_line():
    cores = len(os.sched_getaffinity(0))
    check_nproc(cores, "cpu")
    with pytest.raises(
        AttnlabError, match=rf"train.nproc={cores + 1} exceeds the {cores} CPU cores"
    ):
        check_nproc(cores + 1, "cpu")


def test_torchrun_command_has_no_fixed_port():
    argv = torchrun_argv(2, ["train", "--quiet"])
    assert argv[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc_per_node=2" in argv and argv[-3:] == ["attnlab", "train", "--quiet"]
    assert not any("port" in a or "master" in a for a in argv)


def test_nproc_too_large_on_the_cli_exits_2(tmp_path):
    from attnlab.cli import cli

    code = cli.main(
        ["train", "--nproc", "1024", "--device", "cpu", "--out", str(tmp_path)],
        standalone_mode=False,
    )
    assert code == 2
    assert not any(tmp_path.iterdir())  # refused before any run directory was made


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("model.arch=transformer", "model.self_attention=performer", "model.d_model=16"),
    ],
)
def test_the_ddp_probe_finds_unused_parameters_and_changes_nothing(overrides):
    """wrap_model asks DDP to look for unused parameters only when a step leaves some
    without a gradient; the probe must not move the random state or a variant's counters."""
    from _tiny import tiny_config

    from attnlab.nn.model import build_model
    from attnlab.train.distributed import unused_parameters

    model = build_model(tiny_config("probe", *overrides), 12, 12).train()
    assert unused_parameters(model) == []
    model.register_parameter("spare", torch.nn.Parameter(torch.zeros(3)))
    calls = [getattr(m, "_calls", None) for m in model.modules()]
    state = torch.get_rng_state()
    assert unused_parameters(model) == ["spare"]
    assert torch.equal(torch.get_rng_state(), state)
    assert [getattr(m, "_calls", None) for m in model.modules()] == calls
    assert all(p.grad is None for p in model.parameters())


def test_wrap_model_asks_ddp_to_search_only_when_the_probe_finds_unused(tmp_path, monkeypatch):
    """find_unused_parameters: off when every parameter gets a gradient, on when the probe
    finds an unused one or cannot run the model (a one-process gloo group stands in)."""
    import torch.distributed as tdist
    from _tiny import tiny_config

    from attnlab.nn.model import build_model
    from attnlab.train import distributed

    tdist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        info = distributed.Dist(world_size=2)  # "active"; DDP itself uses the 1-process group
        model = build_model(tiny_config("wrap"), 12, 12).train()
        assert distributed.wrap_model(model, info).find_unused_parameters is False
        monkeypatch.setattr(distributed, "unused_parameters", lambda m: ["spare"])
        assert distributed.wrap_model(model, info).find_unused_parameters is True

        def cannot_run(m):
            raise RuntimeError("a variant the 2-sentence probe cannot run")

        monkeypatch.setattr(distributed, "unused_parameters", cannot_run)
        assert distributed.wrap_model(model, info).find_unused_parameters is True
    finally:
        tdist.destroy_process_group()


# -- 2 processes (slow) ------------------------------------------------------------------------

# A tiny GRU + Bahdanau experiment: 64 pairs, 16 sentences a batch (4 plan batches an epoch).
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
)


def _sets(*items: str) -> list[str]:
    return [arg for item in (*TINY, *items) for arg in ("--set", item)]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",  # a rank killed by a fatal signal prints its stacks
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }


def _events(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in iter_events(run_dir) if e["type"] == kind]


def _run(argv: list[str], timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=timeout)


def _run_torchrun(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``_run`` for a torchrun job, once more (with a warning that carries what the ranks
    said) when a rank died of SIGABRT. The abort seen at about 1 exit in 35 is fixed in the
    product (``distributed.exit_worker``); this net keeps another one visible, not fatal."""
    done = _run(argv)
    if done.returncode != 0 and "SIGABRT" in done.stderr:
        said = _failure(done)
        warnings.warn(f"a torchrun rank aborted; running the job again:\n{said}", stacklevel=2)
        out, name = argv[argv.index("--out") + 1], argv[argv.index("--run-name") + 1]
        shutil.rmtree(Path(out, name), ignore_errors=True)  # the aborted job's run directory
        done = _run(argv)
    return done


def _failure(done: subprocess.CompletedProcess[str]) -> str:
    """What a failed torchrun said: what the ranks wrote (a C++ abort's message, the Python
    stacks faulthandler dumps on a fatal signal) before torchrun's own summary, which fills
    the tail and names only the signal; then that tail."""
    own, _, summary = done.stderr.rpartition("Traceback (most recent call last)")  # torchrun's
    return own[-6000:] + "\n...\n" + summary[-1500:]


def _reference(config, steps: int, world: int) -> tuple[dict[str, torch.Tensor], list, list, list]:
    """(weights, then tokens, loss and gradient norm per step) of one process, no DDP: each
    step trains on the concatenation of ``world`` consecutive plan batches, the loss
    normalised by their token count (the update DDP must reproduce)."""
    from attnlab.data.batching import make_batch, plan_batches
    from attnlab.data.dataset import load_dataset
    from attnlab.evaluate import token_loss_sum
    from attnlab.nn.model import build_model
    from attnlab.train.trainer import make_optimizer, seed_everything

    cfg = config.train
    seed_everything(cfg.seed)  # the trainer's order: seed, data, model
    data = load_dataset(config.data)
    model = build_model(config, len(data.src_vocab), len(data.tgt_vocab))
    optimizer = make_optimizer(model, cfg)
    train = data.splits.train
    merged_batches = []
    for epoch in range(steps):
        plan = plan_batches(
            train, cfg.batch_size, cfg.batch_tokens, True, cfg.seed + epoch, cfg.bucket
        )
        for start in range(0, len(plan) - world + 1, world):
            merged_batches.append([train[i] for idx in plan[start : start + world] for i in idx])
    model.train()
    tokens, losses, norms = [], [], []
    for examples in merged_batches[:steps]:
        batch = make_batch(examples, data.src_vocab, data.tgt_vocab)
        out = model(batch.src, batch.src_mask, batch.tgt_in, teacher_forcing=1.0)
        loss = token_loss_sum(out.logits, batch.tgt_out, cfg.label_smoothing) / batch.n_tokens
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), cfg.clip)))
        optimizer.step()
        tokens.append(batch.n_tokens)
        losses.append(float(loss.detach()))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, tokens, losses, norms


@pytest.mark.slow
def test_two_ranks_update_like_one_process_on_the_merged_batches(tmp_path):
    """torchrun directly (no attnlab launcher); dropout 0; 5 steps over 3 epochs. The merged
    batch pads differently, so float32 sums differ in the last bits: 1e-6 holds at lr 1e-3."""
    from attnlab.config import ExperimentConfig
    from attnlab.experiment import apply_overrides
    from attnlab.runs import read_checkpoint

    extra = ("model.dropout=0", "train.max_steps=5", "train.eval_every=1000", "train.lr=0.001")
    argv = torchrun_argv(
        2, ["train", "--out", str(tmp_path), "--run-name", "ddp", "--quiet", *_sets(*extra)]
    )
    done = _run_torchrun(argv)
    assert done.returncode == 0, _failure(done)
    assert "find_unused_parameters" not in done.stderr  # no DDP warning for the user to read
    run_dir = tmp_path / "ddp"
    steps = _events(run_dir, "step")
    assert [e["step"] for e in steps] == [1, 2, 3, 4, 5]
    assert {e["world_size"] for e in steps} == {2}
    assert len(_events(run_dir, "start")) == 1  # one writer

    config = apply_overrides(ExperimentConfig(name="tiny"), [*TINY, *extra])
    expected, tokens, losses, norms = _reference(config, steps=5, world=2)
    weights, meta = read_checkpoint(run_dir / "checkpoints" / "last")
    assert meta["step"] == 5
    assert set(weights) == set(expected)  # unwrapped: no "module." prefix
    for name, value in expected.items():
        assert torch.allclose(weights[name], value, atol=1e-6, rtol=0), name
    # Step events carry the global loss and the global token count (cumulative).
    assert [e["tokens"] for e in steps] == [sum(tokens[: i + 1]) for i in range(5)]
    for event, loss, norm in zip(steps, losses, norms, strict=True):
        assert event["loss"] == pytest.approx(loss, abs=1e-5)
        # Adam would hide a gradient scaled by N; the clipped norm of the synced one does not.
        assert event["grad_norm"] == pytest.approx(norm, rel=1e-4)


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _start_long_run(tmp_path: Path, name: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--nproc",
        "2",
        "--out",
        str(tmp_path),
        "--run-name",
        name,
        "--quiet",
        *_sets("train.max_steps=100000", "train.eval_every=100000"),
    ]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )


def _ends_once(run_dir: Path, reason: str) -> dict:
    (done,) = _events(run_dir, "done")
    assert done["reason"] == reason
    checkpoints = _events(run_dir, "checkpoint")
    assert [(c["tag"], c["step"]) for c in checkpoints] == [("last", done["step"])]  # one
    from attnlab.runs import read_checkpoint

    _, meta = read_checkpoint(run_dir / "checkpoints" / "last")
    assert meta["step"] == done["step"]
    return done


@pytest.mark.slow
@pytest.mark.parametrize("how", ["control", "sigint"])
def test_stop_ends_both_ranks_on_one_step_with_one_checkpoint(tmp_path, how):
    """``stop`` in RUN/control, or Ctrl+C to ``attnlab train --nproc 2``: every rank ends
    on the same step (else rank 0 would hang in the next collective), one checkpoint."""
    from attnlab.runs import write_control

    run_dir = tmp_path / how
    child = _start_long_run(tmp_path, how)
    try:
        _wait_for(lambda: any(e["type"] == "step" for e in read_events(run_dir)[0]), 120, "a step")
        if how == "control":
            write_control(run_dir, "stop")
        else:
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == (0 if how == "control" else 130), err[-2000:]
    _ends_once(run_dir, "stopped" if how == "control" else "interrupted")


@pytest.mark.slow
def test_uneven_shards_finish_and_resume_continues_with_one_process(tmp_path):
    """48 pairs = 3 plan batches an epoch for 2 ranks: one step, the odd batch dropped (no
    hang); then ``--resume`` of the 2-process run in 1 process goes on from its step."""
    run_dir = tmp_path / "uneven"
    argv = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--nproc",
        "2",
        "--out",
        str(tmp_path),
        "--run-name",
        "uneven",
        "--quiet",
        *_sets("data.train_size=48", "train.max_steps=5", "train.eval_every=5"),
    ]
    first = _run(argv)
    assert first.returncode == 0, first.stderr[-2000:]
    assert _events(run_dir, "done")[-1]["reason"] == "finished"
    assert _events(run_dir, "done")[-1]["step"] == 5

    again = _run(
        [
            sys.executable,
            "-m",
            "attnlab",
            "train",
            "--resume",
            str(run_dir),
            "--nproc",
            "1",
            "--quiet",
            "--set",
            "train.max_steps=7",
        ]
    )
    assert again.returncode == 0, again.stderr[-2000:]
    starts = _events(run_dir, "start")
    assert [s["world_size"] for s in starts] == [2, 1] and starts[1]["resumed"]
    steps = [e["step"] for e in _events(run_dir, "step")]
    assert steps == [1, 2, 3, 4, 5, 6, 7]
    assert _events(run_dir, "done")[-1] == {
        **_events(run_dir, "done")[-1],
        "reason": "finished",
        "step": 7,
    }


def test_the_lab_passes_processes_through_its_preset(tmp_path):
    """Setup's "processes" is train.nproc: the preset the lab writes for its child carries
    it, and `attnlab train --preset FILE` then launches that many processes."""
    from dataclasses import replace

    from attnlab.config import ExperimentConfig
    from attnlab.experiment import load_preset
    from attnlab.launch import TrainingProcess
    from attnlab.tui.views.setup import FIELDS

    assert "train.nproc" in {field.key for field in FIELDS}
    base = ExperimentConfig()
    config = replace(base, train=replace(base.train, nproc=2))
    seen = tmp_path / "seen.toml"

    def copy_preset(preset: Path, runs: Path, name: str) -> list[str]:
        return [sys.executable, "-c", f"import shutil; shutil.copy({str(preset)!r}, {str(seen)!r})"]

    child = TrainingProcess.start(config, tmp_path / "runs", "r", command=copy_preset)
    assert child.wait(60) == 0
    assert load_preset(str(seen)).train.nproc == 2


# -- rank 0 decides, every rank follows (merged with the trainer's eval rules) ----------------


class _ScriptedDist(Dist):
    """A rank of a 2-process job whose collectives return what rank 0 would send."""

    def __init__(self, rank: int, outcome: int | None = None, state: dict | None = None):
        super().__init__(rank=rank, world_size=2)
        self.outcome, self.state, self.sent = outcome, state, []

    def primary_only(self, work):
        if self.is_primary:
            self.sent.append(work())  # what rank 0 broadcasts
            return self.sent[-1]
        return self.outcome

    def broadcast_object(self, obj):
        if self.is_primary:
            self.sent.append(obj)
            return obj
        return self.state


def _trainer_at_step(tiny_config, tmp_path, dist: Dist, step: int = 4):
    from attnlab.train.schedules import LRSchedule
    from attnlab.train.trainer import Trainer

    trainer = Trainer(tiny_config, tmp_path / "run", install_signals=False)
    trainer.dist, trainer.step = dist, step
    trainer.lr_schedule = LRSchedule(tiny_config.train)
    trainer.best_value, trainer.best_metrics, trainer.last_metrics = None, {}, {}
    trainer.bad_evals, trainer._last_saved_step = 0, 0
    return trainer


RANK0_STATE = {
    "best_value": 12.5,
    "best_metrics": {"bleu": 12.5, "loss": 1.25, "step": 4, "chosen_by": "bleu"},
    "last_metrics": {"bleu": 12.5, "loss": 1.25, "step": 4},
    "bad_evals": 0,
    "lr_schedule": {"plateau_best": 12.5, "plateau_bad": 0, "plateau_scale": 0.5},
    "last_saved_step": 4,
}


def test_a_rank_takes_rank_0s_best_checkpoint_decision_and_early_stop(tiny_config, tmp_path):
    from attnlab.train.trainer import EVAL_STOP_EARLY

    dist = _ScriptedDist(1, EVAL_STOP_EARLY, RANK0_STATE)
    trainer = _trainer_at_step(tiny_config, tmp_path, dist)
    assert trainer._evaluate_on_primary() is True
    assert trainer.best_value == 12.5 and trainer.bad_evals == 0
    assert trainer.best_metrics == RANK0_STATE["best_metrics"]
    assert trainer.last_metrics == RANK0_STATE["last_metrics"]
    assert trainer._last_saved_step == 4  # rank 0 saved `last` at this step
    assert trainer.lr_schedule.state_dict()["plateau_scale"] == 0.5


def test_a_non_finite_dev_loss_on_rank_0_stops_every_rank(tiny_config, tmp_path, monkeypatch):
    """Rank 0's NonFiniteLoss is an outcome it broadcasts (2), not a failure (-1): the
    other ranks raise NonFiniteLoss too and end with reason "error" on the same step."""
    from attnlab.train.trainer import EVAL_NON_FINITE, NonFiniteLoss

    other = _trainer_at_step(tiny_config, tmp_path, _ScriptedDist(1, EVAL_NON_FINITE, RANK0_STATE))
    with pytest.raises(NonFiniteLoss, match="step 4"):
        other._evaluate_on_primary()

    primary = _trainer_at_step(tiny_config, tmp_path, _ScriptedDist(0))

    def nan_dev() -> bool:
        raise NonFiniteLoss("dev loss became nan at step 4; no checkpoint was written")

    monkeypatch.setattr(primary, "_evaluate", nan_dev)
    with pytest.raises(NonFiniteLoss, match="dev loss became nan at step 4"):
        primary._evaluate_on_primary()
    assert primary.dist.sent[0] == EVAL_NON_FINITE  # then its bookkeeping for the others
    assert primary.dist.sent[1]["last_saved_step"] == 0


def test_a_torchrun_worker_takes_a_repeat_within_the_grace_as_the_same_ctrl_c(monkeypatch):
    from attnlab.train import signals as deferred

    clock = iter([100.0, 101.5, 102.5])
    monkeypatch.setattr(deferred.time, "monotonic", lambda: next(clock))
    signals = deferred.DeferredSignals(grace=2.0)
    signals._handle(signal.SIGINT, None)
    signals._handle(signal.SIGINT, None)  # torchrun's forwarded copy, 1.5 s later
    assert signals.hit
    with pytest.raises(KeyboardInterrupt):  # a real second Ctrl+C, 2.5 s after the first
        signals._handle(signal.SIGINT, None)


def test_the_launcher_checks_a_new_run_dir_without_making_it(tmp_path):
    from attnlab.runs import check_new_run_dir, lock_run_dir, write_config

    assert check_new_run_dir(tmp_path, "fresh") == tmp_path / "fresh"
    with pytest.raises(AttnlabError, match="not a valid run name"):
        check_new_run_dir(tmp_path, "../x", "--run-name")
    (tmp_path / "busy").mkdir()
    lock = lock_run_dir(tmp_path / "busy")
    try:
        with pytest.raises(AttnlabError, match=f"being trained by pid {os.getpid()}"):
            check_new_run_dir(tmp_path, "busy")
    finally:
        lock.release()
    (tmp_path / "done").mkdir()
    from attnlab.config import ExperimentConfig

    write_config(tmp_path / "done", ExperimentConfig(name="done"))
    with pytest.raises(AttnlabError, match="already holds a run"):
        check_new_run_dir(tmp_path, "done")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "done"]  # made nothing


@pytest.mark.slow
def test_ctrl_c_while_the_ranks_start_leaves_no_run_directory(tmp_path):
    """Ctrl+C to ``attnlab train --nproc 2`` once rank 0 has made RUN (the ranks are still
    importing / setting up): every rank stops before the first step, exit 130, no RUN."""
    run_dir = tmp_path / "early"
    child = _start_long_run(tmp_path, "early")
    try:
        _wait_for(run_dir.is_dir, 120, "rank 0 to make the run directory")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    assert not run_dir.exists()


NAN_DEV = """\
import sys

import attnlab.train.checkpointing as checkpointing  # where the trainer evaluates dev

real = checkpointing.evaluate_split


def nan_dev(*args, **kwargs):  # rank 0's dev loss turns non-finite; training stays finite
    return {**real(*args, **kwargs), "loss": float("nan")}


checkpointing.evaluate_split = nan_dev
from attnlab.cli import main

main(sys.argv[1:])
"""


@pytest.mark.slow
def test_a_nan_dev_loss_on_rank_0_ends_both_ranks_with_one_error(tmp_path):
    script = tmp_path / "nan_dev.py"
    script.write_text(NAN_DEV)
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(script),
        "train",
        "--out",
        str(tmp_path),
        "--run-name",
        "nan",
        "--quiet",
        *_sets("train.max_steps=100000", "train.eval_every=2"),
    ]
    done = _run(argv)
    assert done.returncode != 0  # torchrun: rank 0 exited 1
    run_dir = tmp_path / "nan"
    (error,) = _events(run_dir, "error")
    assert error["kind"] == "nan" and error["step"] == 2
    assert error["message"].startswith("dev loss became nan at step 2")
    (end,) = _events(run_dir, "done")
    assert (end["reason"], end["step"]) == ("error", 2)
    assert [e["step"] for e in _events(run_dir, "step")] == [1, 2]


@pytest.mark.slow
def test_two_ranks_keep_step_copies_once_and_eval_carries_entropy(tmp_path):
    """train.keep_last under 2 ranks: rank 0 alone writes the step copies (each the whole
    ``last`` of its step, no scratch left by a second writer); the eval events carry the
    attention entropy of rank 0's extra pass."""
    from attnlab.runs import read_checkpoint, step_checkpoints

    run_dir = tmp_path / "keep"
    argv = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--nproc",
        "2",
        "--out",
        str(tmp_path),
        "--run-name",
        "keep",
        "--quiet",
        *_sets("train.max_steps=6", "train.eval_every=2", "train.keep_last=2"),
    ]
    done = _run(argv)
    assert done.returncode == 0, _failure(done)
    assert [s for s, _ in step_checkpoints(run_dir)] == [4, 6]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "best",
        "last",
        "step-4",
        "step-6",
    ]
    last, _ = read_checkpoint(run_dir / "checkpoints" / "last")
    kept, meta = read_checkpoint(run_dir / "checkpoints" / "step-6")
    assert meta["step"] == 6 and all(torch.equal(kept[k], last[k]) for k in last)
    from attnlab.runs.history import HISTORY_DIR, read_history

    # the attention history: rank 0 alone writes it, one snapshot per evaluation, no scratch
    assert read_history(run_dir).steps == [2, 4, 6]
    assert not [p for p in (run_dir / HISTORY_DIR).iterdir() if p.name.endswith(".tmp")]
    evals = _events(run_dir, "eval")
    assert len(evals) == 3 and all(e["attention_entropy"].get("cross") for e in evals)
