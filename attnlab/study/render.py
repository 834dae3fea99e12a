"""A study table as plain rows (for rich or Markdown) and as Markdown text."""

from __future__ import annotations

from attnlab.stats import format_p
from attnlab.study.metrics import COSTS, METRICS
from attnlab.study.table import ALPHA, RANGE_MARK, MetricCell, StudyTable

EDGE_MARK = "◂"  # a tuned choice on the edge of its grid


def _digits(metric: str) -> int:
    return METRICS[metric][1] if metric in METRICS else 1


def interval_text(cell: MetricCell, digits: int) -> str:
    """``0.912 ± 0.031`` (the t interval's half-width); ``—`` without a value."""
    if cell.mean is None:
        return "—"
    if cell.low is None or cell.high is None:
        return f"{cell.mean:.{digits}f}"
    mark = RANGE_MARK if cell.out_of_range else ""
    return f"{cell.mean:.{digits}f} ± {(cell.high - cell.low) / 2:.{digits}f}{mark}"


def difference_text(cell: MetricCell, digits: int) -> str:
    if cell.difference is None:
        return ""
    marks = ""
    if cell.seeds_p_value is not None and cell.seeds_p_value < ALPHA:
        marks += "*"
    if cell.sentences_p_value is not None and cell.sentences_p_value < ALPHA:
        marks += "†"
    return f"{cell.difference:+.{digits}f}{marks}"


def chosen_text(row: object) -> str:
    """A tuned cell's chosen setting (``lr=3e-4 ◂`` on the grid's edge); ``…`` while tuning."""
    tune = getattr(row, "tune", None)
    if not tune:
        return ""
    if tune.get("chosen_label") is None:
        return "tuning…"
    return tune["chosen_label"] + (f" {EDGE_MARK}" if tune.get("edge") else "")


def header(table: StudyTable) -> list[str]:
    columns = ["cell", "n"] + (["tuned"] if table.tune else [])
    for metric in table.metrics:
        label = METRICS[metric][0] if metric in METRICS else metric
        columns += [label, f"Δ {label}"]
    return columns


def rows(table: StudyTable) -> list[list[str]]:
    out = []
    for row in table.rows:
        n = max((m.n for m in row.metrics.values()), default=0)
        cells = [
            row.name + (" (baseline)" if row.name == row.baseline else ""),
            f"{n}/{len(table.seeds)}",
        ] + ([chosen_text(row)] if table.tune else [])
        for metric in table.metrics:
            cell = row.metrics.get(metric)
            if cell is None:
                cells += ["—", ""]
                continue
            cells += [interval_text(cell, _digits(metric)), difference_text(cell, _digits(metric))]
        out.append(cells)
    return out


def has_randomization(table: StudyTable) -> bool:
    return any(c.randomization_p_value is not None for r in table.rows for c in r.metrics.values())


def p_value_columns(table: StudyTable) -> list[str]:
    columns = [
        "cell",
        "baseline",
        "metric",
        "p (seeds, Welch, Holm)",
        "p (sentences, paired, Holm)",
    ]
    if has_randomization(table):
        columns.append("p (sentences, approx. randomisation, Holm)")
    return columns


def p_value_rows(table: StudyTable) -> list[list[str]]:
    """Per cell and metric: the Holm-adjusted p over seeds and over sentences (and by
    approximate randomisation, when the table has it)."""
    with_ar = has_randomization(table)
    out = []
    for row in table.rows:
        if row.name == row.baseline:
            continue
        for metric in table.metrics:
            cell = row.metrics.get(metric)
            if cell is None or cell.difference is None:
                continue
            out.append(
                [
                    row.name,
                    row.baseline,
                    metric,
                    format_p(cell.seeds_p_value),
                    format_p(cell.sentences_p_value),
                ]
                + ([format_p(cell.randomization_p_value)] if with_ar else [])
            )
    return out


def bucket_rows(table: StudyTable) -> tuple[list[str], list[list[str]]]:
    buckets = sorted(
        {b for r in table.rows for b in r.buckets},
        key=lambda b: int(b.split("-")[0]) if b.split("-")[0].isdigit() else 0,
    )
    out = []
    for row in table.rows:
        out.append(
            [row.name]
            + [
                interval_text(row.buckets[b], 1) + ("*" if row.buckets[b].significant else "")
                if b in row.buckets
                else "—"
                for b in buckets
            ]
        )
    return ["cell", *[f"BLEU {b}" for b in buckets]], out


COST_TITLE = "what each cell costs (mean ± 95 % t half-width over seeds)"


