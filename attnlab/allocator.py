"""Process-wide malloc settings that the CPU hot paths depend on (no torch import here)."""

from __future__ import annotations

import ctypes
import sys

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit
_TRIM_THRESHOLD = 1 << 30


def retain_freed_memory() -> bool:
    """Let glibc keep freed blocks of up to 32 MiB for reuse instead of unmapping them.

    PyTorch's CPU allocator does not cache: every [rows, vocab] tensor of a decoding step
    (or an activation of a training step) is a fresh malloc of several MiB, which glibc
    serves with a new mmap and gives back on free, so each step pays for page faults and
    zeroing. Serving them from the heap and not trimming it lets the next step reuse the
    same pages (the effect PyTorch's CPU tuning guide gets from jemalloc / tcmalloc).
    The process keeps its peak heap until it exits. Linux glibc only; True when applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )
