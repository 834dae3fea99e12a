"""attnlab.train.session.start_or_resume: the one engine call behind ``attnlab train`` (and the
lab's and the study runner's runs), without the command line."""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from _tiny import TINY_OVERRIDES

from attnlab.errors import AttnlabError
from attnlab.events import Done, Step, as_event
from attnlab.train.session import RunRequest, start_or_resume


class Recorder:
    def __init__(self) -> None:
        self.events: list = []
        self.opened: list[tuple[int, int, bool]] = []
        self.closed = 0
        self.run_dirs: list[tuple[Path, int]] = []

    def on_event(self, event) -> None:
        self.events.append(as_event(event))

    @contextmanager
    def progress(self, max_steps: int, start_step: int, primary: bool):
        self.opened.append((max_steps, start_step, primary))
        try:
            yield self
        finally:
            self.closed += 1

    def on_run_dir(self, path: Path, processes: int) -> None:
        self.run_dirs.append((path, processes))


def _train(request: RunRequest) -> tuple[dict, Recorder]:
    seen = Recorder()
    summary = start_or_resume(request, on_run_dir=seen.on_run_dir, progress=seen.progress)
    assert isinstance(summary, dict)
    return summary, seen


def _logged_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [rec["step"] for rec in map(json.loads, lines) if rec.get("type") == "step"]


def test_a_new_run_then_its_resume_through_the_engine_call(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    summary, seen = _train(RunRequest(overrides=TINY_OVERRIDES, out=tmp_path, run_name="s"))
    run_dir = tmp_path / "s"
    assert seen.run_dirs == [(run_dir, 1)]  # said once, by the process that made it
    assert seen.opened == [(6, 0, True)] and seen.closed == 1
    assert Path(summary["run_dir"]) == run_dir and summary["step"] == 6
    # the sink saw what the run directory's log holds
    steps = [e.step for e in seen.events if isinstance(e, Step)]
    assert steps == _logged_steps(run_dir) and steps[-1] == 6
    assert isinstance(seen.events[-1], Done) and seen.events[-1].step == 6
    assert signal.getsignal(signal.SIGINT) is before  # the start-up handlers are removed again

    request = RunRequest(overrides=("train.max_steps=8",), resume_dir=run_dir)
    summary, seen = _train(request)
    assert seen.run_dirs == [(run_dir, 1)]
    assert seen.opened == [(8, 6, True)]  # the bar starts at the checkpoint's step
    assert summary["step"] == 8 and _logged_steps(run_dir)[-1] == 8


def test_a_resume_refuses_a_preset_and_a_max_steps_below_the_checkpoint(tmp_path):
    with pytest.raises(AttnlabError, match="takes no --preset or --run-name"):
        start_or_resume(RunRequest(preset="reverse-bahdanau", resume_dir=tmp_path))
    _train(RunRequest(overrides=TINY_OVERRIDES, out=tmp_path, run_name="r"))
    low = RunRequest(overrides=("train.max_steps=3",), resume_dir=tmp_path / "r")
    with pytest.raises(AttnlabError, match="train.max_steps=3 is below the checkpoint's step 6"):
        start_or_resume(low)


def test_a_new_run_that_fails_before_its_first_step_leaves_no_directory(tmp_path):
    empty = tmp_path / "empty-corpus"  # exists, so it fails only when read
    empty.mkdir()
    request = RunRequest(
        overrides=(*TINY_OVERRIDES, "data.task=corpus", f"data.path={empty}"),
        out=tmp_path,
        run_name="gone",
    )
    made = []
    with pytest.raises(AttnlabError, match=str(empty)):
        start_or_resume(request, on_run_dir=lambda path, _n: made.append(path.is_dir()))
    assert made == [True]  # it was made (and locked) before the corpus was read ...
    assert not (tmp_path / "gone").exists()  # ... and removed again


def test_a_missing_corpus_is_refused_before_a_run_directory_is_made(tmp_path):
    missing = tmp_path / "no-such-corpus"
    request = RunRequest(
        overrides=(*TINY_OVERRIDES, "data.task=corpus", f"data.path={missing}"),
        out=tmp_path,
        run_name="gone",
    )
    made = []
    with pytest.raises(AttnlabError, match="no such file or folder"):
        start_or_resume(request, on_run_dir=lambda path, _n: made.append(path))
    assert made == [] and not (tmp_path / "gone").exists()
