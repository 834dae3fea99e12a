"""The run selector shared by the Inspect and Export tabs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.widgets import Select

from attnlab.viz.text import run_labels

CHECKPOINT_TAGS = ("best", "last")  # as in attnlab.runs (not imported: it would load torch)


def has_checkpoint(run_dir: Path | str) -> bool:
    """The run saved a checkpoint (best or last) a model can be loaded from."""
    return any(
        (Path(run_dir) / "checkpoints" / tag / "meta.json").is_file() for tag in CHECKPOINT_TAGS
    )


def checkpoint_path(run_dir: Path, tag: str) -> Path:
    """RUN/checkpoints/TAG when it was saved, else RUN (best, else last)."""
    path = Path(run_dir) / "checkpoints" / tag
    return path if (path / "meta.json").is_file() else Path(run_dir)


def refresh_run_select(
    select: Select,
    runs_dir: Path,
    shown: list[str],
    prefer: Callable[[str], bool] | None = None,
    label_width: int | None = None,
) -> list[str]:
    """Fill ``select`` with the runs in ``runs_dir`` (keeping the current choice when it is still
    there; else the newest run ``prefer`` accepts, else the newest) and return their paths;
    returns ``shown`` untouched when nothing changed, so a timer can call this cheaply.
    ``label_width`` shortens the names shown (stamp first, then the middle) so that a narrow
    panel does not wrap them."""
    try:  # the runs directory's runs, then each study's under its study and cell
        from attnlab.study.listing import lab_runs

        runs = lab_runs(runs_dir)
    except Exception:  # a half-written run directory must not break the tab
        runs = []
    paths = [str(r.path) for r in runs]
    if paths == shown:
        return shown
    current = select.value
    names = [r.listed_name for r in runs]
    labels = run_labels(names, label_width) if label_width else names
    # The blank entry (the "(no runs)" prompt) is listed only while there is no run to choose.
    select._allow_blank = not paths  # Select has no public setter; set_options reads it
    select.set_options(list(zip(labels, paths, strict=True)))
    if current in paths:
        select.value = current
    elif paths:
        select.value = next((p for p in paths if prefer(p)), paths[0]) if prefer else paths[0]
    return paths
