"""Pure text-layout helpers shared by the CLI, the renderers and the lab (no textual, no torch).

* :func:`middle_ellipsis` shortens a name in the middle, so both ends survive: a run name keeps
  its task/variant prefix and the tail of its timestamp instead of losing the variant.
* :func:`stagger_labels` places multi-character column labels horizontally, each starting at
  its column, on as many header rows as needed so that no two overlap (a token is never split
  across rows).
* :func:`integer_ticks` chooses whole-number axis ticks over a real range (steps are integers).
* :func:`fit_count` writes a count in a fixed width, exactly when it fits, else in k / M / G.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

ELLIPSIS = "…"


def middle_ellipsis(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters by replacing its middle with "…".

    The head keeps one character more than the tail when the split is uneven (the head is
    usually the more telling part: task and variant come first in run names).
    """
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return ELLIPSIS
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


COUNT_SUFFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def fit_count(value: float, width: int) -> str:
    """``value`` with thousands separators when that fits ``width`` (``24,427``), else with
    the largest k / M / G suffix and as many decimals as fit (``9.03M``, ``676.5k``): a table
    cell then never cuts a number's digits off."""
    exact = f"{value:,.0f}"
    if len(exact) <= width:
        return exact
    for scale, suffix in COUNT_SUFFIXES:
        if abs(value) >= scale:
            for decimals in (2, 1, 0):
                text = f"{value / scale:.{decimals}f}{suffix}"
                if len(text) <= width:
                    return text
            break
    # Beyond 999G (only a damaged log has such a step count): 1e+29 rather than digits the
    # cell would cut (10^29 showed as "10000").
    return f"{value:.0e}" if len(exact) > width else exact


@dataclass(frozen=True)
class Placement:
    """Where one column label is written in a staggered header."""

    column: int
    row: int  # header row, 0 = the row nearest the grid
    start: int  # character offset from the first column's left edge
    text: str


def stagger_labels(
    labels: Sequence[str], cell: int, max_rows: int, max_label: int = 11, limit: int | None = None
) -> list[Placement] | None:
    """Place ``labels`` (one per ``cell``-wide column) on at most ``max_rows`` header rows.

    A label that fits its cell is centred in it; a longer one starts at its column's left edge
    and runs to the right. Each label goes on the first row (nearest the grid first) where it
    keeps a one-character gap to the label before it. Labels longer than ``max_label`` get a
    middle ellipsis. A label that would run past ``limit`` characters is moved left to end
    there. Returns None when ``max_rows`` rows are not enough.
    """
    ends: list[int] = []  # per row, the first free offset
    placed: list[Placement] = []
    for column, raw in enumerate(labels):
        text = middle_ellipsis(raw, max_label)
        left = column * cell
        start = left + (cell - len(text)) // 2 if len(text) < cell else left
        if limit is not None and start + len(text) > limit:
            start = max(limit - len(text), 0)
        row = next((r for r, end in enumerate(ends) if start >= end), len(ends))
        if row == len(ends):
            if row >= max_rows:
                return None
            ends.append(0)
        ends[row] = start + len(text) + 1
        placed.append(Placement(column, row, start, text))
    return placed


def header_rows(placements: Sequence[Placement]) -> list[str]:
    """The header as plain text lines, top line first (the row nearest the grid is last)."""
    n_rows = max((p.row for p in placements), default=-1) + 1
    width = max((p.start + len(p.text) for p in placements), default=0)
    rows = [[" "] * width for _ in range(n_rows)]
    for p in placements:
        rows[p.row][p.start : p.start + len(p.text)] = list(p.text)
    return ["".join(r).rstrip() for r in reversed(rows)]


def column_header(
    labels: Sequence[str], cell: int, max_rows: int, max_label: int = 11, limit: int | None = None
) -> tuple[list[Placement], bool]:
    """Staggered labels, or (when they need more than ``max_rows`` rows) the column numbers.

    Returns (placements, numbered). With ``numbered`` the caller prints a legend
    (:func:`column_legend`) so each number can be read back as its token.
    """
    placed = stagger_labels(labels, cell, max_rows, max_label, limit)
    if placed is not None:
        return placed, False
    numbers = [str(j) for j in range(len(labels))]
    placed = stagger_labels(numbers, cell, max(max_rows, 8), max_label, limit)
    return placed or [], True


def column_legend(labels: Sequence[str], width: int) -> list[str]:
    """``0 ein  1 mann  2 fährt …`` wrapped to ``width`` (never splitting an entry)."""
    lines: list[str] = []
    line = ""
    for j, label in enumerate(labels):
        entry = f"{j} {label}"
        if line and len(line) + 2 + len(entry) > width:
            lines.append(line)
            line = ""
        line = f"{line}  {entry}" if line else entry
    if line:
        lines.append(line)
    return lines


def integer_ticks(low: float, high: float, max_ticks: int = 5) -> list[int]:
    """Whole-number ticks covering [low, high] with a 1-2-5 step; at least one tick."""
    lo, hi = math.floor(low), math.ceil(high)
    if hi <= lo:
        return [lo]
    span = hi - lo
    step = 1
    for magnitude in (10**k for k in range(0, 12)):
        for mult in (1, 2, 5):
            step = mult * magnitude
            if span / step <= max(max_ticks, 1):
                break
        else:
            continue
        break
    first = math.ceil(lo / step) * step
    ticks = list(range(first, hi + 1, step))
    return ticks or [lo]


