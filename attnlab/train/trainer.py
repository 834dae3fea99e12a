"""The training loop: AdamW, LR and teacher-forcing schedules, clipping, label smoothing,
periodic dev evaluation, best/last checkpoints, early stopping, control and resume.

``Trainer(config, run_dir).run()`` works in-process (tests, a TUI thread) and from the CLI.
Everything it does is written to ``run_dir`` (see attnlab.runs and attnlab.train.events).

Control while running: a controller writes one word to ``run_dir/control`` (the trainer
checks its ``os.stat`` signature every step): ``pause`` (stop stepping, keep polling),
``resume``, ``save`` (write ``last`` now), ``stop`` (save ``last``, ``done`` reason
"stopped"). In-process callers can use ``Trainer.control(command)`` instead. SIGINT/SIGTERM
(when ``run`` is called from the main thread) finish the current step, save ``last`` and end
with ``done`` reason "interrupted"; a second signal aborts at once.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attnlab.config import ExperimentConfig, to_dict
from attnlab.data.batching import iterate_batches, make_batch
from attnlab.data.example import Example
from attnlab.device import autocast, describe, resolve_device
from attnlab.evaluate import evaluate_split, token_loss_sum
from attnlab.interpret.average import keep_step_copy
from attnlab.runs import (
    CONTROL_FILE,
    checkpoint_dir,
    jsonable,
    optimizer_from_tensors,
    optimizer_to_tensors,
    read_trainer_state,
    save_checkpoint,
    write_config,
)
from attnlab.train.events import EventLog
from attnlab.train.schedules import (
    LRSchedule,
    best_eval_decision,
    metric_improved,
    teacher_forcing_ratio,
)

PAUSE_POLL_S = 0.2
CONTROL_SLACK_NS = 500_000_000
EXIT_CODES = {"finished": 0, "early-stop": 0, "stopped": 0, "interrupted": 130, "error": 1}


class NonFiniteLoss(RuntimeError):
    pass


def make_optimizer(model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer:
    """AdamW, fused where torch supports it for the device (CPU since torch 2.4, CUDA): one
    kernel over all parameters instead of a Python loop over ~100 tensors, ~5 % of a step here."""
    kwargs = {"lr": cfg.lr, "betas": tuple(cfg.betas), "weight_decay": cfg.weight_decay}
    try:
        return torch.optim.AdamW(model.parameters(), fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(model.parameters(), **kwargs)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass


class Trainer:
    def __init__(
        self,
        config: ExperimentConfig,
        run_dir: Path,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        device: str = "auto",
        *,
        resume: bool = False,
        dataset: Any = None,
        install_signals: bool = True,
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.on_event = on_event
        self.device_name = device if device != "auto" else config.train.device
        self.resume = resume
        self.dataset = dataset
        self.install_signals = install_signals
        self._pending: str | None = None  # a command from control() (another thread)
        self._signalled = False
        self._control_sig: tuple[int, int, int] | None = None
        # A control file written after this moment is for us (even during set-up); an older
        # one is left over from an earlier session of the run and is ignored. The slack covers
        # file systems whose timestamps come from a coarse clock.
        self._created_ns = time.time_ns() - CONTROL_SLACK_NS
        self.step = 0

    # -- public control -----------------------------------------------------------------------

    def control(self, command: str) -> None:
        """In-process equivalent of writing ``run_dir/control`` (thread-safe)."""
        if command not in ("pause", "resume", "save", "stop"):
            raise ValueError(f"unknown control command {command!r}")
        self._pending = command

    # -- set-up -------------------------------------------------------------------------------

    def _setup(self) -> None:
        from attnlab.data.dataset import load_dataset
        from attnlab.nn.model import build_model, count_parameters

        cfg = self.config.train
        seed_everything(cfg.seed)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(self.device_name)
        if self.dataset is None:
            self.dataset = load_dataset(self.config.data)
        self.dataset_meta = self.dataset.meta()
        self.model = build_model(self.config, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab))
        self.model.to(self.device)
        self.params = count_parameters(self.model)
        self.optimizer = make_optimizer(self.model, cfg)
        self.lr_schedule = LRSchedule(cfg)
        self.epoch, self.batch_in_epoch = 0, 0
        self.best_value: float | None = None
        self.best_metrics: dict[str, Any] = {}
        self.last_metrics: dict[str, Any] = {}
        self.bad_evals = 0
        self.prior_elapsed = 0.0
        self.total_tokens = 0
        self.train_time = 0.0  # seconds spent stepping (tokens/s over the run)
        self._last_saved_step = -1
        if self.resume:
            self._load_resume_state()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_config(self.run_dir, self.config)
        self.events = EventLog(self.run_dir, self.on_event)
        signature = self._stat_signature(self.run_dir / CONTROL_FILE)
        self._control_sig = signature if signature is None or signature[0] < self._created_ns else None

    def _load_resume_state(self) -> None:
        weights, state, tensors = read_trainer_state(self.run_dir)
        self.model.load_state_dict(weights)
        self.optimizer.load_state_dict(optimizer_from_tensors(tensors, state["optimizer"]))
        for group in self.optimizer.param_groups:  # the config may have changed lr on resume
            group["initial_lr"] = self.config.train.lr
        self.lr_schedule.load_state_dict(state.get("lr_schedule", {}))
        self.step = int(state["step"])
        self._last_saved_step = self.step  # resuming from it: it is the last good checkpoint
        self.epoch = int(state.get("epoch", 0))
        self.batch_in_epoch = int(state.get("batch_in_epoch", 0))
        self.best_value = state.get("best_value")
        self.best_metrics = dict(state.get("best_metrics") or {})
        self.bad_evals = int(state.get("bad_evals", 0))
        self.prior_elapsed = float(state.get("elapsed_s", 0.0))
        self.total_tokens = int(state.get("total_tokens", 0))
        self.train_time = float(state.get("train_time", 0.0))
        py_state = state.get("python_random")
        if py_state:
            random.setstate((py_state[0], tuple(py_state[1]), py_state[2]))
        if "rng.cpu" in tensors:
            torch.set_rng_state(tensors["rng.cpu"])
        if torch.cuda.is_available():
            cuda_states = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
            if len(cuda_states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda_states)

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train until max_steps, early stop, stop or interrupt; return a summary dict."""
        self._setup()
        self._start_time = time.perf_counter()
        restore = self._install_signal_handlers()
        reason = "error"
        try:
            self.events.emit(
                "start",
                self.step,
                run_dir=str(self.run_dir),
                name=self.config.name,
                config=to_dict(self.config),
                params=self.params,
                device=describe(self.device),
                resumed=self.resume,
                max_steps=self.config.train.max_steps,
                pid=os.getpid(),
                host=socket.gethostname(),
                dropped_pairs=int(self.dataset.stats.get("train_too_long_dropped", 0) or 0),
            )
            try:
                reason = self._loop()
            except NonFiniteLoss as err:
                self.events.emit("error", self.step, message=str(err), kind="nan")
                reason = "error"
            except Exception as err:
                oom = is_out_of_memory(err)
                self.events.emit(
                    "error",
                    self.step,
                    message=f"{type(err).__name__}: {err}",
                    kind="oom" if oom else "exception",
                )
                self._done("error")
                raise
            self._done(reason)
        finally:
            restore()
            self.events.close()
            with contextlib.suppress(OSError):  # consumed: a later --resume starts clean
                (self.run_dir / CONTROL_FILE).unlink()
        return self.summary(reason)

    def _loop(self) -> str:
        cfg = self.config.train
        model, optimizer = self.model, self.optimizer
        params = [p for p in model.parameters() if p.requires_grad]
        src_vocab, tgt_vocab = self.dataset.src_vocab, self.dataset.tgt_vocab
        batches = self._batches()
        window_loss = torch.zeros((), device=self.device)  # summed token loss since last log
        window_tokens, window_steps = 0, 0
        window_padding = 0.0  # mean padding fraction of the window's batches
        window_busy_s = 0.0  # training seconds in this window before a pause
        window_start = time.perf_counter()
        grad_norm: torch.Tensor | None = None
        last_ratio, last_lr = 1.0, cfg.lr
        model.train()
        while self.step < cfg.max_steps:
            command = self._poll_control()
            if command == "pause":
                window_busy_s += time.perf_counter() - window_start
                command = self._paused()
                window_start = time.perf_counter()
            if command == "stop":
                self._check_finite(window_loss)
                self._save("last")
                return "stopped"
            if command == "save":
                self._check_finite(window_loss)
                self._save("last")
            if self._signalled:
                self._check_finite(window_loss)
                self._save("last")
                return "interrupted"

            examples = next(batches)
            cpu_batch = make_batch(examples, src_vocab, tgt_vocab)
            n_tokens = cpu_batch.n_tokens  # counted on the CPU copy: no device sync
            batch = cpu_batch.to(self.device)
            last_ratio = teacher_forcing_ratio(cfg, self.step)
            last_lr = self.lr_schedule.lr(self.step)
            for group in optimizer.param_groups:
                group["lr"] = last_lr
            with autocast(self.device, cfg.amp):
                out = model(batch.src, batch.src_mask, batch.tgt_in, teacher_forcing=last_ratio)
            loss_sum = token_loss_sum(out.logits, batch.tgt_out, cfg.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            (loss_sum / n_tokens).backward()
            if cfg.clip > 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            optimizer.step()
            self.step += 1
            self.batch_in_epoch += 1
            window_loss += loss_sum.detach()
            window_tokens += n_tokens
            window_padding += cpu_batch.padding_fraction
            window_steps += 1

            at_eval = self.step % cfg.eval_every == 0 or self.step == cfg.max_steps
            if self.step % cfg.log_every == 0 or at_eval:
                loss_value = float(window_loss) / max(window_tokens, 1)  # the one sync per window
                if not math.isfinite(loss_value):
                    raise NonFiniteLoss(
                        f"loss became {loss_value} between steps {self.step - window_steps + 1} "
                        f"and {self.step}; {self._kept()}"
                    )
                seconds = max(window_busy_s + time.perf_counter() - window_start, 1e-9)
                self.total_tokens += window_tokens
                self.train_time += seconds
                self.events.emit(
                    "step",
                    self.step,
                    loss=round(loss_value, 6),
                    lr=last_lr,
                    tokens_per_s=round(window_tokens / seconds, 1),
                    tf_ratio=round(last_ratio, 6),
                    grad_norm=None if grad_norm is None else _finite_or_none(float(grad_norm)),
                    elapsed_s=round(self.elapsed(), 3),
                    tokens=self.total_tokens,
                    padding=round(window_padding / max(window_steps, 1), 4),
                )
                window_loss.zero_()
                window_padding = 0.0
                window_tokens, window_steps, window_busy_s = 0, 0, 0.0
                window_start = time.perf_counter()
            if at_eval:
                stop_early = self._evaluate()
                window_start = time.perf_counter()  # eval time does not count as training
                if stop_early:
                    return "early-stop"  # _evaluate saved last at this step
        if self._last_saved_step != self.step:
            self._save("last")
        return "finished"

    def _batches(self) -> Iterator[list[Example]]:
        """Endless shuffled epochs; resumes at (epoch, batch_in_epoch)."""
        cfg = self.config.train
        train = self.dataset.splits.train
        skip = self.batch_in_epoch
        while True:
            iterator = iterate_batches(
                train, cfg.batch_size, cfg.batch_tokens, shuffle=True, seed=cfg.seed + self.epoch,
                bucket=cfg.bucket,
            )
            for index, examples in enumerate(iterator):
                if index < skip:
                    continue
                yield examples
            skip = 0
            self.epoch += 1
            self.batch_in_epoch = 0

    # -- evaluation and checkpoints -----------------------------------------------------------

    def _evaluate(self) -> bool:
        """Score dev, log eval + samples, save best/last; True when early stopping says stop."""
        cfg = self.config.train
        decode_cfg = replace(self.config.decode, beam=1, sample=False, nbest=1)  # batched greedy
        with autocast(self.device, cfg.amp):
            result = evaluate_split(
                self.model,
                self.dataset,
                "dev",
                decode_cfg,
                device=self.device,
                max_sentences=cfg.eval_sentences,
                samples=cfg.samples,
            )
        self.model.train()
        samples = result.pop("samples", [])
        if not math.isfinite(float(result["loss"])):
            raise NonFiniteLoss(f"dev loss became {result['loss']} at step {self.step}; {self._kept()}")
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
            chosen_by = decided_by if decided_by == cfg.metric else f"{decided_by} (tie in {cfg.metric})"
            self.best_metrics = {**result, "step": self.step, "chosen_by": chosen_by}
        self.lr_schedule.on_eval(value)
        self.last_metrics = {**result, "step": self.step}
        self.events.emit("eval", self.step, **jsonable(result), best=improved, elapsed_s=round(self.elapsed(), 3))
        for sample in samples:
            self.events.emit("sample", self.step, **sample)
        if improved:
            self._save("best")
        self._save("last")
        return cfg.patience > 0 and self.bad_evals >= cfg.patience

    def _save(self, tag: str) -> None:
        """Write a checkpoint, only of finite weights (else the last good one stays)."""
        if not self._weights_finite():
            raise NonFiniteLoss(f"the weights are no longer finite at step {self.step}; {self._kept()}")
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
        self.events.emit("checkpoint", self.step, tag=tag, path=str(directory))

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
            raise NonFiniteLoss(f"loss became {float(window_loss)} before step {self.step}; {self._kept()}")

    def _weights_finite(self) -> bool:
        flags = [torch.isfinite(p).all() for p in self.model.parameters()]
        return bool(torch.stack(flags).all()) if flags else True

    def _kept(self) -> str:
        if self._last_saved_step < 0:
            return "no checkpoint was written"
        return f"kept the last good checkpoint (step {self._last_saved_step})"

    # -- control and signals ------------------------------------------------------------------

    @staticmethod
    def _stat_signature(path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _poll_control(self) -> str | None:
        """A new command from control() or a changed ``run_dir/control`` file, else None."""
        if self._pending is not None:
            command, self._pending = self._pending, None
            return command
        path = self.run_dir / CONTROL_FILE
        signature = self._stat_signature(path)
        if signature == self._control_sig:
            return None
        self._control_sig = signature
        if signature is None:
            return None
        try:
            word = path.read_text(encoding="utf-8").strip().lower()
        except OSError:
            return None
        return word if word in ("pause", "resume", "save", "stop") else None

    def _paused(self) -> str | None:
        """Wait while paused; returns the command that ended the pause (resume/stop/save)."""
        pause_start = time.perf_counter()
        self.events.emit("control", self.step, command="pause")
        try:
            while not self._signalled:
                command = self._poll_control()
                if command == "save":
                    self._save("last")
                elif command in ("resume", "stop"):
                    self.events.emit("control", self.step, command="resume")
                    return command
                time.sleep(PAUSE_POLL_S)
            return None
        finally:
            # Time spent paused is not training time.
            self._start_time += time.perf_counter() - pause_start

    def _install_signal_handlers(self) -> Callable[[], None]:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: Any) -> None:
            if self._signalled:  # second signal: abort now
                for sig, old in previous.items():
                    signal.signal(sig, old)
                raise KeyboardInterrupt
            self._signalled = True

        for sig in previous:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore

    # -- summary ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.prior_elapsed + (time.perf_counter() - self._start_time)

    def _done(self, reason: str) -> None:
        self.events.emit(
            "done",
            self.step,
            reason=reason,
            best=jsonable(self.best_metrics),
            elapsed_s=round(self.elapsed(), 3),
            tokens_per_s=round(self.total_tokens / self.train_time, 1) if self.train_time else None,
        )

    def summary(self, reason: str) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "reason": reason,
            "exit_code": EXIT_CODES.get(reason, 1),
            "step": self.step,
            "params": self.params,
            "device": describe(self.device),
            "best": dict(self.best_metrics),
            "last": dict(self.last_metrics),
            "wall_s": self.elapsed(),
            "tokens_per_s": self.total_tokens / self.train_time if self.train_time else None,
            "best_checkpoint": str(checkpoint_dir(self.run_dir, "best")),
        }


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError."""
    if isinstance(err, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def _finite_or_none(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
