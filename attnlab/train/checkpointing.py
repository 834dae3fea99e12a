"""Evaluation scheduling and checkpoint policy of the training loop: when to score dev,
what a score decides (best checkpoint, patience, a plateau LR schedule), and what is saved
(``best`` on a gain, ``last`` after every eval, the ``train.keep_last`` step copies), only
of finite weights. Under DDP rank 0 evaluates and saves; every rank takes its decisions.

``EvaluationAndCheckpoints`` is a base class of ``attnlab.train.trainer.Trainer`` (it uses
the trainer's model, optimiser, schedules, events and counters).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attnlab.device import peak_memory_mb
from attnlab.evaluate import evaluate_split
from attnlab.events import Checkpoint, Eval, Note, Sample
from attnlab.interpret.average import keep_step_copy
from attnlab.nn.archs import normalisations_of
from attnlab.runs import (
    WriteError,
    jsonable,
    optimizer_to_tensors,
    require_run_dir,
    save_checkpoint,
)
from attnlab.runs.sample_maps import store_long_maps
from attnlab.train.attention_history import history_off_reason, record_attention_history
from attnlab.train.schedules import best_eval_decision, metric_improved

# Outcomes of an evaluation (rank 0's, shared with every rank under DDP).
EVAL_GO_ON, EVAL_STOP_EARLY, EVAL_NON_FINITE = 0, 1, 2


class NonFiniteLoss(RuntimeError):
    pass


class EvaluationAndCheckpoints:
    """Dev evaluation and best/last checkpoints, mixed into ``Trainer``."""

    # Set by Trainer (declared here for the type checker and the reader).
    config: Any
    run_dir: Path
    model: Any
    optimizer: Any
    dataset: Any
    dataset_meta: Any
    device: torch.device
    dist: Any
    events: Any
    lr_schedule: Any
    params: int
    step: int
    epoch: int
    batch_in_epoch: int
    best_value: float | None
    best_metrics: dict[str, Any]
    last_metrics: dict[str, Any]
    bad_evals: int
    total_tokens: int
    train_time: float
    _last_saved_step: int
    elapsed: Callable[[], float]  # seconds of this run so far

    def _evaluate_on_primary(self) -> bool:
        """Rank 0 evaluates (and saves) while the others wait. Every rank then learns the
        outcome — go on, stop early, or stop on a non-finite dev loss or weights (NonFiniteLoss
        on every rank: none waits for a peer that stopped) — and takes rank 0's bookkeeping:
        best checkpoint, patience, LR schedule (a plateau schedule reacts to the eval)."""
        failure: list[NonFiniteLoss] = []

        def evaluate() -> int:
            try:
                return EVAL_STOP_EARLY if self._evaluate() else EVAL_GO_ON
            except NonFiniteLoss as err:  # an outcome to share, not a failure of rank 0
                failure.append(err)
                return EVAL_NON_FINITE

        outcome = self.dist.primary_only(evaluate)
        if self.dist.active:
            self._set_eval_state(self.dist.broadcast_object(self._eval_state()))
        if outcome == EVAL_NON_FINITE:
            raise (
                failure[0]
                if failure
                else NonFiniteLoss(
                    f"rank 0 stopped on a non-finite dev loss or weights at step {self.step}"
                )
            )
        return outcome == EVAL_STOP_EARLY

    def _eval_state(self) -> dict[str, Any]:
        """What an evaluation decides (on rank 0) and every rank keeps."""
        return {
            "best_value": self.best_value,
            "best_metrics": self.best_metrics,
            "last_metrics": self.last_metrics,
            "bad_evals": self.bad_evals,
            "lr_schedule": self.lr_schedule.state_dict(),
            "last_saved_step": self._last_saved_step,
        }

    def _set_eval_state(self, state: dict[str, Any]) -> None:
        self.best_value = state["best_value"]
        self.best_metrics = state["best_metrics"]
        self.last_metrics = state["last_metrics"]
        self.bad_evals = state["bad_evals"]
        self.lr_schedule.load_state_dict(state["lr_schedule"])
        self._last_saved_step = state["last_saved_step"]

    def _evaluate(self) -> bool:
        """Score dev, log eval + samples, save best/last; True when early stopping says stop."""
        cfg = self.config.train
        # Batched greedy, whatever decoder the run names for translate / eval.
        decode_cfg = replace(self.config.decode, decoder="greedy", beam=1, sample=False, nbest=1)
        # training's peak, before the evaluation's own allocations join it
        peak_mb = round(peak_memory_mb(self.device), 1)
        # In float32, not under train.amp's bf16 autocast: the event must equal what
        # `attnlab eval` of the checkpoint saved now reports (it runs in float32).
        result = evaluate_split(
            self.model,
            self.dataset,
            "dev",
            decode_cfg,
            device=self.device,
            max_sentences=cfg.eval_sentences,
            samples=cfg.samples,
            normalisations=normalisations_of(self.config),
        )
        self.model.train()
        samples = result.pop("samples", [])
        result["cost"].update(
            train_tokens_per_s=round(self.total_tokens / self.train_time, 1)
            if self.train_time
            else None,
            train_peak_memory_mb=peak_mb,
        )
        if not math.isfinite(float(result["loss"])):
            raise NonFiniteLoss(
                f"dev loss became {result['loss']} at step {self.step}; {self._kept()}"
            )
        value = float(result[cfg.metric])
        # Patience counts evals without a strict gain in train.metric; the best checkpoint
        # also moves on a tie in it that the dev loss (then BLEU) breaks.
        if metric_improved(cfg.metric, value, self.best_value):
            self.best_value = value
            self.bad_evals = 0
        else:
            self.bad_evals += 1
        decided_by = best_eval_decision(cfg.metric, result, self.best_metrics)
        improved = decided_by is not None
        if improved:
            chosen_by = (
                decided_by if decided_by == cfg.metric else f"{decided_by} (tie in {cfg.metric})"
            )
            self.best_metrics = {**result, "step": self.step, "chosen_by": chosen_by}
        self.lr_schedule.on_eval(value)
        self.last_metrics = {**result, "step": self.step}
        elapsed = round(self.elapsed(), 3)
        evaluation = Eval.build(self.step, **jsonable(result), best=improved, elapsed_s=elapsed)
        self.events.emit(evaluation)
        self._store_long_maps(samples)
        for sample in samples:
            self.events.emit(Sample.build(self.step, **sample))
        if improved:
            self._save("best")
        self._save("last")
        # after the checkpoints: a full disk loses a snapshot, never the weights
        self._record_attention_history(result)
        return cfg.patience > 0 and self.bad_evals >= cfg.patience

    def _store_long_maps(self, samples: list[dict[str, Any]]) -> None:
        """Long sample maps go to RUN/samples/ before the events name them; a map that cannot
        be written (a full disk) is left out of its event with one note, never the run."""
        if not self.dist.is_primary:
            for sample in samples:
                sample.pop("attention_array", None)
            return
        try:
            store_long_maps(self.run_dir, self.step, samples)
        except WriteError as err:
            for sample in samples:
                if sample.pop("attention_array", None) is not None:
                    sample["attention"] = None
            self.events.emit(Note(self.step, message=f"sample maps not kept: {err}"))

    def _record_attention_history(self, result: dict[str, Any]) -> None:
        """train.attention_history: this evaluation's snapshot of the fixed dev sentences (the
        weights the checkpoint saved now holds); a model with no weights to keep: one note."""
        if self.config.train.attention_history <= 0:
            return
        reason = history_off_reason(self.config)
        if reason is None and self.dataset.streams is not None:
            reason = (
                "train.attention_history: a language model has no dev sentences to keep "
                "maps of; no attention history is stored"
            )
        if reason is not None:
            if not getattr(self, "_history_noted", False):
                self._history_noted = True
                self.events.emit(Note(self.step, message=reason))
            return
        require_run_dir(self.run_dir)  # deleted under us: one line, never re-created
        record_attention_history(
            self.model, self.dataset, self.config, self.device, self.run_dir, self.step, result
        )

    def _save(self, tag: str) -> None:
        """Write a checkpoint, only of finite weights (else the last good one stays)."""
        if self.dist.is_primary:  # deleted under us: fail with one line, do not re-create it
            require_run_dir(self.run_dir)
        if not self._weights_finite():
            raise NonFiniteLoss(
                f"the weights are no longer finite at step {self.step}; {self._kept()}"
            )
        if not self.dist.is_primary:  # one writer; the weights are the same on every rank
            if tag == "last":
                self._last_saved_step = self.step
            return
        metrics = self.best_metrics if tag == "best" else (self.last_metrics or self.best_metrics)
        directory = save_checkpoint(
            self.run_dir,
            tag,
            self.model,
            self.config,
            self.dataset_meta,
            self.step,
            metrics,
            self.params,
            trainer_state=self._trainer_state() if tag == "last" else None,
        )
        if tag == "last":
            self._last_saved_step = self.step
            keep_step_copy(self.run_dir, self.step, self.config.train.keep_last)
        self.events.emit(Checkpoint(self.step, tag=tag, path=str(directory)))

    def _trainer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, optimizer_info = optimizer_to_tensors(self.optimizer.state_dict())
        tensors["rng.cpu"] = torch.get_rng_state()
        if self.device.type == "cuda":
            for i, state in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"rng.cuda.{i}"] = state
        version, internal, gauss = random.getstate()
        scalars = {
            "step": self.step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "best_value": self.best_value,
            "best_metrics": jsonable(self.best_metrics),
            "bad_evals": self.bad_evals,
            "elapsed_s": self.elapsed(),
            "total_tokens": self.total_tokens,
            "train_time": self.train_time,
            "lr_schedule": self.lr_schedule.state_dict(),
            "optimizer": optimizer_info,
            "python_random": [version, list(internal), gauss],
        }
        return tensors, scalars

    def _check_finite(self, window_loss: torch.Tensor) -> None:
        """Never save weights that a non-finite loss may already have corrupted."""
        if not math.isfinite(float(window_loss)):
            raise NonFiniteLoss(
                f"loss became {float(window_loss)} before step {self.step}; {self._kept()}"
            )

    def _weights_finite(self) -> bool:
        flags = [torch.isfinite(p).all() for p in self.model.parameters()]
        return bool(torch.stack(flags).all()) if flags else True

    def _kept(self) -> str:
        if self._last_saved_step < 0:
            return "no checkpoint was written"
        return f"kept the last good checkpoint (step {self._last_saved_step})"
