"""Run directories, checkpoints (safetensors + JSON), export and the list of runs.

Layout of a run directory::

    RUN/config.toml                       the experiment (attnlab.config.dumps_toml)
    RUN/.lock                             flock'ed by the one process training the run
                                          (holds its pid; released by the OS when it dies)
    RUN/events.jsonl                      append-only event log (attnlab.events)
    RUN/control                           optional: one word written by a controller
                                          (pause | resume | save | stop)
    RUN/checkpoints/{best,last}/
        model.safetensors                 weights (+ the step in its metadata)
        trainer_state.safetensors         last only: optimiser tensors, torch RNG state (+ step)
        trainer_state.json                last only: step, schedules, early stopping, data position
        meta.json                         config, dataset meta (vocabularies, tokenizers), step,
                                          metrics, params, attnlab version
    RUN/checkpoints/step-<N>/             with train.keep_last = K > 0: model.safetensors +
                                          meta.json of the last save at step N, the K newest
                                          (``keep_step_checkpoint``; ``attnlab average``)

**Every file of a checkpoint carries its step**; loading and resuming refuse a directory whose
files disagree (one line naming each file's step).

**A checkpoint directory is replaced as a whole** (``save_checkpoint``):

1. all files are written into a fresh ``RUN/checkpoints/.TAG.tmp-PID-XXXX/`` and fsynced;
2. the current ``TAG/`` (if any) is renamed to ``.TAG.old-PID-XXXX/``;
3. the temporary directory is renamed to ``TAG/`` and the parent directory fsynced;
4. ``.TAG.old-*`` is removed.

Why this is safe at every instant: before step 2, ``TAG/`` is the old, complete checkpoint;
after step 3, it is the new, complete one (renames are atomic). Between 2 and 3 ``TAG/`` is
absent and ``.TAG.old-*`` holds the old checkpoint, complete: a reader falls back to it
(``resolve_checkpoint``) and the next writer renames it back (``prepare_checkpoints``, called
at the start of training and before every save). A failed rename in 3 is rolled back at once.
A step copy is written the same way (TAG = ``step-N``), and a retired one is first renamed
to ``.step-N.tmp-*``, so no partial copy ever sits under its name. A ``.TAG.tmp-*`` directory
is never read; it and any ``.TAG.old-*`` beside a present ``TAG/``
are stale and removed by the next start or save, once the process named by their PID is gone.

Single files (``config.toml``, ``control``, exported ``.safetensors``) are written to a
temporary ``.NAME.PID-XXXX.tmp`` beside them, fsynced and moved into place with ``os.replace``;
``export`` removes stale ones (their process gone) of the file it writes. Every file and
directory is created with the user's umask (no 0600 temporaries). A write that fails (ENOSPC,
a read-only or missing path) raises ``WriteError``: one line with the path and the OS reason,
and the previous file or checkpoint is untouched. Loading never unpickles: weights come from
safetensors, everything else from JSON.

Fault injection: ``ATTNLAB_FAULT_SAVE_DELAY=SECONDS`` sleeps after each file of a checkpoint
and between its renames, so that ``benchmarks/fault_injection.py`` can kill a save midway.

An exported checkpoint is one ``.safetensors`` file whose metadata holds JSON strings under
``attnlab.config``, ``attnlab.dataset``, ``attnlab.metrics`` (+ ``attnlab.step``,
``attnlab.version``, ``attnlab.params``, ``attnlab.format``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attnlab import __version__
from attnlab.config import ExperimentConfig, check_name, dumps_toml, load_toml, to_dict
from attnlab.errors import AttnlabError
from attnlab.events import (
    EVENTS_FILE,
    ControlCommand,
    Done,
    Error,
    Eval,
    RunStatus,
    Start,
    Step,
    read_typed_log,
    run_status,
)

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    import torch
    from torch import Tensor

CONFIG_FILE = "config.toml"
CONTROL_FILE = "control"
CONTROL_COMMANDS = tuple(c.value for c in ControlCommand)  # what write_control accepts
LOCK_FILE = ".lock"
LOCK_WAIT_S = 0.5  # a lab's lock probe (a shared lock for a moment) is not a second trainer
CHECKPOINTS = "checkpoints"
MODEL_FILE = "model.safetensors"
META_FILE = "meta.json"
STATE_TENSORS = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"
EXPORT_FORMAT = "attnlab-checkpoint-1"
CHECKPOINT_TAGS = ("best", "last")
FAULT_DELAY_ENV = "ATTNLAB_FAULT_SAVE_DELAY"
_TMP, _OLD = ".tmp-", ".old-"  # markers of a checkpoint's scratch directories
STEP_PREFIX = "step-"  # checkpoints/step-N: the copies train.keep_last keeps
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STEP_ENTRY = re.compile(r"^\.?(step-\d+)(?:$|\.tmp-|\.old-)")


class WriteError(AttnlabError):
    """A file could not be written (no space, read-only, missing path): path + OS reason."""


def _write_error(path: Path, err: OSError) -> WriteError:
    reason = err.strerror or str(err)
    return WriteError(f"{path}: cannot write ({reason}); nothing was replaced")


# -- atomic writes ------------------------------------------------------------------------------


def _scratch_suffix() -> str:
    """PID (to tell a live writer's temporaries from a dead one's) + randomness."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def _owner_alive(name: str) -> bool:
    """Whether another process whose PID is in a scratch name still runs (unparseable: no)."""
    match = re.search(r"(\d+)-[0-9a-f]{8}$", name)
    if match is None:
        return False
    pid = int(match.group(1))
    return pid != os.getpid() and pid_alive(pid)


