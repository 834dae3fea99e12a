"""Data-parallel training through PyTorch's own engine: torchrun + DistributedDataParallel.

``attnlab train --nproc N`` re-runs the same command under
``python -m torch.distributed.run --standalone --nproc_per_node N -m attnlab train ...``;
``torchrun ... -m attnlab train ...`` works directly (multi-node included). Each process
reads ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` from the environment; NCCL on CUDA, gloo
elsewhere. Everything here is a no-op in a single process, so the trainer calls it
unconditionally.

Guarantees the trainer builds on (see its loop):
- every rank computes the same seeded batch plan; rank r takes plan batches r, r+N, ...
  (``shard_plan``), so N consecutive plan batches form one global step and every rank takes
  the same number of steps per epoch (no rank waits forever);
- the loss is normalised by the global target-token count;
- the control word (pause / save / stop / Ctrl+C) and rank 0's evaluation outcome are
  agreed by a collective each step, so every rank acts on the same step.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from attnlab.errors import AttnlabError
from attnlab.events import INTERRUPT_WORD, ControlCommand
from attnlab.parent_death import set_parent_death_signal  # noqa: F401 - re-exported
from attnlab.train.signals import EXIT_FILE_ENV, PEER_LOST_KIND  # noqa: F401 - re-exported

T = TypeVar("T")

# Rank 0 may evaluate (or prepare a corpus) for a long time while the others wait.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)

# Control words as agreed integers: the largest on any rank wins.
CONTROL_CODES: dict[ControlCommand | None, int] = {
    None: 0,
    ControlCommand.RESUME: 1,
    ControlCommand.SAVE: 2,
    ControlCommand.PAUSE: 3,
    ControlCommand.STOP: 4,
}
assert set(CONTROL_CODES) - {None} == set(ControlCommand)  # every command has a code
CONTROL_WORDS = {code: word for word, code in CONTROL_CODES.items()}


# Under torchrun a terminal's Ctrl+C reaches a worker twice (directly and forwarded by
# torchrun): a repeat within this many seconds is the same request.
SIGNAL_GRACE_S = 2.0

# ... and the launch time (ns since the epoch): a control word written after it is for us.
LAUNCH_TIME_ENV = "ATTNLAB_LAUNCH_NS"
# ... and the launcher's pid: a rank whose launcher is gone ends (see ``die_with_parent``).
LAUNCHER_PID_ENV = "ATTNLAB_LAUNCHER_PID"

# A rank whose parent (torchrun) or launcher died gets SIGTERM (the trainer stops on the
# step, like Ctrl+C); one that has not ended this many seconds later exits at once.
ORPHAN_GRACE_S = 5.0
ORPHAN_POLL_S = 0.5
# Exit code of a rank ended by that deadline.
ORPHAN_EXIT_CODE = 1


class PeerFailed(AttnlabError):
    """Rank 0 failed in a step the others wait on (they end quietly; rank 0 reports)."""


# What the Error event (kind PEER_LOST_KIND) says when another rank is gone.
LOST_PEER_MESSAGE = "another rank of this data-parallel job is gone (killed or crashed)"


# What gloo and NCCL say when the other end of a collective has gone away.
_LOST_PEER_SIGNS = (
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
    "socket closed",
    "timed out",
    "nccl communicator was aborted",
)


def lost_peer(err: BaseException) -> bool:
    """Whether ``err``, raised in a data-parallel step, means another rank is gone."""
    if isinstance(err, PeerFailed):
        return True
    text = str(err).lower()
    distributed_error = getattr(dist, "DistError", ())
    from_backend = isinstance(err, distributed_error) or "gloo" in text or "nccl" in text
    return from_backend and any(sign in text for sign in _LOST_PEER_SIGNS)


def env_world() -> tuple[int, int, int, int]:
    """(rank, local rank, world size, local world size) from torchrun's environment."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
    return rank, local_rank, world, local_world


def launch_time_ns() -> int | None:
    """When ``attnlab train --nproc`` started this job (None when it did not)."""
    if not launched_by_torchrun():
        return None
    try:
        return int(os.environ[LAUNCH_TIME_ENV])
    except (KeyError, ValueError):
        return None


def launched_by_torchrun() -> bool:
    return env_world()[2] > 1


def is_primary_process() -> bool:
    """False on every rank but 0 (those print nothing and write nothing)."""
    return env_world()[0] == 0


