"""Attention history: the cross-attention of a few fixed dev sentences at each evaluation, kept
in the run directory so Inspect, ``translate --at-step`` and ``export-history`` can show how
attention formed over training.

Layout::

    RUN/attention_history/index.json                 what is stored (rewritten atomically)
    RUN/attention_history/step-<8 digits>.safetensors float16 ``map.<i>`` [hyp_len, src_len]

``index.json`` holds the format version, the layer (None for RNN attention) and head
("mean") the maps come from, the sentences' source tokens, and per stored step its file, the
dev scores of that evaluation and each sentence's hypothesis tokens (the map's rows; no
``</s>`` row, as ``sample`` events). A frame file is written whole before the index names it,
and a file the index stops naming is deleted only after the new index is in place: a crash at
any point leaves a readable history.

Thinning (``keep``, at least 2): when a new snapshot would make more than ``keep``, the first
and the newest always stay, and one of the others is dropped: the one whose removal leaves the
smallest largest gap between stored steps, then the smallest sum of squared gaps (the most even
spacing), then the older. Evenly spaced evaluations thus lose every other middle snapshot in
turn: 100 evaluations at keep 8 leave steps 1, 17, 33, 49, 65, 81, 97, 100 (in evaluations).

Reading never executes code (JSON and safetensors only), reads regular files of bounded size,
and turns any damage (truncated, garbage, wrong shapes, non-finite weights) into one
``AttnlabError`` line naming the file.
"""

from __future__ import annotations

import json
import math
import re
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.errors import AttnlabError
from attnlab.regular_files import read_bounded
from attnlab.runs.atomic import (
    WriteError,
    atomic_write_bytes,
    atomic_write_text,
    remove_stale_temps,
)

HISTORY_DIR = "attention_history"
INDEX_FILE = "index.json"
FORMAT = "attnlab-attention-history"
FORMAT_VERSION = 1
HEAD_MEAN = "mean"
INDEX_MAX_BYTES = 64 << 20  # 64 sentences x 1,000 snapshots of 100-token hypotheses fit
FRAME_MAX_BYTES = 256 << 20  # float16 maps of 64 sentences of 1,500 x 1,000 tokens fit
MIN_KEEP = 2  # the first and the newest
_FRAME_NAME = re.compile(r"step-(\d{8,19})\.safetensors")  # never a path: no "/" or ".."


def frame_file_name(step: int) -> str:
    return f"step-{step:08d}.safetensors"


def history_dir(run_dir: Path) -> Path:
    return Path(run_dir) / HISTORY_DIR


@dataclass(frozen=True)
class HistoryFrame:
    """One stored evaluation: its step, dev scores, and per sentence the hypothesis tokens and
    the float32 map [len(hyp), len(source)]."""

    step: int
    scores: dict[str, float]
    hyps: list[list[str]]
    maps: list[np.ndarray]


@dataclass(frozen=True)
class AttentionHistory:
    """What ``index.json`` says is stored; ``frame(step)`` reads one snapshot's maps."""

    run_dir: Path
    layer: int | None  # None for RNN attention
    head: str  # "mean": the average over heads
    sources: list[list[str]]
    steps: list[int]  # ascending
    scores: list[dict[str, float]]  # per step
    hyps: tuple[list[list[str]], ...] = ()  # per step, per sentence
    files: tuple[str, ...] = ()  # per step

    def frame(self, step: int) -> HistoryFrame:
        """The snapshot of exactly ``step``; an AttnlabError naming the stored steps otherwise,
        or naming the file when it is missing or damaged."""
        if step not in self.steps:
            raise AttnlabError(
                f"{history_dir(self.run_dir) / INDEX_FILE}: no attention snapshot at step {step}; "
                f"stored steps: {steps_text(self.steps)}"
            )
        at = self.steps.index(step)
        hyps = self.hyps[at]
        path = history_dir(self.run_dir) / self.files[at]
        maps = read_frame_maps(path, hyps, self.sources)
        return HistoryFrame(step, dict(self.scores[at]), [list(h) for h in hyps], maps)

    def nearest_step(self, step: int) -> int:
        """The stored step closest to ``step`` (a tie: the earlier one)."""
        return min(self.steps, key=lambda s: (abs(s - step), s))


def steps_text(steps: list[int], most: int = 12) -> str:
    """The stored steps for an error line: all of a few, else the first and last ones."""
    if len(steps) <= most:
        return ", ".join(str(s) for s in steps)
    half = most // 2
    head = ", ".join(str(s) for s in steps[:half])
    tail = ", ".join(str(s) for s in steps[-half:])
    return f"{head}, … ({len(steps) - most} more), {tail}"


# -- writing ----------------------------------------------------------------------------------


def thin_steps(steps: list[int], keep: int) -> list[int]:
    """``steps`` (ascending) cut to at most ``keep`` by the thinning rule (module docstring)."""
    kept = list(steps)
    keep = max(keep, MIN_KEEP)
    while len(kept) > keep:
        del kept[_step_to_drop(kept)]
    return kept


