"""Training throughput (target tokens/s) side by side with the peers in ../shared/bench.

Runs, in one sitting and interleaved round by round, on the same reverse data
(/tmp/anchor-data/reverse, written by ../shared/bench/make-toy.py) and the same model sizes:
- JoeyNMT 2.3.0 (``run-joey.sh rnn|transformer``, its own "Tokens per Sec"),
- the naive tutorial loop (``seed_naive.py``, RNN only),
- attnlab (``attnlab train`` with the reverse-bahdanau / reverse-transformer presets pointed
  at the same files; tokens/s of the training loop from its step events).
Each system trains ``--updates`` batches of 64 sentences with OMP_NUM_THREADS=2 and prints the
median tokens/s and the ratios. Machines here are noisy (~15 %); compare medians of a few rounds.

    bash ../shared/bench/setup-joey.sh          # once: JoeyNMT venv in /tmp/anchor-venv
    python benchmarks/throughput.py --rounds 3  # about 3 x 4 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "bench"
DATA = Path("/tmp/anchor-data/reverse")
VENV = Path(os.environ.get("ANCHOR_VENV", "/tmp/anchor-venv"))
ENV = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PYTHONHASHSEED": "0"}

ATTNLAB_PRESETS = {"rnn": "reverse-bahdanau", "transformer": "reverse-transformer"}


def result_field(output: str, name: str) -> float:
    match = re.search(rf"RESULT .*\b{name}=([0-9.]+)", output)
    if not match:
        raise RuntimeError(f"no {name} in output:\n{output[-2000:]}")
    return float(match.group(1))


def run_joey(model: str, updates: int) -> float:
    out = subprocess.run(
        ["bash", str(BENCH / "run-joey.sh"), model, "reverse"],
        env={**ENV, "ANCHOR_UPDATES": str(updates)},
        capture_output=True, text=True, check=True,
    ).stdout
    return result_field(out, "train_tok_per_s")


def run_naive(updates: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [str(VENV / "bin" / "python"), str(BENCH / "seed_naive.py"), "--data", "reverse",
             "--updates", str(updates), "--max-test", "50", "--results", f"{tmp}/r.jsonl"],
            env=ENV, capture_output=True, text=True, check=True,
        ).stdout
    return result_field(out, "train_tok_per_s")


def run_attnlab(model: str, updates: int) -> float:
    """tokens/s of the training loop, from the run's ``done`` event."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "attnlab", "train", "--preset", ATTNLAB_PRESETS[model],
             "--out", tmp, "--run-name", "bench", "--quiet", "--device", "cpu",
             "--set", "data.task=corpus", "--set", f"data.path={DATA}",
             "--set", "data.src_lang=src", "--set", "data.tgt_lang=trg",
             "--set", f"train.max_steps={updates}", "--set", f"train.eval_every={updates}",
             "--set", "train.eval_sentences=50", "--set", "train.log_every=50",
             "--set", "train.threads=2"],
            env=ENV, cwd=tmp, capture_output=True, text=True, check=True,
        )
        events = [json.loads(line) for line in Path(tmp, "bench", "events.jsonl").read_text().splitlines()]
    done = next(e for e in events if e["type"] == "done")
    return float(done["tokens_per_s"])  # target tokens / seconds of the training loop (no eval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--models", default="rnn,transformer")
    parser.add_argument("--skip-peers", action="store_true", help="attnlab only")
    args = parser.parse_args()
    if not (DATA / "train.src").exists():
        subprocess.run([sys.executable, str(BENCH / "make-toy.py")], check=True)
    have_joey = (VENV / "bin" / "python").exists() and not args.skip_peers
    if not have_joey and not args.skip_peers:
        print(f"no JoeyNMT venv at {VENV}: run bash {BENCH}/setup-joey.sh first", file=sys.stderr)
        sys.exit(2)

    results: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for model in args.models.split(","):
            systems = [("attnlab", lambda m=model: run_attnlab(m, args.updates))]
            if have_joey:
                systems.append(("joeynmt", lambda m=model: run_joey(m, args.updates)))
                if model == "rnn":
                    systems.append(("naive", lambda: run_naive(args.updates)))
            for name, fn in systems:
                tok_s = fn()
                results.setdefault((model, name), []).append(tok_s)
                print(f"round {round_ + 1} {model:11s} {name:8s} {tok_s:8.0f} trg tok/s", flush=True)

    print("\nmodel        system    median trg tok/s   vs attnlab")
    for model in args.models.split(","):
        ours = statistics.median(results[(model, "attnlab")])
        for (m, name), values in results.items():
            if m != model:
                continue
            med = statistics.median(values)
            ratio = f"attnlab {ours / med:.2f}x" if name != "attnlab" else ""
            print(f"{model:12s} {name:8s} {med:12.0f}       {ratio}")


if __name__ == "__main__":
    main()
