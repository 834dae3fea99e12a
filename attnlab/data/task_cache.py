"""Generated tasks in the corpora's disk cache: a large task is drawn once.

A toy task of at least ``CACHE_MIN_TOKENS`` source tokens (its three splits' sizes times
``data.max_len``) is stored after it is drawn, as the integer arrays of its splits
(attnlab.data.arrays) in one uncompressed ``.npz`` under ``$ATTNLAB_CACHE/tasks`` (the
corpora's cache folder, ``./.attnlab-cache`` by default), and read back on the next run with
the same settings as arrays again: loading is the file read, with no example built. The key
hashes the task's name, every field it reads (``TaskSpec.reads``) and the bytes of the module
that generates it, so a changed generator draws again. A damaged entry is drawn again and
rewritten; an unwritable folder only costs the cache. Smaller tasks draw faster than a file
is read: they are never cached.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import secrets
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.config import DataConfig
from attnlab.data.arrays import ArrayExamples
from attnlab.data.example import Splits

CACHE_MIN_TOKENS = 1_000_000
CACHE_VERSION = 1
SPLITS = ("train", "dev", "test")


def cache_tokens(cfg: DataConfig) -> int:
    """About how many source tokens the task's splits hold (sizes × the longest length)."""
    longest = max(cfg.max_len, cfg.test_max_len)
    return (cfg.train_size + cfg.dev_size + cfg.test_size) * longest


def task_key(cfg: DataConfig, entry: Any) -> str:
    """The cache key: the task, the values of the fields it reads, its generator's source."""
    fields = {key: getattr(cfg, key.split(".", 1)[1], None) for key in entry.meta.reads}
    try:
        source = Path(inspect.getsourcefile(entry.factory) or "").read_bytes()
    except (OSError, TypeError):
        source = b""
    text = json.dumps(
        {"version": CACHE_VERSION, "task": cfg.task, "fields": fields}, sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode() + hashlib.sha256(source).digest()).hexdigest()[:24]


def load_task_splits(cfg: DataConfig, entry: Any, cache_dir: Path | None = None) -> Splits:
    """The task's splits: from the cache when it holds them, else drawn (and cached when
    large); ``stats["cache"]`` says which (hit, miss, unwritable; absent: not cached)."""
    if cache_tokens(cfg) < CACHE_MIN_TOKENS:
        return entry.factory(cfg)
    from attnlab.data.corpus import default_cache_dir

    path = (cache_dir or default_cache_dir()) / "tasks" / f"{cfg.task}-{task_key(cfg, entry)}.npz"
    splits = _read(path)
    if splits is not None:
        splits.stats["cache"] = "hit"
        return splits
    splits = entry.factory(cfg)
    splits = Splits(*(_arrays(getattr(splits, s)) for s in SPLITS), dict(splits.stats))
    try:
        _write(path, splits)
        splits.stats["cache"] = "miss"
    except OSError:
        splits.stats["cache"] = "unwritable"  # a read-only folder must not stop training
    return splits


def _arrays(examples: Any) -> ArrayExamples:
    if isinstance(examples, ArrayExamples):
        return examples
    return ArrayExamples.from_examples(examples)


def _write(path: Path, splits: Splits) -> None:
    arrays: dict[str, np.ndarray] = {
        "stats": np.array(json.dumps(splits.stats, default=str)),
    }
    for name in SPLITS:
        part: ArrayExamples = getattr(splits, name)
        arrays[f"{name}_symbols"] = np.array(part.symbols, dtype=str)
        for side in ("src", "tgt", "alignment"):
            value = getattr(part, side)
            if value is not None:
                arrays[f"{name}_{side}"], arrays[f"{name}_{side}_offsets"] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, path)  # atomic: a crash never leaves half an entry
    finally:
        tmp.unlink(missing_ok=True)


def _read(path: Path) -> Splits | None:
    """The cached splits, or None when the entry is missing or damaged (drawn again)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            parts = []
            for name in SPLITS:
                aligned = f"{name}_alignment" in data
                parts.append(
                    ArrayExamples(
                        data[f"{name}_symbols"].tolist(),
                        (data[f"{name}_src"], data[f"{name}_src_offsets"]),
                        (data[f"{name}_tgt"], data[f"{name}_tgt_offsets"]),
                        (data[f"{name}_alignment"], data[f"{name}_alignment_offsets"])
                        if aligned
                        else None,
                    )
                )
            stats = json.loads(str(data["stats"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # damaged: draw again
        return None
    if not isinstance(stats, dict) or not all(_consistent(p) for p in parts):
        return None
    return Splits(*parts, stats)


def _consistent(part: ArrayExamples) -> bool:
    """Offsets that cover their values and ids inside the symbol table."""
    sides = [part.src, part.tgt] + ([part.alignment] if part.alignment is not None else [])
    for flat, offsets in sides:
        if offsets.ndim != 1 or len(offsets) != len(part.src[1]) or offsets[-1] != len(flat):
            return False
        if len(offsets) and (offsets[0] != 0 or np.any(np.diff(offsets) < 0)):
            return False
    for flat, _ in (part.src, part.tgt):
        if flat.size and (flat.min() < 0 or flat.max() >= len(part.symbols)):
            return False
    return True