def _step_to_drop(kept: list[int]) -> int:
    """The index of the middle step whose removal leaves the most even spacing."""
    gaps = [b - a for a, b in zip(kept, kept[1:], strict=False)]
    widest = max(gaps)

    def cost(i: int) -> tuple[int, int, int]:
        # dropping kept[i] merges gaps i-1 and i: the largest gap becomes at least their sum,
        # and the sum of squared gaps grows by 2·g[i-1]·g[i]; then the older one
        merged = gaps[i - 1] + gaps[i]
        return max(widest, merged), gaps[i - 1] * gaps[i], i

    return min(range(1, len(kept) - 1), key=cost)


def write_history_frame(
    run_dir: Path,
    *,
    step: int,
    scores: dict[str, float],
    sources: list[list[str]],
    hyps: list[list[str]],
    maps: list[Any],
    layer: int | None,
    keep: int,
    head: str = HEAD_MEAN,
) -> None:
    """Store the snapshot of ``step`` (maps: per sentence [len(hyp), len(source)], numpy arrays
    or tensors) and thin the history to ``keep``. Snapshots at ``step`` or later (left by a run
    that resumed from an earlier checkpoint) are replaced; a history of other sentences, layer
    or head (or an unreadable index) is started over. WriteError when a file cannot be written.
    """
    from safetensors.numpy import save as safetensors_bytes

    if not (len(sources) == len(hyps) == len(maps)):
        raise ValueError("sources, hyps and maps need one entry per sentence")
    arrays = {}
    for i, (src, hyp, weights) in enumerate(zip(sources, hyps, maps, strict=True)):
        array = _as_numpy(weights).astype(np.float16)
        if array.shape != (len(hyp), len(src)):
            raise ValueError(f"map {i} is {array.shape}, expected {(len(hyp), len(src))}")
        arrays[f"map.{i}"] = np.ascontiguousarray(array)
    directory = history_dir(run_dir)
    name = frame_file_name(step)
    try:  # inside an existing run directory only (atomic writes would create its parents)
        directory.mkdir(exist_ok=True)
    except OSError as err:
        raise WriteError(f"{directory}: cannot write ({err.strerror or err})") from None
    header = {"layer": layer, "head": head, "sources": [list(map(str, s)) for s in sources]}
    stored = _frames_to_extend(directory, header)
    frames = [f for f in stored or [] if f["step"] < step]  # a resumed run redoes the rest
    if stored is None or len(frames) < len(stored):  # unname files before overwriting them
        _write_index(directory, header, frames)
    atomic_write_bytes(directory / name, safetensors_bytes(arrays, metadata={"step": str(step)}))
    frames.append(
        {
            "step": int(step),
            "file": name,
            "scores": {k: float(v) for k, v in scores.items() if _finite_number(v)},
            "hyps": [list(map(str, h)) for h in hyps],
        }
    )
    kept = set(thin_steps([f["step"] for f in frames], keep))
    frames = [f for f in frames if f["step"] in kept]
    _write_index(directory, header, frames)
    # Only now that the index no longer names them: files of dropped (or orphaned) snapshots.
    named = {f["file"] for f in frames}
    with suppress(OSError):
        for entry in directory.iterdir():
            if _FRAME_NAME.fullmatch(entry.name) and entry.name not in named:
                with suppress(OSError):
                    entry.unlink()
    remove_stale_temps(directory, INDEX_FILE)
    remove_stale_temps(directory, name)


