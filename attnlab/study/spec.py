"""A study file: a base preset, cells (a grid over config keys and/or named cells) and seeds.

```toml
name = "length-generalisation"
description = "..."
preset = "reverse-transformer"          # a preset name, or a file relative to the study file
set = ["data.max_len=20"]               # applied to every run
seeds = 5                               # or a list: [1, 2, 3]
split = "test"                          # the split every run is scored on
checkpoint = "best"                     # or "last"
metrics = ["exact_match", "bleu"]       # the table's columns
baseline = "sinusoidal"                 # a cell name

[grid]                                  # a cartesian grid over config keys ...
"model.positions" = ["sinusoidal", "rotary"]

[[cells]]                               # ... and/or named cells
name = "alibi"
set = ["model.self_attention=alibi", "model.positions=none"]
```

Every cell's overrides are applied to the base preset when the file is read, so a mistake is
one line naming the file, the cell and the key, before any run starts.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnlab.config import PRESETS_DIR, ExperimentConfig, check_name, load_toml, safe_name
from attnlab.errors import AttnlabError, did_you_mean
from attnlab.regular_files import check_regular
from attnlab.study.literals import array_literals
from attnlab.study.metrics import DEFAULT_METRICS, METRICS
from attnlab.study.tune import Tune, parse_tune

STUDIES_DIR = PRESETS_DIR.parent / "studies"
SPLITS = ("dev", "test")
CHECKPOINTS = ("best", "last")
TOP_KEYS = (
    "name",
    "description",
    "preset",
    "set",
    "seeds",
    "split",
    "checkpoint",
    "metrics",
    "baseline",
    "grid",
    "cells",
    "tune",
)
SEED_MAX = 2**31 - 1
CELL_NAME_MAX = 60  # leaves room for "-s<seed>" inside a run name
# A study of more runs than this is refused unless --max-runs raises it: a grid of 2,999 ×
# 1,000 values is a typo far more often than a plan.
MAX_RUNS = 10_000


@dataclass(frozen=True)
class Cell:
    """One configuration of the study: its name and the overrides that make it."""

    name: str
    overrides: tuple[str, ...]
    values: tuple[tuple[str, str], ...] = ()  # a grid cell's (key, value) per axis


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    preset: str  # a preset name or an absolute file path
    overrides: tuple[str, ...]  # every run's (the file's ``set`` and then the command line's)
    seeds: tuple[int, ...]
    split: str
    checkpoint: str
    metrics: tuple[str, ...]
    baseline: str  # the baseline cell, or for a per-axis baseline the first cell's
    cells: tuple[Cell, ...]
    baselines: dict[str, str] = field(default_factory=dict)  # cell -> its baseline cell
    source: str = ""  # the file it was read from
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    tune: Tune | None = None  # the [tune] table (None: every cell at the file's settings)

    def cell(self, name: str) -> Cell:
        for cell in self.cells:
            if cell.name == name:
                return cell
        raise AttnlabError(f"study {self.name}: no cell {name!r}")

    def run_overrides(self, cell: Cell, seed: int, chosen: tuple[str, ...] = ()) -> list[str]:
        """Every override of one run, in the order they apply (a tuned setting after the
        cell's, the seed last)."""
        return [*self.overrides, *cell.overrides, *chosen, f"train.seed={seed}"]

    def config_of(self, cell: Cell, seed: int, chosen: tuple[str, ...] = ()) -> ExperimentConfig:
        from attnlab.experiment import apply_overrides, load_preset

        return apply_overrides(load_preset(self.preset), self.run_overrides(cell, seed, chosen))


def run_name(cell: Cell, seed: int) -> str:
    return f"{cell.name}-s{seed}"


def resolve_study_file(name_or_file: str) -> Path:
    """A study file, or the name of one shipped in ``studies/`` (``length-generalisation``)."""
    path = Path(name_or_file)
    if path.suffix == ".toml" or "/" in name_or_file or path.exists():
        if not path.exists():
            raise AttnlabError(f"{name_or_file}: no such study file")
        check_regular(path)  # a FIFO, a device or a folder: said as such, never read
        return path
    shipped = STUDIES_DIR / f"{name_or_file}.toml"
    if not shipped.is_file():
        names = sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))
        raise AttnlabError(
            f"unknown study {name_or_file!r}{did_you_mean(name_or_file, names)}; shipped: "
            f"{', '.join(names) or 'none'} (or give a .toml file)"
        )
    return shipped


CountCallback = Callable[[str, int, int, int], None]  # (name, cells, seeds, runs)


