"""A study's table, from its runs' score files alone (no model is loaded).

Per cell and metric: n seeds, the mean and a 95 % Student t interval over seeds. Per cell
against the baseline: the difference of means and two tests, each Holm-corrected over the
cells compared with the baseline (per metric):
- over seeds: Welch's t-test (seed-to-seed variance: would another training run agree?);
- over test sentences, paired, seeds pooled (seed i of the cell against seed i of the
  baseline, the seed-paired systems' sentences concatenated): paired bootstrap resampling for
  BLEU and chrF as sacrebleu defines it, the exact McNemar test for exact match.
The methods are named in every rendering (``METHOD_NOTES``) and in docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.study.metrics import COSTS, METRICS, leaves_range, range_text
from attnlab.study.metrics import metric as metric_info
from attnlab.study.outcomes import read_outcomes
from attnlab.study.runner import load_record
from attnlab.study.score import read_score, score_path, score_problem
from attnlab.study.task import run_status
from attnlab.study.tune import CellTuning, Tune, load_tuning, tune_from_dict

TEXT_METRICS = ("bleu", "chrf")  # tested over sentences with sacrebleu's paired bootstrap
ALPHA = 0.05
FEW_SEEDS = 3  # an interval over fewer seeds is noted as too few to read
RANGE_MARK = "‡"  # an interval that leaves the metric's range
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345
RANDOMIZATION_TRIALS = 10000  # sacrebleu --paired-ar's default


@dataclass
class MetricCell:
    """One metric of one cell: the interval over seeds, and the tests against the baseline."""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    values: list[float]
    difference: float | None = None
    seeds_p_value: float | None = None  # Welch over seeds, Holm-adjusted
    sentences_p_value: float | None = None  # paired over sentences, Holm-adjusted
    seeds_p_raw: float | None = None
    sentences_p_raw: float | None = None
    sentences_n: int | None = None
    # approximate randomisation over the same pooled sentences (BLEU/chrF; on request only:
    # about 2 s per comparison on 1500 sentences)
    randomization_p_value: float | None = None
    randomization_p_raw: float | None = None
    out_of_range: bool = False  # the interval reaches outside the values the metric can take
    range: list[float | None] = field(default_factory=list)  # [low, high]; None: unbounded

    @property
    def significant(self) -> bool:
        return self.seeds_p_value is not None and self.seeds_p_value < ALPHA


@dataclass
class CellRow:
    name: str
    overrides: list[str]
    baseline: str  # the cell this one is compared with (itself: a baseline)
    runs: list[str]  # scored runs
    missing: list[str]  # not scored: (run, status or why)
    metrics: dict[str, MetricCell] = field(default_factory=dict)
    buckets: dict[str, MetricCell] = field(default_factory=dict)  # BLEU by source length
    # what the cell costs (metrics.COSTS), each over the seeds as the scores are (no tests)
    costs: dict[str, MetricCell] = field(default_factory=dict)
    tune: dict[str, Any] | None = None  # a tuned study: chosen, candidates, edge, failed


@dataclass
class StudyTable:
    name: str
    directory: str
    split: str
    checkpoint: str
    seeds: list[int]
    metrics: list[str]
    baseline: str
    rows: list[CellRow]
    methods: dict[str, str]
    failures: list[dict[str, str]]
    # score files that exist but cannot be used: {"run", "file", "reason"}; the note says a
    # rerun scores them again
    score_problems: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings under the table (few seeds...)
    tune: dict[str, Any] | None = None  # the tuning protocol (grid, tune seeds, select, budget)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row in out["rows"]:
            for group in ("metrics", "buckets"):
                for key, metric in row[group].items():
                    # "p_value" alone stays the Welch test's (older readers); "tests" lists
                    # every test run on this figure, each with its p-value under "p_value".
                    metric["p_value"] = metric["seeds_p_value"]
                    metric["tests"] = _tests(key if group == "metrics" else "bleu", metric)
        return out


def _tests(metric: str, cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The tests behind one figure's Δ, each with its Holm-adjusted ``p_value``, the raw p
    and the method's name (empty for a baseline or an untested figure)."""
    methods = _stats().METHODS
    tests = []
    if cell["seeds_p_raw"] is not None:
        tests.append(
            {
                "test": "welch",
                "over": "seeds",
                "method": methods["welch"],
                "correction": methods["holm"],
                "p_value": cell["seeds_p_value"],
                "p_raw": cell["seeds_p_raw"],
                "n": cell["n"],
            }
        )
    if cell["sentences_p_raw"] is not None:
        key = "paired_bootstrap" if metric in TEXT_METRICS else "paired_exact_match"
        tests.append(
            {
                "test": key,
                "over": "sentences",
                "method": methods[key],
                "correction": methods["holm"],
                "p_value": cell["sentences_p_value"],
                "p_raw": cell["sentences_p_raw"],
                "n": cell["sentences_n"],
            }
        )
    if cell["randomization_p_raw"] is not None:
        tests.append(
            {
                "test": "paired_randomization",
                "over": "sentences",
                "method": f"{methods['paired_randomization']}, {RANDOMIZATION_TRIALS} trials",
                "correction": methods["holm"],
                "p_value": cell["randomization_p_value"],
                "p_raw": cell["randomization_p_raw"],
                "n": cell["sentences_n"],
            }
        )
    return tests


