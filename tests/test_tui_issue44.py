"""The lab part of issue 44: workers that never overlap on one model, Setup's study prompt,
study runs in the lab's menus, Setup's Data section from the task registry, the Train plots
and Studies table at 80×24, names told apart by their distinguishing part."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch
from _tiny import TINY_TRANSFORMER
from _tui_support import ready, tiny_config, until, workers_idle
from textual.widgets import Input, Static

from attnlab.data.dataset import load_dataset
from attnlab.experiment import apply_overrides
from attnlab.nn.model import build_model, count_parameters
from attnlab.runs import save_checkpoint, write_config
from attnlab.tui.app import make_app
from attnlab.tui.jobs import Jobs, error_line
from attnlab.tui.views.inspect import InspectView

SIZE = (100, 30)
TRANSFORMER = [*TINY_TRANSFORMER, "data.max_len=5"]


def saved_run(root: Path, name: str, overrides: list[str], seed: int = 0) -> Path:
    """An untrained model saved as RUN/checkpoints/best with its config.toml (a listed run)."""
    config = apply_overrides(tiny_config(name), overrides)
    dataset = load_dataset(config.data)
    torch.manual_seed(seed)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    run_dir = root / name
    save_checkpoint(run_dir, "best", model, config, dataset.meta(), 0, {}, count_parameters(model))
    write_config(run_dir, config)
    return run_dir


class Overlap:
    """Wraps the engine's ``decode_batch``: counts how many run at once; the first is slow
    (so a second request comes while it runs, as `d` during the automatic decode did)."""

    def __init__(self, real) -> None:
        self.real, self.active, self.most, self.calls = real, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            first = self.calls == 1
        try:
            if first:
                time.sleep(0.6)
            return self.real(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


# -- 1. no two decodes at once ---------------------------------------------------------------


async def test_decode_while_the_first_decode_runs_waits_and_shows_the_newest(
    tmp_path: Path, monkeypatch
) -> None:
    import attnlab.decode.search as search

    overlap = Overlap(search.decode_batch)
    monkeypatch.setattr(search, "decode_batch", overlap)
    run_dir = saved_run(tmp_path, "tf", TRANSFORMER)
    app = make_app(tmp_path, config=tiny_config())
    notes: list[tuple[str, str]] = []
    real_notify = app.notify
    monkeypatch.setattr(
        app, "notify", lambda m, *a, **k: (notes.append((m, k.get("severity"))), real_notify(m))
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(app, pilot)
        await pilot.press("3")  # opens on sample 0 of the run: the first, slow decode
        inspect = app.query_one(InspectView)
        await until(pilot, lambda: overlap.calls == 1)
        inspect.query_one("#insp-index", Input).value = "2"
        inspect.query_one("#heatmap").focus()
        await pilot.press("d")  # while the first still runs
        await workers_idle(pilot)
        await pilot.pause()
        assert overlap.most == 1  # never two decodes in one model
        assert not [n for n in notes if n[1] == "error"], notes
        assert inspect.result is not None and inspect.result.request.index == 2
        assert "✗" not in str(inspect.query_one("#insp-title", Static).content)
        assert inspect.query_one("#heatmap").shape[0] > 0
    assert run_dir.is_dir()


def test_jobs_skip_a_superseded_request_and_answer_in_one_line() -> None:
    jobs = Jobs()
    first, second = jobs.issue(), jobs.issue()
    assert jobs.stale(first) and not jobs.stale(second) and not jobs.stale(None)
    assert jobs.run(first, lambda: 1).skipped  # superseded before it started: not run
    assert jobs.run(second, lambda: 2).value == 2

    def broken() -> None:
        torch.stack([torch.zeros(2), torch.zeros(3)])

    outcome = jobs.run(jobs.issue(), broken)
    assert outcome.value is None and "\n" not in outcome.error
    assert outcome.error.startswith("unexpected error (RuntimeError: stack expects")
    assert error_line(FileNotFoundError(2, "No such file or directory", "x.pt")) == (
        "x.pt: No such file or directory"
    )
