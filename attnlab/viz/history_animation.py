"""One sentence's stored attention over training (``attnlab.runs.history``) as an animated SVG
(CSS keyframes: each frame shown in turn, looping) or a self-contained HTML page with a slider
(and arrow keys) to step through the frames. No torch, no textual, no network: the files carry
everything they show.

Each frame is a heatmap of the stored map — rows the hypothesis tokens of that step, columns the
source tokens — coloured on the terminal heatmap's palette (``attnlab.viz.heatmap``) on a fixed
0..1 scale, so frames compare; its label reads ``step S · dev BLEU x · …``. Each cell carries
its weight (``data-weight``) and a tooltip.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from attnlab.viz.heatmap import PALETTE, heatmap_level

CELL = 22  # px per cell
LABEL_WIDTH = 110  # px for row labels
HEADER = 90  # px above the grid: the frame label and the (rotated) column labels
FONT = "font-family:monospace;font-size:12px"
SECONDS_PER_FRAME = 1.0
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # no XML 1.0 character


@dataclass(frozen=True)
class Frame:
    """One frame to draw: its label, row labels (hypothesis tokens) and [rows, cols] weights."""

    label: str
    rows: list[str]
    weights: Any  # [len(rows), len(cols)], numbers in 0..1


def _text(value: str) -> str:
    """A token as XML text / attribute: escaped, characters XML cannot hold replaced."""
    return escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def cell_colour(weight: float) -> str:
    """The fill of a cell: the palette colour of ``weight`` on a 0..1 scale."""
    r, g, b = PALETTE[heatmap_level(float(weight), 1.0)]
    return f"#{r:02x}{g:02x}{b:02x}"


def _size(frames: Sequence[Frame], cols: Sequence[str]) -> tuple[int, int]:
    n_rows = max((len(f.rows) for f in frames), default=0)
    width = LABEL_WIDTH + CELL * max(len(cols), 1) + 20
    return max(width, 420), HEADER + CELL * max(n_rows, 1) + 10


def _frame_group(frame: Frame, cols: Sequence[str], index: int, css_class: str) -> str:
    """One frame: label, column labels, row labels and cells."""
    parts = [
        f'<g class="{css_class}" id="frame-{index}" data-label="{_text(frame.label)}">',
        f'<text class="label" x="4" y="16" style="{FONT};font-weight:bold">'
        f"{_text(frame.label)}</text>",
    ]
    for c, token in enumerate(cols):
        x = LABEL_WIDTH + CELL * c + CELL // 2
        parts.append(
            f'<text x="{x}" y="{HEADER - 6}" style="{FONT}" '
            f'transform="rotate(-60 {x} {HEADER - 6})">{_text(token)}</text>'
        )
    for r, token in enumerate(frame.rows):
        y = HEADER + CELL * r
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + CELL - 7}" style="{FONT}" '
            f'text-anchor="end">{_text(token)}</text>'
        )
        for c in range(len(cols)):
            weight = float(frame.weights[r][c])
            parts.append(
                f'<rect class="cell" x="{LABEL_WIDTH + CELL * c}" y="{y}" width="{CELL}" '
                f'height="{CELL}" fill="{cell_colour(weight)}" data-row="{r}" data-col="{c}" '
                f'data-weight="{weight:.4f}"><title>{_text(token)} → {_text(cols[c])}: '
                f"{weight:.3f}</title></rect>"
            )
    parts.append("</g>")
    return "\n".join(parts)


def animated_svg(frames: Sequence[Frame], cols: Sequence[str], title: str) -> str:
    """An SVG that shows ``frames`` in turn (``SECONDS_PER_FRAME`` each, looping) with CSS
    keyframes; a viewer without animation shows the last frame."""
    width, height = _size(frames, cols)
    n = len(frames)
    total = SECONDS_PER_FRAME * n
    share = 100.0 / n
    style = [
        ".frame { visibility: hidden; }",
        ".frame:last-of-type { visibility: visible; }",
        "@media (prefers-reduced-motion: no-preference) {",
        f"  .frame {{ animation: show {total:g}s step-end infinite; }}",
        f"  @keyframes show {{ 0% {{ visibility: visible; }} {share:.4f}% {{ visibility: hidden; }}"
        " 100% { visibility: hidden; } }",
    ]
    style += [
        f"  #frame-{i} {{ animation-delay: {SECONDS_PER_FRAME * i - total:g}s; }}" for i in range(n)
    ]
    style.append("}")
    groups = [_frame_group(frame, cols, i, "frame") for i, frame in enumerate(frames)]
    return "\n".join(
        [
            '<?xml version="1.0" encoding="UTF-8"?>',
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">',
            f"<title>{_text(title)}</title>",
            '<rect width="100%" height="100%" fill="#ffffff"/>',
            "<style>",
            *style,
            "</style>",
            *groups,
            "</svg>",
            "",
        ]
    )


def slider_html(frames: Sequence[Frame], cols: Sequence[str], title: str) -> str:
    """A self-contained HTML page: one SVG per frame, a slider (and ← → keys) choosing which
    is shown; the last frame is shown first."""
    width, height = _size(frames, cols)
    n = len(frames)
    svgs = []
    for i, frame in enumerate(frames):
        hidden = "" if i == n - 1 else " hidden"
        svgs.append(
            f'<svg class="frame" data-index="{i}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}"{hidden}>'
            f'<rect width="100%" height="100%" fill="#ffffff"/>'
            f"{_frame_group(frame, cols, i, 'map')}</svg>"
        )
    script = (
        "const slider = document.getElementById('step');"
        "const frames = document.querySelectorAll('svg.frame');"
        "const label = document.getElementById('label');"
        "function show(i) { frames.forEach((f, k) => { f.hidden = k !== i; });"
        " label.textContent = frames[i].querySelector('g').dataset.label; }"
        "slider.addEventListener('input', () => show(Number(slider.value)));"
        f"show({n - 1});"
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f"<title>{_text(title)}</title>",
            f"<style>body {{ {FONT}; margin: 1em; }} input {{ width: {width}px; }}</style>",
            "</head>",
            "<body>",
            f'<h1 style="font-size:14px">{_text(title)}</h1>',
            f'<input id="step" type="range" min="0" max="{n - 1}" value="{n - 1}" step="1" '
            'aria-label="stored step">',
            f'<p id="label">{_text(frames[-1].label) if frames else ""}</p>',
            *svgs,
            f"<script>{script}</script>",
            "</body>",
            "</html>",
            "",
        ]
    )