def _stats() -> Any:
    import attnlab.stats as stats  # numpy, sacrebleu: only when a table is made

    return stats


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _interval(values: Sequence[float], metric: str = "bleu") -> MetricCell:
    if not values:
        return MetricCell(None, None, None, 0, [])
    interval = _stats().seed_interval(values)
    low, high = _finite(interval.low), _finite(interval.high)
    bounds = metric_info(metric)
    return MetricCell(
        interval.mean,
        low,
        high,
        interval.n,
        list(values),
        out_of_range=leaves_range(metric, low, high),
        range=[_finite(bounds.low), _finite(bounds.high)],
    )


def _cost_of(score: dict[str, Any], key: str) -> Any:
    cost = score.get("cost")  # absent in score files from before the cost record
    return cost.get(key) if isinstance(cost, dict) else None


def _scores_of(
    directory: Path, cell: str, seeds: Sequence[int], problems: list[dict[str, str]]
) -> tuple[dict[int, dict], list]:
    scores: dict[int, dict[str, Any]] = {}
    missing = []
    for seed in seeds:
        run = directory / f"{cell}-s{seed}"
        score = read_score(run)
        status = run_status(run) if run.exists() else None
        if score is not None and status == "finished":
            scores[seed] = score
            continue
        problem = score_problem(run) if score is None else None
        if problem is not None:
            problems.append({"run": run.name, "file": str(score_path(run)), "reason": problem})
            missing.append((run.name, f"score file unusable: {problem}"))
        else:
            missing.append((run.name, status or "not started"))
    return scores, missing


def _notes(rows: list[CellRow], metrics: list[str], problems: list[dict[str, str]]) -> list[str]:
    """The warnings under the table: unusable score files, too few seeds, intervals that
    leave the metric's range."""
    notes = [
        f"{p['file']}: {p['reason']}; this seed is not counted (a rerun of the study scores "
        "the run again)"
        for p in problems
    ]
    few = [row.name for row in rows if 0 < row_n(row) < FEW_SEEDS]
    if few:
        notes.append(
            f"n < {FEW_SEEDS} seeds ({', '.join(few)}): too few to read; with 2 seeds the t "
            "interval is about 6 standard deviations wide, and equal seeds give ± 0 — run "
            "more seeds (--seeds 5)"
        )
    outside = [
        f"{row.name} {METRICS[m].label if m in METRICS else m} {range_text(m)}"
        for row in rows
        for m in metrics
        if m in row.metrics and row.metrics[m].out_of_range
    ]
    if outside:
        notes.append(
            f"{RANGE_MARK} the interval leaves the metric's range ({'; '.join(outside)}): "
            "too few seeds or too much spread for the normal approximation"
        )
    return notes


