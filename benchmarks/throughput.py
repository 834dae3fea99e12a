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
    python benchmarks/throughput.py --peak-only # the fraction of peak alone (~3 minutes)

After the comparison it prints how close training runs to this machine's limit (``--peak``,
on by default): for reverse-transformer and multi30k-transformer, the achieved model FLOP/s
of the training loop (``attnlab train``'s tokens/s x the mean model FLOPs per target token
over the training set, counted as in gpu_check.py) over the FLOP/s of a 2048 x 2048 float32
matmul on the same 2 threads, measured before and after in the same sitting (the better of
the two is the peak).
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


def run_joey(model: str, updates: int) -> dict[str, float]:
    out = subprocess.run(
        ["bash", str(BENCH / "run-joey.sh"), model, "reverse"],
        env={**ENV, "ANCHOR_UPDATES": str(updates)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        "train": result_field(out, "train_tok_per_s"),
        "greedy": result_field(out, "greedy_sent_per_s"),
        "beam5": result_field(out, "beam5_sent_per_s"),
    }


def run_naive(updates: int) -> dict[str, float]:
    """Training tok/s and the naive per-sentence greedy / beam-5 decoding.

    Decodes the 500 test sentences.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                str(VENV / "bin" / "python"),
                str(BENCH / "seed_naive.py"),
                "--data",
                "reverse",
                "--updates",
                str(updates),
                "--results",
                f"{tmp}/r.jsonl",
            ],
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return {
        "train": result_field(out, "train_tok_per_s"),
        "greedy": result_field(out, "greedy_sent_per_s"),
        "beam5": result_field(out, "beam5_sent_per_s"),
    }


DECODE_BATCH = 64  # sentences per batch; set by --decode-batch


def decode_speed(run_dir: Path) -> dict[str, float]:
    """Batched greedy / beam-5 (alpha 1, like the naive baseline) sent/s on the reverse test set."""
    import time

    import torch

    from attnlab.config import DecodeConfig
    from attnlab.data.batching import make_batch
    from attnlab.data.example import Example
    from attnlab.decode.search import decode_batch
    from attnlab.runs import load_checkpoint

    torch.set_num_threads(2)
    loaded = load_checkpoint(run_dir)
    lines = (DATA / "test.src").read_text().splitlines()
    examples = [Example(tuple(line.split()), ()) for line in lines]
    vocab_src, vocab_tgt = loaded.dataset.src_vocab, loaded.dataset.tgt_vocab
    size = DECODE_BATCH
    batches = [
        make_batch(examples[i : i + size], vocab_src, vocab_tgt)
        for i in range(0, len(examples), size)
    ]
    speeds = {}
    for name, cfg in (("greedy", DecodeConfig()), ("beam5", DecodeConfig(beam=5, alpha=1.0))):
        started = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                decode_batch(loaded.model, batch.src, batch.src_mask, cfg)
        speeds[name] = len(examples) / (time.perf_counter() - started)
    return speeds


ATTNLAB_SETS: list[str] = []  # extra --set overrides; set by --attnlab-set
PEAK_PRESETS = ("reverse-transformer", "multi30k-transformer")


def train_tokens_per_s(preset: str, steps: int, run_dir: Path, extra: list[str]) -> float:
    """``attnlab train --preset`` for ``steps`` steps on 2 threads: the training loop's
    target tokens/s from its ``done`` event (evaluation excluded)."""
    sets = [
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        "train.eval_sentences=20",
        "train.samples=0",
        "train.threads=2",
        *extra,
    ]
    subprocess.run(
        [sys.executable, "-m", "attnlab", "train", "--preset", preset, "--out", str(run_dir)]
        + ["--run-name", preset, "--quiet", "--device", "cpu"]
        + [arg for item in sets for arg in ("--set", item)],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    events = [json.loads(line) for line in (run_dir / preset / "events.jsonl").open()]
    return float(next(e for e in events if e["type"] == "done")["tokens_per_s"])


def fraction_of_peak(steps: int) -> list[dict[str, float | str]]:
    """Achieved model FLOP/s of each PEAK_PRESETS training loop over the float32 matmul rate."""
    import torch
    from flops import flops_per_target_token, matmul_flops_per_s

    from attnlab.data.dataset import load_dataset
    from attnlab.runs import load_checkpoint

    peak = matmul_flops_per_s()
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in PEAK_PRESETS:
            print(f"fraction of peak: training {preset} for {steps} steps", file=sys.stderr)
            tokens_per_s = train_tokens_per_s(preset, steps, Path(tmp), ATTNLAB_SETS)
            loaded = load_checkpoint(Path(tmp, preset))
            torch.set_num_threads(2)
            train = load_dataset(loaded.config.data).splits.train
            per_token = flops_per_target_token(loaded.model, train)
            rows.append(
                {"preset": preset, "tokens_per_s": tokens_per_s, "flops_per_token": per_token}
            )
    peak = max(peak, matmul_flops_per_s())  # the better of before and after
    for row in rows:
        achieved = float(row["tokens_per_s"]) * float(row["flops_per_token"])
        row.update(achieved_gflops=achieved / 1e9, peak_gflops=peak / 1e9, fraction=achieved / peak)
    return rows


def print_fraction_of_peak(rows: list[dict[str, float | str]]) -> None:
    print(
        "\nfraction of peak: model FLOP/s of the training loop / float32 matmul FLOP/s (2 threads)"
    )
    print("preset                  tok/s   MFLOP/token  achieved GFLOP/s  matmul GFLOP/s  fraction")
    for r in rows:
        print(
            f"{r['preset']:22s} {r['tokens_per_s']:7,.0f} "
            f"{float(r['flops_per_token']) / 1e6:12.2f} "
            f"{r['achieved_gflops']:17.1f} {r['peak_gflops']:15.1f} {float(r['fraction']):8.1%}"
        )


def run_attnlab(model: str, updates: int) -> dict[str, float]:
    """tokens/s of the training loop (from the run's ``done`` event) and decoding sent/s."""
    extra = [arg for item in ATTNLAB_SETS for arg in ("--set", item)]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "attnlab",
                "train",
                "--preset",
                ATTNLAB_PRESETS[model],
                "--out",
                tmp,
                "--run-name",
                "bench",
                "--quiet",
                "--device",
                "cpu",
                "--set",
                "data.task=corpus",
                "--set",
                f"data.path={DATA}",
                "--set",
                "data.src_lang=src",
                "--set",
                "data.tgt_lang=trg",
                "--set",
                f"train.max_steps={updates}",
                "--set",
                f"train.eval_every={updates}",
                "--set",
                "train.eval_sentences=50",
                "--set",
                "train.log_every=50",
                "--set",
                "train.threads=2",
                *extra,
            ],
            env=ENV,
            cwd=tmp,
            capture_output=True,
            text=True,
            check=True,
        )
        events = [
            json.loads(line) for line in Path(tmp, "bench", "events.jsonl").read_text().splitlines()
        ]
        done = next(e for e in events if e["type"] == "done")
        # target tokens / seconds of the training loop (evaluation excluded)
        return {"train": float(done["tokens_per_s"]), **decode_speed(Path(tmp, "bench"))}


