"""Score one run of a study: its chosen checkpoint on the study's split, as ``attnlab eval``
does, plus what the paired tests need (every hypothesis and reference, exact-match flags).

Written atomically to ``RUN/study-score.json``; ``python -m attnlab.study.score RUN --split
test --checkpoint best`` runs it in a child process (the study runner does, so a crash or the
memory of one model never reaches the runner).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError

SCORE_FILE = "study-score.json"
SCORE_VERSION = 1


def score_path(run_dir: Path) -> Path:
    return Path(run_dir) / SCORE_FILE


def split_scores(loaded: Any, split: str, device: Any) -> dict[str, Any]:
    """``attnlab eval``'s scores of a loaded model on ``split``, with every sentence kept
    (hypotheses, references, exact-match flags) for the paired tests."""
    from attnlab.evaluate import evaluate_split, with_training_cost
    from attnlab.nn.archs import normalisations_of
    from attnlab.runs import load_checkpoint_data

    result = evaluate_split(
        loaded.model,
        load_checkpoint_data(loaded),
        split,
        loaded.config.decode,
        device=device,
        normalisations=normalisations_of(loaded.config),
        keep_sentences=True,
    )
    result.pop("samples", None)
    with_training_cost(result["cost"], loaded.metrics)
    return result


def score_run(run_dir: Path, split: str, checkpoint: str, device: str = "cpu") -> dict[str, Any]:
    """Evaluate ``RUN/checkpoints/<checkpoint>`` (best falls back to last, as ``attnlab eval
    RUN`` does) on ``split`` and write the score file; returns what it wrote."""
    from attnlab.runs import (
        atomic_write_json,
        checkpoint_dir,
        jsonable,
        load_checkpoint,
    )

    run_dir = Path(run_dir)
    target = checkpoint_dir(run_dir, checkpoint)
    loaded = load_checkpoint(target if target.exists() else run_dir, device=device)
    result = split_scores(loaded, split, device)
    score = {
        "version": SCORE_VERSION,
        "run": run_dir.name,
        "checkpoint": str(loaded.path.relative_to(run_dir))
        if _inside(loaded.path, run_dir)
        else str(loaded.path),
        "step": loaded.step,
        **result,
    }
    atomic_write_json(score_path(run_dir), jsonable(score))
    return score


def _inside(path: Path, parent: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(parent).resolve())
    except ValueError:
        return False
    return True


def read_score(run_dir: Path) -> dict[str, Any] | None:
    """A run's score file when it is complete and well-formed, else None (a damaged file is
    scored again, never trusted; ``score_problem`` says why)."""
    return _checked(run_dir)[0]


def score_problem(run_dir: Path) -> str | None:
    """Why a run's score file that exists cannot be used (corrupt, NaN, a negative n...), or
    None when it is fine or absent."""
    return _checked(run_dir)[1]


def _checked(run_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    from attnlab.runs import read_json

    path = score_path(run_dir)
    if not path.is_file():
        return None, None
    try:
        score = read_json(path)
    except AttnlabError as err:
        return None, _reason(str(err), path)
    if not isinstance(score, dict):
        return None, "not a JSON object"
    if score.get("version") != SCORE_VERSION:
        return None, f"version {score.get('version')!r}, expected {SCORE_VERSION}"
    if "bits_per_token" in score:  # a language model's: its loss scores, no sentence pairs
        return _checked_lm(score)
    sentences = score.get("sentences")
    if not isinstance(sentences, dict):
        return None, "no sentences"
    lists = [sentences.get(key) for key in ("hyps", "refs", "exact", "src_len")]
    if not all(isinstance(v, list) for v in lists) or len({len(v) for v in lists}) != 1:
        return None, "the sentence lists are missing or of different lengths"
    for key in ("exact_match", "bleu", "chrf"):
        value = score.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None, f"{key} is {value!r}, not a number"
        if not math.isfinite(value):
            return None, f"{key} is {value}"
    n = score.get("n", len(lists[0]))
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return None, f"n is {n!r}, not a count"
    return score, None


def _checked_lm(score: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A language model's score (attnlab.evaluate.evaluate_lm): finite loss and bits per
    token, a perplexity that is a number (inf only past exp's range), windows counted."""
    for key in ("loss", "bits_per_token", "perplexity"):
        value = score.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None, f"{key} is {value!r}, not a number"
        if math.isnan(value) or (key != "perplexity" and not math.isfinite(value)):
            return None, f"{key} is {value}"
    n = score.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return None, f"n is {n!r}, not a count"
    return score, None


def _reason(message: str, path: Path) -> str:
    """read_json's one line without the path it starts with (the note names the file)."""
    return message.removeprefix(f"{path}: ").removeprefix(f"{path}:")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.study.score")
    parser.add_argument("run", type=Path)
    parser.add_argument("--split", default="test", choices=("dev", "test"))
    parser.add_argument("--checkpoint", default="best", choices=("best", "last"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    try:
        score_run(args.run, args.split, args.checkpoint, args.device)
    except AttnlabError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