def row_n(row: CellRow) -> int:
    """The seeds a cell's figures stand on (the most of any metric)."""
    return max((m.n for m in row.metrics.values()), default=0)


def _pooled(
    base: dict[int, dict], cell: dict[int, dict]
) -> tuple[list[str], list[str], list[str], list[bool], list[bool]] | None:
    """Seed i of the baseline paired with seed i of the cell (the seeds both have), their
    sentences concatenated; None when they were scored on different references."""
    seeds = sorted(set(base) & set(cell))
    base_hyps: list[str] = []
    cell_hyps: list[str] = []
    refs: list[str] = []
    base_exact: list[bool] = []
    cell_exact: list[bool] = []
    for seed in seeds:
        b, c = base[seed]["sentences"], cell[seed]["sentences"]
        if b["refs"] != c["refs"]:
            return None
        base_hyps += b["hyps"]
        cell_hyps += c["hyps"]
        refs += b["refs"]
        base_exact += [bool(x) for x in b["exact"]]
        cell_exact += [bool(x) for x in c["exact"]]
    if not refs:
        return None
    return base_hyps, cell_hyps, refs, base_exact, cell_exact


def _sentence_test(
    metric: str, base: dict[int, dict], cell: dict[int, dict]
) -> tuple[float | None, int | None]:
    """Paired over sentences, seeds pooled by seed (only seeds both have); None when the two
    cells were scored on different references (a different data setting)."""
    if metric not in TEXT_METRICS and metric != "exact_match":
        return None, None  # no test over sentences (an LM's loss: its windows are not kept)
    stats = _stats()
    pooled = _pooled(base, cell)
    if pooled is None:
        return None, None
    base_hyps, cell_hyps, refs, base_exact, cell_exact = pooled
    if metric in TEXT_METRICS:
        result = stats.paired_bootstrap(
            metric,
            base_hyps,
            cell_hyps,
            refs,
            resamples=BOOTSTRAP_RESAMPLES,
            seed=BOOTSTRAP_SEED,
        )
    elif metric == "exact_match":
        result = stats.paired_exact_match(base_exact, cell_exact)
    else:
        return None, None
    return float(result.p_value), len(refs)


def _randomization_test(metric: str, base: dict[int, dict], cell: dict[int, dict]) -> float | None:
    """sacrebleu's approximate randomisation (--paired-ar) on the same pooled sentences."""
    pooled = _pooled(base, cell) if metric in TEXT_METRICS else None
    if pooled is None:
        return None
    base_hyps, cell_hyps, refs, _, _ = pooled
    result = _stats().paired_randomization(
        metric, base_hyps, cell_hyps, refs, trials=RANDOMIZATION_TRIALS, seed=BOOTSTRAP_SEED
    )
    return float(result.p_value)


def _holm_in_place(cells: list[MetricCell], raw: str, adjusted: str) -> None:
    tested = [c for c in cells if getattr(c, raw) is not None]
    if not tested:
        return
    for cell, p in zip(tested, _stats().holm([getattr(c, raw) for c in tested]), strict=False):
        setattr(cell, adjusted, float(p))


def _compare(
    metric: str,
    rows: list[CellRow],
    scores: dict[str, dict[int, dict]],
    bucket: bool = False,
    randomization: bool = False,
) -> None:
    """Each row against its baseline on one metric (or one length bucket); Holm over all the
    comparisons of this metric in the study."""
    by_name = {row.name: row for row in rows}
    compared = []
    for row in rows:
        base_row = by_name.get(row.baseline)
        if base_row is None or row.name == row.baseline:
            continue
        cell = (row.buckets if bucket else row.metrics).get(metric)
        base = (base_row.buckets if bucket else base_row.metrics).get(metric)
        if cell is None or cell.mean is None or base is None or base.mean is None:
            continue
        cell.difference = cell.mean - base.mean
        if cell.n >= 2 and base.n >= 2:
            cell.seeds_p_raw = float(_stats().welch_test(cell.values, base.values).p_value)
        if not bucket:
            p, n = _sentence_test(metric, scores[row.baseline], scores[row.name])
            cell.sentences_p_raw, cell.sentences_n = p, n
            if randomization:
                base_scores, cell_scores = scores[row.baseline], scores[row.name]
                cell.randomization_p_raw = _randomization_test(metric, base_scores, cell_scores)
        compared.append(cell)
    _holm_in_place(compared, "seeds_p_raw", "seeds_p_value")
    _holm_in_place(compared, "sentences_p_raw", "sentences_p_value")
    _holm_in_place(compared, "randomization_p_raw", "randomization_p_value")


