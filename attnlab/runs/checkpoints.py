"""Saving checkpoints: ``RUN/checkpoints/{best,last}`` and the ``step-N`` copies.

**Every file of a checkpoint carries its step**; loading and resuming refuse a directory whose
files disagree (one line naming each file's step; attnlab.runs.loading).

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
A save that fails raises ``WriteError`` and leaves the previous checkpoint untouched.

Fault injection: ``ATTNLAB_FAULT_SAVE_DELAY=SECONDS`` sleeps after each file of a checkpoint
and between its renames, so that ``benchmarks/fault_injection.py`` can kill a save midway.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab import __version__
from attnlab.config import ExperimentConfig, to_dict
from attnlab.errors import AttnlabError
from attnlab.runs.atomic import (
    _fsync_dir,
    _json_text,
    _scratch_suffix,
    _tensor_bytes,
    _write_error,
    _write_new_file,
    jsonable,
    remove_stale_temps,
)
from attnlab.runs.rundir import CONFIG_FILE, CONTROL_FILE

if TYPE_CHECKING:  # torch is imported lazily: the TUI lists runs without loading it
    import torch
    from torch import Tensor


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


def checkpoint_dir(run_dir: Path, tag: str) -> Path:
    if tag not in CHECKPOINT_TAGS:
        raise AttnlabError(f'unknown checkpoint "{tag}"; valid: {", ".join(CHECKPOINT_TAGS)}')
    return Path(run_dir) / CHECKPOINTS / tag


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
            remove_entry(scratch)
        if final.is_dir():  # per-file temporaries of checkpoints written before 0.x
            for name in (MODEL_FILE, META_FILE, STATE_TENSORS, STATE_JSON):
                remove_stale_temps(final, name)
    for name in (CONFIG_FILE, CONTROL_FILE):
        remove_stale_temps(run_dir, name)


def remove_entry(path: Path) -> None:
    """Remove a checkpoint entry: a symlink (``checkpoints/last -> elsewhere``) is removed
    itself, never followed; a directory with its contents. rmtree refuses a symlink, and
    with its error ignored a resume left ``.last.old-PID-*`` behind."""
    with suppress(OSError):  # gone already, or left for prepare_checkpoints to try again
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


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
        remove_entry(old)


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
        remove_entry(scratch)


def resolve_or_none(directory: Path) -> Path | None:
    """A checkpoint directory with its meta.json (or its mid-swap fallback), else None.
    (exists(), not is_file(): a meta.json that is a FIFO is named by its reader.)"""
    if (directory / META_FILE).exists():
        return directory
    return _fallback_dir(directory.parent, directory.name)
