"""An LM run's task-declared metrics where runs are read back: the lab's follower and its
Train-view metric plot, and ``attnlab runs`` (a loss column only when an LM is listed)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.runs import summarize_run
from attnlab.tui.follow import SENTENCE_METRICS_TITLE, RunFollower, metric_panel


def write_run(run: Path, task: str, evals: list[dict]) -> None:
    run.mkdir(parents=True)
    (run / "config.toml").write_text(f'name = "{run.name}"\n[data]\ntask = "{task}"\n')
    start = {"type": "start", "step": 0, "name": run.name, "max_steps": 30, "time": 1.0}
    start["config"] = {"data": {"task": task}}
    if task == "lm":  # what the trainer writes: the task's declared metrics
        start["metrics"] = ["loss", "perplexity", "bits_per_token"]
    done = {"type": "done", "step": 30, "reason": "finished", "time": 3.0}
    events = [
        start,
        *({"type": "eval", "step": 10 * (i + 1), "time": 2.0, **e} for i, e in enumerate(evals)),
        done,
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


LM_EVALS = [
    {"loss": 2.5, "ppl": 12.18, "perplexity": 12.18, "bits_per_token": 3.607, "best": True},
    {"loss": 1.5, "ppl": 4.48, "perplexity": 4.48, "bits_per_token": 2.164, "best": True},
    {"loss": 1.7, "ppl": 5.47, "perplexity": 5.47, "bits_per_token": 2.453, "best": False},
]


def test_the_follower_plots_the_metrics_the_lm_task_declares(tmp_path):
    write_run(tmp_path / "lm-run", "lm", LM_EVALS)
    follower = RunFollower(tmp_path / "lm-run")
    follower.poll()
    curves = follower.curves
    assert list(curves.task) == ["loss", "perplexity", "bits_per_token"]
    assert curves.task["bits_per_token"] == [3.607, 2.164, 2.453]
    title, bounds, series = metric_panel(curves)
    assert title == "dev perplexity / bits/token" and bounds is None  # their own scale
    assert [label for label, _, _ in series] == ["perplexity", "bits/token"]
    assert follower.best["loss"] == 1.5 and follower.best["bits_per_token"] == 2.164
    assert any(
        "eval dev: loss 1.500  perplexity 4.480  bits/token 2.164 *best*" in line
        for line in follower.log
    )


def test_a_sentence_pair_run_keeps_its_bleu_plot(tmp_path):
    write_run(
        tmp_path / "rev", "reverse", [{"loss": 1.0, "bleu": 40.0, "chrf": 50.0, "exact_match": 0.5}]
    )
    follower = RunFollower(tmp_path / "rev")
    follower.poll()
    title, bounds, series = metric_panel(follower.curves)
    assert (title, bounds) == (SENTENCE_METRICS_TITLE, (0.0, 100.0))
    assert [label for label, _, values in series] == ["BLEU", "chrF", "exact %"]
    assert follower.curves.task == {}


def test_runs_lists_an_lms_best_dev_loss_and_no_loss_column_without_one(tmp_path):
    write_run(
        tmp_path / "runs" / "rev",
        "reverse",
        [{"loss": 1.0, "bleu": 40.0, "chrf": 50.0, "exact_match": 0.5}],
    )
    plain = CliRunner().invoke(cli, ["runs", str(tmp_path / "runs")])
    assert plain.exit_code == 0, plain.output
    assert "loss" not in plain.output.splitlines()[2]  # the header row, as before
    write_run(tmp_path / "runs" / "lm-run", "lm", LM_EVALS)
    assert summarize_run(tmp_path / "runs" / "lm-run").best_loss == 1.5  # lower is better
    listed = CliRunner().invoke(cli, ["runs", str(tmp_path / "runs")])
    assert listed.exit_code == 0, listed.output
    header = next(line for line in listed.output.splitlines() if " run " in f" {line} ")
    assert "loss" in header.split()
    row = next(line for line in listed.output.splitlines() if "lm-run" in line)
    assert "1.500" in row.split()


async def test_the_train_view_plots_an_lms_perplexity_and_bits_not_bleu(tmp_path):
    from _tui_support import lab_config, ready, until

    from attnlab.tui.app import make_app
    from attnlab.tui.views.train import TrainView
    from attnlab.tui.widgets.plots import MetricPlot

    write_run(tmp_path / "lm-run", "lm", LM_EVALS)
    app = make_app(tmp_path, config=lab_config(), poll_seconds=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await pilot.press("2")
        app.query_one(TrainView).follow_run(tmp_path / "lm-run")
        metric_plot = app.query_one("#metric-plot", MetricPlot)
        await until(pilot, lambda: metric_plot.points > 0)
        assert metric_plot.title == "dev perplexity / bits/token"
        assert metric_plot.points == 2 * 3  # perplexity and bits/token at three evals
        assert [label for label, _, _ in metric_plot.series] == ["perplexity", "bits/token"]
        status = str(app.query_one("#train-status").content)
        assert "BLEU" not in status and "dev loss 1.700" in status  # the last eval's loss


async def test_the_runs_view_compares_marked_lms_by_dev_loss(tmp_path):
    from _tui_support import lab_config, ready
    from textual.widgets import DataTable

    from attnlab.tui.app import make_app
    from attnlab.tui.views.runs import COMPARE_LOSS_TITLE, RunsView
    from attnlab.tui.widgets.plots import MetricPlot

    write_run(tmp_path / "lm-a", "lm", LM_EVALS)
    write_run(tmp_path / "lm-b", "lm", LM_EVALS[:2])
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await pilot.press("4")
        runs = app.query_one(RunsView)
        runs.refresh_runs()
        table = app.query_one("#runs-table", DataTable)
        assert table.row_count == 2
        table.focus()
        await pilot.press("space", "down", "space")
        assert len(runs.marked) == 2
        curves = app.query_one("#compare-curves", MetricPlot)
        assert curves.title == COMPARE_LOSS_TITLE and curves.bounds is None
        assert curves.points == 3 + 2  # each run's dev losses
        assert [values for _, _, values in curves.series] == [[2.5, 1.5, 1.7], [2.5, 1.5]]
