"""Pure layout helpers: middle ellipsis, run labels, staggered column labels, integer ticks,
the plain (colourless) heatmap and plot legends/axes. Expected values are worked by hand."""

from __future__ import annotations

import itertools

import pytest

from attnlab.tui.widgets.plots import legend_text, x_axis, y_limits
from attnlab.viz.heatmap import render_plain_heatmap
from attnlab.viz.text import (
    column_header,
    column_legend,
    fit_count,
    fold_warnings,
    header_rows,
    integer_ticks,
    middle_ellipsis,
    run_label,
    run_labels,
    stagger_labels,
)


@pytest.mark.parametrize(
    "text,width,expected",
    [
        ("abcdefghij", 10, "abcdefghij"),
        ("abcdefghij", 9, "abcd…ghij"),  # 8 kept: 4 head + 4 tail
        ("abcdefghij", 6, "abc…ij"),  # 5 kept: head gets the odd one
        ("abcdefghij", 2, "a…"),
        ("abcdefghij", 1, "…"),
        ("abcdefghij", 0, ""),
    ],
)
def test_middle_ellipsis(text, width, expected):
    out = middle_ellipsis(text, width)
    assert out == expected and len(out) <= max(width, 0)


def test_run_label_cuts_the_stamp_before_the_variant():
    name = "reverse-rnn-luong-general-20261129-101544"
    assert run_label(name, 60) == name
    assert run_label(name, 31) == "reverse-rnn-luong-general-…1544"
    assert run_label(name, 28) == "reverse-rnn-luong-general"
    assert run_label(name, 12) == middle_ellipsis("reverse-rnn-luong-general", 12)
    assert run_label("no-stamp-here-at-all", 10) == middle_ellipsis("no-stamp-here-at-all", 10)


def _check_whole_and_apart(labels, placements, cell):
    """Every label appears whole, starts in/at its column, and no two on a row overlap."""
    assert [p.column for p in placements] == list(range(len(labels)))
    for p, label in zip(placements, labels, strict=True):
        assert p.text == middle_ellipsis(label, 11)
        if len(p.text) < cell:
            assert p.column * cell <= p.start < (p.column + 1) * cell
        else:
            assert p.start == p.column * cell
    ordered = sorted(placements, key=lambda p: (p.row, p.start))
    for row, group in itertools.groupby(ordered, key=lambda p: p.row):
        spans = [(p.start, p.start + len(p.text)) for p in group]
        gaps = zip(spans, spans[1:], strict=False)
        assert all(a_end < b_start for (_, a_end), (b_start, _) in gaps), (row, spans)


def test_stagger_short_tokens_fit_one_row():
    placed = stagger_labels(["6", "12", "27"], cell=3, max_rows=4)
    assert placed is not None and {p.row for p in placed} == {0}
    assert header_rows(placed) == [" 6 12 27"]  # "12" centred in cell 1 starts at 3 + 0


def test_stagger_long_tokens_by_hand():
    labels = ["ein", "mann", "fährt", "fahrrad", ".", "</s>"]
    placed = stagger_labels(labels, cell=4, max_rows=4)
    assert placed is not None
    _check_whole_and_apart(labels, placed, 4)
    # ein@0 (row 0), mann@4 (row 0: 4 >= 3+1), fährt@8 (row 0 ends at 9: row 1),
    # fahrrad@12 (row 0), "." centred at 17 (row 0 ends at 20: row 1 ends at 14), </s>@20 row 0
    assert [(p.row, p.start) for p in placed] == [(0, 0), (0, 4), (1, 8), (0, 12), (1, 17), (0, 20)]
    assert header_rows(placed) == ["        fährt    .", "ein mann    fahrrad </s>"]


