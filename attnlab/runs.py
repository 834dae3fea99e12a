"""Run directories, checkpoints (safetensors + JSON), export and the list of runs.

Layout of a run directory::

    RUN/config.toml                       the experiment (attnlab.config.dumps_toml)
    RUN/.lock                             flock'ed by the one process training the run
                                          (holds its pid; released by the OS when it dies)
    RUN/events.jsonl                      append-only event log (attnlab.train.events)
    RUN/control                           optional: one word written by a controller
                                          (pause | resume | save | stop)
    RUN/checkpoints/{best,last}/
        model.safetensors                 weights (+ a copy of the step in its metadata)
        trainer_state.safetensors         last only: optimiser tensors, torch RNG state
        trainer_state.json                last only: step, schedules, early stopping, data position
        meta.json                         written last: config, dataset meta (vocabularies,
                                          tokenizers), step, metrics, params, attnlab version

Every file is written to a temporary file in the same directory and moved into place with
``os.replace``, so a crash never leaves a half-written file; ``meta.json`` goes last, so a
checkpoint directory with a ``meta.json`` has all its files. Loading never unpickles:
weights come from safetensors, everything else from JSON.

An exported checkpoint is one ``.safetensors`` file whose metadata holds JSON strings under
``attnlab.config``, ``attnlab.dataset``, ``attnlab.metrics`` (+ ``attnlab.step``,
``attnlab.version``, ``attnlab.params``, ``attnlab.format``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attnlab import __version__
from attnlab.config import (
    ExperimentConfig,
    check_name,
    dumps_toml,
    from_dict,
    load_toml,
    to_dict,
    validate,
)
from attnlab.errors import AttnlabError
from attnlab.train.events import EVENTS_FILE, read_event_log

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    import torch
    from torch import Tensor

CONFIG_FILE = "config.toml"
CONTROL_FILE = "control"
LOCK_FILE = ".lock"
LOCK_WAIT_S = 0.5  # a lab's lock probe (a shared lock for a moment) is not a second trainer
CHECKPOINTS = "checkpoints"
MODEL_FILE = "model.safetensors"
META_FILE = "meta.json"
STATE_TENSORS = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"
EXPORT_FORMAT = "attnlab-checkpoint-1"
CHECKPOINT_TAGS = ("best", "last")


# -- atomic writes ------------------------------------------------------------------------------


@contextmanager
def atomic_open(path: Path) -> Iterator[BinaryIO]:
    """Open a temp file beside ``path``; on success fsync + ``os.replace`` it into place.

    If the block raises, the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_open(path) as handle:
        handle.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=1, allow_nan=False) + "\n")