def _write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` (tests replace this to simulate ENOSPC)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (must not exist) with the umask's mode, write, fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        _write_fd(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with suppress(OSError):  # not every platform/file system can fsync a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def atomic_open(path: Path) -> Iterator[BinaryIO]:
    """Open a temp file beside ``path``; on success fsync + ``os.replace`` it into place.

    If the block raises, the temp file is removed and ``path`` is untouched. The file gets
    the user's umask (``0o666 & ~umask``), like any other file. An OSError -> WriteError.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{_scratch_suffix()}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as err:
        raise _write_error(path, err) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _write_error(path, err) from None
        raise


def remove_stale_temps(directory: Path, name: str) -> int:
    """Remove ``.NAME.*.tmp`` left in ``directory`` by writers that died; returns the count."""
    removed = 0
    with suppress(OSError):
        for entry in Path(directory).iterdir():
            ours = entry.name.startswith(f".{name}.") and entry.name.endswith(".tmp")
            if ours and not _owner_alive(entry.name[: -len(".tmp")]):
                with suppress(OSError):
                    entry.unlink()
                    removed += 1
    return removed


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_open(path) as handle:
        _write_fd(handle.fileno(), data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, _json_text(obj))


def _json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def _tensor_bytes(tensors: dict[str, Tensor], metadata: dict[str, str] | None) -> bytes:
    from safetensors.torch import save as safetensors_bytes

    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    return safetensors_bytes(cpu, metadata=metadata)


def save_tensors(
    path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None
) -> None:
    """safetensors file, atomically (tensors are made contiguous CPU copies)."""
    atomic_write_bytes(path, _tensor_bytes(tensors, metadata))


def read_tensors(path: Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors and string metadata of a safetensors file (never unpickles)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise AttnlabError(f"{path}: not a readable safetensors file ({err})") from None
    return tensors, metadata


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except json.JSONDecodeError as err:
        raise AttnlabError(f"{path}: invalid JSON ({err})") from None
    except UnicodeDecodeError as err:  # JSON is UTF-8: a damaged or foreign file
        raise AttnlabError(f"{path}: invalid JSON (not UTF-8 at byte {err.start})") from None
    except OSError as err:  # a directory of that name, no permission
        raise AttnlabError(f"{path}: cannot read ({err.strerror})") from None


# -- run directories ---------------------------------------------------------------------------


class RunLock:
    """An exclusive ``flock`` on ``RUN/.lock``: one trainer per run directory. The OS drops
    it when the process dies, so a crash never leaves a stale lock (the file stays)."""

    def __init__(self, path: Path, fd: int | None):
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def lock_run_dir(run_dir: Path) -> RunLock:
    """Lock an existing run directory for training, or AttnlabError naming the holder's pid."""
    path = Path(run_dir) / LOCK_FILE
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no locking
        return RunLock(path, None)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as err:
        raise AttnlabError(f"{path}: cannot create the run lock ({err.strerror})") from None
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.02)
                continue
            os.close(fd)
            raise _busy(run_dir) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(path, fd)


def _busy(run_dir: Path) -> AttnlabError:
    holder = _read_lock_pid(Path(run_dir) / LOCK_FILE) or "unknown"
    return AttnlabError(
        f"{run_dir} is being trained by pid {holder}; wait for it to end or stop it "
        "(a run directory has one trainer at a time)"
    )


def check_run_dir_free(run_dir: Path) -> None:
    """Refuse a run directory a trainer holds (a probe; ``lock_run_dir`` takes the lock)."""
    if run_dir_locked(run_dir):
        raise _busy(run_dir)


def _read_lock_pid(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def run_dir_locked(run_dir: Path) -> bool | None:
    """True while a trainer holds ``RUN/.lock``, False when none does, None without a lock
    file (runs written before locks existed). A shared lock for a moment: no side effect."""
    try:
        import fcntl

        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops our shared lock
    return False


def new_run_dir(out: Path, name: str, what: str = "run name") -> tuple[Path, RunLock]:
    """``out/name``, created and locked; refuses a name that is not one plain path component
    (it could point outside ``out``) and a directory that already holds a run."""
    run_dir = Path(out) / check_name(name, what)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnlabError(f"{run_dir}: cannot create the run directory ({err.strerror})") from None
    lock = lock_run_dir(run_dir)
    if _holds_run(run_dir):
        lock.release()
        raise _taken(run_dir)
    return run_dir, lock


def check_new_run_dir(out: Path, name: str, what: str = "run name") -> Path:
    """``out/name`` checked as ``new_run_dir`` checks it, but neither created nor locked: the
    ``--nproc`` launcher refuses mistakes early; its rank 0 then makes and locks it."""
    run_dir = Path(out) / check_name(name, what)
    check_run_dir_free(run_dir)
    if _holds_run(run_dir):
        raise _taken(run_dir)
    return run_dir


def _holds_run(run_dir: Path) -> bool:
    return (run_dir / CONFIG_FILE).exists() or (run_dir / EVENTS_FILE).exists()


def _taken(run_dir: Path) -> AttnlabError:
    return AttnlabError(f"{run_dir} already holds a run; choose another --run-name or use --resume")


def remove_unstarted_run(run_dir: Path, lock: RunLock) -> None:
    """Undo ``new_run_dir`` for a run that failed or was interrupted before its first step:
    remove the files its set-up writes, then the directory if nothing else is in it."""
    for name in (CONFIG_FILE, EVENTS_FILE, CONTROL_FILE, LOCK_FILE):
        with suppress(OSError):
            (Path(run_dir) / name).unlink()
    lock.release()
    with suppress(OSError):
        Path(run_dir).rmdir()


def write_config(run_dir: Path, config: ExperimentConfig) -> None:
    atomic_write_text(Path(run_dir) / CONFIG_FILE, dumps_toml(config))


def read_config(run_dir: Path) -> ExperimentConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise AttnlabError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    from attnlab.experiment import from_dict, validate  # the registries import torch: lazily

    return validate(from_dict(load_toml(path), source=str(path)))


def require_run_dir(run_dir: Path) -> None:
    """Refuse to write into a run directory that lost its ``config.toml`` (deleted while the
    trainer ran): saving must not re-create an orphan ``RUN/checkpoints/...``."""
    if not (Path(run_dir) / CONFIG_FILE).is_file():
        raise AttnlabError(
            f"{run_dir}: the run directory was deleted (no {CONFIG_FILE}); not saving a checkpoint"
        )


def checkpoint_dir(run_dir: Path, tag: str) -> Path:
    if tag not in CHECKPOINT_TAGS:
        raise AttnlabError(f'unknown checkpoint "{tag}"; valid: {", ".join(CHECKPOINT_TAGS)}')
    return Path(run_dir) / CHECKPOINTS / tag


def write_control(run_dir: Path, command: ControlCommand | str) -> None:
    """The one way a controller (the lab, a test, a script) asks a running trainer to
    ``pause`` | ``resume`` | ``save`` | ``stop``: one word in ``RUN/control``, written
    atomically (the trainer never reads half a word). An unknown word raises
    ``UnknownControlCommand`` (an AttnlabError and a ValueError) naming the valid ones."""
    word = ControlCommand.parse(command)
    Path(run_dir).mkdir(parents=True, exist_ok=True)  # the lab may ask before the child made it
    atomic_write_text(Path(run_dir) / CONTROL_FILE, word.value + "\n")


# -- checkpoints -------------------------------------------------------------------------------


def _scratch_dirs(root: Path, tag: str, marker: str) -> list[Path]:
    prefix = f".{tag}{marker}"
    with suppress(OSError):
        return sorted(p for p in root.iterdir() if p.name.startswith(prefix) and p.is_dir())
    return []


def _fallback_dir(root: Path, tag: str) -> Path | None:
    """While ``TAG/`` is absent mid-swap (or after a crash there): the old, complete copy."""
    olds = [p for p in _scratch_dirs(root, tag, _OLD) if (p / META_FILE).is_file()]
    return max(olds, key=lambda p: p.stat().st_mtime_ns) if olds else None


def _step_tags(root: Path) -> list[str]:
    """``step-N`` names of the step copies (``train.keep_last``) in ``root``, complete or not:
    from the directories themselves and from their scratch directories."""
    tags = set()
    with suppress(OSError):
        for entry in root.iterdir():
            match = _STEP_ENTRY.match(entry.name)
            if match is not None:
                tags.add(match.group(1))
    return sorted(tags)


def prepare_checkpoints(run_dir: Path) -> None:
    """Finish what a killed save left: put a lone ``.TAG.old-*`` back as ``TAG/``, and remove
    scratch directories and stale ``.tmp`` files. Only the run's single writer calls this (the
    trainer, at start and before each save), holding the run directory's lock: every scratch
    directory it finds was left by an earlier writer, whatever its PID says (PIDs are reused).
    The ``step-N`` copies (``train.keep_last``) are kept and repaired the same way."""
    run_dir = Path(run_dir)
    root = run_dir / CHECKPOINTS
    for tag in (*CHECKPOINT_TAGS, *_step_tags(root)):
        final = root / tag
        fallback = _fallback_dir(root, tag)
        if not final.exists() and fallback is not None:
            os.rename(fallback, final)  # the crash fell between the two renames: roll back
            _fsync_dir(root)
        for scratch in (*_scratch_dirs(root, tag, _TMP), *_scratch_dirs(root, tag, _OLD)):
            shutil.rmtree(scratch, ignore_errors=True)
        if final.is_dir():  # per-file temporaries of checkpoints written before 0.x
            for name in (MODEL_FILE, META_FILE, STATE_TENSORS, STATE_JSON):
                remove_stale_temps(final, name)
    for name in (CONFIG_FILE, CONTROL_FILE):
        remove_stale_temps(run_dir, name)


def _fault_pause() -> None:
    """Test hook (off unless ATTNLAB_FAULT_SAVE_DELAY is set): widen a save's window."""
    delay = os.environ.get(FAULT_DELAY_ENV)
    if delay:
        time.sleep(float(delay))


def _swap_in(root: Path, tag: str, new: Path) -> None:
    """Steps 2-4 of the module docstring: old ``TAG/`` aside, ``new`` -> ``TAG/``, drop old."""
    final = root / tag
    old = None
    if final.exists():
        old = root / f".{tag}{_OLD}{_scratch_suffix()}"
        os.rename(final, old)
        _fault_pause()
    try:
        os.rename(new, final)
    except BaseException:
        if old is not None:
            with suppress(OSError):  # if even this fails, prepare_checkpoints rolls back
                os.rename(old, final)
        raise
    _fsync_dir(root)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    run_dir: Path,
    tag: str,
    model: torch.nn.Module,
    config: ExperimentConfig,
    dataset_meta: dict[str, Any],
    step: int,
    metrics: dict[str, Any],
    params: int,
    trainer_state: tuple[dict[str, Tensor], dict[str, Any]] | None = None,
) -> Path:
    """Write ``RUN/checkpoints/<tag>/`` as a whole (see the module docstring): weights,
    optional trainer state and meta.json, every file stamped with ``step``."""
    final = checkpoint_dir(run_dir, tag)
    root = final.parent
    stamp = {"attnlab.step": str(int(step))}
    weights = dict(model.state_dict())
    files: list[tuple[str, Callable[[], bytes]]] = [
        (MODEL_FILE, lambda: _tensor_bytes(weights, stamp))
    ]
    if trainer_state is not None:
        tensors, scalars = trainer_state
        files.append((STATE_TENSORS, lambda: _tensor_bytes(tensors, stamp)))
        files.append((STATE_JSON, lambda: _json_text({**scalars, "step": int(step)}).encode()))
    meta = {
        "format": EXPORT_FORMAT,
        "attnlab_version": __version__,
        "config": to_dict(config),
        "dataset": dataset_meta,
        "step": int(step),
        "metrics": jsonable(metrics),
        "params": int(params),
    }
    files.append((META_FILE, lambda: _json_text(meta).encode("utf-8")))
    try:
        root.mkdir(parents=True, exist_ok=True)
        prepare_checkpoints(Path(run_dir))
    except OSError as err:
        raise _write_error(final, err) from None
    return _write_checkpoint_dir(root, tag, files, pause=_fault_pause)


def _write_checkpoint_dir(
    root: Path,
    tag: str,
    files: list[tuple[str, Callable[[], bytes]]],
    pause: Callable[[], None] = lambda: None,
) -> Path:
    """``root/<tag>/`` as a whole: ``files`` (name, bytes) written in order into a fresh
    scratch directory, fsynced and swapped in (see the module docstring). A failed write
    removes the scratch directory and leaves the previous ``<tag>/`` in place."""
    final = root / tag
    target = final
    try:
        new = root / f".{tag}{_TMP}{_scratch_suffix()}"
        os.mkdir(new, 0o777)  # the umask applies
    except OSError as err:
        raise _write_error(target, err) from None
    try:
        for name, render in files:
            target = final / name
            _write_new_file(new / name, render())
            pause()
        target = final
        _fsync_dir(new)
        _swap_in(root, tag, new)
    except BaseException as err:
        shutil.rmtree(new, ignore_errors=True)
        if isinstance(err, OSError):
            raise _write_error(target, err) from None
        raise
    return final


def step_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete ``checkpoints/step-N`` copy, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    found = []
    with suppress(OSError):
        for child in root.iterdir():
            match = _STEP_DIR.match(child.name)
            if match is not None and (child / META_FILE).is_file():
                found.append((int(match.group(1)), child))
    return sorted(found)


def keep_step_checkpoint(run_dir: Path, step: int, keep_last: int) -> Path | None:
    """Copy ``checkpoints/last`` (weights + meta, both stamped with ``step``) to
    ``checkpoints/step-<step>`` as a whole (a scratch directory swapped in, like a save), then
    retire all but the ``keep_last`` newest copies. Nothing happens when ``keep_last`` is 0.
    The run's single writer (rank 0) calls this right after saving ``last``."""
    if keep_last <= 0:
        return None
    root = Path(run_dir) / CHECKPOINTS
    source = checkpoint_dir(run_dir, "last")
    tag = f"{STEP_PREFIX}{int(step)}"
    files = [  # meta last, as in a save
        (name, lambda name=name: (source / name).read_bytes()) for name in (MODEL_FILE, META_FILE)
    ]
    target = _write_checkpoint_dir(root, tag, files)
    for _step, directory in step_checkpoints(run_dir)[:-keep_last]:
        _retire(root, directory)
    return target


def _retire(root: Path, directory: Path) -> None:
    """Remove a checkpoint directory without ever leaving a partial one under its name: it
    is first renamed to a scratch ``.tmp-`` name (prepare_checkpoints clears those, never
    restores them)."""
    scratch = root / f".{directory.name}{_TMP}{_scratch_suffix()}"
    with suppress(OSError):
        os.rename(directory, scratch)
        _fsync_dir(root)
        shutil.rmtree(scratch, ignore_errors=True)


def jsonable(obj: Any) -> Any:
    """Metrics as plain JSON (non-finite floats become null)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


@dataclass
class LoadedModel:
    model: Any  # Seq2Seq in eval mode
    config: ExperimentConfig
    dataset: Any  # attnlab.data.dataset.Dataset with vocabularies/tokenizers, empty splits
    dataset_meta: dict[str, Any]
    step: int
    metrics: dict[str, Any]
    params: int
    path: Path
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def src_vocab(self) -> Any:
        return self.dataset.src_vocab

    @property
    def tgt_vocab(self) -> Any:
        return self.dataset.tgt_vocab

    @property
    def src_tokenizer(self) -> Any:
        return self.dataset.src_tokenizer

    @property
    def tgt_tokenizer(self) -> Any:
        return self.dataset.tgt_tokenizer


RUN_OR_CHECKPOINT = "give a run directory, a checkpoint directory or an exported .safetensors file"


def resolve_checkpoint(path: Path) -> Path:
    """A run dir (best, else last), a checkpoint dir, or a ``.safetensors`` file."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        fallback = _fallback_dir(path.parent, path.name) if path.name in CHECKPOINT_TAGS else None
        if fallback is not None:  # mid-swap: the old copy of this very checkpoint
            return fallback
        raise AttnlabError(f"{path}: no such run directory or checkpoint")
    if (path / META_FILE).is_file():
        return path
    for tag in CHECKPOINT_TAGS:
        candidate = path / CHECKPOINTS / tag
        if (candidate / META_FILE).is_file():
            return candidate
        fallback = _fallback_dir(path / CHECKPOINTS, tag)
        if fallback is not None:
            return fallback
    raise AttnlabError(
        f"{path}: no checkpoint found (expected {CHECKPOINTS}/best or {CHECKPOINTS}/last)"
    )


def _int_field(path: Path, obj: dict[str, Any], key: str, required: bool = True) -> int:
    value = obj.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        what = "missing" if key not in obj else f"{json.dumps(value)} is not"
        raise AttnlabError(f'{path}: field "{key}" {what} a step count (an integer >= 0)')
    return value


def read_meta(directory: Path) -> dict[str, Any]:
    """A checkpoint directory's meta.json, its shape checked (one line per problem)."""
    path = Path(directory) / META_FILE
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise AttnlabError(f"{path}: must hold a JSON object, not {type(meta).__name__}")
    for key in ("config", "dataset"):
        if not isinstance(meta.get(key), dict):
            got = "missing" if key not in meta else f"a {type(meta[key]).__name__}"
            raise AttnlabError(f'{path}: field "{key}" must be a table (JSON object), got {got}')
    _int_field(path, meta, "step")
    params = meta.get("params")  # optional; load_checkpoint reads it as an int
    if params is not None and (isinstance(params, bool) or not isinstance(params, int)):
        raise AttnlabError(f'{path}: field "params" {json.dumps(params)} is not an integer')
    if not isinstance(meta.get("metrics") or {}, dict):
        got = type(meta["metrics"]).__name__
        raise AttnlabError(f'{path}: field "metrics" must be a table (JSON object), got a {got}')
    return meta


def _stamped_step(path: Path, metadata: dict[str, str]) -> int | None:
    raw = metadata.get("attnlab.step")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise AttnlabError(f"{path}: metadata attnlab.step={raw!r} is not an integer") from None


def _header_step(path: Path) -> int | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return _stamped_step(path, dict(handle.metadata() or {}))
    except AttnlabError:
        raise
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise AttnlabError(f"{path}: not a readable safetensors file ({err})") from None


def check_single_step(directory: Path, steps: dict[str, int | None]) -> int:
    """The one step all files of a checkpoint carry; a mixed checkpoint is refused."""
    known = {name: step for name, step in steps.items() if step is not None}
    if len(set(known.values())) > 1:
        listed = ", ".join(f"{name} step {step}" for name, step in known.items())
        raise AttnlabError(
            f"checkpoint {directory} mixes steps ({listed}): it was not written whole; "
            "use another checkpoint (best/last) or retrain"
        )
    return next(iter(known.values()), 0)


def _state_file_steps(directory: Path) -> dict[str, int | None]:
    steps: dict[str, int | None] = {}
    if (directory / STATE_TENSORS).is_file():
        steps[STATE_TENSORS] = _header_step(directory / STATE_TENSORS)
    if (directory / STATE_JSON).is_file():
        state = read_json(directory / STATE_JSON)
        if isinstance(state, dict):
            steps[STATE_JSON] = _int_field(directory / STATE_JSON, state, "step")
    return steps


def _read_checkpoint_dir(directory: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    meta = read_meta(directory)
    tensors, metadata = read_tensors(directory / MODEL_FILE)
    check_single_step(
        directory,
        {
            META_FILE: meta["step"],
            MODEL_FILE: _stamped_step(directory / MODEL_FILE, metadata),
            **_state_file_steps(directory),
        },
    )
    return tensors, meta


def read_checkpoint(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(weights, meta dict) of a checkpoint dir or exported file; nothing is unpickled."""
    path = Path(path)
    resolved = resolve_checkpoint(path)
    if resolved.is_dir():
        for _ in range(2):  # a save swapped the directory while we read it: read it again
            try:
                return _read_checkpoint_dir(resolved)
            except AttnlabError:
                time.sleep(0.05)
                resolved = resolve_checkpoint(path)
        return _read_checkpoint_dir(resolved)
    try:
        tensors, metadata = read_tensors(resolved)
    except AttnlabError as err:  # a file given where a run is expected (config.toml, a .txt)
        raise AttnlabError(f"{err}; {RUN_OR_CHECKPOINT}") from None
    if "attnlab.config" not in metadata:
        raise AttnlabError(
            f"{resolved}: a safetensors file without attnlab metadata (not an attnlab export)"
        )
    try:
        meta = {
            "format": metadata.get("attnlab.format", EXPORT_FORMAT),
            "attnlab_version": metadata.get("attnlab.version", ""),
            "config": json.loads(metadata["attnlab.config"]),
            "dataset": json.loads(metadata["attnlab.dataset"]),
            "metrics": json.loads(metadata.get("attnlab.metrics", "{}")),
            "step": int(metadata.get("attnlab.step", "0")),
            "params": int(metadata.get("attnlab.params", "0")),
        }
    except (KeyError, ValueError) as err:
        raise AttnlabError(f"{resolved}: invalid attnlab metadata ({err})") from None
    for key in ("config", "dataset", "metrics"):
        if not isinstance(meta[key], dict):
            raise AttnlabError(f"{resolved}: metadata attnlab.{key} must be a JSON object")
    return tensors, meta


# Config keys that set weight shapes, per architecture (what a mismatch is blamed on).
_SHAPE_KEYS = {
    "rnn": ("hidden", "emb", "layers", "bidirectional", "input_feeding", "cell"),
    "transformer": ("d_model", "ff", "enc_layers", "dec_layers", "positions", "share_embeddings"),
}


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


Shapes = dict[str, tuple[int, ...]]


def _build_shapes(config: ExperimentConfig, n_src: int, n_tgt: int) -> Shapes | None:
    """Weight shapes the config builds (on the meta device: nothing is allocated)."""
    import torch

    from attnlab.nn.model import build_model

    try:
        with torch.device("meta"):
            return _shapes(build_model(config, n_src, n_tgt))
    except Exception:  # an invalid candidate config: it explains nothing
        return None


def _explain_mismatch(
    config: ExperimentConfig, n_src: int, n_tgt: int, want: Shapes, have: Shapes
) -> str:
    """Name the meta.json value that the weights contradict, else the first differing tensor."""
    import dataclasses

    dims = sorted({d for shape in want.values() for d in shape} | set(range(1, 9)))
    for key in _SHAPE_KEYS.get(config.model.arch, ()):
        current = getattr(config.model, key)
        if isinstance(current, bool):
            options = [not current]
        else:
            options = dims if isinstance(current, int) else []
        for value in options:
            if value == current:
                continue
            model = dataclasses.replace(config.model, **{key: value})
            candidate = dataclasses.replace(config, model=model)
            if _build_shapes(candidate, n_src, n_tgt) == want:
                shown = json.dumps(current) if isinstance(current, bool) else current
                return (
                    f"model.{key}={shown} in {META_FILE} does not match its weights "
                    f"({json.dumps(value)})"
                )
    for name, n, other in (("src_vocab", n_src, n_tgt), ("tgt_vocab", n_tgt, n_src)):
        for value in dims:
            sizes = (value, other) if name == "src_vocab" else (other, value)
            if value != n and _build_shapes(config, *sizes) == want:
                return f"dataset.{name} in {META_FILE} has {n} entries but its weights have {value}"
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            got = "absent" if name not in want else f"shape {list(want[name])}"
            built = "absent" if name not in have else f"shape {list(have[name])}"
            return (
                f"tensor {name} is {got} in the weights but {built} in the model {META_FILE} builds"
            )
    return "weights do not match the model"  # pragma: no cover - the shapes differ somewhere


def model_from_meta(meta: dict[str, Any], resolved: Path) -> tuple[Any, Any, Any]:
    """(the untrained model, config, dataset) that a checkpoint's meta describes; errors name
    the checkpoint ``resolved`` (its meta.json, or the exported file)."""
    from attnlab.data.dataset import Dataset
    from attnlab.experiment import from_dict, validate
    from attnlab.nn.model import build_model

    source = resolved / META_FILE if resolved.is_dir() else resolved
    config = validate(from_dict(meta["config"], source=str(source)))
    try:
        dataset = Dataset.from_meta(meta["dataset"])
    except AttnlabError as err:  # name the file: "dataset metadata is invalid: ..."
        raise AttnlabError(f"{source}: {err}") from None
    return build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab)), config, dataset


def check_weights_fit(
    model: Any, config: Any, dataset: Any, tensors: dict[str, Tensor], resolved: Path
) -> None:
    """Refuse weights whose names or shapes are not those of the model their meta builds."""
    have = _shapes(model)
    want = {k: tuple(v.shape) for k, v in tensors.items()}
    if want != have:
        sizes = len(dataset.src_vocab), len(dataset.tgt_vocab)
        reason = _explain_mismatch(config, *sizes, want, have)
        raise AttnlabError(f"checkpoint {resolved}: {reason}")


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild the model (eval mode), config, vocabularies and tokenizers from a checkpoint."""
    from attnlab.nn.model import count_parameters

    resolved = resolve_checkpoint(Path(path))
    tensors, meta = read_checkpoint(resolved)
    model, config, dataset = model_from_meta(meta, resolved)
    check_weights_fit(model, config, dataset, tensors, resolved)
    model.load_state_dict(tensors)
    model.to(device).eval()
    return LoadedModel(
        model=model,
        config=config,
        dataset=dataset,
        dataset_meta=meta["dataset"],
        step=int(meta.get("step", 0)),
        metrics=dict(meta.get("metrics") or {}),
        params=int(meta.get("params") or count_parameters(model)),
        path=resolved,
        version=str(meta.get("attnlab_version", "")),
    )


def default_export_path(run_dir: Path, which: str) -> Path:
    """Where ``export`` writes when no ``--out`` is given (the lab's default too)."""
    return Path("exports") / f"{Path(run_dir).name}-{which}.safetensors"


def export_source(run_dir: Path, which: str) -> tuple[Path, str]:
    """The checkpoint directory an export of ``which`` reads, and what it is: ``best``,
    ``last`` (also when ``best`` was asked for but the run has none yet) or ``checkpoint``
    (``run_dir`` is itself a checkpoint directory)."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise AttnlabError(
            f"{run_dir}: is a file; export takes a run directory or a checkpoint directory "
            "(an exported .safetensors file is already self-contained)"
        )
    directory = checkpoint_dir(run_dir, which)
    if resolve_or_none(directory) is not None:
        return directory, which
    if which == "best" and resolve_or_none(checkpoint_dir(run_dir, "last")) is not None:
        return checkpoint_dir(run_dir, "last"), "last"
    if (run_dir / META_FILE).is_file():
        return run_dir, "checkpoint"
    raise AttnlabError(f"{run_dir}: no {which} checkpoint to export")


def export_checkpoint(
    run_dir: Path, out_file: Path, which: str = "best", force: bool = False
) -> Path:
    """One self-contained ``.safetensors`` file: weights + JSON metadata (config, vocabularies,
    tokenizers, metrics). ``which`` = best | last; ``best`` falls back to ``last`` if absent.
    An existing ``out_file`` is replaced only with ``force``; the file appears whole or not
    at all, and stale temporaries of earlier killed exports to it are removed."""
    run_dir = Path(run_dir)
    out_file = Path(out_file)
    if out_file.suffix != ".safetensors":
        raise AttnlabError(f"{out_file}: the export file name must end in .safetensors")
    if out_file.is_dir():
        raise AttnlabError(f"{out_file}: is a directory; give a .safetensors file name")
    if out_file.exists() and not force:
        raise AttnlabError(f"{out_file}: already exists; pass --force to replace it")
    directory, _tag = export_source(run_dir, which)
    tensors, meta = read_checkpoint(directory)
    # Refuse weights the model does not take: eval would refuse the exported file.
    check_weights_fit(*model_from_meta(meta, directory), tensors, directory)
    metadata = {
        "format": "pt",  # the convention other safetensors loaders check
        "attnlab.format": EXPORT_FORMAT,
        "attnlab.version": str(meta.get("attnlab_version", __version__)),
        "attnlab.config": json.dumps(meta["config"], ensure_ascii=False),
        "attnlab.dataset": json.dumps(meta["dataset"], ensure_ascii=False),
        "attnlab.metrics": json.dumps(meta.get("metrics", {}), ensure_ascii=False),
        "attnlab.step": str(meta.get("step", 0)),
        "attnlab.params": str(meta.get("params", 0)),
    }
    remove_stale_temps(out_file.parent, out_file.name)
    save_tensors(out_file, tensors, metadata)
    return out_file


def resolve_or_none(directory: Path) -> Path | None:
    """A checkpoint directory with its meta.json (or its mid-swap fallback), else None."""
    if (directory / META_FILE).is_file():
        return directory
    return _fallback_dir(directory.parent, directory.name)


# -- trainer state (resume) ----------------------------------------------------------------------


def optimizer_to_tensors(state_dict: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """torch optimizer state_dict -> (tensors "opt.<param>.<name>", JSON-able rest)."""
    from torch import Tensor

    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, values in state_dict["state"].items():
        for name, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"opt.{index}.{name}"] = value
            else:
                scalars.setdefault(str(index), {})[name] = value
    groups = [
        {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()}
        for g in state_dict["param_groups"]
    ]
    return tensors, {"param_groups": groups, "scalars": scalars}


def optimizer_from_tensors(tensors: dict[str, Tensor], info: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if not key.startswith("opt."):
            continue
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in info.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(values)
    groups = []
    for g in info["param_groups"]:
        g = dict(g)
        if "betas" in g and isinstance(g["betas"], list):
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    return {"state": state, "param_groups": groups}


def check_optimizer_state(path: Path, params: list[Any], optimizer_state: dict[str, Any]) -> None:
    """Refuse optimiser tensors that do not fit the model's parameters (``path`` names the
    file): torch would load them and fail, or broadcast them into NaNs, at the first step."""
    from collections import Counter

    from torch import Tensor

    state = optimizer_state["state"]
    for index, values in sorted(state.items()):
        if not 0 <= index < len(params):
            raise AttnlabError(
                f"{path}: optimiser state for parameter {index}, but the model has "
                f"{len(params)} parameters; cannot resume"
            )
        for name, value in values.items():
            if not isinstance(value, Tensor):
                continue
            if name == "step" and value.numel() != 1:
                raise AttnlabError(
                    f"{path}: opt.{index}.step is shape {list(value.shape)}, not one number; "
                    "cannot resume"
                )
            if name != "step" and tuple(value.shape) != tuple(params[index].shape):
                raise AttnlabError(
                    f"{path}: opt.{index}.{name} is shape {list(value.shape)} but parameter "
                    f"{index} is {list(params[index].shape)}; cannot resume"
                )
    # Every parameter's state has the same names (exp_avg, exp_avg_sq, step for AdamW).
    usual = Counter(frozenset(values) for values in state.values()).most_common(1)
    for index, values in sorted(state.items()):
        if usual and set(values) != usual[0][0]:
            missing = sorted(usual[0][0] - set(values)) or sorted(set(values) - usual[0][0])
            raise AttnlabError(
                f"{path}: the optimiser state of parameter {index} differs from the others' in "
                f"{', '.join(missing)}; cannot resume"
            )


_STATE_COUNTS = ("epoch", "batch_in_epoch", "bad_evals", "total_tokens")
_STATE_SECONDS = ("elapsed_s", "train_time")


def _check_state_json(path: Path, state: Any) -> dict[str, Any]:
    """trainer_state.json's fields, their types checked (one line naming file and field)."""
    if not isinstance(state, dict):
        raise AttnlabError(f"{path}: must hold a JSON object, not {type(state).__name__}")
    _int_field(path, state, "step")
    for key in _STATE_COUNTS:
        _int_field(path, state, key, required=False)
    for key in _STATE_SECONDS:
        value = state.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AttnlabError(
                f'{path}: field "{key}" {json.dumps(value)} is not a number of seconds'
            )
    optimizer = state.get("optimizer")
    if not isinstance(optimizer, dict) or not isinstance(optimizer.get("param_groups"), list):
        what = "is missing" if optimizer is None else "has no param_groups list"
        raise AttnlabError(f'{path}: field "optimizer" (the optimiser state) {what}; cannot resume')
    schedule = state.get("lr_schedule", {})
    if not isinstance(schedule, dict):
        raise AttnlabError(f'{path}: field "lr_schedule" must be a JSON object')
    # The fields the trainer reads with float() / int() / comparisons: a wrong type there was a
    # traceback (TypeError, ValueError) in the middle of a resume.
    for where, key, check, what in (
        (state, "best_value", _is_number, "a number or null"),
        (state, "best_metrics", lambda v: isinstance(v, dict), "a JSON object or null"),
        (schedule, "plateau_scale", _is_number, "a number"),
        (schedule, "plateau_best", _is_number, "a number or null"),
        (schedule, "plateau_bad_evals", lambda v: _is_number(v) and v == int(v), "an integer"),
    ):
        value = where.get(key)
        if value is not None and not check(value):
            name = key if where is state else f"lr_schedule.{key}"
            raise AttnlabError(f'{path}: field "{name}" {json.dumps(value)} is not {what}')
    py_state = state.get("python_random")
    if py_state:
        try:  # what the trainer's random.setstate will take, tried on a throwaway generator
            if not isinstance(py_state, list) or len(py_state) != 3:
                raise ValueError("not [version, [ints], gauss]")
            random.Random().setstate((py_state[0], tuple(py_state[1]), py_state[2]))
        except (TypeError, ValueError) as err:
            raise AttnlabError(
                f'{path}: field "python_random" is not a Python random state ({err}); cannot resume'
            ) from None
    return state


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _resumable_dir(run_dir: Path) -> Path | None:
    """``RUN/checkpoints/last`` (or its mid-swap fallback) when it holds trainer state."""
    directory = resolve_or_none(checkpoint_dir(run_dir, "last"))
    return directory if directory is not None and (directory / STATE_JSON).is_file() else None


def has_resumable_checkpoint(run_dir: Path) -> bool:
    """Whether ``RUN/checkpoints/last`` (or its fallback) holds trainer state to resume from.

    False only when there is no ``last`` yet (killed before its first save: the run starts
    over). A ``last`` directory without its meta.json or trainer_state.json cannot come from a
    save (they are swapped in whole), so it is refused rather than silently trained over from
    step 0, which would discard the run's weights and log a second history."""
    if _resumable_dir(run_dir) is not None:
        return True
    last = checkpoint_dir(run_dir, "last")
    if last.is_dir():
        missing = [name for name in (META_FILE, STATE_JSON) if not (last / name).is_file()]
        raise AttnlabError(
            f"cannot resume {run_dir}: {last} has no {' and no '.join(missing)} (it was not "
            "written by a save); restore it, or remove it to train this run over from step 0"
        )
    return False


def read_trainer_state(
    run_dir: Path,
) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Tensor]]:
    """(model weights, trainer scalars, trainer tensors) of ``RUN/checkpoints/last``; every
    file must carry the same step."""
    directory = _resumable_dir(run_dir)
    if directory is None:
        raise AttnlabError(
            f"{run_dir}: no resumable checkpoint (checkpoints/last with trainer state)"
        )
    meta = read_meta(directory)
    weights, metadata = read_tensors(directory / MODEL_FILE)
    state_tensors, state_metadata = read_tensors(directory / STATE_TENSORS)
    state = _check_state_json(directory / STATE_JSON, read_json(directory / STATE_JSON))
    check_single_step(
        directory,
        {
            META_FILE: meta["step"],
            MODEL_FILE: _stamped_step(directory / MODEL_FILE, metadata),
            STATE_TENSORS: _stamped_step(directory / STATE_TENSORS, state_metadata),
            STATE_JSON: state["step"],
        },
    )
    return weights, state, state_tensors


def check_resume_weights(
    run_dir: Path, model: Any, weights: dict[str, Tensor], config: ExperimentConfig
) -> None:
    """Refuse a resume whose config (config.toml, --set) builds other weight shapes than the
    checkpoint holds, naming the model keys that changed."""
    want = {k: tuple(v.shape) for k, v in weights.items()}
    if _shapes(model) == want:
        return
    directory = resolve_or_none(checkpoint_dir(run_dir, "last")) or checkpoint_dir(run_dir, "last")
    saved = read_meta(directory)["config"].get("model", {})
    now = to_dict(config)["model"]
    changed = [
        f"model.{k}={json.dumps(now.get(k))} (checkpoint: {json.dumps(saved.get(k))})"
        for k in sorted(set(saved) | set(now))
        if saved.get(k) != now.get(k)
    ]
    if not changed:  # same config: the vocabularies differ, or a tensor was damaged
        have = _shapes(model)
        name = min(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        got = "absent" if name not in want else f"shape {list(want[name])}"
        built = "absent" if name not in have else f"shape {list(have[name])}"
        raise AttnlabError(
            f"cannot resume {run_dir}: its checkpoint does not fit the model its config builds: "
            f"tensor {name} is {got} in {directory} but {built} in the model"
        )
    raise AttnlabError(
        f"cannot resume {run_dir}: the architecture changed since its checkpoint: "
        + "; ".join(changed)
    )


# -- listing runs --------------------------------------------------------------------------------


@dataclass
class RunSummary:
    path: Path
    name: str
    task: str
    arch: str
    attention: str
    params: int
    steps: int
    best_bleu: float | None
    best_chrf: float | None
    best_exact_match: float | None
    tokens_per_s: float | None
    wall_s: float | None
    status: str  # running | finished | interrupted | stopped | error
    skipped_lines: int = 0  # malformed lines of events.jsonl that were skipped
    warnings: list[str] = field(default_factory=list)  # one line each, for the user


def pid_alive(pid: int) -> bool:
    """Whether a process with this (logged, untrusted) pid runs on this host."""
    if not 0 < pid < 2**31:  # a logged pid is data: never signal a group or overflow
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True
    return True


def summarize_run(run_dir: Path) -> RunSummary:
    """One run's summary from its config and events (tolerates a run still being written)."""
    run_dir = Path(run_dir)
    raw, config_warning = _read_run_config(run_dir)
    data, model = _section(raw, "data"), _section(raw, "model")
    arch = str(model.get("arch", "rnn"))
    attention = _attention_text(arch, model, None)
    summary = RunSummary(
        path=run_dir,
        name=str(raw.get("name", run_dir.name)),
        task=str(data.get("task", "")),
        arch=arch,
        attention=attention,
        params=0,
        steps=0,
        best_bleu=None,
        best_chrf=None,
        best_exact_match=None,
        tokens_per_s=None,
        wall_s=None,
        status="running",
    )
    if config_warning:
        summary.warnings.append(config_warning)
    done_reason, errored, pid, host = None, False, None, ""
    events, reader = read_typed_log(run_dir)
    for event in events:  # well-shaped; a mistyped field has its default
        summary.steps = max(summary.steps, event.step)
        if isinstance(event, Start):
            summary.params = event.params
            if event.roles:  # the variants as built (dec-self resolved)
                summary.attention = _attention_text(arch, model, event.roles)
            pid, host = event.pid, event.host
            done_reason, errored = None, False  # a resumed run starts over
        elif isinstance(event, Step):
            summary.tokens_per_s = _given(event.tokens_per_s, summary.tokens_per_s)
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
        elif isinstance(event, Eval):
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
            summary.best_bleu = _larger(summary.best_bleu, event.bleu)
            summary.best_chrf = _larger(summary.best_chrf, event.chrf)
            summary.best_exact_match = _larger(summary.best_exact_match, event.exact_match)
        elif isinstance(event, Error):
            errored = True
        elif isinstance(event, Done):
            done_reason = event.reason
            summary.wall_s = _given(event.elapsed_s, summary.wall_s)
    locked = run_dir_locked(run_dir) if done_reason is None and not errored else None
    if done_reason is not None:
        summary.status = str(run_status(done_reason))
    elif errored:
        summary.status = RunStatus.ERROR.value
    elif locked is not None:
        # The trainer's lock is the truth: held while it lives, dropped by the OS when it dies
        # (also before a "start" event, e.g. a process killed during set-up).
        summary.status = (RunStatus.RUNNING if locked else RunStatus.ERROR).value
    elif pid is not None and host == _hostname() and not pid_alive(pid):
        summary.status = RunStatus.ERROR.value  # the process died without "done" (killed)
    # A last line without its newline is being written while the run runs; after, it is lost.
    truncated = bool(reader.pending) and summary.status != "running"
    warning = reader.warning(include_pending=truncated)
    summary.skipped_lines = reader.skipped + int(truncated)
    if warning:
        summary.warnings.append(warning)
    return summary


def _given(value: Any, before: Any) -> Any:
    """A logged figure, or the earlier one where this event has none."""
    return before if value is None else value


def _larger(best: float | None, value: float | None) -> float | None:
    return value if value is not None and (best is None or value > best) else best


def _attention_text(arch: str, model: dict[str, Any], built: dict[str, Any] | None) -> str:
    """The model column: the variant in every attention slot of the architecture, in slot
    order, joined by "/" unless all agree (``attnlab.nn.archs.ArchSpec``).

    ``built`` is the trainer's record of the variants it built (slot name -> variant);
    without one (older runs, a run not started yet) empty slots are resolved by the
    architecture's rule, asking the attention registry only when it is already loaded,
    because listing runs must not import torch.
    """
    from attnlab.naming import roles_text
    from attnlab.nn.archs import arch_spec, roles_if_loaded

    spec = arch_spec(arch)
    if spec is None:
        return str((built or {}).get("cross") or model.get("attention", ""))
    resolved = spec.resolve(_model_defaults(model), roles_if_loaded)
    variants = [str((built or {}).get(s.name) or resolved[s.key]) for s in spec.slots]
    return roles_text(variants, "/")


def _model_defaults(model: dict[str, Any]) -> dict[str, Any]:
    """A run's [model] table over the defaults (a key an older version did not write)."""
    from attnlab.config import ModelConfig

    defaults = {
        f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name != "attn_params"
    }
    return {**defaults, **model}


def _read_run_config(run_dir: Path) -> tuple[dict[str, Any], str]:
    """config.toml as a dict (empty when absent or unreadable) and a warning, never raising."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return {}, ""
    try:
        return load_toml(path), ""
    except AttnlabError as err:
        return {}, str(err)
    except ValueError as err:  # tomllib decodes UTF-8 itself: UnicodeDecodeError
        return {}, f"{path}: cannot read it ({err})"


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name)
    return value if isinstance(value, dict) else {}


def _hostname() -> str:
    import socket

    return socket.gethostname()


def list_runs(root: Path) -> list[RunSummary]:
    """Every run directory directly under ``root`` (newest first)."""
    root = Path(root)
    if not root.is_dir():
        return []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = [
        d
        for d in entries
        if d.is_dir() and ((d / CONFIG_FILE).is_file() or (d / EVENTS_FILE).is_file())
    ]
    found.sort(key=_events_mtime, reverse=True)
    return [summarize_run(d) for d in found]


def _events_mtime(run_dir: Path) -> float:
    try:  # a run directory may be deleted while the list is built
        return (run_dir / EVENTS_FILE).stat().st_mtime
    except OSError:
        return 0.0
