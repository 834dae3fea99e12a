"""Tuned studies (issue #42): per cell the best candidate on dev, then the study's seeds at it.

The runs here are fakes: the child processes are replaced by functions that write a finished
run directory (its real config) and a score file whose figures depend on the candidate and the
split, so dev and test can prefer different candidates."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.errors import AttnlabError
from attnlab.study import task as task_module
from attnlab.study.runner import run_study
from attnlab.study.spec import load_study
from attnlab.study.table import load_table

scipy_stats = pytest.importorskip("scipy.stats")

LRS = ["1e-4", "1e-3", "1e-2"]
# cell -> split -> lr -> BLEU: dev and test disagree for bahdanau; none's best is on the edge.
BLEU = {
    "bahdanau": {
        "dev": {1e-4: 20.0, 1e-3: 60.0, 1e-2: 40.0},
        "test": {1e-4: 10.0, 1e-3: 30.0, 1e-2: 90.0},
    },
    "none": {
        "dev": {1e-4: 10.0, 1e-3: 20.0, 1e-2: 30.0},
        "test": {1e-4: 30.0, 1e-3: 20.0, 1e-2: 10.0},
    },
}


def _file(tmp_path: Path, tune: str = "") -> Path:
    path = tmp_path / "t.toml"
    path.write_text(
        'name = "t"\npreset = "reverse-bahdanau"\nseeds = 2\nmetrics = ["bleu"]\n'
        '[grid]\n"model.attention" = ["bahdanau", "none"]\n'
        + (tune or f'[tune]\n"train.lr" = [{", ".join(LRS)}]\nselect = "bleu"\n'),
        encoding="utf-8",
    )
    return path


def _noise(run: str) -> float:
    return random.Random(run).uniform(-1.0, 1.0)


class FakeChildren:
    """Stands in for ``python -m attnlab train`` and ``python -m attnlab.study.score``."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.calls: list[list[str]] = []
        self.scored: dict[str, str] = {}  # run dir -> split it was scored on
        self.fail = set(fail)
        self.lock = threading.Lock()

    def __call__(self, argv, env, children):
        from attnlab.config import dumps_toml
        from attnlab.experiment import apply_overrides, load_preset

        with self.lock:
            self.calls.append(list(argv))
        if argv[2] == "attnlab.study.score":
            run, split = Path(argv[3]), argv[argv.index("--split") + 1]
            config = (run / "config.toml").read_text()
            cell = "none" if 'attention = "none"' in config else "bahdanau"
            lr = float(config.split("\nlr = ")[1].split("\n")[0])
            bleu = BLEU[cell][split][lr] + _noise(run.name)
            score = {
                "version": 1,
                "split": split,
                "n": 1,
                "bleu": bleu,
                "chrf": bleu,
                "exact_match": bleu / 100,
                "loss": 1.0,
                "sentences": {"hyps": ["a"], "refs": ["a"], "exact": [True], "src_len": [1]},
            }
            (run / "study-score.json").write_text(json.dumps(score))
            with self.lock:
                self.scored[str(run)] = split
            return 0, ""
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        out, name = argv[argv.index("--out") + 1], argv[argv.index("--run-name") + 1]
        if name in self.fail:
            return 1, "boom: this candidate diverged"
        run = Path(out) / name
        run.mkdir(parents=True)
        config = apply_overrides(load_preset(argv[argv.index("--preset") + 1]), sets)
        (run / "config.toml").write_text(dumps_toml(config))
        done = {"type": "done", "time": 2.0, "step": 10, "reason": "finished", "best": {}}
        (run / "events.jsonl").write_text(json.dumps(done) + "\n")
        return 0, ""


def _dev_means(fake: FakeChildren, directory: Path, cell: str, seeds=(10001, 10002)) -> list:
    """The independent computation: each candidate's mean dev BLEU from the score files."""
    means = []
    for index in range(len(LRS)):
        values = []
        for seed in seeds:
            run = directory / "tune" / f"{cell}-c{index + 1}-s{seed}"
            assert fake.scored[str(run)] == "dev"
            values.append(json.loads((run / "study-score.json").read_text())["bleu"])
        means.append(sum(values) / len(values))
    return means


