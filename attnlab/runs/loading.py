"""Reading checkpoints back: resolving a path, checking that its files agree on the step,
and building the model its meta.json describes (never unpickling)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError, did_you_mean
from attnlab.regular_files import check_regular
from attnlab.runs.atomic import read_json, read_tensors
from attnlab.runs.checkpoints import (
    CHECKPOINT_TAGS,
    CHECKPOINTS,
    EXPORT_FORMAT,
    META_FILE,
    MODEL_FILE,
    STATE_JSON,
    STATE_TENSORS,
    _fallback_dir,
)

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    import torch
    from torch import Tensor


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


# The largest size a config key may give a dimension (model.ff's bound): a mismatch is never
# explained by building a model larger than a config could ask for.
MAX_CANDIDATE_DIM = 65536
# Candidate builds before naming the first differing tensor (a real mismatch needs ~150).
MAX_CANDIDATES = 400
RUN_OR_CHECKPOINT = "give a run directory, a checkpoint directory or an exported .safetensors file"


def _near_miss(path: Path) -> str:
    """' (did you mean "runs/avgtest"?)' when a sibling's name is close to the missing one."""
    parent = path.parent
    try:
        siblings = [p.name for p in parent.iterdir()] if parent.is_dir() else []
    except OSError:  # an unreadable folder: no suggestion rather than a second error
        return ""
    close = did_you_mean(path.name, siblings)
    if not close:
        return ""
    name = close.split('"')[1]
    return f' (did you mean "{parent / name}"?)'


def resolve_checkpoint(path: Path) -> Path:
    """A run dir (best, else last), a checkpoint dir, or a ``.safetensors`` file."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        fallback = _fallback_dir(path.parent, path.name) if path.name in CHECKPOINT_TAGS else None
        if fallback is not None:  # mid-swap: the old copy of this very checkpoint
            return fallback
        raise AttnlabError(f"{path}: no such run directory or checkpoint{_near_miss(path)}")
    # exists(), not is_file(): a meta.json that is a FIFO or a folder is named by the reader
    if (path / META_FILE).exists():
        return path
    for tag in CHECKPOINT_TAGS:
        candidate = path / CHECKPOINTS / tag
        if (candidate / META_FILE).exists():
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
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        shown = json.dumps(value) if not isinstance(value, int) or value < 2**63 else "a number"
        what = "missing" if key not in obj else f"{shown} is not"
        raise AttnlabError(
            f'{path}: field "{key}" {what} a step count (an integer in [0, 2^63 - 1])'
        )
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
        check_regular(path)  # safetensors opens it itself: a FIFO would block that open
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
    "decoder-only": ("d_model", "ff", "dec_layers", "positions", "share_embeddings"),
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
    """Name the meta.json value that the weights contradict, else the first differing tensor.

    Candidate models (on the meta device) take only sizes a config may hold (at most
    MAX_CANDIDATE_DIM), and at most MAX_CANDIDATES are built: a crafted header's [0, 2^30]
    tensor once made it build a GRU of hidden size 2^30 for minutes."""
    import dataclasses

    budget = [MAX_CANDIDATES]

    def spent() -> bool:
        budget[0] -= 1
        return budget[0] < 0

    dims = sorted(
        {d for shape in want.values() for d in shape if 0 < d <= MAX_CANDIDATE_DIM}
        | set(range(1, 9))
    )
    for key in _SHAPE_KEYS.get(config.model.arch, ()):
        current = getattr(config.model, key)
        if isinstance(current, bool):
            options = [not current]
        else:
            options = dims if isinstance(current, int) else []
        for value in options:
            if value == current:
                continue
            if spent():
                break
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
            if spent():
                break
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


def meta_source(resolved: Path) -> Path:
    """The file a checkpoint's settings come from: its meta.json, or the exported file."""
    return resolved / META_FILE if resolved.is_dir() else resolved


def load_checkpoint_data(loaded: LoadedModel, data: Any = None) -> Any:
    """The dataset a checkpoint's settings (or ``data``, a DataConfig) describe, with the
    checkpoint's vocabularies and tokenizers; a failure names the file the settings came
    from (a meta.json claiming data.task="corpus" gave an error naming neither)."""
    import dataclasses

    from attnlab.data.dataset import load_dataset

    try:
        # reuse: a task that encodes its own data (an LM's token ids) uses these vocabularies
        dataset = load_dataset(
            data if data is not None else loaded.config.data, reuse=loaded.dataset
        )
    except AttnlabError as err:
        raise AttnlabError(
            f"{meta_source(loaded.path)}: its data settings do not load: {err}"
        ) from None
    return dataclasses.replace(
        dataset,
        src_vocab=loaded.dataset.src_vocab,
        tgt_vocab=loaded.dataset.tgt_vocab,
        src_tokenizer=loaded.dataset.src_tokenizer,
        tgt_tokenizer=loaded.dataset.tgt_tokenizer,
    )


def model_from_meta(meta: dict[str, Any], resolved: Path) -> tuple[Any, Any, Any]:
    """(the untrained model, config, dataset) that a checkpoint's meta describes; errors name
    the checkpoint ``resolved`` (its meta.json, or the exported file)."""
    from attnlab.data.dataset import Dataset
    from attnlab.experiment import from_dict, validate
    from attnlab.nn.model import build_model

    source = meta_source(resolved)
    config = validate(from_dict(meta["config"], source=str(source)))
    try:
        dataset = Dataset.from_meta(meta["dataset"])
    except AttnlabError as err:  # name the file: "dataset metadata is invalid: ..."
        raise AttnlabError(f"{source}: {err}") from None
    return build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab)), config, dataset


def check_weights_fit(
    model: Any, config: Any, dataset: Any, tensors: dict[str, Tensor], resolved: Path
) -> None:
    """Refuse weights whose names, shapes or dtypes are not those of the model their meta
    builds, or that hold NaN / infinity (as saving refuses them)."""
    have = _shapes(model)
    want = {k: tuple(v.shape) for k, v in tensors.items()}
    if want != have:
        sizes = len(dataset.src_vocab), len(dataset.tgt_vocab)
        reason = _explain_mismatch(config, *sizes, want, have)
        raise AttnlabError(f"checkpoint {resolved}: {reason}")
    check_weight_values(model, tensors, f"checkpoint {resolved}")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def check_weight_values(model: Any, tensors: dict[str, Tensor], where: str) -> None:
    """Each tensor has the dtype the model holds (a header that relabels F32 as I32 keeps the
    bytes and evaluated to a loss of 3.7e10) and, when floating point, only finite values."""
    import torch

    expected = model.state_dict()
    for name, tensor in tensors.items():
        dtype = expected[name].dtype
        if tensor.dtype != dtype:
            raise AttnlabError(
                f"{where}: tensor {name} is {_dtype_name(tensor.dtype)} in the weights but "
                f"{_dtype_name(dtype)} in the model {META_FILE} builds (a damaged or altered file)"
            )
        if tensor.is_floating_point():
            finite = torch.isfinite(tensor)
            if not bool(finite.all()):
                bad = int(finite.numel() - int(finite.sum()))
                raise AttnlabError(
                    f"{where}: tensor {name} holds {bad} non-finite values (NaN or infinity); "
                    "weights must be finite (use another checkpoint, or retrain)"
                )


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
