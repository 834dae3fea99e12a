"""``STUDY/outcomes.json``: each run's latest outcome (a failed run's one-line error).

Written only by the runner that holds the study lock (attnlab.study.lock), from one thread at
a time (a lock here as well: the Dask and local executors call back from the main thread
today, but a write is never interleaved with another). Tuning runs are keyed ``tune/NAME``.
"""

from __future__ import annotations

import threading
from pathlib import Path

from attnlab.errors import AttnlabError

OUTCOMES_FILE = "outcomes.json"  # run -> the last invocation's outcome (a failed run's error)
_WRITE = threading.Lock()


def record_outcome(directory: Path, key: str, state: str, error: str) -> None:
    """Keep the run's latest outcome (read, change, atomic write under the lock)."""
    from attnlab.runs import atomic_write_json

    with _WRITE:
        outcomes = read_outcomes(directory)
        outcomes[key] = {"state": state, "error": error}
        atomic_write_json(Path(directory) / OUTCOMES_FILE, outcomes)


def read_outcomes(directory: Path) -> dict[str, dict[str, str]]:
    from attnlab.runs import read_json

    path = Path(directory) / OUTCOMES_FILE
    try:
        data = read_json(path) if path.is_file() else {}
    except AttnlabError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(run): {"state": str(v.get("state", "")), "error": str(v.get("error", ""))}
        for run, v in data.items()
        if isinstance(v, dict)
    }
