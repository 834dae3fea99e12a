"""CUDA graphs of the whole training step (``train.cuda_graphs``).

A small model's step on a large GPU is launch-bound: ~850 kernels a step, each launched from
Python, leave the device idle most of the time. Captured once as a CUDA graph, the same step
(forward, loss, backward, clipping and the AdamW update) is replayed with one launch. A graph
replays fixed shapes, so it needs static batch shapes (``attnlab.train.static_shapes``): one
graph per bucket shape, captured the first time that shape comes, all in one memory pool.

What a replay reads is copied into the graph's static input tensors first: the batch and the
step's target-token count (the loss's divisor). The learning rate lives in the optimiser as a
device tensor that the schedule writes into (``set_lr``), and AdamW is fused and capturable
(its step counters on the device), so neither the schedule nor the optimiser forces a capture
again. Capturing runs a few warm-up steps on a side stream (CUDA's rule); their updates are
undone, in place, before the capture, so graphs change no step of the run.

A run that cannot be captured trains eagerly: the reasons known before training
(``refusal``) and any failure at capture time (a host sync in a variant, an op CUDA graphs do
not support) are said once in a note, as ``train.compile`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.data.batching import Batch
from attnlab.nn.archs import arch_spec
from attnlab.train.optim import weight_decay_groups

# A step that can be captured: (device batch, target-token count) -> (summed loss, norm | None).
StepFn = Callable[[Batch, Tensor], tuple[Tensor, Tensor | None]]
WARMUP_STEPS = 3  # CUDA's advice: a few eager iterations on a side stream before capturing
BATCH_FIELDS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask")


def refusal(config: Any, device: torch.device, world_size: int) -> str | None:
    """Why this run's training step cannot be captured, or None when it can (try)."""
    cfg = config.train
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device (this run trains on {device.type})"
    if cfg.compile:
        return "train.compile is on (it compiles the step instead)"
    if cfg.pad_buckets == "off":
        return "train.pad_buckets=off (a graph replays one shape)"
    if world_size > 1:
        return "DDP (--nproc > 1) all-reduces outside a graph"
    if cfg.tf_schedule != "constant":
        return f"train.tf_schedule={cfg.tf_schedule} changes the step on the host every step"
    spec = arch_spec(config.model.arch)
    return spec.graph_refusal if spec is not None and spec.graph_refusal else None


def decide(config: Any, device: torch.device, world_size: int) -> tuple[bool, str | None]:
    """(capture the step?, a note for the run or None). auto: capture where the run allows,
    quietly eager elsewhere; on: the same, but a run that cannot is said in a note."""
    setting = config.train.cuda_graphs
    if setting == "off":
        return False, None
    reason = refusal(config, device, world_size)
    if reason is None:
        return True, None
    if setting == "on":
        return False, f"train.cuda_graphs=on but {reason}; training eagerly"
    return False, None