def _write_index(directory: Path, header: dict[str, Any], frames: list[dict[str, Any]]) -> None:
    """index.json atomically; with no frames, no index (a history holds at least one)."""
    if not frames:
        with suppress(FileNotFoundError):
            (directory / INDEX_FILE).unlink()
        return
    index = {"format": FORMAT, "version": FORMAT_VERSION, **header, "frames": frames}
    # compact: one token per line (indented JSON) would triple the size of the hypotheses
    text = json.dumps(index, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    atomic_write_text(directory / INDEX_FILE, text + "\n")


def _frames_to_extend(directory: Path, header: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The stored frames a new snapshot joins ([] when there is no index); None when the index
    is unreadable or holds other sentences, another layer or head (not comparable: start over).
    """
    if not (directory / INDEX_FILE).exists():
        return []
    try:
        index = _read_index(directory / INDEX_FILE)
    except AttnlabError:
        return None
    if any(index[key] != value for key, value in header.items()):
        return None
    return index["frames"]


def _as_numpy(weights: Any) -> np.ndarray:
    if hasattr(weights, "detach"):  # a torch tensor (torch is not imported here)
        weights = weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=np.float32)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- reading ----------------------------------------------------------------------------------


def read_history(run_dir: Path) -> AttentionHistory | None:
    """The run's attention history; None when it keeps none (no ``attention_history/index.json``).
    A damaged index is one AttnlabError naming it; frames are read by ``frame``."""
    path = history_dir(run_dir) / INDEX_FILE
    if not path.exists() and not path.is_symlink():
        return None
    index = _read_index(path)
    frames = index["frames"]
    return AttentionHistory(
        run_dir=Path(run_dir),
        layer=index["layer"],
        head=index["head"],
        sources=index["sources"],
        steps=[f["step"] for f in frames],
        scores=[f["scores"] for f in frames],
        hyps=tuple(f["hyps"] for f in frames),
        files=tuple(f["file"] for f in frames),
    )


def _read_index(path: Path) -> dict[str, Any]:
    """index.json, checked field by field: one AttnlabError line naming the file and field."""
    try:
        data = read_bounded(path, INDEX_MAX_BYTES, "attention history index")
        index = json.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except AttnlabError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as err:
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:200]
        raise AttnlabError(f"{path}: not a readable attention history index ({reason})") from None
    except OSError as err:
        raise AttnlabError(f"{path}: cannot read ({err.strerror})") from None

    def bad(what: str) -> AttnlabError:
        return AttnlabError(f"{path}: not a readable attention history index ({what})")

    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise bad(f'"format" is not "{FORMAT}"')
    version = index.get("version")
    if version != FORMAT_VERSION:
        raise bad(f"version {str(version)[:20]}; this attnlab reads version {FORMAT_VERSION}")
    layer = index.get("layer")
    if layer is not None and not (_is_int(layer) and layer >= 0):
        raise bad('"layer" is not a layer index or null')
    if not isinstance(index.get("head"), str):
        raise bad('"head" is not a string')
    sources = index.get("sources")
    if not _token_lists(sources) or not sources:
        raise bad('"sources" is not a list of token lists')
    frames = index.get("frames")
    if not isinstance(frames, list) or not frames:
        raise bad('"frames" is not a non-empty list')
    previous = -1
    for number, frame in enumerate(frames):
        where = f"frame {number}"
        if not isinstance(frame, dict):
            raise bad(f"{where} is not an object")
        step = frame.get("step")
        if not (_is_int(step) and step > previous):
            raise bad(f"{where}: step is not an integer above the previous frame's")
        previous = step
        file = frame.get("file")
        if not isinstance(file, str) or _FRAME_NAME.fullmatch(file) is None:
            raise bad(f"{where}: file is not a step-<N>.safetensors name")
        scores = frame.get("scores")
        if not isinstance(scores, dict) or not all(
            isinstance(k, str) and _finite_number(v) for k, v in scores.items()
        ):
            raise bad(f"{where}: scores are not finite numbers by name")
        hyps = frame.get("hyps")
        if not _token_lists(hyps) or len(hyps) != len(sources):
            raise bad(f"{where}: hyps are not {len(sources)} token lists")
    return index


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_lists(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(tokens, list) and all(isinstance(t, str) for t in tokens) for tokens in value
    )


def read_frame_maps(
    path: Path, hyps: list[list[str]], sources: list[list[str]]
) -> list[np.ndarray]:
    """The float32 maps of one frame file, each checked against [len(hyp), len(source)] and
    for finite weights; any damage is one AttnlabError naming the file."""
    pairs = enumerate(zip(hyps, sources, strict=True))
    wanted = [(f"map.{i}", (len(hyp),), len(src)) for i, (hyp, src) in pairs]
    return read_maps(path, wanted, "attention history frame")


def read_maps(
    path: Path, wanted: list[tuple[str, tuple[int, ...], int]], what: str
) -> list[np.ndarray]:
    """From the safetensors file ``path``: each (key, allowed row counts, columns) of
    ``wanted`` as a float32 map of finite weights; any damage is one AttnlabError naming the
    file (``what`` says what it is)."""
    from safetensors.numpy import load as safetensors_load

    try:
        data = read_bounded(path, FRAME_MAX_BYTES, what)
        tensors = safetensors_load(data)
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file (named by the run's records)") from None
    except AttnlabError:
        raise
    except OSError as err:
        raise AttnlabError(f"{path}: cannot read ({err.strerror})") from None
    except Exception as err:  # safetensors' own error types for a bad header or data
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise AttnlabError(f"{path}: not a readable safetensors file ({reason})") from None
    maps = []
    for key, rows, cols in wanted:
        array = tensors.get(key)
        if array is None:
            raise AttnlabError(f"{path}: no {key}")
        if array.dtype not in (np.float16, np.float32):
            raise AttnlabError(f"{path}: {key} is {array.dtype}, not float16")
        if array.ndim != 2 or array.shape[0] not in rows or array.shape[1] != cols:
            raise AttnlabError(
                f"{path}: {key} is {list(array.shape)}, but its sentence has "
                f"{' or '.join(map(str, rows))} hypothesis x {cols} source tokens"
            )
        array = array.astype(np.float32)
        if not np.isfinite(array).all():
            raise AttnlabError(f"{path}: {key} holds non-finite weights")
        maps.append(array)
    return maps
