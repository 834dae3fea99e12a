"""The heatmap and n-best renderers: golden text/SVG snapshots plus structural checks.

Regenerate the golden files after an intended change with
``ATTNLAB_UPDATE_GOLDEN=1 pytest tests/test_heatmap.py`` and review the diff.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from attnlab.decode.hypothesis import Hypothesis
from attnlab.viz.heatmap import (
    PALETTE,
    heatmap_cell_style,
    heatmap_level,
    heatmap_rgb,
    render_heatmap,
)
from attnlab.viz.nbest import render_nbest

GOLDEN = Path(__file__).parent / "golden" / "heatmap"
UPDATE = os.environ.get("ATTNLAB_UPDATE_GOLDEN") == "1"

SOURCE = ["ein", "mann", "fährt", "fahrrad", ".", "</s>"]
TARGET = ["a", "man", "rides", "a", "bike", ".", "</s>"]
# a soft, mostly monotone alignment; every row sums to 1
MATRIX = [
    [0.82, 0.10, 0.03, 0.02, 0.02, 0.01],
    [0.05, 0.85, 0.04, 0.03, 0.02, 0.01],
    [0.02, 0.08, 0.80, 0.06, 0.03, 0.01],
    [0.30, 0.05, 0.25, 0.35, 0.04, 0.01],
    [0.01, 0.02, 0.07, 0.86, 0.03, 0.01],
    [0.01, 0.01, 0.02, 0.04, 0.90, 0.02],
    [0.02, 0.02, 0.02, 0.04, 0.20, 0.70],
]


def record(renderable, width: int = 60) -> Console:
    console = Console(
        record=True, width=width, color_system="truecolor", file=io.StringIO(), legacy_windows=False
    )
    console.print(renderable)
    return console


def check_golden(name: str, console: Console) -> None:
    text = console.export_text(clear=False)
    svg = console.export_svg(title=name, clear=False)
    for suffix, content in (("txt", text), ("svg", svg)):
        path = GOLDEN / f"{name}.{suffix}"
        if UPDATE or not path.exists():
            if not UPDATE:
                pytest.fail(
                    f"missing golden file {path}; run with ATTNLAB_UPDATE_GOLDEN=1 to create it"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        assert content == path.read_text(encoding="utf-8"), (
            f"{path} differs (ATTNLAB_UPDATE_GOLDEN=1 to accept)"
        )


def body_lines(console: Console, n_header: int, n_rows: int) -> list[str]:
    lines = console.export_text(clear=False).splitlines()
    return [line.rstrip() for line in lines[n_header : n_header + n_rows]]


@pytest.mark.parametrize(
    "name,options",
    [
        ("plain", {"title": "cross-attention"}),
        ("values", {"show_values": True}),
        ("half_block", {"half_block": True}),
    ],
)
def test_heatmap_matches_golden(name, options):
    check_golden(name, record(render_heatmap(MATRIX, TARGET, SOURCE, **options)))


def test_wide_matrix_is_cut_to_fit_with_a_marker():
    cols = [f"w{j}" for j in range(50)]
    matrix = [[(i * 50 + j) % 7 / 6 for j in range(50)] for i in range(3)]
    console = record(render_heatmap(matrix, ["x", "y", "z"], cols, max_width=40), width=80)
    check_golden("wide_cut", console)
    lines = console.export_text(clear=False).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("x "))  # staggered rows
    rows = body_lines(console, header, 3)
    for label, row in zip("xyz", rows, strict=True):
        assert len(row) <= 40
        hidden = int(row.rsplit("+", 1)[1])
        shown = len(row) - len(f"{label} ") - len(f" +{hidden}")
        assert shown + hidden == 50 and shown >= 30  # one character a cell, as many as fit


def test_rows_are_target_tokens_and_columns_are_source_tokens():
    console = record(render_heatmap(MATRIX, TARGET, SOURCE))
    lines = console.export_text(clear=False).splitlines()
    # Labels are whole tokens written across, staggered so that none overlaps: at width 60
    # the cells widen to 4 ("fahrrad" + 1 would be 8; the cap is 4), two header rows.
    header_height = 2
    header, rows, legend = lines[:header_height], lines[header_height:-1], lines[-1]
    assert len(rows) == len(TARGET)
    label_width = max(len(t) for t in TARGET)
    cell = 4
    assert [r[:label_width].strip() for r in rows] == TARGET
    assert all(len(r) == label_width + 1 + cell * len(SOURCE) for r in rows)
    # every source token appears whole on one header line, starting in its own column
    for j, token in enumerate(SOURCE):
        left = label_width + 1 + cell * j
        starts = [line.find(token, left) for line in header]
        assert any(left <= at < left + cell for at in starts), (token, header)
    words = [w for line in header for w in line.split()]
    assert sorted(words) == sorted(SOURCE)  # nothing split, nothing extra
    assert legend.startswith("0 ") and legend.endswith("0.90")


def test_half_block_packs_two_target_rows_per_line():
    console = record(render_heatmap(MATRIX, TARGET, SOURCE, half_block=True))
    lines = console.export_text(clear=False).splitlines()
    rows = [line for line in lines if "▀" in line]
    assert len(rows) == (len(TARGET) + 1) // 2
    assert all(r.count("▀") == len(SOURCE) for r in rows)
    assert rows[0].split()[0] == "a/man"


def cell_colours(renderable, width: int = 60) -> list[list[tuple[int, int, int]]]:
    """Background colours of the cells, row by row, from the rendered segments."""
    console = Console(width=width, color_system="truecolor", file=io.StringIO())
    cell = renderable.layout(width)[0]
    out = []
    for line in console.render_lines(renderable, pad=False):
        colours = [
            seg.style.bgcolor.triplet
            for seg in line
            if seg.style and seg.style.bgcolor and seg.text.strip() == "" and len(seg.text) == cell
        ]
        if colours:
            out.append([tuple(c) for c in colours])
    return out


def test_the_largest_weight_gets_the_top_colour():
    colours = cell_colours(render_heatmap(MATRIX, TARGET, SOURCE))
    assert len(colours) == len(TARGET) and all(len(r) == len(SOURCE) for r in colours)
    top = PALETTE[-1]
    peak = max(v for row in MATRIX for v in row)
    for i, row in enumerate(MATRIX):
        for j, value in enumerate(row):
            assert (colours[i][j] == top) == (value == peak)
            assert colours[i][j] == heatmap_rgb(value, peak)
    # a larger weight is never drawn with a lower level of the scale
    flat = sorted((v, heatmap_level(v, peak)) for row in MATRIX for v in row)
    assert [lvl for _, lvl in flat] == sorted(lvl for _, lvl in flat)


def test_colour_scale_by_hand():
    assert heatmap_rgb(0.0) == (0x44, 0x01, 0x54)
    assert heatmap_rgb(0.5) == (0x21, 0x91, 0x8C)
    assert heatmap_rgb(1.0) == (0xFD, 0xE7, 0x25)
    assert heatmap_rgb(2.0) == heatmap_rgb(1.0) and heatmap_rgb(-1.0) == heatmap_rgb(0.0)
    assert heatmap_level(0.3, vmax=0.6) == 50
    assert heatmap_level(float("nan")) == 0
    style = heatmap_cell_style(1.0)
    assert style.bgcolor.triplet == (0xFD, 0xE7, 0x25) and style.color.triplet == (0, 0, 0)
    assert heatmap_cell_style(0.0).color.triplet == (255, 255, 255)


def test_tensor_input_renders_like_lists():
    torch = pytest.importorskip("torch")
    as_tensor = record(render_heatmap(torch.tensor(MATRIX), TARGET, SOURCE)).export_text()
    assert as_tensor == record(render_heatmap(MATRIX, TARGET, SOURCE)).export_text()


def test_labels_must_match_the_matrix():
    with pytest.raises(ValueError, match="7 rows but 6 row labels"):
        render_heatmap(MATRIX, TARGET[:-1], SOURCE)
    with pytest.raises(ValueError, match="6 columns but 5 column labels"):
        render_heatmap(MATRIX, TARGET, SOURCE[:-1])


def test_nbest_table_matches_golden():
    hyps = [
        Hypothesis(
            tokens=[4, 5, 6],
            score=-1.2345,
            log_prob=-2.5,
            length_penalty=1.5,
            coverage_penalty=-0.4,
        ),
        Hypothesis(
            tokens=[4, 7], score=-1.5, log_prob=-2.0, length_penalty=1.3333, coverage_penalty=0.0
        ),
        Hypothesis(tokens=[4, 7, 7, 7], score=-3.0, log_prob=-3.0, finished=False),
    ]
    console = record(
        render_nbest(hyps, ["a man rides", "a bike", "a bike bike bike"], title="3-best"), width=70
    )
    check_golden("nbest", console)
    text = console.export_text()
    for expected in ("a man rides", "-2.500", "1.500", "-0.400", "-1.234", "a bike bike bike …"):
        assert expected in text


def test_renderers_import_neither_textual_nor_torch():
    code = "import sys, attnlab.viz; print('textual' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_a_1024_map_on_80_columns_shows_each_block_s_maximum(tmp_path):
    """Far wider than fits: square blocks, each cell its block's maximum (a numpy reshape as
    the reference), the title saying so; the SVG/HTML export draws the same."""
    import numpy as np

    from attnlab.viz.export import export_heatmap

    rng = np.random.default_rng(0)
    matrix = rng.random((1024, 1024)) ** 8
    rows, cols = [f"t{i}" for i in range(1024)], [f"s{j}" for j in range(1024)]
    drawn = render_heatmap(matrix, rows, cols, title="cross")
    factor = drawn.block_factor(80)
    assert factor == 16  # ceil(1024 / (80 - 12 - 2))
    blocks = drawn.downsampled(factor)
    expected = matrix.reshape(64, 16, 64, 16).max(axis=(1, 3))
    np.testing.assert_allclose(np.array(blocks.rows), expected)
    console = record(drawn, width=80)
    lines = console.export_text(clear=False).splitlines()
    assert lines[0] == "cross — max of each 16×16 block (1024×1024 shown as 64×64)"
    assert max(len(line) for line in lines) <= 80 and len(lines) < 80
    assert any(line.startswith("1008-1023 ") for line in lines)
    svg, _html = export_heatmap(matrix, rows, cols, "cross", tmp_path / "map", width=80)
    assert "max&#160;of&#160;each&#160;16×16&#160;block" in svg.read_text(encoding="utf-8")
