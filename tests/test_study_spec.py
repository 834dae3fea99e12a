"""Study files: parsing, every mistake as one line naming file and key, grid expansion."""

from __future__ import annotations

from pathlib import Path

import pytest
from _tiny import TINY_OVERRIDES

from attnlab.errors import AttnlabError
from attnlab.study.runner import plan_workers, tasks_of
from attnlab.study.spec import STUDIES_DIR, load_study, run_name


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    return path


BASE = 'preset = "reverse-bahdanau"\nseeds = 2\n'


def test_a_grid_is_the_cartesian_product_named_by_its_values(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + '[grid]\n"model.attention" = ["bahdanau", "luong-general"]\n'
        '"model.hidden" = [16, 32]\n',
    )
    study = load_study(path)
    assert [c.name for c in study.cells] == [
        "bahdanau_16",
        "bahdanau_32",
        "luong-general_16",
        "luong-general_32",
    ]
    assert study.cells[1].overrides == ("model.attention=bahdanau", "model.hidden=32")
    assert study.seeds == (1, 2)
    assert study.baseline == study.cells[0].name  # the first cell unless named


def test_one_axis_names_cells_by_value_and_named_cells_follow(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + 'baseline = "none"\n[grid]\n"model.attention" = ["bahdanau", "none"]\n'
        '[[cells]]\nname = "wide"\nset = ["model.hidden=64"]\n',
    )
    study = load_study(path)
    assert [c.name for c in study.cells] == ["bahdanau", "none", "wide"]
    assert study.baseline == "none"


def test_tasks_are_seed_major_with_the_seed_last(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + 'set = ["train.max_steps=5"]\n[grid]\n"model.attention" = ["bahdanau", "none"]\n',
    )
    study = load_study(path, extra=("train.batch_size=8",))
    tasks = tasks_of(study, tmp_path / "out", threads=1)
    assert [t.run_name for t in tasks] == ["bahdanau-s1", "none-s1", "bahdanau-s2", "none-s2"]
    assert tasks[3].overrides == (
        "train.max_steps=5",
        "train.batch_size=8",
        "model.attention=none",
        "train.seed=2",
    )
    assert Path(tasks[0].study_dir) == (tmp_path / "out" / "s").resolve()
    assert run_name(study.cells[0], 7) == "bahdanau-s7"


def test_seeds_flag_replaces_the_files_seeds(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + '[grid]\n"model.attention" = ["none"]\n')
    assert load_study(path, seeds=4).seeds == (1, 2, 3, 4)
    path = _write(
        tmp_path,
        'preset = "reverse-bahdanau"\nseeds = [7, 3]\n[grid]\n"model.attention" = ["none"]\n',
    )
    assert load_study(path).seeds == (7, 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE + 'seed = 3\n[grid]\n"model.attention" = ["none"]\n', "seed: unknown key"),
        (BASE + "[grid]\n", "grid: expected a table"),
        (BASE, "a study needs a [grid] or [[cells]]"),
        (
            'preset = "reverse-bahdanau"\nseeds = 0\n[grid]\n"model.attention" = ["none"]\n',
            "seeds: 0 is not a count",
        ),
        (
            'preset = "reverse-bahdanau"\nseeds = [1, 1]\n[grid]\n"model.attention" = ["none"]\n',
            "seeds: a seed appears twice",
        ),
        (
            BASE + 'baseline = "nope"\n[grid]\n"model.attention" = ["none"]\n',
            "baseline: 'nope' is not a cell",
        ),
        (
            BASE + 'split = "train"\n[grid]\n"model.attention" = ["none"]\n',
            "split: 'train' is not one of dev, test",
        ),
        (
            BASE + 'metrics = ["bleu", "rouge"]\n[grid]\n"model.attention" = ["none"]\n',
            "metrics: 'rouge' is not one of",
        ),
        (BASE + '[grid]\n"model.attention" = ["bahdanau", "nonsense"]\n', "cell nonsense: "),
        (BASE + '[grid]\n"model.hiddden" = [16]\n', "cell 16: "),
        (
            BASE + 'baseline = { "model.emb" = 8 }\n[grid]\n"model.attention" = ["none"]\n'
            '"model.hidden" = [8]\n',
            "baseline.model.emb: not a grid axis",
        ),
        (
            BASE + '[[cells]]\nname = "a"\nset = ["model.hidden=8"]\n[[cells]]\nname = "a"\n',
            "two cells are named 'a'",
        ),
        (BASE + '[[cells]]\nname = "a b"\n', "is not a valid run name"),
        (BASE + '[[cells]]\nname = "a"\nset = ["model.hidden"]\n', 'is not "SECTION.KEY=VALUE"'),
        ('seeds = 2\n[grid]\n"model.attention" = ["none"]\n', "preset: expected a preset"),
        (
            'preset = "reverse-bahdanu"\n[grid]\n"model.attention" = ["none"]\n',
            "preset: unknown preset",
        ),
        # train.seed would be overwritten by each run's seed: every seed the same run
        (
            BASE + 'set = ["train.seed=7"]\n[grid]\n"model.attention" = ["none"]\n',
            "set: train.seed",
        ),
        (BASE + '[grid]\n"train.seed" = [1, 2]\n', "grid.train.seed: train.seed is the study's"),
        (
            BASE + '[[cells]]\nname = "a"\nset = ["train.seed = 4"]\n',
            "cell a: train.seed is the study's",
        ),
        (
            BASE + 'baseline = { "model.attention" = "none" }\n[[cells]]\nname = "a"\n',
            "baseline: a per-axis baseline needs a [grid]",
        ),
        (BASE + 'metrics = ["aer", "blue"]\n[grid]\n"model.attention" = ["none"]\n', "'blue'"),
    ],
)
def test_mistakes_are_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(AttnlabError) as err:
        load_study(path)
    message = str(err.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_a_train_seed_on_the_command_line_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + '[grid]\n"model.attention" = ["none"]\n')
    with pytest.raises(AttnlabError, match=r"--set: train.seed is the study's.*seeds"):
        load_study(path, extra=["train.max_steps=2", "train.seed=9"])


