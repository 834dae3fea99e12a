"""Helpers for the TUI tests: hand-written run directories with fixed events and times."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from _tiny import tiny_config

from attnlab.config import ExperimentConfig, dumps_toml

T0 = 1_800_000_000.0  # fixed clock: snapshots and logs never depend on the real time

# The lab tests' sizes on top of _tiny's: 200 sentences of 3-6 symbols over 10, 30 steps on
# the CPU (the snapshots show these values).
LAB_OVERRIDES = (
    "data.train_size=200",
    "data.min_len=3",
    "data.max_len=6",
    "data.vocab_size=10",
    "train.max_steps=30",
    "train.eval_every=10",
    "train.log_every=2",
    "train.device=cpu",
)


def lab_config(name: str = "tiny") -> ExperimentConfig:
    """The tiny config (``_tiny.tiny_config``) at the lab tests' sizes."""
    return tiny_config(name, *LAB_OVERRIDES)


def sample_events(step: int) -> list[dict[str, Any]]:
    """Two logged samples with attention (hyp_len x src_len), reverse task."""
    return [
        {
            "type": "sample",
            "step": step,
            "index": 0,
            "src": ["3", "1", "4", "2"],
            "ref": ["2", "4", "1", "3"],
            "hyp": ["2", "4", "1", "3"],
            "attention": [
                [0.05, 0.05, 0.1, 0.8],
                [0.05, 0.1, 0.75, 0.1],
                [0.1, 0.7, 0.1, 0.1],
                [0.85, 0.05, 0.05, 0.05],
            ],
        },
        {
            "type": "sample",
            "step": step,
            "index": 1,
            "src": ["5", "6", "7"],
            "ref": ["7", "6", "5"],
            "hyp": ["7", "5"],
            "attention": [[0.2, 0.2, 0.6], [0.5, 0.3, 0.2]],
        },
    ]


def run_events(
    steps: int = 40, eval_every: int = 20, done: str | None = "finished"
) -> list[dict[str, Any]]:
    """A plausible event log: start, steps every 5, evals with samples, checkpoints, done."""
    config = lab_config()
    from attnlab.config import to_dict

    events: list[dict[str, Any]] = [
        {
            "type": "start",
            "step": 0,
            "name": "tiny",
            "config": to_dict(config),
            "params": 4321,
            "device": "cpu",
            "resumed": False,
        }
    ]
    for step in range(5, steps + 1, 5):
        events.append(
            {
                "type": "step",
                "step": step,
                "loss": round(3.0 * 0.9 ** (step / 5), 4),
                "lr": 0.002,
                "tokens_per_s": 1000.0 + step,
                "tf_ratio": 1.0,
                "grad_norm": 1.0,
                "elapsed_s": step * 0.1,
                "tokens": step * 100,
            }
        )
        if step % eval_every == 0:
            k = step // eval_every
            events.append(
                {
                    "type": "eval",
                    "step": step,
                    "split": "dev",
                    "loss": round(2.0 / k, 4),
                    "ppl": 1.0,
                    "bleu": 30.0 * k,
                    "chrf": 35.0 * k,
                    "exact_match": 0.2 * k,
                    "alignment_accuracy": 0.5,
                    # falls as it learns (mean entropy of the one cross head)
                    "attention_entropy": {"cross": [[round(1.2 - 0.4 * k, 3)]]},
                    "bleu_by_length": [
                        {"bucket": "1-5", "n": 8, "bleu": 40.0 * k},
                        {"bucket": "6-10", "n": 8, "bleu": 20.0 * k},
                    ],
                    "best": True,
                    "elapsed_s": step * 0.1,
                }
            )
            events.extend(sample_events(step))
            events.append(
                {"type": "checkpoint", "step": step, "tag": "best", "path": "checkpoints/best"}
            )
    if done:
        events.append(
            {
                "type": "done",
                "step": steps,
                "reason": done,
                "best": {"bleu": 60.0},
                "elapsed_s": steps * 0.1,
            }
        )
    return events


def write_events(run_dir: Path, events: list[dict[str, Any]], partial: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
        for i, event in enumerate(events):
            handle.write(json.dumps({"time": T0 + i, **event}) + "\n")
        handle.write(partial)


def write_run(root: Path, name: str, events: list[dict[str, Any]] | None = None) -> Path:
    """A run directory with config.toml and events.jsonl (no checkpoints)."""
    run_dir = root / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dumps_toml(lab_config(name)), encoding="utf-8")
    write_events(run_dir, run_events() if events is None else events)
    return run_dir


async def ready(app: Any, pilot: Any) -> None:
    """Wait until the registries loaded and Setup's menus exist."""
    await asyncio.wait_for(app.menus_ready.wait(), 60)
    await pilot.pause()


async def until(pilot: Any, condition: Any, timeout: float = 30.0, step: float = 0.05) -> None:
    """Let the app run until ``condition()`` holds (event driven; no fixed sleeps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(step)


async def mounted(pilot: Any, app: Any, *selectors: str, timeout: float = 30.0) -> None:
    """Let the app run until every selector matches a widget. Setup rebuilds a variant's
    hyper-parameter inputs after its menu's Changed message, by an awaited remove and mount:
    one ``pilot.pause()`` is not enough on a loaded machine. Waits, too, until Setup is not
    rebuilding: it validates (publishes its config) right after a rebuild."""
    from attnlab.tui.views.setup import SetupView

    def done() -> bool:
        shown = all(app.query(s) for s in selectors)
        return shown and not any(view.rebuilding for view in app.query(SetupView))

    await until(pilot, done, timeout=timeout)


async def workers_idle(pilot: Any, timeout: float = 60.0) -> None:
    """Let the app run until no worker is pending or running. Unlike
    ``workers.wait_for_complete()`` a worker cancelled by a newer exclusive one (the lab's own
    start-up selection racing the test's on a loaded machine) is not an error: the newer one
    is waited for instead."""
    from textual.worker import WorkerState

    busy = (WorkerState.PENDING, WorkerState.RUNNING)
    await until(pilot, lambda: not any(w.state in busy for w in pilot.app.workers), timeout)
