"""The run selector shared by the Inspect and Export tabs."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Select

from attnlab.viz.text import run_label


def refresh_run_select(
    select: Select, runs_dir: Path, shown: list[str], label_width: int | None = None
) -> list[str]:
    """Fill ``select`` with the runs in ``runs_dir`` (keeping the current choice when it is still
    there) and return their paths; returns ``shown`` untouched when nothing changed, so a timer
    can call this cheaply. ``label_width`` shortens the names shown (stamp first, then the
    middle) so that a narrow panel does not wrap them."""
    try:
        from attnlab.runs import list_runs

        runs = list_runs(runs_dir)
    except Exception:  # a half-written run directory must not break the tab
        runs = []
    paths = [str(r.path) for r in runs]
    if paths == shown:
        return shown
    current = select.value
    names = [Path(p).name for p in paths]
    labels = [run_label(n, label_width) if label_width else n for n in names]
    select.set_options(list(zip(labels, paths, strict=True)))
    if current in paths:
        select.value = current
    elif paths:
        select.value = paths[0]
    return paths