def save_tensors(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> None:
    """safetensors file, atomically (tensors are made contiguous CPU copies)."""
    from safetensors.torch import save as safetensors_bytes

    cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    atomic_write_bytes(path, safetensors_bytes(cpu, metadata=metadata))


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
            holder = _read_lock_pid(path) or "unknown"
            raise AttnlabError(
                f"{run_dir} is being trained by pid {holder}; wait for it to end or stop it "
                "(a run directory has one trainer at a time)"
            ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return RunLock(path, fd)


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
    if (run_dir / CONFIG_FILE).exists() or (run_dir / EVENTS_FILE).exists():
        lock.release()
        raise AttnlabError(f"{run_dir} already holds a run; choose another --run-name or use --resume")
    return run_dir, lock


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


def write_control(run_dir: Path, command: str) -> None:
    """What a controller (the TUI) calls: ``pause`` | ``resume`` | ``save`` | ``stop``."""
    if command not in ("pause", "resume", "save", "stop"):
        raise AttnlabError(f'unknown control command "{command}"; valid: pause, resume, save, stop')
    atomic_write_text(Path(run_dir) / CONTROL_FILE, command + "\n")


# -- checkpoints -------------------------------------------------------------------------------


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
    """Write ``RUN/checkpoints/<tag>/``: weights, optional trainer state, then meta.json."""
    directory = checkpoint_dir(run_dir, tag)
    directory.mkdir(parents=True, exist_ok=True)
    save_tensors(directory / MODEL_FILE, dict(model.state_dict()), {"attnlab.step": str(step)})
    if trainer_state is not None:
        tensors, scalars = trainer_state
        save_tensors(directory / STATE_TENSORS, tensors, {"attnlab.step": str(step)})
        atomic_write_json(directory / STATE_JSON, scalars)
    meta = {
        "format": EXPORT_FORMAT,
        "attnlab_version": __version__,
        "config": to_dict(config),
        "dataset": dataset_meta,
        "step": int(step),
        "metrics": jsonable(metrics),
        "params": int(params),
    }
    atomic_write_json(directory / META_FILE, meta)
    return directory


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


def resolve_checkpoint(path: Path) -> Path:
    """A run dir (best, else last), a checkpoint dir, or a ``.safetensors`` file."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise AttnlabError(f"{path}: no such run directory or checkpoint")
    if (path / META_FILE).is_file():
        return path
    for tag in CHECKPOINT_TAGS:
        candidate = path / CHECKPOINTS / tag
        if (candidate / META_FILE).is_file():
            return candidate
    raise AttnlabError(f"{path}: no checkpoint found (expected {CHECKPOINTS}/best or {CHECKPOINTS}/last)")


def read_checkpoint(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(weights, meta dict) of a checkpoint dir or exported file; nothing is unpickled."""
    path = resolve_checkpoint(path)
    if path.is_dir():
        meta = read_json(path / META_FILE)
        tensors, _ = read_tensors(path / MODEL_FILE)
        return tensors, meta
    tensors, metadata = read_tensors(path)
    if "attnlab.config" not in metadata:
        raise AttnlabError(f"{path}: a safetensors file without attnlab metadata (not an attnlab export)")
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
        raise AttnlabError(f"{path}: invalid attnlab metadata ({err})") from None
    return tensors, meta


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """Rebuild the model (eval mode), config, vocabularies and tokenizers from a checkpoint."""
    from attnlab.data.dataset import Dataset
    from attnlab.nn.model import build_model, count_parameters

    resolved = resolve_checkpoint(Path(path))
    tensors, meta = read_checkpoint(resolved)
    config = validate(from_dict(meta["config"], source=str(resolved)))
    dataset = Dataset.from_meta(meta["dataset"])
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise AttnlabError(
            f"{resolved}: weights do not match the model its config builds "
            f"(missing {len(missing)}, unexpected {len(unexpected)}; e.g. {(missing + unexpected)[0]})"
        )
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


def export_checkpoint(run_dir: Path, out_file: Path, which: str = "best") -> Path:
    """One self-contained ``.safetensors`` file: weights + JSON metadata (config, vocabularies,
    tokenizers, metrics). ``which`` = best | last; ``best`` falls back to ``last`` if absent."""
    run_dir = Path(run_dir)
    directory = checkpoint_dir(run_dir, which)
    if not (directory / META_FILE).is_file():
        if which == "best" and (checkpoint_dir(run_dir, "last") / META_FILE).is_file():
            directory = checkpoint_dir(run_dir, "last")
        elif (run_dir / META_FILE).is_file():
            directory = run_dir  # a checkpoint directory given directly
        else:
            raise AttnlabError(f"{run_dir}: no {which} checkpoint to export")
    tensors, meta = read_checkpoint(directory)
    metadata = {
        "attnlab.format": EXPORT_FORMAT,
        "attnlab.version": str(meta.get("attnlab_version", __version__)),
        "attnlab.config": json.dumps(meta["config"], ensure_ascii=False),
        "attnlab.dataset": json.dumps(meta["dataset"], ensure_ascii=False),
        "attnlab.metrics": json.dumps(meta.get("metrics", {}), ensure_ascii=False),
        "attnlab.step": str(meta.get("step", 0)),
        "attnlab.params": str(meta.get("params", 0)),
    }
    out_file = Path(out_file)
    if out_file.suffix != ".safetensors":
        raise AttnlabError(f"{out_file}: the export file name must end in .safetensors")
    save_tensors(out_file, tensors, metadata)
    return out_file


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
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in state_dict["param_groups"]]
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


def read_trainer_state(run_dir: Path) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Tensor]]:
    """(model weights, trainer scalars, trainer tensors) of ``RUN/checkpoints/last``."""
    directory = checkpoint_dir(run_dir, "last")
    if not (directory / META_FILE).is_file() or not (directory / STATE_JSON).is_file():
        raise AttnlabError(f"{run_dir}: no resumable checkpoint (checkpoints/last with trainer state)")
    weights, _ = read_tensors(directory / MODEL_FILE)
    state_tensors, _ = read_tensors(directory / STATE_TENSORS)
    return weights, read_json(directory / STATE_JSON), state_tensors


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


_DONE_STATUS = {
    "finished": "finished",
    "early-stop": "finished",
    "interrupted": "interrupted",
    "stopped": "stopped",
    "error": "error",
}


def _pid_alive(pid: int) -> bool:
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
    if arch == "transformer":
        attention = f"{model.get('self_attention', 'scaled-dot')}/{model.get('cross_attention', 'scaled-dot')}"
    else:
        attention = str(model.get("attention", ""))
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
    done_reason, errored, pid, host = None, False, None, None
    events, reader = read_event_log(run_dir)
    for event in events:  # well-shaped: str type, int step, used fields of the right type
        kind = event["type"]
        summary.steps = max(summary.steps, event["step"])
        if kind == "start":
            summary.params = int(event.get("params", 0) or 0)
            pid, host = event.get("pid"), event.get("host")
            done_reason, errored = None, False  # a resumed run starts over
        elif kind == "step":
            summary.tokens_per_s = event.get("tokens_per_s", summary.tokens_per_s)
            summary.wall_s = event.get("elapsed_s", summary.wall_s)
        elif kind == "eval":
            summary.wall_s = event.get("elapsed_s", summary.wall_s)
            for attr, key in (("best_bleu", "bleu"), ("best_chrf", "chrf"), ("best_exact_match", "exact_match")):
                value = event.get(key)
                if value is not None and (getattr(summary, attr) is None or value > getattr(summary, attr)):
                    setattr(summary, attr, value)
        elif kind == "error":
            errored = True
        elif kind == "done":
            done_reason = event.get("reason")
            summary.wall_s = event.get("elapsed_s", summary.wall_s)
    locked = run_dir_locked(run_dir) if done_reason is None and not errored else None
    if done_reason is not None:
        summary.status = _DONE_STATUS.get(str(done_reason), str(done_reason))
    elif errored:
        summary.status = "error"
    elif locked is not None:
        # The trainer's lock is the truth: held while it lives, dropped by the OS when it dies
        # (also before a "start" event, e.g. a process killed during set-up).
        summary.status = "running" if locked else "error"
    elif pid is not None and host == _hostname() and not _pid_alive(int(pid)):
        summary.status = "error"  # the process died without writing "done" (killed)
    # A last line without its newline is being written while the run runs; after, it is lost.
    truncated = bool(reader.pending) and summary.status != "running"
    warning = reader.warning(include_pending=truncated)
    summary.skipped_lines = reader.skipped + int(truncated)
    if warning:
        summary.warnings.append(warning)
    return summary


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
