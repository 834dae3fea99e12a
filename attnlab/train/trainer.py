"""The training loop: AdamW, LR and teacher-forcing schedules, clipping, label smoothing,
periodic dev evaluation, best/last checkpoints, early stopping, control and resume.

``Trainer(config, run_dir).run()`` works in-process (tests, a TUI thread) and from the CLI.
Everything it does is written to ``run_dir`` (see attnlab.runs and attnlab.events).

Control while running: a controller writes one word to ``run_dir/control`` (the trainer
checks its ``os.stat`` signature every step): ``pause`` (stop stepping, keep polling),
``resume``, ``save`` (write ``last`` now), ``stop`` (save ``last``, ``done`` reason
"stopped"). In-process callers can use ``Trainer.control(command)`` instead. SIGINT/SIGTERM
(when ``run`` is called from the main thread) finish the current step, save ``last`` and end
with ``done`` reason "interrupted"; a second signal aborts at once. A signal during set-up
(before the ``start`` event) raises KeyboardInterrupt once set-up is over, with nothing written.

``run`` holds the run directory's lock (attnlab.runs.lock_run_dir) from set-up to the end, or
uses the one its caller took (``lock=``). Under DDP (attnlab.train.distributed) rank 0 alone
holds it and writes the run directory; a signal during set-up, rank 0's evaluation outcome
and every control word are agreed by all ranks, so they stop on the same step.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attnlab.config import ExperimentConfig, to_dict
from attnlab.data.batching import Batch, make_batch, plan_batches
from attnlab.data.task_registry import run_metric, task_metrics
from attnlab.device import autocast, describe, resolve_device
from attnlab.errors import AttnlabError
from attnlab.evaluate import token_loss_sum
from attnlab.events import (
    INTERRUPT_WORD,
    ControlCommand,
    Done,
    DoneReason,
    Error,
    Event,
    EventLog,
    Note,
    NullEventLog,
    Start,
    Step,
    exit_code,
)
from attnlab.naming import attention_roles
from attnlab.runs import (
    CONTROL_FILE,
    STATE_TENSORS,
    WriteError,
    check_optimizer_state,
    check_resume_weights,
    checkpoint_dir,
    has_resumable_checkpoint,
    jsonable,
    keep_checkpoint_vocabularies,
    lock_run_dir,
    optimizer_from_tensors,
    prepare_checkpoints,
    read_trainer_state,
    write_config,
)
from attnlab.train import distributed, graphs
from attnlab.train.checkpointing import (  # noqa: F401 - EVAL_*: importable here as before
    EVAL_GO_ON,
    EVAL_NON_FINITE,
    EVAL_STOP_EARLY,
    EvaluationAndCheckpoints,
    NonFiniteLoss,
)
from attnlab.train.control import ControlAndSignals
from attnlab.train.distributed import (
    CONTROL_CODES,
    CONTROL_WORDS,
    PEER_LOST_KIND,
    PeerFailed,
    shard_plan,
)
from attnlab.train.optim import weight_decay_groups
from attnlab.train.schedules import (
    LRSchedule,
    teacher_forcing_ratio,
)
from attnlab.train.static_shapes import bucket_padding

CONTROL_SLACK_NS = 500_000_000


def make_optimizer(model: torch.nn.Module, cfg: Any) -> torch.optim.Optimizer:
    """AdamW, fused where torch supports it for the device (CPU since torch 2.4, CUDA): one
    kernel over all parameters instead of a Python loop over ~100 tensors, ~5 % of a step here."""
    kwargs = {"lr": cfg.lr, "betas": tuple(cfg.betas), "weight_decay": cfg.weight_decay}
    try:
        return torch.optim.AdamW(weight_decay_groups(model.parameters(), cfg), fused=True, **kwargs)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(weight_decay_groups(model.parameters(), cfg), **kwargs)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass


SPLITS_CAPPED = ("dev", "test")  # the splits data.eval_max_tokens caps


class Trainer(EvaluationAndCheckpoints, ControlAndSignals):
    def __init__(
        self,
        config: ExperimentConfig,
        run_dir: Path,
        on_event: Callable[[Event], None] | None = None,  # each event, typed
        device: str = "auto",
        *,
        resume: bool = False,
        dataset: Any = None,
        install_signals: bool = True,
        lock: Any = None,
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.on_event = on_event
        self.device_name = device if device != "auto" else config.train.device
        self.resume = resume
        self.dataset = dataset
        self.install_signals = install_signals
        self.lock = lock  # a RunLock the caller holds on run_dir; None: run() takes one
        self.started = False  # True once the "start" event is written
        self._pending: ControlCommand | None = None  # a command from control() (another thread)
        self._signalled = False
        self._signal_at: float | None = None  # when this process got its first signal
        self._control_sig: tuple[int, int, int] | None = None
        # A control file written after this moment is for us (even during set-up); an older
        # one is left over from an earlier session of the run and is ignored. The slack covers
        # file systems whose timestamps come from a coarse clock. Under `attnlab train --nproc`
        # the launcher's start counts (its Ctrl+C may reach RUN/control before we exist).
        now = time.time_ns()
        self._created_ns = min(now, distributed.launch_time_ns() or now) - CONTROL_SLACK_NS
        self.step = 0

    # -- public control -----------------------------------------------------------------------

    def control(self, command: ControlCommand | str) -> None:
        """In-process equivalent of writing ``run_dir/control`` (thread-safe); an unknown
        word raises ``UnknownControlCommand`` (a ValueError)."""
        self._pending = ControlCommand.parse(command)

    def interrupt(self) -> None:
        """What a first SIGINT does: stop at the next step (or right after set-up)."""
        if self._signal_at is None:
            self._signal_at = time.monotonic()  # a repeat counts from here (see the handler)
        self._signalled = True

    # -- set-up -------------------------------------------------------------------------------

    def _setup(self) -> None:
        from attnlab.data.dataset import load_dataset
        from attnlab.nn.model import build_model, count_parameters

        # The metric the task reports that "best" means (an LM left at the default "bleu":
        # its loss); the run's config.toml records it.
        metric = run_metric(self.config.data.task, self.config.train.metric)
        if metric != self.config.train.metric:
            self.config = self.config.replace(train=replace(self.config.train, metric=metric))
        cfg = self.config.train
        seed_everything(cfg.seed)
        self.dist = distributed.init(self.device_name)  # one process: rank 0 of 1, no-op
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.device = self.dist.device if self.dist.active else resolve_device(self.device_name)
        # CUDA graphs of the step (attnlab.train.graphs) need static shapes (static_shapes).
        self.graphs_on, self._graphs_note = graphs.decide(
            self.config, self.device, self.dist.world_size
        )
        self.padding = bucket_padding(cfg, self.device, self.graphs_on)  # None: own shapes
        if self.dataset is None:  # rank 0 prepares the corpus cache, the others then read it
            self.dataset = self.dist.primary_first(lambda: load_dataset(self.config.data))
        if self.dataset.streams is not None:  # LM windows: one shape already, no filler
            self.padding = None
        if self.resume:  # the ids its weights were trained with (older toy vocabularies)
            self.dataset = keep_checkpoint_vocabularies(self.run_dir, self.dataset)
        self.dataset_meta = self.dataset.meta()
        self.model = build_model(
            self.config, len(self.dataset.src_vocab), len(self.dataset.tgt_vocab)
        )
        self.model.to(self.device)
        self.params = count_parameters(self.model)
        if self.graphs_on:
            self.optimizer = graphs.make_graph_optimizer(
                list(self.model.parameters()), cfg, self.device
            )
        else:
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
        # Rank 0 finishes or clears what a killed save left behind, before any rank reads it.
        self.dist.primary_first(self._prepare_checkpoints)
        if self.resume and has_resumable_checkpoint(self.run_dir):
            self._load_resume_state()
        # else: killed before its first checkpoint, the run starts over (same seed, same losses)
        self._prepare_parallel()
        signature = self._stat_signature(self.run_dir / CONTROL_FILE)
        self._control_sig = (
            signature if signature is None or signature[0] < self._created_ns else None
        )
        if self._interrupted_in_setup():  # Ctrl+C during set-up: stop before writing anything
            raise KeyboardInterrupt
        primary = self.dist.is_primary
        if primary:  # one writer: rank 0
            write_config(self.run_dir, self.config)
        self.events = EventLog(self.run_dir, self.on_event) if primary else NullEventLog()

    def _prepare_checkpoints(self) -> None:
        if self.dist.is_primary:
            prepare_checkpoints(self.run_dir)

    def _interrupted_in_setup(self) -> bool:
        """A signal during set-up. Under DDP any rank's signal, or the ``interrupt`` that
        ``attnlab train --nproc`` writes to RUN/control (rank 0 reads it), agreed by every rank
        in one collective: all stop here together, before anything is written."""
        if not self.dist.active:
            return self._signalled
        word = self._poll_control() if self.dist.is_primary else None
        if word == INTERRUPT_WORD:
            self._signalled = True
        elif word is not None:
            self._pending = word  # pause / save / stop: acted on at the first step
        _, signalled, _ = self.dist.sync_step(0, self._signalled, 0)
        return signalled

    def _load_resume_state(self) -> None:
        weights, state, tensors = read_trainer_state(self.run_dir)
        check_resume_weights(self.run_dir, self.model, weights, self.config)
        self.model.load_state_dict(weights)
        state_file = checkpoint_dir(self.run_dir, "last") / STATE_TENSORS
        optimizer_state = optimizer_from_tensors(tensors, state["optimizer"])
        # This run's optimiser kind (eager or graphed) whichever kind saved the checkpoint.
        optimizer_state = graphs.keep_graph_flags(self.optimizer, optimizer_state)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        check_optimizer_state(state_file, params, optimizer_state)
        try:
            self.optimizer.load_state_dict(optimizer_state)
        except (KeyError, TypeError, ValueError) as err:  # e.g. param groups of other sizes
            raise AttnlabError(f"{state_file}: optimiser state does not fit ({err})") from None
        graphs.state_on_device(self.optimizer)
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
            random.setstate((py_state[0], tuple(py_state[1]), py_state[2]))  # checked on reading
        if "rng.cpu" in tensors:
            try:
                torch.set_rng_state(tensors["rng.cpu"])
            except (TypeError, RuntimeError) as err:  # not a torch RNG state
                raise AttnlabError(
                    f"{state_file}: rng.cpu is not a torch RNG state ({err})"
                ) from None
        if torch.cuda.is_available():
            cuda_states = [tensors[k] for k in sorted(tensors) if k.startswith("rng.cuda.")]
            if len(cuda_states) == torch.cuda.device_count():
                torch.cuda.set_rng_state_all(cuda_states)

    def _prepare_parallel(self) -> None:
        """DDP (broadcasts rank 0's weights), per-rank dropout seeds and opt-in torch.compile.
        ``self.model`` stays the plain module: evaluation and checkpoints use it."""
        cfg = self.config.train
        self._eager_model = distributed.wrap_model(self.model, self.dist)
        self.train_model = self._eager_model
        if self.dist.active:
            distributed.share_redraw_generator(self.model, cfg.seed)  # features agree
            if not (self.resume and self.dist.is_primary):  # a resumed rank 0 keeps its RNG
                torch.manual_seed(cfg.seed + self.dist.rank + 7919 * self.step)
                random.seed(cfg.seed + self.dist.rank + 7919 * self.step)
        self.train_loss = token_loss_sum
        if cfg.compile:
            try:
                self.train_model = torch.compile(self._eager_model)
                # Compiled, the loss reads the logits once in their own dtype (bf16 under
                # autocast) instead of writing and reading a float32 copy of them.
                self.train_loss = torch.compile(token_loss_sum)
            except Exception as err:  # e.g. no compiler on this platform
                self._compile_failed(err)
        self.step_graphs = None
        if self.graphs_on:
            self.step_graphs = graphs.StepGraphs(self._graph_step, self.model, self.optimizer)

    def _note_skipped_eval_pairs(self) -> None:
        """One line on stderr and in the events when data.eval_max_tokens skipped dev/test
        pairs (evaluation then scores fewer sentences than the files hold)."""
        stats = self.dataset.stats
        counts = [
            (split, int(stats.get(f"{split}_too_long_dropped", 0) or 0))
            for split in ("dev", "test")
        ]
        skipped = " and ".join(f"{n} {split}" for split, n in counts if n)
        if not skipped:
            return
        message = (
            f"skipped {skipped} pairs longer than data.eval_max_tokens="
            f"{self.config.data.eval_max_tokens} tokens"
        )
        if self.dist.is_primary:
            print(f"note: {message}", file=sys.stderr, flush=True)
        self.events.emit(Note(self.step, message=message))

    def _compile_failed(self, err: BaseException) -> None:
        """One line on stderr and in the events; training goes on eagerly."""
        self.train_model, self.train_loss = self._eager_model, token_loss_sum
        cause = f"{type(err).__name__}: {_first_line(err)}"
        message = f"torch.compile failed ({cause}); training eagerly"
        if self.dist.is_primary:
            print(f"note: {message}", file=sys.stderr, flush=True)
        if hasattr(self, "events"):
            self.events.emit(Note(self.step, message=message))
        else:
            self._compile_note = message

    def _forward(self, batch: Any, ratio: float) -> Any:
        args = (batch.src, batch.src_mask, batch.tgt_in)
        amp = self.config.train.amp
        # A graph must not keep autocast's weight casts from its capture: no cache there.
        graphed = getattr(self, "step_graphs", None) is not None
        with autocast(self.device, amp, cache=False) if graphed else autocast(self.device, amp):
            return self._call("train_model", *args, teacher_forcing=ratio)

    def _train_step(
        self, batch: Batch, tokens: int | torch.Tensor, ratio: float
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One update from a device batch: forward, summed token loss, backward, clipping,
        AdamW. Nothing here reads a device value on the host (a CUDA test runs it under
        ``torch.cuda.set_sync_debug_mode("error")``), so a CUDA graph can hold it whole.
        ``tokens``: the global target-token count (a device tensor inside a graph).
        -> (the summed token loss, detached; the norm before clipping, a tensor, or None)."""
        cfg = self.config.train
        out = self._forward(batch, ratio)
        loss_sum = self._loss_sum(out.logits, batch.tgt_out)
        prefix_logits = out.extras.get("prefix_logits") if out.extras else None
        if prefix_logits is not None:  # train.prefix_loss: the source's next tokens too
            loss_sum = loss_sum + self._loss_sum(prefix_logits, batch.src[:, 1:])
        self.optimizer.zero_grad(set_to_none=True)
        # Normalised by the global token count; DDP averages gradients over the N ranks,
        # hence × N: the update equals one process's on the merged batches.
        ((loss_sum * self.dist.world_size) / tokens).backward()
        norm = None
        if cfg.clip > 0:  # foreach: a few kernels, the norm stays a device tensor
            foreach = True if self.device.type == "cuda" else None
            norm = torch.nn.utils.clip_grad_norm_(self._trainable, cfg.clip, foreach=foreach)
        self.optimizer.step()
        return loss_sum.detach(), norm

    def _graph_step(
        self, batch: Batch, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # graphs.refusal: only a constant teacher-forcing ratio is captured.
        return self._train_step(batch, tokens, teacher_forcing_ratio(self.config.train, 0))

    def _update(
        self, batch: Batch, n_tokens: int, ratio: float
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The step, replayed from its CUDA graph when graphs are on, else eagerly; a step that
        cannot be captured turns graphs off for the run, said once."""
        if self.step_graphs is not None:
            try:
                return self.step_graphs.run(batch, n_tokens)
            except graphs.CaptureFailed as err:
                self._note_eager(
                    f"CUDA graph capture failed ({_first_line(err)}); training eagerly"
                )
        return self._train_step(batch, n_tokens, ratio)

    def _note_eager(self, message: str) -> None:
        """Graphs off for the rest of the run, said once on stderr and in the events."""
        self.step_graphs = None
        if self.dist.is_primary:
            print(f"note: {message}", file=sys.stderr, flush=True)
        self.events.emit(Note(self.step, message=message))

    def _loss_tokens(self, batch: Batch) -> int:
        """The tokens the loss is summed over: the targets, plus with train.prefix_loss each
        source token after a row's first (what the loss is normalised by and tokens/s counts)."""
        if not self.config.train.prefix_loss:
            return batch.n_tokens
        return batch.n_tokens + int(batch.src_mask[:, 1:].sum())

    def _loss_sum(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self._call("train_loss", logits, targets, self.config.train.label_smoothing)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``self.<name>(...)`` (``train_model`` or ``train_loss``). Compiled, a failure at
        the call (compilation happens there, and again on new shapes) turns both back to
        eager, said once, and the call is made again eagerly."""
        fn = getattr(self, name)
        if fn is self._eager_model or fn is token_loss_sum:  # eager: its errors are real
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if is_out_of_memory(err):
                raise
            self._compile_failed(err)
            return getattr(self, name)(*args, **kwargs)

    def _sync_control(self, tokens: int) -> tuple[ControlCommand | None, int]:
        """Rank 0's control word and any rank's signal, agreed by every rank (plus the global
        token count of this step) in one collective; alone: the local word, as is."""
        word = self._poll_control() if self.dist.is_primary else None
        if word == INTERRUPT_WORD:  # written by `attnlab train --nproc` on Ctrl+C / SIGTERM
            word, self._signalled = None, True
        code, signalled, total = self.dist.sync_step(CONTROL_CODES[word], self._signalled, tokens)
        self._signalled = self._signalled or signalled  # a signal may land meanwhile
        return CONTROL_WORDS[code], total

    def _global_loss(self, window_loss: torch.Tensor) -> torch.Tensor:
        return self.dist.all_reduce_sum(window_loss)

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train until max_steps, early stop, stop or interrupt; return a summary dict."""
        # Handlers first: a signal during set-up becomes a flag, not a KeyboardInterrupt that
        # an import or a library's bare ``except`` could swallow.
        restore = self._install_signal_handlers()
        lock = self.lock
        try:
            # One lock holder, rank 0 (the others would wait on it); it made the run dir.
            if lock is None and distributed.is_primary_process():
                self.run_dir.mkdir(parents=True, exist_ok=True)
                lock = lock_run_dir(self.run_dir)
            self._setup()
        except BaseException:
            restore()
            if lock is not None and lock is not self.lock:
                lock.release()
            raise
        self._start_time = time.perf_counter()
        reason = DoneReason.ERROR
        try:
            self.events.emit(
                Start(
                    self.step,
                    run_dir=str(self.run_dir),
                    name=self.config.name,
                    config=to_dict(self.config),
                    params=self.params,
                    device=describe(self.device),
                    resumed=self.resume,
                    max_steps=self.config.train.max_steps,
                    # The variant in each attention role as built (dec-self "" resolved).
                    roles=attention_roles(self.config.model),
                    pid=os.getpid(),
                    host=socket.gethostname(),
                    dropped_pairs=int(self.dataset.stats.get("train_too_long_dropped", 0) or 0),
                    world_size=self.dist.world_size,
                    metrics=list(task_metrics(self.config.data.task)) or None,
                )
            )
            self.started = True
            if getattr(self, "_compile_note", None):
                self.events.emit(Note(self.step, message=self._compile_note))
            if self._graphs_note:  # train.cuda_graphs=on where graphs cannot run
                if self.dist.is_primary:
                    print(f"note: {self._graphs_note}", file=sys.stderr, flush=True)
                self.events.emit(Note(self.step, message=self._graphs_note))
            self._note_skipped_eval_pairs()
            try:
                reason = self._loop()
            except NonFiniteLoss as err:
                self.events.emit(Error(self.step, message=str(err), kind="nan"))
                reason = DoneReason.ERROR
            except PeerFailed:  # rank 0 stopped on an error and reports it; this rank ends
                reason = DoneReason.ERROR
            except WriteError as err:
                # No space for a checkpoint, a read-only checkpoints/: the run ends with done
                # "error" and exit code 1, and its Error event is the one line the user sees
                # (raised on, the CLI printed it a second time and exited 2).
                self.events.emit(Error(self.step, message=str(err), kind="io"))
                reason = DoneReason.ERROR
            except Exception as err:
                if self.dist.active and distributed.lost_peer(err):  # a rank was killed
                    message = f"{distributed.LOST_PEER_MESSAGE} ({type(err).__name__})"
                    self.events.emit(Error(self.step, message=message, kind=PEER_LOST_KIND))
                    reason = DoneReason.ERROR
                else:
                    self.events.emit(
                        Error(
                            self.step,
                            message=f"{type(err).__name__}: {err}",
                            kind="oom" if is_out_of_memory(err) else "exception",
                        )
                    )
                    self._done(DoneReason.ERROR)
                    raise
            self._done(reason)
        finally:
            restore()
            self.events.close()
            if self.dist.is_primary:
                with contextlib.suppress(OSError):  # consumed: a later --resume starts clean
                    (self.run_dir / CONTROL_FILE).unlink()
            if lock is not None and lock is not self.lock:
                lock.release()
        return self.summary(reason)

    def _loop(self) -> DoneReason:
        cfg = self.config.train
        model, optimizer = self.model, self.optimizer
        self._trainable = [p for p in model.parameters() if p.requires_grad]
        batches = self._batches()
        window_loss = torch.zeros((), device=self.device)  # summed token loss since last log
        window_tokens, window_steps = 0, 0
        window_padding = 0.0  # mean padding fraction of the window's batches
        window_busy_s = 0.0  # training seconds in this window before a pause
        window_start = time.perf_counter()
        grad_norm: torch.Tensor | None = None
        last_ratio, last_lr = 1.0, cfg.lr
        first_step = self.step + 1  # logged at once: progress and ETA move from the first step
        model.train()
        world = self.dist.world_size

        def log_window() -> None:
            """One ``step`` event for the steps since the last one (the one sync per window)."""
            nonlocal window_tokens, window_steps, window_padding, window_busy_s, window_start
            loss_value = float(self._global_loss(window_loss)) / max(window_tokens, 1)
            if not math.isfinite(loss_value):
                raise NonFiniteLoss(
                    f"loss became {loss_value} between steps {self.step - window_steps + 1} "
                    f"and {self.step}; {self._kept()}"
                )
            seconds = max(window_busy_s + time.perf_counter() - window_start, 1e-9)
            self.total_tokens += window_tokens
            self.train_time += seconds
            self.events.emit(
                Step(
                    self.step,
                    loss=round(loss_value, 6),
                    lr=last_lr,
                    tokens_per_s=round(window_tokens / seconds, 1),
                    mean_tokens_per_s=round(self.total_tokens / self.train_time, 1),
                    tf_ratio=round(last_ratio, 6),
                    grad_norm=None if grad_norm is None else _finite_or_none(float(grad_norm)),
                    elapsed_s=round(self.elapsed(), 3),
                    tokens=self.total_tokens,
                    padding=round(window_padding / max(window_steps, 1), 4),
                    world_size=world,
                )
            )
            window_loss.zero_()
            window_padding = 0.0
            window_tokens, window_steps, window_busy_s = 0, 0, 0.0
            window_start = time.perf_counter()

        def end_window() -> None:
            """Before a save that ends the run: log the open window, so its loss and tokens
            (the saved total a resume continues from) are not lost."""
            if window_steps:
                log_window()
            else:
                self._check_finite(self._global_loss(window_loss))

        while self.step < cfg.max_steps:
            cpu_batch = next(batches)  # this rank's share of the step (see _batches)
            if self.padding is not None:  # a static bucket shape; same loss and gradients
                cpu_batch = self.padding.apply(cpu_batch)
            if self.device.type == "cuda":
                cpu_batch = cpu_batch.pin_memory()  # the copy below is then asynchronous
            # Counted on the CPU copy (no device sync); summed over ranks with the control word.
            command, n_tokens = self._sync_control(self._loss_tokens(cpu_batch))
            if command == ControlCommand.PAUSE:
                window_busy_s += time.perf_counter() - window_start
                command = self._paused()
                window_start = time.perf_counter()
            if command == ControlCommand.STOP:
                end_window()
                self._save("last")
                return DoneReason.STOPPED
            if command == ControlCommand.SAVE:
                self._check_finite(self._global_loss(window_loss))
                self._save("last")
            if self._signalled:
                end_window()
                self._save("last")
                return DoneReason.INTERRUPTED

            batch = cpu_batch.to(self.device)
            last_ratio = teacher_forcing_ratio(cfg, self.step)
            last_lr = self.lr_schedule.lr(self.step)
            graphs.set_lr(optimizer, last_lr)
            # No host sync until the next log: the loss sums on the device, the norm stays a
            # tensor, the token count comes from the CPU batch.
            loss_sum, norm = self._update(batch, n_tokens, last_ratio)
            if norm is not None:
                grad_norm = norm
            self.step += 1
            self.batch_in_epoch += world  # plan batches consumed (by all ranks together)
            window_loss += loss_sum
            window_tokens += n_tokens
            window_padding += cpu_batch.padding_fraction
            window_steps += 1

            at_eval = self.step % cfg.eval_every == 0 or self.step == cfg.max_steps
            if self.step % cfg.log_every == 0 or at_eval or self.step == first_step:
                log_window()
            if at_eval:
                stop_early = self._evaluate_on_primary()
                window_start = time.perf_counter()  # eval time does not count as training
                if stop_early:
                    return DoneReason.EARLY_STOP  # _evaluate saved last at this step
        if self._last_saved_step != self.step:
            self._save("last")
        return "finished"

    def _batches(self) -> Iterator[Batch]:
        """Endless shuffled epochs of CPU batches; resumes at (epoch, batch_in_epoch). Every
        rank computes the same seeded plan and takes its share (``shard_plan``);
        ``batch_in_epoch`` counts plan batches, so a run resumes with any number of processes.
        A language model's batch is a pure function of (train.seed, step) instead
        (attnlab.data.lm), the step read when the batch is drawn."""
        cfg = self.config.train
        streams = self.dataset.streams
        if streams is not None:
            while True:
                yield streams.train_batch(
                    self.step, cfg.batch_size, cfg.seed, self.dist.rank, self.dist.world_size
                )
        train = self.dataset.splits.train
        src_vocab, tgt_vocab = self.dataset.src_vocab, self.dataset.tgt_vocab
        while True:
            plan = plan_batches(
                train,
                cfg.batch_size,
                cfg.batch_tokens,
                shuffle=True,
                seed=cfg.seed + self.epoch,
                bucket=cfg.bucket,
                width_multiple=1 if self.padding is None else self.padding.multiple,
            )
            share = shard_plan(len(plan), self.dist.world_size, self.dist.rank, self.batch_in_epoch)
            for index in share:
                yield make_batch([train[i] for i in plan[index]], src_vocab, tgt_vocab)
            self.epoch += 1
            self.batch_in_epoch = 0

    # -- summary ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.prior_elapsed + (time.perf_counter() - self._start_time)

    def _done(self, reason: DoneReason) -> None:
        self.events.emit(
            Done(
                self.step,
                reason=reason,
                best=jsonable(self.best_metrics),
                elapsed_s=round(self.elapsed(), 3),
                tokens_per_s=round(self.total_tokens / self.train_time, 1)
                if self.train_time
                else None,
            )
        )

    def summary(self, reason: DoneReason | str) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "reason": str(reason),
            "exit_code": exit_code(reason),
            "step": self.step,
            "params": self.params,
            "device": describe(self.device),
            "world_size": self.dist.world_size,
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


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""


def _finite_or_none(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