def load_study(
    name_or_file: str | Path,
    seeds: int | None = None,
    extra: tuple[str, ...] | list[str] = (),
    max_runs: int = MAX_RUNS,
    on_count: CountCallback | None = None,
    tune: bool = True,
) -> Study:
    """Read and check a study file. ``seeds`` replaces the file's seeds by 1..N; ``extra``
    overrides go after the file's own ``set`` (a short budget for a smoke run). The runs are
    counted (``on_count``) before any cell is checked; more than ``max_runs`` is refused.
    ``tune=False`` ignores the file's ``[tune]`` (the plain study at the file's settings)."""
    path = resolve_study_file(str(name_or_file))
    raw = load_toml(path)
    # The file passed load_toml's bounded read; its text names cells by their values.
    text = path.read_text(encoding="utf-8", errors="replace")
    return parse_study(
        raw,
        path,
        seeds=seeds,
        extra=tuple(extra),
        text=text,
        max_runs=max_runs,
        on_count=on_count,
        tune=tune,
    )


def _fail(path: Path, key: str, message: str) -> AttnlabError:
    return AttnlabError(f"{path}: {key}: {message}")


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, key, 'expected a list of "SECTION.KEY=VALUE" strings')
    for item in value:
        if "=" not in item:
            raise _fail(path, key, f'{item!r} is not "SECTION.KEY=VALUE"')
    return tuple(value)


SEED_KEY = "train.seed"  # set by the study for each run (the last override)


def _override_key(item: str) -> str:
    return item.split("=", 1)[0].strip()


def _refuse_seed(path: Path, where: str, keys: list[str]) -> None:
    """A ``train.seed`` of the user's would be overwritten by every run's own seed: every seed
    of a cell would silently be the same run. Refused, pointing at ``seeds``."""
    if SEED_KEY in keys:
        raise _fail(
            path,
            where,
            f"{SEED_KEY} is the study's: each run gets one of its seeds (seeds = 5, or a list "
            "such as seeds = [1, 2, 3]; --seeds N on the command line)",
        )


def _seeds(path: Path, value: Any) -> tuple[int, ...]:
    if isinstance(value, bool):
        raise _fail(path, "seeds", "expected a count (e.g. 5) or a list of seeds")
    if isinstance(value, int):
        if not 1 <= value <= 1000:
            raise _fail(path, "seeds", f"{value} is not a count from 1 to 1000")
        return tuple(range(1, value + 1))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        if len(set(value)) != len(value):
            raise _fail(path, "seeds", "a seed appears twice")
        if any(not 0 <= v <= SEED_MAX for v in value):
            raise _fail(path, "seeds", f"seeds are integers from 0 to {SEED_MAX}")
        return tuple(value)
    raise _fail(path, "seeds", "expected a count (e.g. 5) or a non-empty list of integers")


def _choice(path: Path, key: str, value: Any, valid: tuple[str, ...]) -> str:
    if value not in valid:
        raise _fail(path, key, f"{value!r} is not one of {', '.join(valid)}")
    return str(value)


def _grid_axes(path: Path, grid: Any) -> list[tuple[str, list[Any]]]:
    if not isinstance(grid, dict) or not grid:
        raise _fail(path, "grid", 'expected a table of "SECTION.KEY" = [values, ...]')
    axes: list[tuple[str, list[Any]]] = []
    for key, values in grid.items():
        if "." not in key:
            raise _fail(path, f"grid.{key}", "expected a SECTION.KEY, e.g. model.attention")
        if not isinstance(values, list) or not values:
            raise _fail(path, f"grid.{key}", "expected a non-empty list of values")
        axes.append((key, values))
    return axes


def _grid_cells(axes: list[tuple[str, list[Any]]], written: dict[str, list[str]]) -> list[Cell]:
    """The cartesian product, each cell named by its values as written in the file (``3e-4``),
    joined by "_" across axes (alibi, reverse_alibi)."""
    if not axes:
        return []
    labels = [written.get(key) or [_toml_text(v) for v in values] for key, values in axes]
    cells = []
    for combo in itertools.product(*(range(len(values)) for _, values in axes)):
        texts = [(key, _toml_text(values[i])) for (key, values), i in zip(axes, combo, strict=True)]
        overrides = tuple(f"{key}={text}" for key, text in texts)
        label = "_".join(labels[a][i] or "empty" for a, i in enumerate(combo))
        cells.append(Cell(safe_name(label)[:CELL_NAME_MAX], overrides, tuple(texts)))
    return cells


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _named_cells(path: Path, cells: Any) -> list[Cell]:
    if not isinstance(cells, list) or not cells:
        raise _fail(path, "cells", "expected [[cells]] tables with a name and a set list")
    result = []
    for index, cell in enumerate(cells):
        where = f"cells[{index}]"
        if not isinstance(cell, dict):
            raise _fail(path, where, "expected a table with name and set")
        unknown = set(cell) - {"name", "set"}
        if unknown:
            raise _fail(path, where, f"unknown key {sorted(unknown)[0]!r}; valid: name, set")
        name = cell.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(path, f"{where}.name", "expected a non-empty string")
        if len(name) > CELL_NAME_MAX:
            raise _fail(path, f"{where}.name", f"longer than {CELL_NAME_MAX} characters")
        check_name(name, f"{path}: {where}.name")
        result.append(Cell(name, _strings(path, f"{where}.set", cell.get("set", []))))
    return result


