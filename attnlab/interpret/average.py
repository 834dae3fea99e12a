"""Checkpoint averaging and the step copies it averages (``train.keep_last``).

With ``train.keep_last = N`` (> 0), after each save of ``checkpoints/last`` the trainer (rank 0,
the one writer) calls ``keep_step_copy``: the weights and meta of that save are copied to
``checkpoints/step-<step>`` as a whole (attnlab.runs's directory swap) and all but the N newest
step copies are retired.
``average_checkpoints`` averages the N newest copies' parameters elementwise (in float64, cast
back) into one exported ``.safetensors`` bundle that ``eval`` / ``translate`` load. Buffers are
not trained and are taken from the newest copy: Performer's ω is a random draw, and a mean of
independent draws is not one (its rows shrink, which biases the softmax-kernel estimate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.errors import AttnlabError


def step_copies(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete ``checkpoints/step-*`` copy, oldest first."""
    from attnlab.runs import step_checkpoints

    return step_checkpoints(run_dir)


def keep_step_copy(run_dir: Path, step: int, keep_last: int) -> Path | None:
    """``checkpoints/last`` -> ``checkpoints/step-<step>`` (atomic), keeping the ``keep_last``
    newest copies (attnlab.runs.keep_step_checkpoint). Nothing happens when it is 0."""
    from attnlab.runs import keep_step_checkpoint

    return keep_step_checkpoint(run_dir, step, keep_last)


def average_state_dicts(
    states: list[dict[str, Tensor]], from_newest: frozenset[str] = frozenset()
) -> dict[str, Tensor]:
    """Elementwise mean of floating tensors; integer tensors and the keys in ``from_newest``
    are the newest state's. All states must hold the same keys."""
    if not states:
        raise AttnlabError("no checkpoints to average")
    keys = set(states[0])
    for state in states[1:]:
        if set(state) != keys:
            raise AttnlabError(
                "the checkpoints to average hold different tensors (different models)"
            )
    out = {}
    for key, newest in states[-1].items():
        if newest.is_floating_point() and key not in from_newest:
            total = torch.zeros_like(newest, dtype=torch.float64)
            for state in states:
                if state[key].shape != newest.shape:
                    raise AttnlabError(f"tensor {key} differs in shape between the checkpoints")
                total += state[key].to(torch.float64)
            out[key] = (total / len(states)).to(newest.dtype)
        else:
            out[key] = newest.clone()
    return out


def read_step_copy(step: int, directory: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """One step copy through the checkpoint reader (every file must carry one step), which
    must also be the step its name says."""
    from attnlab.runs import read_checkpoint

    state, meta = read_checkpoint(directory)
    if meta["step"] != step:
        raise AttnlabError(
            f"checkpoint {directory} holds step {meta['step']}, not the step {step} of its "
            "name; it was not written by keep_last: remove it or average fewer (--last)"
        )
    return state, meta


def check_same_model(
    meta: dict[str, Any], directory: Path, newest: dict[str, Any], newest_dir: Path
) -> None:
    """Copies averaged together must index the same tokens and build the same model: two
    vocabularies of one size but other tokens averaged silently into a model of neither."""
    for key in ("src_vocab", "tgt_vocab", "src_tokenizer", "tgt_tokenizer"):
        mine, theirs = meta["dataset"].get(key), newest["dataset"].get(key)
        if mine != theirs:
            where = ""
            if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
                index = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
                where = f" (id {index}: {mine[index]!r} vs {theirs[index]!r})"
            raise AttnlabError(
                f"checkpoint {directory}: its {key} differs from {newest_dir.name}'s{where}; "
                "average copies of one run only"
            )
    if meta["config"].get("model") != newest["config"].get("model"):
        raise AttnlabError(
            f"checkpoint {directory}: its model settings differ from {newest_dir.name}'s; "
            "average copies of one run only"
        )


def buffer_names(meta: dict[str, Any], directory: Path) -> frozenset[str]:
    """The buffers of the model the meta of checkpoint ``directory`` describes."""
    from attnlab.runs import model_from_meta

    model, _config, _dataset = model_from_meta(meta, directory)
    return frozenset(name for name, _ in model.named_buffers())


def average_checkpoints(
    run_dir: Path, last: int, out_file: Path, force: bool = False
) -> tuple[Path, list[int]]:
    """Average the ``last`` newest step copies of ``run_dir`` into ``out_file`` (.safetensors,
    written whole; an existing file is replaced only with ``force``)."""
    import json

    from attnlab.runs import EXPORT_FORMAT, remove_stale_temps, save_output_tensors

    out_file = Path(out_file)
    if out_file.suffix != ".safetensors":
        raise AttnlabError(f"{out_file}: the output file name must end in .safetensors")
    if out_file.is_dir():
        raise AttnlabError(f"{out_file}: is a directory; give a .safetensors file name")
    if last < 1:
        raise AttnlabError(f"--last must be at least 1, got {last}")
    copies = step_copies(run_dir)
    if not copies:
        raise AttnlabError(
            f"{run_dir}: no checkpoints/step-* copies to average; "
            "train with --set train.keep_last=N"
        )
    if len(copies) < last:
        raise AttnlabError(
            f"{run_dir}: --last {last} but the run kept only {len(copies)} step checkpoints"
        )
    if out_file.exists() and not force:
        raise AttnlabError(f"{out_file}: already exists; pass --force to replace it")
    chosen = copies[-last:]
    states, metas = zip(*(read_step_copy(step, path) for step, path in chosen), strict=True)
    meta = metas[-1]
    for (_step, path), other in zip(chosen[:-1], metas[:-1], strict=True):
        check_same_model(other, path, meta, chosen[-1][1])
    averaged = average_state_dicts(list(states), buffer_names(meta, chosen[-1][1]))
    steps = [step for step, _ in chosen]
    metadata = {
        "format": "pt",
        "attnlab.format": EXPORT_FORMAT,
        "attnlab.version": str(meta.get("attnlab_version", "")),
        "attnlab.config": json.dumps(meta["config"], ensure_ascii=False),
        "attnlab.dataset": json.dumps(meta["dataset"], ensure_ascii=False),
        "attnlab.metrics": json.dumps({}, ensure_ascii=False),
        "attnlab.step": str(meta.get("step", 0)),
        "attnlab.params": str(meta.get("params", 0)),
        "attnlab.averaged_steps": json.dumps(steps),
    }
    remove_stale_temps(out_file.parent, out_file.name)
    save_output_tensors(out_file, averaged, metadata)
    return out_file, steps
