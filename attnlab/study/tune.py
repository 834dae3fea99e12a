"""Tuned studies: per cell, the best of a grid of settings on **dev**, then the study's seeds
at that setting (issue #42).

```toml
[tune]
"train.lr" = [1e-4, 4.6e-4, 2.2e-3, 1e-2]   # one or more config keys and their candidates
"train.warmup" = [0, 100]
select = "exact_match"                        # the dev metric; its direction from METRICS
tune_seeds = 2                                # or a list; never one of the study's seeds
```

Every candidate (the product of the lists, in the order written) is trained with every tune
seed in ``STUDY/tune/CELL-cI-sSEED`` and scored on the dev split; the candidate with the best
mean dev score is the cell's setting (ties go to the first listed; a failed run counts as the
metric's worst value). Only dev score files are read to choose: the test split never is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError
from attnlab.study.metrics import METRICS, metric, sort_key, worst

TUNE_DIR = "tune"  # inside the study directory
TUNE_SPLIT = "dev"
SETTINGS = ("select", "tune_seeds")
DEFAULT_TUNE_SEEDS = 2
TUNE_SEED_BASE = 10_000  # tune_seeds = N means 10001..10000+N: never a study seed by default
TUNE_MODES = ("on", "off")

Fail = Callable[[str, str], AttnlabError]


@dataclass(frozen=True)
class Tune:
    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]  # per key, its candidate values (TOML values)
    texts: tuple[tuple[str, ...], ...]  # the same as written in the file (3e-4)
    select: str
    seeds: tuple[int, ...]

    def candidates(self) -> list[tuple[int, ...]]:
        """Index tuples into ``values``, the product in the order written."""
        return list(itertools.product(*(range(len(v)) for v in self.values)))

    def overrides(self, combo: Sequence[int]) -> tuple[str, ...]:
        return tuple(
            f"{key}={_text(self.values[k][i])}"
            for k, (key, i) in enumerate(zip(self.keys, combo, strict=True))
        )

    def values_of(self, combo: Sequence[int]) -> dict[str, Any]:
        return {
            key: self.values[k][i] for k, (key, i) in enumerate(zip(self.keys, combo, strict=True))
        }

    def label(self, combo: Sequence[int]) -> str:
        """``lr=3e-4 warmup=50``: each key's last part and the value as written."""
        return " ".join(
            f"{key.split('.')[-1]}={self.texts[k][i]}"
            for k, (key, i) in enumerate(zip(self.keys, combo, strict=True))
        )

    def on_edge(self, combo: Sequence[int]) -> bool:
        """True when a value lies on the first or last of its list (lists of 2 or more):
        the best may lie beyond the grid."""
        return any(
            len(self.values[k]) > 1 and i in (0, len(self.values[k]) - 1)
            for k, i in enumerate(combo)
        )

    @property
    def runs_per_cell(self) -> int:
        return len(self.candidates()) * len(self.seeds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "keys": list(self.keys),
            "values": {k: list(v) for k, v in zip(self.keys, self.values, strict=True)},
            "texts": {k: list(t) for k, t in zip(self.keys, self.texts, strict=True)},
            "select": self.select,
            "direction": "higher" if metric(self.select).higher_is_better else "lower",
            "seeds": list(self.seeds),
            "split": TUNE_SPLIT,
        }


def tune_from_dict(data: Mapping[str, Any]) -> Tune:
    """The Tune of a ``study.json`` record (``Tune.to_dict``)."""
    keys = tuple(str(k) for k in data["keys"])
    return Tune(
        keys=keys,
        values=tuple(tuple(data["values"][k]) for k in keys),
        texts=tuple(tuple(str(t) for t in data["texts"][k]) for k in keys),
        select=str(data["select"]),
        seeds=tuple(int(s) for s in data["seeds"]),
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_tune(
    table: Any, study_seeds: Sequence[int], written: Mapping[str, list[str]], fail: Fail
) -> Tune:
    if not isinstance(table, dict) or not table:
        raise fail(
            "tune", 'expected a table of "SECTION.KEY" = [candidates, ...], select, tune_seeds'
        )
    keys, values = [], []
    for key, candidates in table.items():
        if key in SETTINGS:
            continue
        if "." not in key:
            raise fail(
                f"tune.{key}",
                f"expected a SECTION.KEY such as train.lr, or one of {', '.join(SETTINGS)}",
            )
        if key == "train.seed":
            raise fail("tune.train.seed", "seeds are the study's (tune_seeds for the search)")
        if not isinstance(candidates, list) or not candidates:
            raise fail(f"tune.{key}", "expected a non-empty list of candidate values")
        if any(isinstance(v, (list, dict)) for v in candidates):
            raise fail(f"tune.{key}", "candidates are single values (numbers, strings)")
        keys.append(key)
        values.append(tuple(candidates))
    if not keys:
        raise fail("tune", 'no key to tune; e.g. "train.lr" = [1e-4, 1e-3, 1e-2]')
    select = table.get("select")
    if select not in METRICS:
        raise fail("tune.select", f"{select!r} is not one of {', '.join(METRICS)}")
    seeds = _tune_seeds(table.get("tune_seeds", DEFAULT_TUNE_SEEDS), fail)
    shared = sorted(set(seeds) & set(study_seeds))
    if shared:
        raise fail(
            "tune.tune_seeds",
            f"seed {shared[0]} is also a study seed; tuning runs use their own seeds (a count "
            f"gives {TUNE_SEED_BASE + 1}, {TUNE_SEED_BASE + 2}, ...)",
        )
    texts = tuple(
        tuple(written.get(key) or [_text(v) for v in vals])
        for key, vals in zip(keys, values, strict=True)
    )
    return Tune(tuple(keys), tuple(values), texts, str(select), seeds)


def _tune_seeds(value: Any, fail: Fail) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= 100:
            raise fail("tune.tune_seeds", f"{value} is not a count from 1 to 100")
        return tuple(range(TUNE_SEED_BASE + 1, TUNE_SEED_BASE + value + 1))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in value)
        and len(set(value)) == len(value)
    ):
        return tuple(value)
    raise fail("tune.tune_seeds", "expected a count (e.g. 2) or a list of distinct seeds")