def parse_study(
    raw: dict[str, Any],
    path: Path,
    seeds: int | None = None,
    extra: tuple[str, ...] = (),
    text: str | None = None,
    max_runs: int = MAX_RUNS,
    on_count: CountCallback | None = None,
    tune: bool = True,
) -> Study:
    for key in raw:
        if key not in TOP_KEYS:
            raise _fail(
                path,
                key,
                f"unknown key{did_you_mean(key, TOP_KEYS)}; valid: " + ", ".join(TOP_KEYS),
            )
    _refuse_seed(path, "set", [_override_key(o) for o in _strings(path, "set", raw.get("set", []))])
    _refuse_seed(path, "--set", [_override_key(o) for o in extra])
    name = raw.get("name", safe_name(path.stem))
    if not isinstance(name, str):
        raise _fail(path, "name", "expected a string")
    check_name(name, f"{path}: name")
    preset = raw.get("preset")
    if not isinstance(preset, str) or not preset:
        raise _fail(path, "preset", "expected a preset name or a .toml file")
    beside = (path.parent / preset).resolve()
    if (preset.endswith(".toml") or "/" in preset) and beside.is_file():
        preset = str(beside)  # a file next to the study file
    study_seeds = tuple(range(1, seeds + 1)) if seeds else _seeds(path, raw.get("seeds", 3))
    axes = _grid_axes(path, raw["grid"]) if "grid" in raw else []
    named = _named_cells(path, raw["cells"]) if "cells" in raw else []
    grid_size = math.prod(len(values) for _, values in axes) if axes else 0
    if not grid_size + len(named):
        raise _fail(path, "grid", "a study needs a [grid] or [[cells]] (at least one cell)")
    tuned = None
    if tune and "tune" in raw:
        tuned = parse_tune(
            raw["tune"],
            study_seeds,
            array_literals(text, "tune", raw["tune"])
            if text and isinstance(raw["tune"], dict)
            else {},
            lambda key, message: _fail(path, key, message),
        )
    if tuned is not None:
        # A tuned key that a cell also sets would be overwritten by the candidate, silently.
        cell_keys = {key for key, _ in axes} | {
            _override_key(o) for cell in named for o in cell.overrides
        }
        clash = sorted(set(tuned.keys) & cell_keys)
        if clash:
            raise _fail(
                path,
                f"tune.{clash[0]}",
                "also set by the cells ([grid] or [[cells]]); a key is either the cells' or tuned",
            )
    # Counted before any cell is built or checked: a huge grid is refused in one line.
    n_cells = grid_size + len(named)
    runs = n_cells * (len(study_seeds) + (tuned.runs_per_cell if tuned else 0))
    if on_count is not None:
        on_count(name, n_cells, len(study_seeds), runs)
    if runs > max_runs:
        raise _fail(
            path,
            "grid",
            f"{n_cells} cells × {len(study_seeds)} seeds"
            + (f" + {tuned.runs_per_cell} tuning runs per cell" if tuned else "")
            + f" = {runs} runs, over the limit of {max_runs}; shrink the grid, or raise the "
            f"limit with --max-runs {runs}",
        )
    written = array_literals(text, "grid", raw["grid"]) if text and axes else {}
    cells = _grid_cells(axes, written) + named
    for key, _ in axes:
        _refuse_seed(path, f"grid.{SEED_KEY}", [key])
    for cell in named:
        _refuse_seed(path, f"cell {cell.name}", [_override_key(o) for o in cell.overrides])
    names = [c.name for c in cells]
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise _fail(path, "cells", f"two cells are named {twice[0]!r}; cell names are unique")
    metrics = raw.get("metrics", list(DEFAULT_METRICS))
    if isinstance(metrics, str):
        metrics = [metrics]
    if not isinstance(metrics, list) or not metrics:
        raise _fail(path, "metrics", f"expected a list from {', '.join(METRICS)}")
    for metric in metrics:
        _choice(path, "metrics", metric, tuple(METRICS))
    baselines = _baselines(path, raw.get("baseline", names[0]), cells)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise _fail(path, "description", "expected a string")
    study = Study(
        name=name,
        description=description,
        preset=preset,
        overrides=_strings(path, "set", raw.get("set", [])) + tuple(extra),
        seeds=study_seeds,
        split=_choice(path, "split", raw.get("split", "test"), SPLITS),
        checkpoint=_choice(path, "checkpoint", raw.get("checkpoint", "best"), CHECKPOINTS),
        metrics=tuple(metrics),
        baseline=baselines[names[0]],
        cells=tuple(cells),
        baselines=baselines,
        source=str(path),
        raw=raw,
        tune=tuned,
    )
    check_cells(study, axes)
    return study