def test_a_tune_table_is_read_with_its_seeds_and_checked(tmp_path: Path) -> None:
    study = load_study(_file(tmp_path))
    assert study.tune is not None
    assert study.tune.keys == ("train.lr",) and study.tune.texts == (tuple(LRS),)
    assert study.tune.seeds == (10001, 10002)  # the default: 2, never a study seed
    assert study.tune.runs_per_cell == 6
    assert load_study(_file(tmp_path), tune=False).tune is None  # --tune off
    bad = [
        ('[tune]\n"train.lr" = [1e-3]\nselect = "accuracy"\n', "tune.select: 'accuracy'"),
        ('[tune]\n"train.lr" = [1e-3]\nselect = "bleu"\ntune_seeds = [2]\n', "also a study seed"),
        ('[tune]\nselect = "bleu"\n', "no key to tune"),
        ('[tune]\n"train.lr" = []\nselect = "bleu"\n', "tune.train.lr: expected a non-empty"),
        ('[tune]\n"train.lrr" = [1e-3]\nselect = "bleu"\n', "tune: lrr=1e-3"),
        ('[tune]\n"model.attention" = ["none"]\nselect = "bleu"\n', "also set by the cells"),
    ]
    for text, message in bad:
        with pytest.raises(AttnlabError, match=message):
            load_study(_file(tmp_path, text))


def test_the_choice_is_dev_s_best_never_test_s_and_a_rerun_trains_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeChildren()
    monkeypatch.setattr(task_module, "_run_child", fake)
    study = load_study(_file(tmp_path))
    result, directory = run_study(study, tmp_path / "out", workers=2)
    assert all(o.state == "scored" for o in result.outcomes)
    assert len(result.outcomes) == 2 * 6 + 2 * 2
    # Tuning runs are scored on dev only: the test split is never read to choose.
    tune_runs = {run: split for run, split in fake.scored.items() if "/tune/" in run}
    assert len(tune_runs) == 12 and set(tune_runs.values()) == {"dev"}
    table = load_table(directory)
    rows = {row.name: row for row in table.rows}
    for cell in ("bahdanau", "none"):
        means = _dev_means(fake, directory, cell)
        best = max(range(len(LRS)), key=lambda i: (means[i], -i))
        tune = rows[cell].tune
        assert tune["chosen"] == {"train.lr": float(LRS[best])}
        got = [c["dev_mean"] for c in tune["candidates"]]
        assert got == pytest.approx(means)
        # The study's runs trained at the chosen setting and were scored on test.
        for seed in (1, 2):
            run = directory / f"{cell}-s{seed}"
            assert fake.scored[str(run)] == "test"
            assert f"lr = {float(LRS[best])}" in (run / "config.toml").read_text()
    assert rows["bahdanau"].tune["chosen"] == {"train.lr": 1e-3}  # dev's; test prefers 1e-2
    assert rows["bahdanau"].tune["edge"] is False
    assert rows["none"].tune["chosen"] == {"train.lr": 1e-2}
    assert rows["none"].tune["edge"] is True  # the last of its list: widen the grid
    # Each candidate's half-width is scipy's t interval over the tune seeds.
    cand = rows["bahdanau"].tune["candidates"][1]
    values = [
        json.loads((directory / "tune" / f"bahdanau-c2-s{s}" / "study-score.json").read_text())[
            "bleu"
        ]
        for s in (10001, 10002)
    ]
    low, high = scipy_stats.t.interval(0.95, 1, loc=sum(values) / 2, scale=scipy_stats.sem(values))
    assert cand["dev_half_width"] == pytest.approx((high - low) / 2)
    assert cand["n"] == 2
    before = len(fake.calls)
    again, _ = run_study(study, tmp_path / "out", workers=2)
    assert len(fake.calls) == before  # nothing trained or scored again, tuning included
    assert all(o.state == "scored" and not o.trained for o in again.outcomes)