def _bucket_values(scores: dict[int, dict]) -> dict[str, list[float]]:
    by_bucket: dict[str, list[float]] = {}
    for score in scores.values():
        for row in score.get("bleu_by_length") or []:
            value = _finite(row.get("bleu")) if isinstance(row, dict) else None
            if value is not None:
                by_bucket.setdefault(str(row.get("bucket")), []).append(value)
    return by_bucket


def _bucket_order(name: str) -> int:
    head = name.split("-")[0]
    return int(head) if head.isdigit() else 0


def method_notes(randomization: bool = False) -> dict[str, str]:
    methods = _stats().METHODS
    notes = {
        "interval": "mean ± half-width of a 95 % Student t interval over seeds",
        "seeds": f"Δ vs baseline over seeds: Welch's t-test ({_method(methods, 'welch')}), "
        "Holm–Bonferroni over every comparison of the metric in the study",
        "sentences": "paired over test sentences, seed i paired with seed i, sentences pooled: "
        f"BLEU/chrF {_method(methods, 'paired_bootstrap')} ({BOOTSTRAP_RESAMPLES} resamples, "
        f"seed {BOOTSTRAP_SEED}); exact match {_method(methods, 'paired_exact_match')}; "
        "Holm–Bonferroni as above",
        "marks": "* seeds p < 0.05, † sentences p < 0.05 (both after Holm)",
    }
    if randomization:
        notes["randomization"] = (
            f"BLEU/chrF also by {_method(methods, 'paired_randomization')} "
            f"({RANDOMIZATION_TRIALS} trials, seed {BOOTSTRAP_SEED}) on the same pooled "
            "sentences, Holm–Bonferroni as above (not in the marks)"
        )
    return notes


def _method(methods: dict[str, str], key: str) -> str:
    return methods.get(key, key.replace("_", " "))


def load_table(directory: Path, randomization: bool = False) -> StudyTable:
    """The table of a study directory (``study.json`` + every run's score file).
    ``randomization`` adds sacrebleu's approximate randomisation for BLEU/chrF beside the
    paired bootstrap (10000 trials: seconds per comparison)."""
    directory = Path(directory)
    record = load_record(directory)
    seeds = [int(s) for s in record.get("seeds", [])]
    metrics = [m for m in record.get("metrics", []) if m in METRICS]
    baseline = str(record.get("baseline", ""))
    rows: list[CellRow] = []
    scores: dict[str, dict[int, dict]] = {}
    failures: list[dict[str, str]] = []
    problems: list[dict[str, str]] = []
    outcomes = read_outcomes(directory)
    tune = _tune_of(record)
    tuning = (
        load_tuning(directory, tune, [str(c.get("name")) for c in record["cells"]])
        if tune is not None
        else {}
    )
    for cell in record["cells"]:
        name = str(cell.get("name"))
        cell_scores, missing = _scores_of(directory, name, seeds, problems)
        scores[name] = cell_scores
        row = CellRow(
            name=name,
            overrides=list(cell.get("set", [])),
            baseline=str(cell.get("baseline", baseline)),
            runs=[f"{name}-s{s}" for s in sorted(cell_scores)],
            missing=[f"{run} ({why})" for run, why in missing],
        )
        for metric in metrics:
            values = [
                v
                for s in sorted(cell_scores)
                if (v := _finite(cell_scores[s].get(metric))) is not None
            ]
            row.metrics[metric] = _interval(values, metric)
        for key in COSTS:
            values = [
                v
                for s in sorted(cell_scores)
                if (v := _finite(_cost_of(cell_scores[s], key))) is not None
            ]
            row.costs[key] = _interval(values, key)
        buckets = _bucket_values(cell_scores)
        for bucket in sorted(buckets, key=_bucket_order):
            row.buckets[bucket] = _interval(buckets[bucket], "bleu")
        if tune is not None and name in tuning:
            row.tune = tuning_record(tuning[name])
            for run in row.tune["failed"]:
                outcome = outcomes.get(f"tune/{run}", {})
                failures.append(
                    {"run": f"tune/{run}", "status": "failed", "error": outcome.get("error", "")}
                )
        rows.append(row)
        for run, why in missing:
            outcome = outcomes.get(run, {})
            state = outcome.get("state")
            # A run killed by Ctrl+C before it saved reads as "error"; its outcome says better.
            if state == "failed" or (why == "error" and state not in ("interrupted", "skipped")):
                failures.append({"run": run, "status": why, "error": outcome.get("error", "")})
    for metric in metrics:
        _compare(metric, rows, scores, randomization=randomization)
    for bucket in {b for r in rows for b in r.buckets}:
        _compare(bucket, rows, scores, bucket=True)
    methods = method_notes(randomization)
    if tune is not None:
        methods["tuning"] = tuning_note(record["tune"], len(record["cells"]))
    return StudyTable(
        name=str(record.get("name", directory.name)),
        directory=str(directory),
        split=str(record.get("split", "test")),
        checkpoint=str(record.get("checkpoint", "best")),
        seeds=seeds,
        metrics=metrics,
        baseline=baseline,
        rows=rows,
        methods=methods,
        failures=failures,
        score_problems=problems,
        notes=_notes(rows, metrics, problems),
        tune=record.get("tune") if tune is not None else None,
    )


