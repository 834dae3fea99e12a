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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnlab.config import PRESETS_DIR, ExperimentConfig, check_name, load_toml, safe_name
from attnlab.errors import AttnlabError, did_you_mean

STUDIES_DIR = PRESETS_DIR.parent / "studies"
SPLITS = ("dev", "test")
CHECKPOINTS = ("best", "last")
# Metrics a study can tabulate: (key in the score file, label, digits, higher is better).
METRICS: dict[str, tuple[str, int]] = {
    "exact_match": ("exact match", 3),
    "bleu": ("BLEU", 1),
    "chrf": ("chrF", 1),
    "loss": ("loss", 3),
    "alignment_accuracy": ("align. acc.", 3),
    "aer": ("AER", 3),
}
DEFAULT_METRICS = ("exact_match", "bleu", "chrf")
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
)
SEED_MAX = 2**31 - 1
CELL_NAME_MAX = 60  # leaves room for "-s<seed>" inside a run name


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

    def cell(self, name: str) -> Cell:
        for cell in self.cells:
            if cell.name == name:
                return cell
        raise AttnlabError(f"study {self.name}: no cell {name!r}")

    def run_overrides(self, cell: Cell, seed: int) -> list[str]:
        """Every override of one run, in the order they apply (the seed last)."""
        return [*self.overrides, *cell.overrides, f"train.seed={seed}"]

    def config_of(self, cell: Cell, seed: int) -> ExperimentConfig:
        from attnlab.experiment import apply_overrides, load_preset

        return apply_overrides(load_preset(self.preset), self.run_overrides(cell, seed))


def run_name(cell: Cell, seed: int) -> str:
    return f"{cell.name}-s{seed}"


def resolve_study_file(name_or_file: str) -> Path:
    """A study file, or the name of one shipped in ``studies/`` (``length-generalisation``)."""
    path = Path(name_or_file)
    if path.suffix == ".toml" or "/" in name_or_file or path.exists():
        if not path.is_file():
            raise AttnlabError(f"{name_or_file}: no such study file")
        return path
    shipped = STUDIES_DIR / f"{name_or_file}.toml"
    if not shipped.is_file():
        names = sorted(p.stem for p in STUDIES_DIR.glob("*.toml"))
        raise AttnlabError(
            f"unknown study {name_or_file!r}{did_you_mean(name_or_file, names)}; shipped: "
            f"{', '.join(names) or 'none'} (or give a .toml file)"
        )
    return shipped


def load_study(
    name_or_file: str | Path,
    seeds: int | None = None,
    extra: tuple[str, ...] | list[str] = (),
) -> Study:
    """Read and check a study file. ``seeds`` replaces the file's seeds by 1..N; ``extra``
    overrides go after the file's own ``set`` (a short budget for a smoke run)."""
    path = resolve_study_file(str(name_or_file))
    raw = load_toml(path)
    return parse_study(raw, path, seeds=seeds, extra=tuple(extra))


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


def _grid_cells(path: Path, grid: Any) -> list[Cell]:
    if not isinstance(grid, dict) or not grid:
        raise _fail(path, "grid", 'expected a table of "SECTION.KEY" = [values, ...]')
    axes: list[tuple[str, list[Any]]] = []
    for key, values in grid.items():
        if "." not in key:
            raise _fail(path, f"grid.{key}", "expected a SECTION.KEY, e.g. model.attention")
        if not isinstance(values, list) or not values:
            raise _fail(path, f"grid.{key}", "expected a non-empty list of values")
        axes.append((key, values))
    cells = []
    for combo in itertools.product(*(values for _, values in axes)):
        overrides = tuple(f"{key}={_toml_text(v)}" for (key, _), v in zip(axes, combo, strict=True))
        # Named by the values, joined by "_" across axes (alibi, reverse_alibi).
        label = "_".join(_toml_text(v) or "empty" for v in combo)
        values = tuple((key, _toml_text(v)) for (key, _), v in zip(axes, combo, strict=True))
        cells.append(Cell(safe_name(label)[:CELL_NAME_MAX], overrides, values))
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
    cells: list[Cell] = []
    if "grid" in raw:
        cells += _grid_cells(path, raw["grid"])
    if "cells" in raw:
        cells += _named_cells(path, raw["cells"])
    if not cells:
        raise _fail(path, "grid", "a study needs a [grid] or [[cells]] (at least one cell)")
    for cell in cells:
        where = f"grid.{SEED_KEY}" if cell.values else f"cell {cell.name}"
        _refuse_seed(path, where, [_override_key(o) for o in cell.overrides])
    names = [c.name for c in cells]
    twice = sorted({n for n in names if names.count(n) > 1})
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
        seeds=tuple(range(1, seeds + 1)) if seeds else _seeds(path, raw.get("seeds", 3)),
        split=_choice(path, "split", raw.get("split", "test"), SPLITS),
        checkpoint=_choice(path, "checkpoint", raw.get("checkpoint", "best"), CHECKPOINTS),
        metrics=tuple(metrics),
        baseline=baselines[names[0]],
        cells=tuple(cells),
        baselines=baselines,
        source=str(path),
        raw=raw,
    )
    check_cells(study)
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


def check_cells(study: Study) -> None:
    """Every cell's config is built once (with the first seed): a bad key or value is refused
    before any run starts, in one line naming the cell. An unknown preset is named as the
    file's ``preset`` (not as the first cell's mistake)."""
    from attnlab.experiment import load_preset

    try:
        load_preset(study.preset)
    except AttnlabError as err:
        raise AttnlabError(f"{study.source}: preset: {err}") from None
    for cell in study.cells:
        try:
            study.config_of(cell, study.seeds[0])
        except AttnlabError as err:
            raise AttnlabError(f"{study.source}: cell {cell.name}: {err}") from None


def with_seeds(study: Study, seeds: tuple[int, ...]) -> Study:
    return replace(study, seeds=seeds)


def study_from_dict(raw: dict[str, Any], source: str) -> Study:
    """A study built in code (the benchmark scripts) with the same checks as a file's;
    ``source`` names it in error lines."""
    return parse_study(raw, Path(source))