def cost_rows(table: StudyTable) -> tuple[list[str], list[list[str]]]:
    """Per cell its cost figures (metrics.COSTS) over the seeds; no rows when no score file
    has a cost record (a study scored before it existed)."""
    if not any(c.mean is not None for r in table.rows for c in r.costs.values()):
        return [], []
    columns = ["cell", *[m.label for m in COSTS.values()]]
    out = []
    for row in table.rows:
        cells = [row.name]
        for key, info in COSTS.items():
            cell = row.costs.get(key)
            cells.append("—" if cell is None else interval_text(cell, info.digits))
        out.append(cells)
    return columns, out


def cost_points(
    table: StudyTable, metric: str, cost: str
) -> list[tuple[str, float, float, float, float]]:
    """Score against cost, one point per cell with a value of both: (cell, cost mean, score
    low, score mean, score high); the interval is the score's 95 % t interval over seeds (the
    mean itself when there is none)."""
    out = []
    for row in table.rows:
        score, price = row.metrics.get(metric), row.costs.get(cost)
        if score is None or price is None or score.mean is None or price.mean is None:
            continue
        low = score.low if score.low is not None else score.mean
        high = score.high if score.high is not None else score.mean
        out.append((row.name, price.mean, low, score.mean, high))
    return out


def _markdown(columns: list[str], body: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(columns) - 1)
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def markdown(table: StudyTable) -> str:
    parts = [
        f"Study `{table.name}`: {table.split} split, {table.checkpoint} checkpoint, seeds "
        f"{', '.join(map(str, table.seeds))}; baseline `{table.baseline}`"
        + ("" if len({r.baseline for r in table.rows}) <= 1 else " (per grid axis)")
        + ".",
        "",
        _markdown(header(table), rows(table)),
    ]
    columns, body = cost_rows(table)
    if body:
        parts += ["", f"{COST_TITLE[0].upper()}{COST_TITLE[1:]}:", "", _markdown(columns, body)]
    columns, body = bucket_rows(table)
    if len(columns) > 1:
        parts += ["", _markdown(columns, body)]
    p_rows = p_value_rows(table)
    if p_rows:
        parts += [
            "",
            _markdown(p_value_columns(table), p_rows),
        ]
    columns, body = tune_rows(table)
    if body:
        parts += ["", _markdown(columns, body)]
    if table.notes:
        parts += ["", *[f"Note: {note}" for note in table.notes]]
    if table.failures:
        parts += [
            "",
            "Failed runs: "
            + "; ".join(f"{f['run']}: {f.get('error') or f['status']}" for f in table.failures),
        ]
    parts += ["", *[f"- {text}" for text in table.methods.values()]]
    return "\n".join(parts)


def stacked_rows(table: StudyTable) -> tuple[list[str], list[list[str]]]:
    """The main table for a terminal: each metric one column, the mean ± half-width over its
    Δ with marks (half the columns of ``rows``, so 80 columns hold three metrics)."""
    lead = 3 if table.tune else 2
    columns = header(table)[:lead] + [METRICS[m][0] if m in METRICS else m for m in table.metrics]
    out = []
    for cells in rows(table):
        stacked = cells[:lead]
        for i in range(len(table.metrics)):
            value, delta = cells[lead + 2 * i], cells[lead + 1 + 2 * i]
            stacked.append(value + (f"\n{delta}" if delta else ""))
        out.append(stacked)
    return columns, out


def candidate_text(candidate: dict, digits: int) -> str:
    """``0.912 ± 0.031`` over the tune seeds; ``—`` without a finite mean."""
    mean, half = candidate.get("dev_mean"), candidate.get("dev_half_width")
    if mean is None:
        return "—"
    return f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if half is not None else "")


def tune_rows(table: StudyTable, cell: str | None = None) -> tuple[list[str], list[list[str]]]:
    """The tuning curve: per cell (or only ``cell``) each candidate's dev mean ± half-width
    of the select metric over the tune seeds, the chosen one marked ✓ (◂ on the grid's
    edge), failed tune runs counted."""
    if not table.tune:
        return [], []
    select = str(table.tune.get("select", ""))
    label = METRICS[select][0] if select in METRICS else select
    digits = _digits(select)
    columns = ["cell", "candidate", f"dev {label}", "n", "chosen"]
    out = []
    for row in table.rows:
        if row.tune is None or (cell is not None and row.name != cell):
            continue
        for cand in row.tune["candidates"]:
            mark = ""
            if cand.get("chosen"):
                mark = "✓" + (f" {EDGE_MARK} widen the grid" if row.tune.get("edge") else "")
            n = str(cand.get("n", 0)) + (
                f" ({len(cand['failed'])} failed)" if cand.get("failed") else ""
            )
            out.append([row.name, cand["label"], candidate_text(cand, digits), n, mark])
    return columns, out
