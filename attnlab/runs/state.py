"""Trainer state for resume: ``trainer_state.{safetensors,json}`` of ``checkpoints/last``
(optimiser tensors, RNG state, schedules, data position), read back and checked against the
weights and the config before a run continues."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.config import ExperimentConfig, to_dict
from attnlab.errors import AttnlabError
from attnlab.runs.atomic import read_json, read_tensors
from attnlab.runs.checkpoints import (
    META_FILE,
    MODEL_FILE,
    STATE_JSON,
    STATE_TENSORS,
    checkpoint_dir,
    resolve_or_none,
)
from attnlab.runs.loading import (
    _int_field,
    _shapes,
    _stamped_step,
    check_single_step,
    check_weight_values,
    read_meta,
)

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    from torch import Tensor


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
    groups = [{k: _group_value(v) for k, v in g.items()} for g in state_dict["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def _group_value(value: Any) -> Any:
    """A param group's setting as JSON: a tuple as a list, a tensor learning rate (a CUDA-graph
    run's, attnlab.train.graphs) as its number (read at a save, not in the step)."""
    from torch import Tensor

    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    return value


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
        directory = resolve_or_none(checkpoint_dir(run_dir, "last"))
        check_weight_values(model, weights, f"cannot resume {run_dir}: checkpoint {directory}")
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


def keep_checkpoint_vocabularies(run_dir: Path, dataset: Any) -> Any:
    """``dataset`` with the vocabularies of ``run_dir``'s last checkpoint, when it has one:
    a resumed run keeps the ids its weights were trained with. A toy task's vocabulary is now
    its alphabet; a run trained before that has its sample's, often of the same size in
    another order, which rebuilt here would resume silently wrong."""
    import dataclasses

    from attnlab.data.indexed import vocab_and_tokenizers_from_meta

    directory = resolve_or_none(checkpoint_dir(run_dir, "last"))
    if directory is None or not (directory / META_FILE).is_file():
        return dataset
    meta = read_meta(directory).get("dataset")
    if not isinstance(meta, dict) or "src_vocab" not in meta:
        return dataset
    src_vocab, tgt_vocab, _src_tok, _tgt_tok = vocab_and_tokenizers_from_meta(meta)
    if src_vocab.itos == dataset.src_vocab.itos and tgt_vocab.itos == dataset.tgt_vocab.itos:
        return dataset
    if getattr(dataset, "streams", None) is not None:  # its ids are encoded: cannot swap
        raise AttnlabError(
            f"{run_dir}: data.path's vocabulary is not the one the checkpoint was trained "
            "with (the text or data.tokenizer changed); resume with the same text"
        )
    return dataclasses.replace(dataset, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