def _baselines(path: Path, baseline: Any, cells: list[Cell]) -> dict[str, str]:
    """Each cell's baseline. ``baseline = "NAME"``: one cell for all. ``baseline =
    {"model.self_attention" = "scaled-dot"}``: per grid axis, each cell is compared with the
    cell that has the same values on the other axes and these values on the named ones (a
    variants × tasks grid compares variants within each task)."""
    names = [c.name for c in cells]
    if isinstance(baseline, str):
        if baseline not in names:
            raise _fail(
                path,
                "baseline",
                f"{baseline!r} is not a cell"
                f"{did_you_mean(baseline, names)}; cells: {', '.join(names)}",
            )
        return {name: baseline for name in names}
    if not isinstance(baseline, dict) or not baseline:
        raise _fail(path, "baseline", 'expected a cell name or a table of "SECTION.KEY" = value')
    axes = {key for cell in cells for key, _ in cell.values}
    if not axes:
        raise _fail(
            path,
            "baseline",
            "a per-axis baseline needs a [grid]; this study has only named cells: "
            f"give a cell name ({', '.join(names)})",
        )
    wanted = {}
    for key, value in baseline.items():
        if key not in axes:
            raise _fail(
                path, f"baseline.{key}", f"not a grid axis; axes: {', '.join(sorted(axes))}"
            )
        wanted[key] = _toml_text(value)
    by_values = {cell.values: cell.name for cell in cells if cell.values}
    result = {}
    for cell in cells:
        if not cell.values:
            raise _fail(
                path,
                "baseline",
                f"cell {cell.name} is not on the grid; a per-axis "
                "baseline needs every cell on the grid",
            )
        target = tuple((key, wanted.get(key, value)) for key, value in cell.values)
        if target not in by_values:
            raise _fail(path, "baseline", f"no grid cell has {dict(target)} (for {cell.name})")
        result[cell.name] = by_values[target]
    return result


def check_cells(study: Study, axes: list[tuple[str, list[Any]]] | None = None) -> None:
    """Refuse a bad key or value before any run starts, in one line naming the cell. The
    preset is read once; each named cell's config is built whole, and of the grid every value
    of every axis once, with the first value of the other axes (so the time grows with the
    number of values, not with the product of the axes; an interaction of two axes beyond
    those shows when the run starts, as its recorded one-line error). Each tuning candidate
    is built once, on the first cell. An unknown preset is named as the file's ``preset``."""
    from attnlab.experiment import apply_overrides, load_preset

    try:
        preset = load_preset(study.preset)
    except AttnlabError as err:
        raise AttnlabError(f"{study.source}: preset: {err}") from None
    try:
        base = apply_overrides(preset, list(study.overrides))
    except AttnlabError as err:
        raise AttnlabError(f"{study.source}: set: {err}") from None
    seed = f"{SEED_KEY}={study.seeds[0]}"
    by_overrides = {cell.overrides: cell for cell in study.cells}
    checked: list[Cell] = [c for c in study.cells if not c.values]
    axes = axes or []
    if axes:
        first = [0] * len(axes)
        combos = {tuple(first)}
        for a, (_, values) in enumerate(axes):
            for i in range(1, len(values)):
                combos.add(tuple(i if b == a else 0 for b in range(len(axes))))
        for combo in sorted(combos):
            overrides = tuple(
                f"{key}={_toml_text(values[i])}"
                for (key, values), i in zip(axes, combo, strict=True)
            )
            checked.append(by_overrides[overrides])
    for cell in checked:
        try:
            apply_overrides(base, [*cell.overrides, seed])
        except AttnlabError as err:
            raise AttnlabError(f"{study.source}: cell {cell.name}: {err}") from None
    if study.tune is not None:
        cell = study.cells[0]
        for combo in study.tune.candidates():
            try:
                apply_overrides(base, [*cell.overrides, *study.tune.overrides(combo), seed])
            except AttnlabError as err:
                raise AttnlabError(
                    f"{study.source}: tune: {study.tune.label(combo)} (cell {cell.name}): {err}"
                ) from None


def with_seeds(study: Study, seeds: tuple[int, ...]) -> Study:
    return replace(study, seeds=seeds)


def study_from_dict(raw: dict[str, Any], source: str) -> Study:
    """A study built in code (the benchmark scripts) with the same checks as a file's;
    ``source`` names it in error lines."""
    return parse_study(raw, Path(source))