def test_a_test_split_score_in_a_tuning_run_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnlab.study.runner import chosen_overrides

    fake = FakeChildren()
    monkeypatch.setattr(task_module, "_run_child", fake)
    study = load_study(_file(tmp_path))
    _, directory = run_study(study, tmp_path / "out", workers=1)
    score_file = directory / "tune" / "bahdanau-c3-s10001" / "study-score.json"
    score = json.loads(score_file.read_text())
    score_file.write_text(json.dumps({**score, "split": "test", "bleu": 99.0}))
    chosen = chosen_overrides(study, directory)
    assert "bahdanau" not in chosen  # that run has no dev score: the cell is not chosen yet
    assert chosen["none"] == ("train.lr=0.01",)


def test_a_failed_tuning_run_counts_as_the_worst_score_and_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeChildren(fail={"bahdanau-c2-s10001"})  # lr 1e-3, dev's best otherwise
    monkeypatch.setattr(task_module, "_run_child", fake)
    result, directory = run_study(load_study(_file(tmp_path)), tmp_path / "out", workers=2)
    assert [o.run_name for o in result.failed] == ["bahdanau-c2-s10001"]
    table = load_table(directory)
    tune = {row.name: row for row in table.rows}["bahdanau"].tune
    cand = tune["candidates"][1]
    other = json.loads(
        (directory / "tune" / "bahdanau-c2-s10002" / "study-score.json").read_text()
    )["bleu"]
    assert cand["failed"] == ["bahdanau-c2-s10001"]
    assert cand["dev_mean"] == pytest.approx((0.0 + other) / 2)  # BLEU's worst is 0
    assert tune["chosen"] == {"train.lr": 1e-2}  # 40 beats (0 + 60) / 2
    failures = [f for f in table.failures if f["run"] == "tune/bahdanau-c2-s10001"]
    assert len(failures) == 1 and "diverged" in failures[0]["error"]


def test_ties_go_to_the_first_listed_and_lower_is_better_for_loss() -> None:
    from attnlab.study.tune import Candidate, Tune, choose

    tune = Tune(("train.lr",), ((1, 2, 3),), (("1", "2", "3"),), "bleu", (10001,))

    def cands(*means: float) -> list[Candidate]:
        return [Candidate((i,), {}, "", [m], [], []) for i, m in enumerate(means)]

    assert choose(tune, cands(5.0, 7.0, 7.0)).combo == (1,)
    loss = Tune(("train.lr",), ((1, 2, 3),), (("1", "2", "3"),), "loss", (10001,))
    assert choose(loss, cands(5.0, 3.0, 3.0)).combo == (1,)
    assert loss.on_edge((0,)) and loss.on_edge((2,)) and not loss.on_edge((1,))


def test_show_gives_the_tuning_curve_the_chosen_setting_and_the_protocol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_module, "_run_child", FakeChildren())
    _, directory = run_study(load_study(_file(tmp_path)), tmp_path / "out", workers=2)
    runner = CliRunner()
    text = runner.invoke(cli, ["study", "show", str(directory)], terminal_width=200).output
    assert "tuning on dev" in text and "widen the grid" in text
    assert "lr=1e-3" in text and "lr=1e-2 ◂" in text
    flat = " ".join(text.split())  # the legend wraps at the console's width
    assert "tuned per cell on dev" in flat and "6 tuning runs for each of the 2 cells" in flat
    assert "every run 1500 steps" in flat  # reverse-bahdanau's train.max_steps
    data = json.loads(runner.invoke(cli, ["study", "show", str(directory), "--json"]).output)
    row = next(r for r in data["rows"] if r["name"] == "none")
    assert row["tune"]["chosen"] == {"train.lr": 0.01} and row["tune"]["edge"] is True
    assert [c["values"] for c in row["tune"]["candidates"]] == [
        {"train.lr": 0.0001},
        {"train.lr": 0.001},
        {"train.lr": 0.01},
    ]
    assert {"dev_mean", "dev_half_width", "n"} <= set(row["tune"]["candidates"][0])
    assert data["tune"]["select"] == "bleu" and data["tune"]["seeds"] == [10001, 10002]
    assert "tuning" in data["methods"]
    md = runner.invoke(cli, ["study", "show", str(directory), "--markdown"]).output
    assert "| none | lr=1e-2 | " in md