def make_graph_optimizer(
    params: list[torch.nn.Parameter], cfg: Any, device: torch.device
) -> torch.optim.Optimizer:
    """Fused AdamW that a graph can hold: capturable (its step counters on the device) and its
    learning rate a device tensor (``set_lr`` writes the schedule's value into it)."""
    dtype = params[0].dtype if params else torch.float32
    lr = torch.tensor(cfg.lr, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    return torch.optim.AdamW(
        weight_decay_groups(params, cfg),
        lr=lr.to(device),
        betas=tuple(cfg.betas),
        weight_decay=cfg.weight_decay,
        fused=True,
        capturable=True,
    )


def set_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
    """The schedule's learning rate into every group: in place into a tensor learning rate
    (a kernel, no host sync, the graph reads it), else as the float it is."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


def keep_graph_flags(optimizer: torch.optim.Optimizer, loaded: dict[str, Any]) -> dict[str, Any]:
    """A loaded optimiser state with this optimiser's own kind (fused / capturable, a tensor
    learning rate): a checkpoint stores the learning rate as a number and is resumed by
    eager and graphed runs alike."""
    groups = []
    for own, saved in zip(optimizer.param_groups, loaded["param_groups"], strict=False):
        merged = dict(saved)
        for key in ("fused", "capturable", "foreach"):
            if key in own:
                merged[key] = own[key]
        if isinstance(own["lr"], Tensor):
            merged["lr"] = own["lr"].fill_(float(saved.get("lr", own["lr"])))
        groups.append(merged)
    groups.extend(loaded["param_groups"][len(groups) :])
    return {**loaded, "param_groups": groups}


def state_on_device(optimizer: torch.optim.Optimizer) -> None:
    """Capturable AdamW keeps its step counters on the parameters' device; a loaded state
    (torch puts them on the CPU for a non-capturable optimiser) is moved there."""
    for group in optimizer.param_groups:
        if not group.get("capturable"):
            continue
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if isinstance(value, Tensor) and value.device != param.device:
                    state[key] = value.to(param.device)


@dataclass
class _Captured:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: Batch  # static input tensors the replay reads
    tokens: Tensor  # static: the step's target-token count
    loss: Tensor  # static output: the summed token loss of the last replay
    norm: Tensor | None  # static output: the gradient norm before clipping


class StepGraphs:
    """One captured training step per batch shape; ``run`` replays (capturing first when a
    shape is new). A failure to capture raises ``CaptureFailed`` with the weights, optimiser
    state and random state as they were before the attempt."""

    def __init__(
        self,
        step: StepFn,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        warmup: int = WARMUP_STEPS,
    ):
        self.step = step
        self.model = model
        self.optimizer = optimizer
        self.warmup = warmup
        self.graphs: dict[tuple[tuple[int, ...], ...], _Captured] = {}
        self.pool: Any = None  # shared by every graph: they never run at once

    @staticmethod
    def key(batch: Batch) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(getattr(batch, name).shape) for name in BATCH_FIELDS)

    def run(self, batch: Batch, tokens: int) -> tuple[Tensor, Tensor | None]:
        captured = self.graphs.get(self.key(batch))
        if captured is None:
            captured = self._capture(batch)
        for name in BATCH_FIELDS:
            getattr(captured.inputs, name).copy_(getattr(batch, name), non_blocking=True)
        captured.tokens.fill_(tokens)
        captured.graph.replay()
        return captured.loss, captured.norm

    # -- capture ------------------------------------------------------------------------------

    def _capture(self, batch: Batch) -> _Captured:
        inputs = Batch(*(getattr(batch, name).clone() for name in BATCH_FIELDS), batch.examples)
        tokens = torch.ones((), device=batch.src.device)
        saved = self._snapshot()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self.step(inputs, tokens)
            torch.cuda.current_stream().wait_stream(side)
            self._restore(saved)  # the warm-up updates never happened
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                loss, norm = self.step(inputs, tokens)
        except Exception as err:
            torch.cuda.synchronize()
            self._restore(saved)
            self.optimizer.zero_grad(set_to_none=True)
            raise CaptureFailed(err) from err
        if self.pool is None:
            self.pool = graph.pool()
        captured = _Captured(graph, inputs, tokens, loss, norm)
        self.graphs[self.key(batch)] = captured
        return captured

    def _snapshot(self) -> dict[str, Any]:
        params = [p.detach().clone() for p in self.model.parameters()]
        state = {
            id(p): {k: v.clone() for k, v in s.items() if isinstance(v, Tensor)}
            for p, s in self.optimizer.state.items()
        }
        rng = torch.cuda.get_rng_state() if torch.cuda.is_available() else None
        return {"params": params, "state": state, "rng": rng, "cpu_rng": torch.get_rng_state()}

    @torch.no_grad()
    def _restore(self, saved: dict[str, Any]) -> None:
        """In place (graphs already captured hold these tensors' addresses)."""
        for param, value in zip(self.model.parameters(), saved["params"], strict=True):
            param.copy_(value)
        for param, state in self.optimizer.state.items():
            before = saved["state"].get(id(param))
            for key, value in state.items():
                if not isinstance(value, Tensor):
                    continue
                if before is None:
                    value.zero_()  # made by the warm-up: a fresh AdamW state is zeros
                else:
                    value.copy_(before[key])
        if saved["rng"] is not None:
            torch.cuda.set_rng_state(saved["rng"])
        torch.set_rng_state(saved["cpu_rng"])


class CaptureFailed(RuntimeError):
    """The step could not be captured (the cause is ``__cause__``); nothing was changed."""

    def __init__(self, err: BaseException):
        super().__init__(f"{type(err).__name__}: {err}")
