"""Checkpoint averaging and the step copies it averages (``train.keep_last``).

With ``train.keep_last = N`` (> 0), after each save of ``checkpoints/last`` the trainer calls
``keep_step_copy``: the weights and meta of that save are copied to
``checkpoints/step-<step>`` and all but the N newest step copies are removed.
``average_checkpoints`` averages the N newest copies elementwise (floating-point tensors in
float64, cast back; integer buffers are taken from the newest) into one exported
``.safetensors`` bundle that ``eval`` / ``translate`` load.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch
from torch import Tensor

from attnlab.errors import AttnlabError

STEP_PREFIX = "step-"
_STEP = re.compile(r"^step-(\d+)$")


def step_copies(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete ``checkpoints/step-*`` copy, oldest first."""
    from attnlab.runs import CHECKPOINTS, META_FILE

    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP.match(child.name)
        if match and (child / META_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def keep_step_copy(run_dir: Path, step: int, keep_last: int) -> Path | None:
    """Copy ``checkpoints/last`` (weights + meta) to ``checkpoints/step-<step>``, then keep
    only the ``keep_last`` newest copies. Nothing happens when ``keep_last`` is 0."""
    from attnlab.runs import CHECKPOINTS, META_FILE, MODEL_FILE, checkpoint_dir

    if keep_last <= 0:
        return None
    source = checkpoint_dir(run_dir, "last")
    target = Path(run_dir) / CHECKPOINTS / f"{STEP_PREFIX}{int(step)}"
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(source / MODEL_FILE, staging / MODEL_FILE)
    shutil.copy2(source / META_FILE, staging / META_FILE)  # meta last: the copy is complete
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    for _step, directory in step_copies(run_dir)[:-keep_last]:
        shutil.rmtree(directory, ignore_errors=True)
    return target


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Elementwise mean of floating tensors; others (and mismatches) must agree in keys."""
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
        if newest.is_floating_point():
            total = torch.zeros_like(newest, dtype=torch.float64)
            for state in states:
                if state[key].shape != newest.shape:
                    raise AttnlabError(f"tensor {key} differs in shape between the checkpoints")
                total += state[key].to(torch.float64)
            out[key] = (total / len(states)).to(newest.dtype)
        else:
            out[key] = newest.clone()
    return out


def average_checkpoints(run_dir: Path, last: int, out_file: Path) -> tuple[Path, list[int]]:
    """Average the ``last`` newest step copies of ``run_dir`` into ``out_file`` (.safetensors)."""
    import json

    from attnlab.runs import EXPORT_FORMAT, read_checkpoint, save_tensors

    out_file = Path(out_file)
    if out_file.suffix != ".safetensors":
        raise AttnlabError(f"{out_file}: the output file name must end in .safetensors")
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
    chosen = copies[-last:]
    states, metas = zip(*(read_checkpoint(path) for _step, path in chosen), strict=True)
    averaged = average_state_dicts(list(states))
    meta = metas[-1]
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
    save_tensors(out_file, averaged, metadata)
    return out_file, steps