def shard_plan(n_batches: int, world: int, rank: int, start: int = 0) -> list[int]:
    """Plan indices ``rank`` trains on in one epoch, from plan position ``start``.

    Rank r takes ``start + r, start + r + N, ...``: global step s consumes the N consecutive
    plan batches ``start + sN .. start + sN + N - 1``. A trailing remainder of fewer than N
    batches is dropped (every rank takes the same number of steps; the next epoch reshuffles).
    A plan shorter than N wraps around so that an epoch still has one step.
    """
    if n_batches <= 0:
        return []
    steps = (n_batches - start) // world
    if steps <= 0 and start == 0:
        steps = 1  # fewer batches than ranks: wrap around
    return [(start + step * world + rank) % n_batches for step in range(max(steps, 0))]


def cpu_threads_per_rank(local_world: int, cores: int | None = None) -> int:
    """max(1, cores // N): the ranks on one machine share its cores."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
    return max(1, cores // max(local_world, 1))


def max_processes(device: str) -> tuple[int, str]:
    """The most processes ``--nproc`` may start here and what bounds it (GPUs or cores)."""
    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        return torch.cuda.device_count(), "CUDA devices"
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return cores, "CPU cores"


def check_nproc(nproc: int, device: str) -> None:
    limit, what = max_processes(device)
    if nproc > max(limit, 1):
        raise AttnlabError(
            f"train.nproc={nproc} exceeds the {limit} {what} here; use 1..{max(limit, 1)}"
        )


def check_threads(threads: int) -> None:
    """train.threads (torch CPU threads; 0 = torch's default) at most the cores here: more
    only oversubscribes them (and torch crashed at 100,000)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    if threads > cores:
        raise AttnlabError(
            f"train.threads={threads} exceeds the {cores} CPU cores here; use 0..{cores}"
            " (0 = torch's default)"
        )


@dataclass
class Dist:
    """This process's place in the job; every method is a no-op when ``world_size`` is 1."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    device: torch.device = torch.device("cpu")  # where collectives' tensors live

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_primary(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def broadcast_int(self, value: int) -> int:
        """Rank 0's ``value`` on every rank."""
        if not self.active:
            return value
        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def broadcast_object(self, obj: Any) -> Any:
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def sync_step(self, code: int, signalled: bool, tokens: int) -> tuple[int, bool, int]:
        """One collective per step: (largest control code, any rank signalled, sum of tokens)."""
        if not self.active:
            return code, signalled, tokens
        mine = torch.tensor([code, int(signalled), tokens], dtype=torch.long, device=self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine)
        table = torch.stack(gathered).cpu()
        return int(table[:, 0].max()), bool(table[:, 1].max()), int(table[:, 2].sum())

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over ranks (a new tensor; the input is unchanged)."""
        if not self.active:
            return tensor
        total = tensor.detach().to(self.device, dtype=torch.float64).clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total.to(tensor.device)

    def primary_first(self, build: Callable[[], T]) -> T:
        """Rank 0 runs ``build`` first (e.g. prepares a corpus cache); then the others do
        (reading what it wrote). A failure on rank 0 ends the others instead of a hang."""
        if not self.active:
            return build()
        if self.is_primary:
            try:
                result = build()
            except BaseException:
                self.broadcast_int(0)
                raise
            self.broadcast_int(1)
            return result
        if not self.broadcast_int(0):
            raise PeerFailed("rank 0 failed while preparing the data")
        return build()

    def primary_value(self, make: Callable[[], T]) -> T:
        """Rank 0's ``make()`` (e.g. the new run directory) on every rank."""
        if not self.active:
            return make()
        if self.is_primary:
            try:
                value = make()
            except BaseException:
                self.broadcast_object((False, None))
                raise
            self.broadcast_object((True, value))
            return value
        ok, value = self.broadcast_object(None)
        if not ok:
            raise PeerFailed("rank 0 failed while setting up the run")
        return value

    def primary_only(self, work: Callable[[], int]) -> int:
        """Rank 0 runs ``work`` (an int outcome ≥ 0) while the others wait; all get the
        outcome. A failure on rank 0 is re-raised there and ends the others with PeerFailed."""
        if not self.active:
            return work()
        if self.is_primary:
            try:
                outcome = work()
            except BaseException:
                self.broadcast_int(-1)
                raise
            return self.broadcast_int(outcome)
        outcome = self.broadcast_int(0)
        if outcome < 0:
            raise PeerFailed("rank 0 stopped on an error")
        return outcome


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, not ours to signal
        return True
    return True


def die_with_parent(grace_s: float = ORPHAN_GRACE_S) -> None:
    """Make this torchrun worker end when torchrun or the ``attnlab train --nproc`` launcher
    dies (``kill -9`` included), instead of training on as an orphan holding the run lock.

    Linux delivers SIGTERM at the parent's death (PR_SET_PDEATHSIG); a watcher thread also
    polls the parent and the launcher pid (every platform, and a parent that died before the
    prctl). SIGTERM is the trainer's Ctrl+C: every rank stops on one step and saves ``last``
    (saves are atomic: a kill inside one leaves the previous checkpoint). A rank still alive
    ``grace_s`` after the loss exits at once (a collective may wait on a rank that is gone)."""
    parent = os.getppid()
    kernel_tells = set_parent_death_signal(signal.SIGTERM)
    exit_file = os.environ.get(EXIT_FILE_ENV)
    if exit_file:  # the launcher's second Ctrl+C kills each rank by this pid
        with contextlib.suppress(OSError):
            rank = int(os.environ.get("RANK", "0") or 0)
            Path(exit_file).with_name(f"rank-{rank}.pid").write_text(f"{os.getpid()}\n")
    try:
        launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0"))
    except ValueError:
        launcher = 0

    def orphaned() -> bool:
        if os.getppid() != parent or parent == 1:
            return True
        return 0 < launcher < 2**31 and not _alive(launcher)

    def watch() -> None:
        while not orphaned():
            time.sleep(ORPHAN_POLL_S)
        if not kernel_tells:  # on Linux the kernel sent it (torchrun too, for its launcher):
            with contextlib.suppress(OSError):  # a second one past the grace would abort the
                os.kill(os.getpid(), signal.SIGTERM)  # stop before its checkpoint
        time.sleep(grace_s)
        os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="attnlab-orphan-watch", daemon=True).start()