def test_a_shipped_study_is_found_by_name_and_unknown_names_are_refused() -> None:
    assert load_study("length-generalisation").source == str(
        STUDIES_DIR / "length-generalisation.toml"
    )
    with pytest.raises(AttnlabError, match="unknown study 'length-generalisatio'.*did you mean"):
        load_study("length-generalisatio")


@pytest.mark.parametrize("path", sorted(STUDIES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_study_parses_and_builds_every_cell(path: Path) -> None:
    study = load_study(path, extra=TINY_OVERRIDES[:0])
    assert len(study.seeds) >= 3
    assert study.baseline in [c.name for c in study.cells]
    # Loading checks each grid value once; here every shipped cell (and candidate) is built.
    candidates = study.tune.candidates() if study.tune else [()]
    for cell in study.cells:
        for combo in candidates:
            chosen = study.tune.overrides(combo) if study.tune else ()
            study.config_of(cell, study.seeds[0], chosen)


def test_workers_default_to_cores_over_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnlab.study import runner

    monkeypatch.setattr(runner, "available_cores", lambda: 8)
    assert plan_workers(None, None) == (8, 1)
    assert plan_workers(None, 2) == (4, 2)
    assert plan_workers(None, 16) == (1, 16)
    assert plan_workers(3, 2) == (3, 2)


def test_a_per_axis_baseline_compares_each_cell_within_its_other_axes(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + 'baseline = { "model.attention" = "none" }\n[grid]\n'
        '"data.task" = ["reverse", "copy"]\n"model.attention" = ["none", "bahdanau"]\n',
    )
    study = load_study(path)
    assert study.baselines == {
        "reverse_none": "reverse_none",
        "reverse_bahdanau": "reverse_none",
        "copy_none": "copy_none",
        "copy_bahdanau": "copy_none",
    }


def test_a_rerun_with_other_settings_is_refused_before_anything_runs(tmp_path: Path) -> None:
    import json

    from attnlab.experiment import apply_overrides
    from attnlab.runs import write_config
    from attnlab.study.runner import check_existing_runs, run_study

    path = _write(tmp_path, BASE + '[grid]\n"model.attention" = ["none", "bahdanau"]\n')
    smoke = load_study(path, extra=["train.max_steps=20"])
    directory = tmp_path / "out" / smoke.name
    finished, begun = directory / "bahdanau-s2", directory / "none-s1"
    # run directories as a smoke run leaves them (the trainer writes this config.toml), with
    # the runner's per-invocation keys (threads, device) set differently
    for run, cell, seed in ((finished, smoke.cells[1], 2), (begun, smoke.cells[0], 1)):
        config = smoke.config_of(cell, seed)
        write_config(run, apply_overrides(config, ["train.threads=3", "train.device=cpu"]))
    done = {"type": "done", "time": 2.0, "step": 20, "reason": "finished", "best": {}}
    (finished / "events.jsonl").write_text(json.dumps(done) + "\n", encoding="utf-8")
    check_existing_runs(smoke, directory)  # the same settings: a rerun goes on

    full = load_study(path, extra=["train.max_steps=800"])
    with pytest.raises(AttnlabError) as err:
        run_study(full, out=tmp_path / "out", workers=1)
    message = str(err.value)
    assert "bahdanau-s2: trained with train.max_steps=20" in message
    assert "train.max_steps=800" in message and "\n" not in message
    assert not (directory / "study.json").exists()  # nothing was started or recorded

    # an unfinished run resumes with new train.* keys (train --resume applies them), not more
    (finished / "events.jsonl").unlink()
    check_existing_runs(full, directory)
    wider = load_study(path, extra=["train.max_steps=800", "model.hidden=32"])
    with pytest.raises(AttnlabError, match="none-s1: begun with model.hidden=.*model.hidden=32"):
        check_existing_runs(wider, directory)


def test_a_huge_grid_is_counted_and_refused_in_one_line_before_any_cell_is_checked(
    tmp_path: Path,
) -> None:
    """Issue #43 item 5: 2,999 × 1,000 cells ran past 60 s with no output."""
    from click.testing import CliRunner

    from attnlab.cli import cli

    a = ", ".join(str(i) for i in range(1, 3000))
    b = ", ".join(str(i) for i in range(1, 1001))
    path = _write(tmp_path, BASE + f'[grid]\n"model.hidden" = [{a}]\n"model.emb" = [{b}]\n')
    result = CliRunner().invoke(cli, ["study", "run", str(path), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert lines[0] == "study s: 2999000 cells × 2 seeds = 5998000 runs"
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "over the limit of 10000" in errors[0]
    assert "--max-runs 5998000" in errors[0]
    assert not (tmp_path / "o").exists()


def test_max_runs_sets_the_limit(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + '[grid]\n"model.hidden" = [8, 16, 24]\n')  # 3 × 2 = 6 runs
    with pytest.raises(AttnlabError, match=r"6 runs, over the limit of 5; .*--max-runs 6"):
        load_study(path, max_runs=5)
    counted: list[tuple] = []
    study = load_study(path, max_runs=6, on_count=lambda *a: counted.append(a))
    assert counted == [("s", 3, 2, 6)] and len(study.cells) == 3


def test_the_count_comes_before_a_bad_cell_is_found(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + '[grid]\n"model.attention" = ["bahdanau", "nonsense"]\n')
    counted: list[tuple] = []
    with pytest.raises(AttnlabError, match="cell nonsense"):
        load_study(path, on_count=lambda *a: counted.append(a))
    assert counted == [("s", 2, 2, 4)]


def test_checking_a_grid_builds_one_config_per_value_not_per_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 cells (10 × 10 × 10): the preset is read once and 1 + 3 × 9 cells are built (every
    value of every axis once), so the check does not grow with the product of the axes."""
    import attnlab.experiment as experiment

    calls = {"apply": 0, "preset": 0}
    apply, preset = experiment.apply_overrides, experiment.load_preset

    def counting_apply(*args, **kwargs):
        calls["apply"] += 1
        return apply(*args, **kwargs)

    def counting_preset(*args, **kwargs):
        calls["preset"] += 1
        return preset(*args, **kwargs)

    monkeypatch.setattr(experiment, "apply_overrides", counting_apply)
    monkeypatch.setattr(experiment, "load_preset", counting_preset)
    values = ", ".join(str(8 * i) for i in range(1, 11))
    path = _write(
        tmp_path,
        'preset = "reverse-bahdanau"\nseeds = 1\n[grid]\n'
        f'"model.hidden" = [{values}]\n"model.emb" = [{values}]\n'
        '"train.max_steps" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n',
    )
    study = load_study(path)
    assert len(study.cells) == 1000
    assert calls["preset"] == 1
    assert calls["apply"] == 1 + (1 + 3 * 9)  # the study's set, then the star of the grid


def test_a_value_off_the_first_row_of_the_other_axes_is_still_checked(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        BASE + '[grid]\n"model.hidden" = [8, 16]\n"model.attention" = ["bahdanau", "nonsense"]\n',
    )
    with pytest.raises(AttnlabError, match="cell 8_nonsense: "):
        load_study(path)


def test_grid_cells_are_named_by_their_values_as_written(tmp_path: Path) -> None:
    """Issue #43 item 11: float cells were named 0.00030000000000000003."""
    path = _write(
        tmp_path,
        BASE + "[grid]\n"
        '"train.lr" = [  # learning rates\n  3e-4, 1.5E-3,\n  0.00030000000000000003,\n]\n'
        '"model.attention" = ["bahdanau", \'none\']\n',
    )
    study = load_study(path)
    assert [c.name for c in study.cells] == [
        "3e-4_bahdanau",
        "3e-4_none",
        "1.5E-3_bahdanau",
        "1.5E-3_none",
        "0.00030000000000000003_bahdanau",
        "0.00030000000000000003_none",
    ]
    # The override is the value itself (the config gets the same float either way).
    assert study.cells[0].overrides == ("train.lr=0.0003", "model.attention=bahdanau")
    assert study.config_of(study.cells[2], 1).train.lr == 1.5e-3


def test_an_inline_grid_falls_back_to_the_values(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + 'grid = { "train.lr" = [3e-4] }\n')
    assert [c.name for c in load_study(path).cells] == ["0.0003"]


def test_named_cells_alone_make_no_grid_cell(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + '[[cells]]\nname = "a"\nset = ["model.hidden=16"]\n')
    assert [c.name for c in load_study(path).cells] == ["a"]


def test_a_study_path_that_is_not_a_regular_file_is_said_to_be_so(tmp_path):
    import os

    from attnlab.errors import AttnlabError
    from attnlab.study.spec import resolve_study_file

    fifo = tmp_path / "s.toml"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a FIFO"), (tmp_path, "a folder"), ("/dev/zero", "device")):
        with pytest.raises(AttnlabError, match=f"{kind}.*not a regular file"):
            resolve_study_file(str(path))
    with pytest.raises(AttnlabError, match="no such study file"):
        resolve_study_file(str(tmp_path / "missing.toml"))
