"""Fault injection: ``kill -9`` a tiny training run (it saves ``last`` after every step) at
random moments and inside checkpoint saves, then check what it left and resume it.

    OMP_NUM_THREADS=1 python benchmarks/fault_injection.py [--n 12] [--seed 0] [--quick]

Kinds of kill:

* random: at a uniformly random moment of training (after the ``start`` event);
* timed: inside a checkpoint save. ``ATTNLAB_FAULT_SAVE_DELAY`` makes the trainer sleep after
  each file of a save and between its renames, so a kill at a random moment of that window
  lands inside it (the table says how many did).

For each kill: loadable = ``checkpoints/last`` (or what a reader falls back to) loads, every
file at one step (or no checkpoint existed yet); same losses = after ``train --resume`` every
``step`` event of the run (before and after the kill) has the loss of an uninterrupted
reference run at that step, up to the last step (a run killed before its first checkpoint is
resumed too: it starts over); temporaries = scratch directories / ``.tmp``
files the kill left, and how many were still there after the resume (goal 0). Goal: 100 % on
loadable, same losses and clean after resume.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TINY = (
    "data.train_size=64",
    "data.dev_size=8",
    "data.test_size=8",
    "data.max_len=8",
    "model.hidden=16",
    "model.emb=8",
    "train.batch_size=16",
    "train.eval_every=1",
    "train.log_every=1",
    "train.samples=1",
    "train.eval_sentences=8",
    "train.threads=1",
)


def _events(run_dir: Path) -> list[dict[str, Any]]:
    """Every well-formed event (a kill can leave half a line, which the resume appends to)."""
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    events = []
    for line in path.read_bytes().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _losses(events: list[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(int(e["step"]), float(e["loss"])) for e in events if e.get("type") == "step"]


def _train(
    work: Path,
    name: str,
    steps: int,
    seed: int,
    env: dict[str, str] | None = None,
    resume: bool = False,
) -> subprocess.Popen:
    args = [sys.executable, "-m", "attnlab", "train", "--quiet", "--device", "cpu"]
    if resume:
        args += ["--resume", str(work / name)]
    else:
        args += ["--out", str(work), "--run-name", name, "--seed", str(seed)]
        args += [x for item in (*TINY, f"train.max_steps={steps}") for x in ("--set", item)]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=environ)


def _scratch(run_dir: Path) -> list[str]:
    """Temporaries: checkpoint scratch directories and ``.tmp`` files anywhere in the run."""
    found = [p.name for p in (run_dir / "checkpoints").glob(".*") if p.is_dir()]
    found += [str(p.relative_to(run_dir)) for p in run_dir.rglob("*.tmp")]
    return found


def _wait_for(predicate, timeout: float = 120.0, poll: float = 0.005) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll)
    return False


def _loadable(run_dir: Path) -> bool | None:
    """True/False: last loads with one step in every file; None: no checkpoint was saved yet."""
    from attnlab.errors import AttnlabError
    from attnlab.runs import checkpoint_dir, load_checkpoint, read_trainer_state, resolve_or_none

    if resolve_or_none(checkpoint_dir(run_dir, "last")) is None:
        return None
    try:
        weights, state, _ = read_trainer_state(run_dir)
        loaded = load_checkpoint(run_dir / "checkpoints" / "last")
    except AttnlabError as err:
        print(f"  not loadable: {err}", file=sys.stderr)
        return False
    return loaded.step == int(state["step"])


def one_kill(
    work: Path, name: str, kind: str, rng: random.Random, args, reference
) -> dict[str, Any]:
    run_dir = work / name
    env = {"ATTNLAB_FAULT_SAVE_DELAY": str(args.delay)} if kind == "timed" else {}
    proc = _train(work, name, args.steps, args.seed, env)
    started = _wait_for(lambda: any(e.get("type") == "start" for e in _events(run_dir)))
    root = run_dir / "checkpoints"

    def saving() -> bool:  # a save's scratch directory exists: the trainer is inside a save
        return root.exists() and any(p.name.startswith(".last.") for p in root.glob(".*"))

    if kind == "random":
        time.sleep(rng.uniform(0.0, reference["train_s"]) if started else 0.0)
    else:
        skip = rng.randrange(0, max(args.steps - 2, 1))  # which save to hit
        for index in range(skip + 1):
            _wait_for(lambda: saving() or proc.poll() is not None)
            if index < skip:
                _wait_for(lambda: not saving() or proc.poll() is not None)
        time.sleep(rng.uniform(0.0, 5 * args.delay))  # 4 files + 1 rename gap, each delayed
    inside = saving()
    finished_first = proc.poll() is not None
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = _scratch(run_dir)
    loadable = _loadable(run_dir)
    # No checkpoint yet (loadable None): --resume starts the run over; a broken one: no resume.
    resumed = (
        _train(work, name, args.steps, args.seed, resume=True) if loadable is not False else None
    )
    resume_rc = None
    if resumed is not None:
        _, err = resumed.communicate(timeout=600)
        resume_rc = resumed.returncode
        if resume_rc:
            print(f"  resume failed ({resume_rc}): {err.decode()[-500:]}", file=sys.stderr)
    losses = _losses(_events(run_dir))
    same = (
        resume_rc == 0
        and bool(losses)
        and losses[-1][0] == args.steps
        and all(reference["losses"].get(step) == loss for step, loss in losses)
    )
    return {
        "kind": kind,
        "finished_first": finished_first,
        "inside_save": inside,
        "loadable": loadable,
        "same_losses": same,
        "left_temporaries": bool(left),
        "clean_after_resume": not _scratch(run_dir),
        "temporaries": left,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "n": len(rows),
        "inside_save": sum(r["inside_save"] for r in rows),
        "no_checkpoint_yet": sum(r["loadable"] is None for r in rows),
        "loadable": sum(r["loadable"] is True for r in rows),
        "same_losses": sum(r["same_losses"] for r in rows),
        "left_temporaries": sum(r["left_temporaries"] for r in rows),
        "clean_after_resume": sum(r["clean_after_resume"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=12, help="kills of each kind")
    parser.add_argument("--random", type=int, default=None, help="random kills (default --n)")
    parser.add_argument("--timed", type=int, default=None, help="kills inside a save (default --n)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 kills of each kind")
    parser.add_argument("--steps", type=int, default=10, help="training steps of each run")
    parser.add_argument("--delay", type=float, default=0.1, help="ATTNLAB_FAULT_SAVE_DELAY (s)")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: temp)")
    parser.add_argument(
        "--json", action="store_true", help="also print the figures as one JSON line"
    )
    args = parser.parse_args()
    n = 3 if args.quick else args.n
    counts = {
        "random": n if args.random is None else args.random,
        "timed": n if args.timed is None else args.timed,
    }
    work = args.work or Path(tempfile.mkdtemp(prefix="attnlab-faults-"))
    rng = random.Random(args.seed)

    began = time.perf_counter()
    ref = _train(work, "reference", args.steps, args.seed)
    _, err = ref.communicate(timeout=600)
    if ref.returncode:
        sys.exit(f"reference run failed: {err.decode()[-1000:]}")
    events = _events(work / "reference")
    times = [e["time"] for e in events if e.get("type") in ("start", "done")]
    reference = {"losses": dict(_losses(events)), "train_s": times[-1] - times[0]}
    print(
        f"reference: {args.steps} steps in {reference['train_s']:.1f} s of training "
        f"({time.perf_counter() - began:.1f} s with start-up); runs in {work}",
        file=sys.stderr,
    )

    figures: dict[str, Any] = {}
    for kind, count in counts.items():
        rows = []
        for i in range(count):
            rows.append(one_kill(work, f"{kind}-{i}", kind, rng, args, reference))
            print(
                f"  {kind} {i}: {json.dumps({k: v for k, v in rows[-1].items() if k != 'kind'})}",
                file=sys.stderr,
            )
        figures[kind] = summarise(rows)

    header = (
        "kill -9",
        "n",
        "inside a save",
        "no ckpt yet",
        "loadable",
        "same losses",
        "left temporaries",
        "clean after resume",
    )
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for kind, f in figures.items():
        print(
            " | ".join(
                str(x)
                for x in (
                    "random moment" if kind == "random" else "inside a save",
                    f["n"],
                    f["inside_save"],
                    f["no_checkpoint_yet"],
                    f"{f['loadable']}/{f['n'] - f['no_checkpoint_yet']}",
                    f"{f['same_losses']}/{f['n']}",
                    f["left_temporaries"],
                    f"{f['clean_after_resume']}/{f['n']}",
                )
            )
        )
    print(
        f"({time.perf_counter() - began:.0f} s; --seed {args.seed}, {args.steps} steps, "
        f"save delay {args.delay} s)"
    )
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