def test_stagger_gives_up_and_header_numbers_columns():
    labels = ["<s>", *[str(k) for k in range(100, 130)]]
    assert stagger_labels(labels, cell=1, max_rows=2) is None
    placed, numbered = column_header(labels, cell=1, max_rows=2)
    assert numbered
    _check_whole_and_apart([str(j) for j in range(len(labels))], placed, 1)
    legend = column_legend(labels, 30)
    assert all(len(line) <= 30 for line in legend)
    assert " ".join(legend).split("  ")[0] == "0 <s>"
    entries = [e for line in legend for e in line.split("  ")]
    assert entries == [f"{j} {label}" for j, label in enumerate(labels)]


def test_stagger_limit_moves_the_last_label_left():
    placed = stagger_labels(["a", "b", "c", "token"], cell=2, max_rows=3, limit=8)
    assert placed is not None
    # "token" would start at 6 and end at 11 > 8: it moves to start at 3 (a new row: "b" at 2)
    assert (placed[-1].start, placed[-1].row) == (3, 1)


@pytest.mark.parametrize(
    "low,high,expected",
    [
        (5, 100, [20, 40, 60, 80, 100]),  # span 95: step 20 (95/20 <= 5)
        (0, 100, [0, 20, 40, 60, 80, 100]),
        (50, 100, [50, 60, 70, 80, 90, 100]),
        (1, 3, [1, 2, 3]),
        (12.5, 18.8, [12, 14, 16, 18]),  # floor/ceil: 12..19, span 7: step 2 (3.5 <= 5)
        (7, 7, [7]),
    ],
)
def test_integer_ticks(low, high, expected):
    ticks = integer_ticks(low, high)
    assert ticks == expected
    assert all(isinstance(t, int) for t in ticks)


def test_x_axis_covers_the_real_range_and_a_lone_point():
    (lo, hi), ticks = x_axis([5, 10, 100])
    assert (lo, hi) == (5, 100) and ticks == [20, 40, 60, 80, 100]
    (lo, hi), ticks = x_axis([100])  # one eval: a visible window around it, integer ticks
    assert (lo, hi) == (99, 101) and ticks == [99, 100, 101]


def test_y_limits_never_empty_and_not_below_zero_for_metrics():
    assert y_limits([0.0, 0.0]) == (0.0, 1.0)
    lo, hi = y_limits([10.0, 30.0])
    assert (lo, hi) == (9.0, 31.0)
    assert y_limits([-2.0, 2.0]) == (-2.2, 2.2)


def test_legend_entries_are_never_broken():
    text = legend_text(["reverse-rnn-bahdanau", "reverse-transformer"], width=30)
    lines = text.plain.split("\n")
    assert lines == ["━ reverse-rnn-bahdanau", "━ reverse-transformer"]
    assert legend_text(["train", "dev"], width=30).plain == "━ train  ━ dev"


def test_plain_heatmap_columns_never_collide():
    rows, cols = ["1", "0", "</s>"], ["<s>", "1", "verylongtoken"]
    matrix = [[0.01, 0.0, 0.99], [1.0, 0.0, 0.0], [0.333, 0.333, 0.334]]
    lines = render_plain_heatmap(matrix, rows, cols, title="cross").splitlines()
    assert lines[0] == "cross"
    # label width 4; column widths max(len, 3): 3, 3, 11 (middle-ellipsed to 11: 5 + … + 5)
    assert lines[1] == "    " + " <s>" + "   1" + " veryl…token"
    assert lines[2] == "   1" + "   1" + "   0" + "          99"
    assert lines[3] == "   0" + " 100" + "   0" + "           0"
    assert lines[4] == "</s>" + "  33" + "  33" + "          33"
    assert "\x1b" not in "\n".join(lines) and "█" not in "\n".join(lines)


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        (676_514, 7, "676,514"),  # fits: exact, with separators
        (9_031_512, 9, "9,031,512"),
        (9_031_512, 7, "9.03M"),  # the Runs table's params column
        (24_427.4, 6, "24,427"),
        (124_427, 6, "124.4k"),  # a GPU's tokens/s in the 6-wide column
        (1_234_567, 5, "1.23M"),
        (99_999, 5, "100k"),
        (2_500_000_000, 5, "2.50G"),
        (12, 5, "12"),
        (10**29, 5, "1e+29"),  # a damaged log's step count: not "10000" cut from its digits
        (999_999_999_999_999, 5, "1e+15"),
    ],
)
def test_fit_count_keeps_every_count_readable_in_its_width(value, width, text):
    assert fit_count(value, width) == text
    assert len(fit_count(value, width)) <= width


