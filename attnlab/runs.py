"""Run directories, checkpoints (safetensors + JSON), export and the list of runs.

Layout of a run directory::

    RUN/config.toml                       the experiment (attnlab.config.dumps_toml)
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
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from attnlab import __version__
from attnlab.config import ExperimentConfig, dumps_toml, from_dict, load_toml, to_dict, validate
from attnlab.errors import AttnlabError
from attnlab.train.events import EVENTS_FILE, iter_events

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    import torch
    from torch import Tensor

CONFIG_FILE = "config.toml"
CONTROL_FILE = "control"
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


def new_run_dir(out: Path, name: str) -> Path:
    """``out/name``; refuses to reuse a directory that already holds a run."""
    run_dir = Path(out) / name
    if (run_dir / CONFIG_FILE).exists() or (run_dir / EVENTS_FILE).exists():
        raise AttnlabError(f"{run_dir} already holds a run; choose another --run-name or use --resume")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def write_config(run_dir: Path, config: ExperimentConfig) -> None:
    atomic_write_text(Path(run_dir) / CONFIG_FILE, dumps_toml(config))


def read_config(run_dir: Path) -> ExperimentConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise AttnlabError(f"{run_dir}: not a run directory (no {CONFIG_FILE})")
    return validate(from_dict(load_toml(path), source=str(path)))


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
        "format": "pt",  # the convention other safetensors loaders check
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


_DONE_STATUS = {
    "finished": "finished",
    "early-stop": "finished",
    "interrupted": "interrupted",
    "stopped": "stopped",
    "error": "error",
}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def summarize_run(run_dir: Path) -> RunSummary:
    """One run's summary from its config and events (tolerates a run still being written)."""
    run_dir = Path(run_dir)
    raw: dict[str, Any] = {}
    if (run_dir / CONFIG_FILE).is_file():
        try:
            raw = load_toml(run_dir / CONFIG_FILE)
        except AttnlabError:
            raw = {}
    data, model = raw.get("data", {}), raw.get("model", {})
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
    done_reason, errored, pid, host = None, False, None, None
    for event in iter_events(run_dir):
        kind = event.get("type")
        summary.steps = max(summary.steps, int(event.get("step", 0)))
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
    if done_reason is not None:
        summary.status = _DONE_STATUS.get(str(done_reason), str(done_reason))
    elif errored:
        summary.status = "error"
    elif pid is not None and host == _hostname() and not _pid_alive(int(pid)):
        summary.status = "error"  # the process died without writing "done" (killed)
    return summary


def _hostname() -> str:
    import socket

    return socket.gethostname()


def list_runs(root: Path) -> list[RunSummary]:
    """Every run directory directly under ``root`` (newest first)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [
        d
        for d in root.iterdir()
        if d.is_dir() and ((d / CONFIG_FILE).is_file() or (d / EVENTS_FILE).is_file())
    ]
    found.sort(key=lambda d: (d / EVENTS_FILE).stat().st_mtime if (d / EVENTS_FILE).exists() else 0, reverse=True)
    return [summarize_run(d) for d in found]