def print_machine() -> None:
    """What the ratio may depend on, first: the CPU features torch uses and its threads."""
    import os

    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    print(
        f"machine: torch {torch.__version__}, CPU capability {capability}, "
        f"{torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs visible",
        flush=True,
    )


def round_ratios(ours: list[dict[str, float]], peer: list[dict[str, float]]) -> str:
    """Each round's attnlab/peer ratio per figure (the two ran back to back in that round):
    'train 2.31x (2.20-2.45), ...' -- the spread a single sitting's median hides."""
    parts = []
    for key in ("train", "greedy", "beam5"):
        ratios = [a[key] / b[key] for a, b in zip(ours, peer, strict=False) if b[key] > 0]
        if ratios:
            parts.append(
                f"{key} {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            )
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--models", default="rnn,transformer")
    parser.add_argument("--skip-peers", action="store_true", help="attnlab only")
    parser.add_argument(
        "--decode-batch",
        type=int,
        default=64,
        help="attnlab's sentences per decoding batch (JoeyNMT uses 64)",
    )
    parser.add_argument(
        "--attnlab-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra override for attnlab's runs, e.g. model.dropout=0.1 to match "
        "JoeyNMT's transformer config (the presets use dropout 0)",
    )
    parser.add_argument(
        "--peak",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print the fraction of peak for reverse-transformer and multi30k-transformer",
    )
    parser.add_argument("--peak-only", action="store_true", help="only the fraction of peak")
    parser.add_argument("--peak-steps", type=int, default=150, help="training steps per preset")
    args = parser.parse_args()
    if args.peak_only:
        ATTNLAB_SETS.extend(args.attnlab_set)
        print_fraction_of_peak(fraction_of_peak(args.peak_steps))
        return
    global DECODE_BATCH
    DECODE_BATCH = args.decode_batch
    ATTNLAB_SETS.extend(args.attnlab_set)
    if not (DATA / "train.src").exists():
        subprocess.run([sys.executable, str(BENCH / "make-toy.py")], check=True)
    have_joey = (VENV / "bin" / "python").exists() and not args.skip_peers
    if not have_joey and not args.skip_peers:
        print(f"no JoeyNMT venv at {VENV}: run bash {BENCH}/setup-joey.sh first", file=sys.stderr)
        sys.exit(2)

    print_machine()
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for model in args.models.split(","):
            systems = [("attnlab", lambda m=model: run_attnlab(m, args.updates))]
            if have_joey:
                systems.append(("joeynmt", lambda m=model: run_joey(m, args.updates)))
                if model == "rnn":
                    systems.append(("naive", lambda: run_naive(args.updates)))
            for name, fn in systems:
                figures = fn()
                results.setdefault((model, name), []).append(figures)
                shown = "  ".join(f"{k} {v:,.1f}" for k, v in figures.items())
                print(f"round {round_ + 1} {model:11s} {name:8s} {shown}", flush=True)

    print(
        "\nmedians: train = target tokens/s of the training loop; greedy / beam5 = test sentences/s"
    )
    print(
        "model        system    train tok/s  greedy sent/s  beam5 sent/s   "
        "attnlab's ratio (train, greedy, beam5)"
    )
    for model in args.models.split(","):
        ours = {
            k: statistics.median(r[k] for r in results[(model, "attnlab")])
            for k in ("train", "greedy", "beam5")
        }
        for (m, name), runs in results.items():
            if m != model:
                continue
            med = {k: statistics.median(r[k] for r in runs) for k in ("train", "greedy", "beam5")}
            ratio = "" if name == "attnlab" else ", ".join(f"{ours[k] / med[k]:.2f}x" for k in med)
            print(
                f"{model:12s} {name:8s} {med['train']:11,.0f} {med['greedy']:14,.1f} "
                f"{med['beam5']:13,.1f}   {ratio}"
            )
            if name != "attnlab":
                print(
                    f"{'':21s} per-round ratios, median (min-max): "
                    + round_ratios(results[(model, "attnlab")], runs)
                )
    if args.peak:
        print_fraction_of_peak(fraction_of_peak(args.peak_steps))


if __name__ == "__main__":
    main()