def test_runs_table_never_cuts_a_large_model_s_parameter_count():
    from types import SimpleNamespace

    from attnlab.tui.views.runs import WIDTHS, summary_row

    run = SimpleNamespace(
        path="runs/big",
        task="corpus",
        arch="transformer",
        attention="scaled-dot",
        params=9_031_512,
        steps=123_456,
        best_bleu=None,
        best_chrf=None,
        best_exact_match=None,
        tokens_per_s=152_340.7,
        wall_s=None,
        status="running",
    )
    from attnlab.tui.views.runs import COLUMNS

    row = dict(zip(COLUMNS, summary_row(run, False), strict=True))
    assert row["params"] == "9.03M" and len(row["params"]) <= WIDTHS["params"]
    assert row["steps"] == "123k" and len(row["steps"]) <= WIDTHS["steps"]
    assert row["tok/s"] == "152.3k" and len(row["tok/s"]) <= WIDTHS["tok/s"]


@pytest.mark.parametrize("width", [16, 20, 22, 28])
def test_runs_of_one_experiment_never_share_a_label(width):
    # Three runs of one preset differ only in their stamp; run_label drops the stamp first, so
    # the lab's Runs table and run menus showed three identical "reverse-rnn-bahdanau" rows.
    names = [
        "reverse-rnn-bahdanau-20261204-201840",
        "reverse-rnn-bahdanau-20261204-201813",
        "reverse-rnn-bahdanau-20261204-201809",
        "copy-rnn-luong-general-20261204-101010",
        "r1",
    ]
    labels = run_labels(names, width)
    assert len(set(labels)) == len(names), labels
    assert all(len(label) <= width for label in labels)
    assert labels[3:] == [run_label(n, width) for n in names[3:]]  # no clash: unchanged
    for name, label in zip(names[:3], labels[:3], strict=True):
        # The prefix the three share goes first; the variant and the stamp's end stay.
        assert label.startswith("…") and "bahdanau" in label and name[-2:] in label
        assert all(part in name for part in label.split("…") if part)


@pytest.mark.parametrize("width", [18, 24, 30])
def test_run_labels_elide_the_common_prefix_not_the_distinguishing_part(width):
    names = [
        "scan-length-transformer-alibi-20261207-101530",
        "scan-length-transformer-rotary-20261207-101544",
        "length-generalisation/alibi-s1",
        "length-generalisation/alibi-s2",
        "length-generalisation/sinusoidal-s1",
    ]
    labels = run_labels(names, width)
    assert len(set(labels)) == len(names) and all(len(label) <= width for label in labels)
    variants = ["alibi", "rotary", "alibi-s1", "alibi-s2", "sinusoidal-s1"]
    for name, label, variant in zip(names, labels, variants, strict=True):
        assert variant in label and (label == name) == (len(name) <= width), (label, name)
    assert labels[0].endswith("1530") and labels[1].endswith("1544")  # the stamps' ends


def test_fold_warnings_shows_the_first_by_run_name_without_details_and_counts_the_rest() -> None:
    warned = [
        ("r1", "runs/r1/events.jsonl: skipped 2 malformed lines (line 3: not JSON (x), line 4)"),
        ("r2", "runs/r2/config.toml: unreadable"),
        ("r2", "runs/r2/events.jsonl: skipped 1 malformed line (line 9)"),
    ]
    assert fold_warnings(warned) == "⚠ r1: skipped 2 malformed lines (+2 more)"
    assert fold_warnings(warned[1:2]) == "⚠ r2: unreadable"
    assert fold_warnings([]) == ""
    long = "reverse-rnn-bahdanau-20261129-101530"
    assert fold_warnings([(long, "x: y")], name_width=26) == "⚠ reverse-rnn-bahdanau-…1530: y"
