"""``attnlab compare RUN_A RUN_B --significance``: paired tests of B against A on the test set
(attnlab.stats: sacrebleu's paired bootstrap / approximate randomisation, exact McNemar)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import fmt, load_run, rich_console
from attnlab.errors import AttnlabError

SPLIT = "test"


def _sentences(loaded: Any, device: Any) -> dict[str, Any]:
    """Every test sentence's hypothesis, reference and exact-match flag (default search)."""
    from attnlab.evaluate import evaluate_split
    from attnlab.nn.archs import normalisations_of
    from attnlab.runs import load_checkpoint_data

    dataset = load_checkpoint_data(loaded, loaded.config.data)
    result = evaluate_split(
        loaded.model,
        dataset,
        SPLIT,
        loaded.config.decode,
        device=device,
        normalisations=normalisations_of(loaded.config),
        keep_sentences=True,
    )
    return result["sentences"]


def significance_report(a: Any, b: Any, device: Any) -> dict[str, Any]:
    """B (system) against A (baseline): one entry per (metric, method), each with p_value."""
    from attnlab.interpret.compare import incomparable_reason
    from attnlab.stats import (
        METHODS,
        paired_bootstrap,
        paired_exact_match,
        paired_randomization,
    )

    reason = incomparable_reason(a.dataset_meta, b.dataset_meta)
    if reason:
        raise AttnlabError(f"cannot compare {a.path} with {b.path}: {reason}")
    left, right = _sentences(a, device), _sentences(b, device)
    if left["refs"] != right["refs"]:
        raise AttnlabError(
            f"cannot compare {a.path} with {b.path}: their {SPLIT} sets differ "
            "(a paired test needs the same sentences)"
        )
    refs = left["refs"]
    tests = []
    for metric in ("bleu", "chrf"):
        tests.append(paired_bootstrap(metric, left["hyps"], right["hyps"], refs))
        tests.append(paired_randomization(metric, left["hyps"], right["hyps"], refs))
    tests.append(paired_exact_match(left["exact"], right["exact"]))
    return {
        "split": SPLIT,
        "n": len(refs),
        "baseline": str(a.path),
        "system": str(b.path),
        "tests": [dataclasses.asdict(t) for t in tests],
        "methods": {
            name: METHODS[name]
            for name in ("paired_bootstrap", "paired_randomization", "paired_exact_match")
        },
    }


def print_significance(run_a: Path, run_b: Path, as_json: bool, device: str | None) -> None:
    a, torch_device = load_run(run_a, device)
    b, _ = load_run(run_b, device)
    report = significance_report(a, b, torch_device)
    if as_json:
        from attnlab.runs import jsonable

        click.echo(json.dumps(jsonable(report), ensure_ascii=False, allow_nan=False))
        return
    from rich.table import Table

    from attnlab.stats import format_p

    table = Table(
        title=f"B {report['system']} vs A {report['baseline']} ({SPLIT}, n={report['n']})"
    )
    for column in ("metric", "A", "B", "B − A", "p", "method"):
        table.add_column(column, justify="left" if column in ("metric", "method") else "right")
    for t in report["tests"]:
        table.add_row(
            t["metric"],
            fmt(t["baseline"]),
            fmt(t["system"]),
            fmt(t["difference"]),
            format_p(t["p_value"]),
            t["method"],
        )
    console = rich_console()
    console.print(table)
    console.print("A is the baseline; p-values are two-sided (docs/statistics.md)", markup=False)