def _tune_of(record: dict[str, Any]) -> Tune | None:
    data = record.get("tune")
    if not isinstance(data, dict):
        return None
    try:
        return tune_from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None  # an unreadable tune record: the table as an untuned study's


def tuning_record(tuning: CellTuning) -> dict[str, Any]:
    """A cell's ``tune`` object in ``study show --json``."""
    chosen = tuning.chosen
    return {
        "chosen": dict(chosen.values) if chosen is not None else None,
        "chosen_label": chosen.label if chosen is not None else None,
        "edge": tuning.edge,
        "candidates": [
            {
                "values": dict(c.values),
                "label": c.label,
                "dev_mean": c.mean,
                "dev_half_width": c.half_width,
                "n": c.n,
                "failed": list(c.failed),
                "pending": list(c.pending),
                "chosen": chosen is not None and c.combo == chosen.combo,
            }
            for c in tuning.candidates
        ],
        "failed": [run for c in tuning.candidates for run in c.failed],
        "pending": sum(len(c.pending) for c in tuning.candidates),
    }


def tuning_note(tune: dict[str, Any], cells: int) -> str:
    """The protocol in one legend line: the grid, the tune seeds, dev selection, the budget
    per run, and that every cell gets the same number of tuning runs."""
    texts = tune.get("texts", {})
    grid = "; ".join(
        f"{key} ∈ {{{', '.join(map(str, texts.get(key, [])))}}}" for key in tune["keys"]
    )
    candidates = 1
    for key in tune["keys"]:
        candidates *= max(1, len(texts.get(key, [])))
    seeds = tune.get("seeds", [])
    budget = tune.get("budget", {})
    steps = f"{budget.get('max_steps')} steps" if budget.get("max_steps") else "the study's budget"
    return (
        f"tuned per cell on dev (the test split is never read to choose): {grid}; "
        f"{candidates} candidate(s) × {len(seeds)} tune seed(s) "
        f"({', '.join(map(str, seeds))}) = {candidates * len(seeds)} tuning runs for each of "
        f"the {cells} cells, every run {steps}; the best mean dev {tune.get('select')} "
        f"({tune.get('direction', 'higher')} is better; ties to the first listed; a failed "
        "run counts as the worst value) is the cell's setting, then the study's seeds train "
        "at it; ◂ marks a choice on the edge of its grid (widen the grid)"
    )