_CURRENT: Dist | None = None


def init(device_name: str = "auto") -> Dist:
    """Join the job torchrun started (idempotent); a one-process Dist when not under torchrun.

    CUDA: rank ``LOCAL_RANK`` uses ``cuda:LOCAL_RANK`` and NCCL; otherwise gloo. On CPU each
    rank's torch threads are set to max(1, cores // local world size).
    """
    global _CURRENT
    if _CURRENT is not None:
        return _CURRENT
    rank, local_rank, world, local_world = env_world()
    if world <= 1:
        _CURRENT = Dist()
        return _CURRENT
    die_with_parent()
    from attnlab.device import resolve_device

    device = resolve_device(device_name)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
        torch.set_num_threads(cpu_threads_per_rank(local_world))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    _CURRENT = Dist(rank, local_rank, world, local_world, device)
    return _CURRENT


def current() -> Dist:
    """The Dist ``init`` made, or a one-process one."""
    return _CURRENT if _CURRENT is not None else Dist()


def teardown() -> None:
    global _CURRENT
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _CURRENT = None


def wrap_model(model: torch.nn.Module, info: Dist) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` (it broadcasts rank 0's weights now);
    the model itself when alone.

    DDP must be told when some parameters get no gradient (``find_unused_parameters``, a
    walk over the autograd graph every step, and a warning on every run that does not need
    it); ``unused_parameters`` finds out with one tiny step before the wrap."""
    if not info.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.device.index] if info.device.type == "cuda" else None
    try:
        unused = bool(unused_parameters(model))
    except Exception:  # a model the 2-sentence probe cannot run: let DDP search every step
        unused = True
    return DistributedDataParallel(model, device_ids=ids, find_unused_parameters=unused)


def unused_parameters(model: torch.nn.Module) -> list[str]:
    """Names of the trainable parameters that a training step of ``model`` leaves without a
    gradient, found with a forward and backward pass of a copy on a 2-sentence batch (the
    model's counters, e.g. Performer's redraw schedule, and the random state stay as they
    were: the run goes on as if the probe had not happened)."""
    import copy

    from attnlab.nn.seq2seq import EOS_ID

    probe = copy.deepcopy(model)
    device = next(probe.parameters()).device
    low = EOS_ID + 1  # past the special tokens
    vocab = min(
        getattr(probe, "src_vocab_size", low + 1), getattr(probe, "tgt_vocab_size", low + 1)
    )
    tokens = torch.arange(6, device=device).remainder(max(vocab - low, 1)).add(low).view(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool, device=device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for p in probe.parameters():
            p.grad = None
        probe(tokens, mask, tokens).logits.float().sum().backward()
    return [n for n, p in probe.named_parameters() if p.requires_grad and p.grad is None]


def share_redraw_generator(model: torch.nn.Module, seed: int) -> None:
    """Give every module that redraws random features (Performer) one generator seeded
    identically on every rank, so their draws agree although dropout's do not."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "redraw_generator"):
            module.redraw_generator = generator


# The torchrun the launcher starts: torchrun's agent, a dead rank named in one line.
LAUNCH_AGENT = "attnlab.train.torchrun_entry"

# How often the launcher looks whether its child ended or an interrupt can be delivered.
LAUNCH_POLL_S = 0.2


def launch(
    nproc: int,
    cli_args: list[str],
    run_dir: Path,
    *,
    new_run: bool = False,
    interrupted: Callable[[], bool] = lambda: False,
) -> int:
    """Run ``attnlab <cli_args>`` in ``nproc`` processes under torchrun; its exit code.

    torchrun and its workers get a session of their own, so a terminal's Ctrl+C reaches only
    this process: the first SIGINT/SIGTERM writes ``interrupt`` to ``RUN/control`` (as soon as
    rank 0 has made RUN; rank 0 reads it and every rank stops on the same step — during set-up
    before anything is written, later with a ``last`` checkpoint, like Ctrl+C in one process);
    a second one kills them all at once. ``interrupted()`` is a Ctrl+C that came before this
    took over the signals. The exit code is rank 0's (130 when interrupted). A ``new_run``
    that never started (its rank 0 killed in set-up) leaves no directory.
    """
    import subprocess
    import tempfile

    sweep_launcher_scratch()
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
        exit_file = Path(scratch) / "exit-code"
        env = dict(os.environ)
        env[EXIT_FILE_ENV] = str(exit_file)
        env[LAUNCH_TIME_ENV] = str(time.time_ns())
        # torchrun sets 1 (with a warning) when unset; each rank sets its own count anyway.
        env.setdefault("OMP_NUM_THREADS", str(cpu_threads_per_rank(nproc)))
        env[LAUNCHER_PID_ENV] = str(os.getpid())
        launcher = os.getpid()

        def end_with_launcher() -> None:  # in the child, before exec: torchrun gets SIGTERM
            set_parent_death_signal(signal.SIGTERM)  # (and stops its ranks) if we die
            if os.getppid() != launcher:  # we died before the prctl
                os.kill(os.getpid(), signal.SIGTERM)

        (Path(scratch) / SCRATCH_OWNER_FILE).write_text(f"{launcher}\n", encoding="utf-8")
        proc = subprocess.Popen(
            torchrun_argv(nproc, cli_args, agent=LAUNCH_AGENT),
            env=env,
            start_new_session=True,
            preexec_fn=end_with_launcher,  # noqa: PLW1509 - one thread here: the CLI's main
        )
        (Path(scratch) / SCRATCH_OWNER_FILE).write_text(
            f"{launcher} {proc.pid}\n", encoding="utf-8"
        )
        received, delivered = 0, False

        def handler(signum: int, frame: Any) -> None:
            nonlocal received, delivered
            received += 1
            if received == 1:
                delivered = _deliver_interrupt(run_dir)
            else:  # torchrun's group, and each rank (each has a session of its own)
                for pid in _rank_pids(Path(scratch)):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if interrupted():
                received = 1
            while True:
                if received and not delivered:  # RUN may not exist yet: rank 0 makes it
                    delivered = _deliver_interrupt(run_dir)
                try:
                    returncode = proc.wait(timeout=LAUNCH_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
        if new_run:
            _remove_if_unstarted(run_dir)
        try:
            return int(exit_file.read_text().strip())
        except (OSError, ValueError):  # rank 0 never got to say (killed, crashed)
            if returncode < 0 and not received:
                name = signal.Signals(-returncode).name
                print(
                    f"error: torchrun (pid {proc.pid}) died of {name}; its ranks were stopped"
                    " (resume from checkpoints/last with --resume)",
                    file=sys.stderr,
                    flush=True,
                )
            return 130 if received else (1 if returncode else 0)


def _rank_pids(scratch: Path) -> list[int]:
    """The pids the ranks wrote into the launcher's scratch folder (``rank-R.pid``)."""
    pids = []
    for path in scratch.glob("rank-*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(path.read_text(encoding="utf-8")[:32])
            if 0 < pid < 2**31:
                pids.append(pid)
    return pids


# The launcher's scratch folders in the system temp folder: ``attnlab-ddp-*`` (the exit-code
# file), and ``attnlab-preset-*`` (the resolved experiment the ranks read). Each holds an
# owner file "<launcher pid> [<torchrun pid>]"; a launcher killed with SIGKILL cannot remove
# them, so the next launch removes those whose owners have all exited.
SCRATCH_PREFIX = "attnlab-ddp-"
PRESET_SCRATCH_PREFIX = "attnlab-preset-"
SCRATCH_OWNER_FILE = "owner"
UNOWNED_SCRATCH_MAX_AGE_S = 24 * 3600.0  # older ones without an owner file: removed too


def sweep_launcher_scratch(temp_dir: Path | None = None) -> list[Path]:
    """Remove the launcher scratch folders (ours, by uid) whose owners have all exited."""
    import shutil
    import tempfile

    temp = Path(temp_dir or tempfile.gettempdir())
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = []
    for prefix in (SCRATCH_PREFIX, PRESET_SCRATCH_PREFIX):
        for scratch in temp.glob(f"{prefix}*"):
            try:
                info = scratch.lstat()
                if not scratch.is_dir() or scratch.is_symlink():
                    continue
                if uid is not None and info.st_uid != uid:
                    continue
                owner = scratch / SCRATCH_OWNER_FILE
                if owner.is_file():
                    words = owner.read_text(encoding="utf-8")[:64].split()[:2]
                    in_use = any(0 < int(w) < 2**31 and _alive(int(w)) for w in words)
                else:
                    in_use = time.time() - info.st_mtime < UNOWNED_SCRATCH_MAX_AGE_S
            except (OSError, ValueError):
                continue  # vanished meanwhile, or not ours to judge
            if not in_use:
                shutil.rmtree(scratch, ignore_errors=True)
                removed.append(scratch)
    return removed


def _deliver_interrupt(run_dir: Path) -> bool:
    """``interrupt`` into RUN/control, once RUN exists (never creating it)."""
    from attnlab.runs import CONTROL_FILE, atomic_write_text

    if not Path(run_dir).is_dir():
        return False
    try:
        atomic_write_text(Path(run_dir) / CONTROL_FILE, INTERRUPT_WORD + "\n")
    except (OSError, AttnlabError):  # removed meanwhile (its rank 0 gave up)
        return False
    return True


def _remove_if_unstarted(run_dir: Path) -> None:
    """After the job: a new run whose rank 0 never wrote an event (killed or interrupted in
    set-up) is removed, as rank 0 itself does when it can."""
    from attnlab.runs import EVENTS_FILE, lock_run_dir, remove_unstarted_run

    if not Path(run_dir).is_dir() or (Path(run_dir) / EVENTS_FILE).exists():
        return
    try:
        lock = lock_run_dir(run_dir)
    except AttnlabError:  # another trainer has it now: not ours to remove
        return
    remove_unstarted_run(run_dir, lock)


def report_exit(code: int) -> int:
    """Called with the command's exit code by every rank: rank 0 records it for ``launch``;
    under ``launch`` an interrupted run exits 0 so torchrun does not call it a failure."""
    path = os.environ.get(EXIT_FILE_ENV)
    if not path or not launched_by_torchrun():
        return code
    if is_primary_process():
        with contextlib.suppress(OSError):
            Path(path).write_text(f"{code}\n")
    return 0 if code == 130 else code


def exit_worker(code: int) -> None:
    """End a torchrun worker now, with ``code``, once its output is flushed.

    The process group is destroyed by then (``teardown``) and every file the run writes is
    complete (events are flushed per line, checkpoints are written atomically). A normal
    interpreter exit would go on to run C++ static destructors, and about one exit in 35
    (gloo, 2 ranks, torch 2.13 CPU) one of them met a c10d thread still joinable:
    "terminate called without an active exception", SIGABRT, and torchrun calls the whole
    job failed although it had finished. ``os._exit`` skips those destructors."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def torchrun_argv(
    nproc: int, cli_args: list[str], agent: str = "torch.distributed.run"
) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc_per_node N -m attnlab ...``
    (``--standalone``: a free port on this machine, no fixed port). The launcher's ``agent``
    is ``attnlab.train.torchrun_entry`` (torchrun naming a dead rank in one line)."""
    return [
        sys.executable,
        "-m",
        agent,
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "attnlab",
        *cli_args,
    ]
