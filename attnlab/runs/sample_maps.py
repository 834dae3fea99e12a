"""Long sample maps beside their ``sample`` events.

A ``sample`` event carries its sentence's cross-attention inline (rows of 4-decimal weights)
while the map is small. A long sentence's map does not fit an event line: a 2,048 x 2,048 map
is about 21 MB of JSON, over the event reader's 8 MiB line limit (such lines are skipped). A
map of more than ``INLINE_MAX_CELLS`` weights is therefore stored as float16 in
``RUN/samples/step-<8 digits>.safetensors`` under ``map.<sample index>``, one file per
evaluation, and the event names that file in ``attention_file`` (its ``attention`` is null).
The file is written whole before the event that names it, so a reader never meets a name
without its file (a crash in between leaves an unnamed file, overwritten by a rerun).

Reading never executes code (safetensors only), reads a regular file of bounded size, takes
only a plain file name (never a path) and turns damage into one ``AttnlabError`` line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.attention_map import INLINE_MAX_CELLS, is_long_map
from attnlab.errors import AttnlabError
from attnlab.runs.atomic import WriteError, atomic_write_bytes
from attnlab.runs.history import read_maps

SAMPLES_DIR = "samples"
_FILE_NAME = re.compile(r"step-\d{8,19}\.safetensors")  # a name, never a path


def sample_file_name(step: int) -> str:
    return f"step-{step:08d}.safetensors"


def store_long_maps(run_dir: Path, step: int, samples: list[dict[str, Any]]) -> None:
    """Move each sample's ``attention_array`` (a [hyp, src] array, set for long maps only)
    into ``RUN/samples/step-<step>.safetensors`` and name that file in the sample's
    ``attention_file``. WriteError when the file cannot be written (the samples then carry no
    map, never a name without its file)."""
    from safetensors.numpy import save as safetensors_bytes

    arrays = {}
    for sample in samples:
        weights = sample.pop("attention_array", None)
        if weights is not None:
            arrays[f"map.{sample['index']}"] = np.ascontiguousarray(
                np.asarray(weights, dtype=np.float16)
            )
    if not arrays:
        return
    directory = Path(run_dir) / SAMPLES_DIR
    name = sample_file_name(step)
    try:  # inside the existing run directory only
        directory.mkdir(exist_ok=True)
    except OSError as err:
        raise WriteError(f"{directory}: cannot write ({err.strerror or err})") from None
    atomic_write_bytes(directory / name, safetensors_bytes(arrays, metadata={"step": str(step)}))
    for sample in samples:
        if f"map.{sample['index']}" in arrays:
            sample["attention"] = None
            sample["attention_file"] = name


def read_sample_map(
    run_dir: Path, name: str, index: int, hyp: list[str], src: list[str]
) -> np.ndarray:
    """The float32 map ``map.<index>`` of the file a sample event names: [len(hyp), len(src)],
    or one row more (a finished hypothesis's </s> row, as inline maps have)."""
    if not _FILE_NAME.fullmatch(str(name)):
        raise AttnlabError(f"attention_file={name!r}: not a samples/step-<N>.safetensors name")
    path = Path(run_dir) / SAMPLES_DIR / name
    rows = (len(hyp), len(hyp) + 1)
    return read_maps(path, [(f"map.{index}", rows, len(src))], "sample map")[0]


__all__ = [
    "INLINE_MAX_CELLS",
    "SAMPLES_DIR",
    "is_long_map",
    "read_sample_map",
    "sample_file_name",
    "store_long_maps",
]