_STAMP = re.compile(r"-(\d{8})-(\d{6})(-\d+)?$")


def run_label(name: str, width: int) -> str:
    """A run name shortened for a legend or a narrow column: the timestamp goes first.

    ``reverse-rnn-bahdanau-20261129-101530`` becomes ``reverse-rnn-bahdanau-…1530`` or
    ``reverse-rnn-bahdanau`` rather than losing its variant; what is still too long is cut in
    the middle.
    """
    if len(name) <= width:
        return name
    match = _STAMP.search(name)
    if match:
        stem = name[: match.start()]
        tail = match.group(2)[-4:]  # minutes and seconds tell runs of one day apart
        for candidate in (f"{stem}-…{tail}", stem):
            if len(candidate) <= width:
                return candidate
        name = stem
    return middle_ellipsis(name, width)


def run_labels(names: Sequence[str], width: int) -> list[str]:
    """Labels of at most ``width`` for a list of run names that tell every run apart.

    A name that fits is kept. Otherwise the prefix it shares with another name of the list
    goes first (``reverse-rnn-`` of ``reverse-rnn-bahdanau-…`` beside ``reverse-rnn-luong-…``:
    shown as ``…bahdanau-…1544``), never its last part (the variant, the stamp, the seed); a
    name sharing nothing is shortened as ``run_label`` does. Two names left with one label
    are cut in the middle, which keeps the stamp's end: a list never shows two equal rows."""
    labels = [_shortened(name, _shared_prefix(name, names), width) for name in names]
    shared = {label for label, count in Counter(labels).items() if count > 1}
    return [
        middle_ellipsis(name, width) if label in shared else label
        for name, label in zip(names, labels, strict=True)
    ]


def without_details(text: str) -> str:
    """``skipped 3 malformed lines (line 2: ... (list), ...)`` -> ``skipped 3 malformed lines``:
    every parenthesised group (nested ones too) left out."""
    out, depth = [], 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(char)
    return " ".join("".join(out).split()).replace(" ;", ";")


def fold_warnings(warned: Sequence[tuple[str, str]], name_width: int = 28) -> str:
    """Many runs' warnings as one line: ``⚠ r600: skipped 3 malformed lines (+599 more)``.

    ``warned`` holds (run name, warning) pairs; a warning that starts with its file's path
    (``runs/r600/events.jsonl: skipped ...``) is shown from after that path, without its
    per-line details, so that the line fits beside a table. "" when there is none. One home
    for the lab's Runs tab and ``attnlab runs`` (a folder of 600 broken runs is one line,
    not 600).
    """
    if not warned:
        return ""
    name, text = warned[0]
    more = f" (+{len(warned) - 1} more)" if len(warned) > 1 else ""
    return f"⚠ {run_label(name, name_width)}: {without_details(text.split(': ', 1)[-1])}{more}"


_SEPARATORS = "-/_"


def _first_token(name: str) -> str:
    return re.split(r"[-/_]", name, maxsplit=1)[0]


def _shared_prefix(name: str, names: Sequence[str]) -> str:
    """The prefix (ending at a separator) that ``name`` shares with every other name of its
    group — the names starting with its first token (its task, its study) — short of the
    name's last part: at most the study of ``STUDY/CELL-sN`` (its cell kept), at most the
    stem of a stamped name less its last token (the variant's end kept)."""
    group = [n for n in names if n != name and _first_token(n) == _first_token(name)]
    if not group:
        return ""
    n = len(name)
    for other in group:
        k = 0
        while k < min(n, len(other)) and name[k] == other[k]:
            k += 1
        n = k
    best = max((i + 1 for i in range(n) if name[i] in _SEPARATORS), default=0)
    stamp = _STAMP.search(name)
    stem = name[: stamp.start()] if stamp else name
    if "/" in stem:  # a study's run: at most the study's folder goes
        limit = stem.rindex("/") + 1
    else:
        cuts = [i + 1 for i, c in enumerate(stem) if c in _SEPARATORS]
        limit = cuts[-1] if cuts else 0
    return name[: min(best, limit)]


def _shortened(name: str, prefix: str, width: int) -> str:
    if len(name) <= width:
        return name
    if not prefix:
        return run_label(name, width)
    rest = name[len(prefix) :]
    stamp = _STAMP.search(rest)
    candidates = [ELLIPSIS + rest]
    if stamp:
        stem, tail = rest[: stamp.start()], stamp.group(2)[-4:] + (stamp.group(3) or "")
        candidates.append(f"{ELLIPSIS}{stem}-{ELLIPSIS}{tail}")
    for candidate in candidates:
        if len(candidate) <= width:
            return candidate
    return middle_ellipsis(candidates[-1], width)


_VISIBLE = {"\n": "⏎", "\t": "⇥", " ": "▁"}


def visible_token(token: str) -> str:
    """A map label that shows its character: newline ⏎, tab ⇥, space ▁ (a character LM's
    tokens; any other token as it is)."""
    return _VISIBLE.get(token, token)
