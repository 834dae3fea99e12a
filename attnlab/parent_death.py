"""A child process that dies with its parent: Linux's ``prctl(PR_SET_PDEATHSIG)``.

One home for the call that DDP ranks, torchrun and the study runner's children make, so no
process attnlab starts outlives the one that started it (no torch here: the study runner's
children call it between fork and exec)."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` to this process when the thread that started it ends
    (kept across exec). False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return False