def tune_run_name(cell: str, candidate: int, seed: int) -> str:
    """``CELL-cI-sSEED`` (I from 1, in the order of ``Tune.candidates``)."""
    return f"{cell}-c{candidate + 1}-s{seed}"


def tune_dir(study_dir: Path) -> Path:
    return Path(study_dir) / TUNE_DIR


@dataclass
class Candidate:
    combo: tuple[int, ...]
    values: dict[str, Any]
    label: str
    scores: list[float]  # the dev score per scored tune seed (a failed run: the worst)
    failed: list[str]  # tune runs that failed (counted as the worst score)
    pending: list[str]  # tune runs without a dev score yet
    mean: float | None = None
    half_width: float | None = None

    @property
    def n(self) -> int:
        return len(self.scores)


@dataclass
class CellTuning:
    cell: str
    candidates: list[Candidate]
    chosen: Candidate | None  # None until every tune run of the cell is scored or failed
    edge: bool = False


def choose(tune: Tune, candidates: list[Candidate]) -> Candidate | None:
    """The candidate with the best mean dev score (the metric's direction), ties to the first
    listed; None while a run is pending or when no candidate has a score."""
    if any(c.pending for c in candidates) or not candidates:
        return None
    best: Candidate | None = None
    best_key = math.inf
    for cand in candidates:
        if not cand.scores:
            continue
        key = sort_key(tune.select, sum(cand.scores) / len(cand.scores))
        if best is None or key < best_key:  # strictly better: a tie keeps the first
            best, best_key = cand, key
    return best


def cell_tuning(
    tune: Tune,
    cell: str,
    dev_score: Callable[[str], float | None],
    failed: Callable[[str], bool],
) -> CellTuning:
    """One cell's candidates from its tune runs' dev scores. ``dev_score(run)`` is the select
    metric of a run's dev score file (None when not scored); ``failed(run)`` says whether the
    run failed (it then counts as the metric's worst value)."""
    candidates = []
    for index, combo in enumerate(tune.candidates()):
        scores, bad, pending = [], [], []
        for seed in tune.seeds:
            run = tune_run_name(cell, index, seed)
            value = dev_score(run)
            if value is not None:
                scores.append(value)
            elif failed(run):
                scores.append(worst(tune.select))
                bad.append(run)
            else:
                pending.append(run)
        cand = Candidate(combo, tune.values_of(combo), tune.label(combo), scores, bad, pending)
        _summarise(cand)
        candidates.append(cand)
    chosen = choose(tune, candidates)
    return CellTuning(cell, candidates, chosen, chosen is not None and tune.on_edge(chosen.combo))


def _summarise(cand: Candidate) -> None:
    """Mean and 95 % t half-width over the tune seeds (None where not finite: a failed run of
    an unbounded metric, or a single seed's width)."""
    if not cand.scores:
        return
    mean = sum(cand.scores) / len(cand.scores)
    cand.mean = mean if math.isfinite(mean) else None
    if len(cand.scores) >= 2 and cand.mean is not None:
        from attnlab.stats import seed_interval

        interval = seed_interval(cand.scores)
        half = (interval.high - interval.low) / 2
        cand.half_width = float(half) if math.isfinite(half) else None


def load_tuning(directory: Path, tune: Tune, cells: Sequence[str]) -> dict[str, CellTuning]:
    """Each cell's tuning from ``STUDY/tune/*/study-score.json``, dev split only, and the
    failed runs in ``outcomes.json`` (keyed ``tune/NAME``)."""
    from attnlab.study.outcomes import read_outcomes
    from attnlab.study.score import read_score

    root = tune_dir(directory)
    outcomes = read_outcomes(directory)

    def dev_score(run: str) -> float | None:
        score = read_score(root / run)
        if score is None or score.get("split", TUNE_SPLIT) != TUNE_SPLIT:
            return None  # a test-split score is never read to choose
        value = score.get(tune.select)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return float(value)
        return None

    def failed(run: str) -> bool:
        return outcomes.get(f"{TUNE_DIR}/{run}", {}).get("state") == "failed"

    return {cell: cell_tuning(tune, cell, dev_score, failed) for cell in cells}
