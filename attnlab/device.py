"""Device choice: ``auto`` picks CUDA, then MPS, then CPU; the same code path runs on all."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from attnlab.errors import AttnlabError, unknown_choice

DEVICES = ("auto", "cpu", "cuda", "mps")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` | ``mps`` -> a torch.device that exists here."""
    base = name.split(":", 1)[0]
    if base not in DEVICES:
        raise unknown_choice("device", name, DEVICES)
    if base == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if base == "cuda" and not torch.cuda.is_available():
        raise AttnlabError(
            "device cuda requested but no CUDA device is available; use --device cpu"
        )
    if base == "mps" and not _mps_available():
        raise AttnlabError("device mps requested but MPS is not available; use --device cpu")
    return torch.device(name)


@contextlib.contextmanager
def autocast(device: torch.device, enabled: bool, cache: bool = True) -> Iterator[None]:
    """bf16 autocast on CUDA when ``enabled`` (``train.amp``); a no-op elsewhere. ``cache``
    off: no weight casts kept across ops (what a CUDA graph capture needs)."""
    if enabled and device.type == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache):
            yield
    else:
        yield


def describe(device: torch.device) -> str:
    """One line for the start event and the summary, e.g. ``cuda (NVIDIA H200)``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return f"cpu ({threads} thread{'' if threads == 1 else 's'})"
    return device.type


def peak_memory_mb(device: torch.device) -> float:
    """The process's memory high-water mark in MiB: on CUDA the tensors' peak
    (``torch.cuda.max_memory_allocated``), elsewhere the resident set's (``ru_maxrss``: what
    the OS saw, the interpreter and torch included; kilobytes on Linux, bytes on macOS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
