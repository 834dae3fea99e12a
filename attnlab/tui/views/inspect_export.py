"""Inspect's export: the map on screen to RUN/figures/*.svg and *.html, in a thread (a mixin
of InspectView; the renderer is attnlab.viz.export, as `attnlab translate --export`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from textual import work
from textual.message import Message
from textual.widgets import Input, Select

from attnlab.attention_map import NORM_SOFTMAX
from attnlab.tui.jobs import Jobs
from attnlab.tui.views.inspect_text import HEAD_AVERAGE, KIND_AXES, KIND_LABELS

MAP_EXPORTS = Jobs(every=True)  # one map written at a time; each `e` is answered


@dataclass
class MapExported(Message):
    paths: list[Path]
    error: str = ""


class MapExport:
    """Export of the map InspectView shows (it provides maps, current_* and the selectors)."""

    maps: dict[str, Any]
    hyp_index: int
    step_row: int | None
    last_export: list[Path]
    app: Any
    query_one: Any
    current_kind: str | None
    current_normalisation: str
    post_message: Any

    def export_target(self) -> tuple[Path, str] | None:
        """(file stem without suffix, title) of the map on screen; None without one."""
        run = self._shown_run()
        kind = self.current_kind
        if run is None or kind is None:
            return None
        layer = self.query_one("#insp-layer", Select).value
        head = self.query_one("#insp-head", Select).value
        layers, heads = self.maps[kind].shape[:2]
        where = []
        if layers > 1:
            where.append(f"layer {layer}/{layers}")
        if heads > 1:
            average = head in (HEAD_AVERAGE, Select.NULL)
            where.append("head avg" if average else f"head {head}/{heads}")
        text = self.query_one("#insp-text", Input).value.strip()
        split = self.query_one("#insp-split", Select).value
        index = self.query_one("#insp-index", Input).value or "0"
        which = "typed" if text else f"{split}{index}"
        h = "avg" if head in (HEAD_AVERAGE, Select.NULL) else f"h{head}"
        name = f"{which}-{kind}-l{layer}-{h}-hyp{self.hyp_index + 1}"
        title = f"{run.name}: {KIND_LABELS.get(kind, kind)} ({KIND_AXES.get(kind, '?')})"
        title += (", " + ", ".join(where)) if where else ""
        return run / "figures" / name, title

    def action_export_map(self) -> None:
        """Write the map on screen to RUN/figures/*.svg and *.html (attnlab.viz.export, the
        renderer of `attnlab translate --export`) in a thread; the notice names the files."""
        current = self.current_matrix()
        target = self.export_target()
        if current is None or target is None or not current[0].size:
            self.app.notify("no map to export: decode a sample first", severity="warning")
            return
        matrix, rows, cols = current
        mask = self.current_selected()
        if self.step_row is not None:  # what is shown: the rows stepped through so far
            matrix, rows = matrix[: self.step_row + 1], rows[: self.step_row + 1]
        rows, cols = rows[: matrix.shape[0]], cols[: matrix.shape[1]]
        if mask is not None:
            mask = mask[: matrix.shape[0], : matrix.shape[1]]
        self.write_export(matrix, rows, cols, *target, self.current_normalisation, mask)

    # Queued (MAP_EXPORTS), never two at once: each `e` writes its files and is answered.
    @work(thread=True, exit_on_error=False, group="inspect-export")
    def write_export(
        self,
        matrix: np.ndarray,
        rows: list[str],
        cols: list[str],
        stem: Path,
        title: str,
        normalisation: str = NORM_SOFTMAX,
        selected: np.ndarray | None = None,
    ) -> None:
        from attnlab.viz.export import export_heatmap

        def write() -> list[Path]:
            stem.parent.mkdir(parents=True, exist_ok=True)
            return export_heatmap(
                matrix, rows, cols, title, stem, normalisation=normalisation, selected=selected
            )

        outcome = MAP_EXPORTS.run(MAP_EXPORTS.issue(), write)
        self.post_message(MapExported(outcome.value or [], outcome.error))

    def on_map_exported(self, message: MapExported) -> None:
        # A handler by name (found through the MRO); an @on handler of a mixin is not.
        if message.error:
            self.app.notify(message.error, title="Export", severity="error")
            return
        if not message.paths:
            return
        svg, *others = message.paths
        self.last_export = message.paths
        extra = "".join(f" + {p.suffix}" for p in others)
        self.app.notify(f"wrote {svg}{extra}", title="Map exported", timeout=10)
