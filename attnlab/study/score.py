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
    from attnlab.evaluate import evaluate_split
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
    scored again, never trusted)."""
    from attnlab.runs import read_json

    path = score_path(run_dir)
    if not path.is_file():
        return None
    try:
        score = read_json(path)
    except AttnlabError:
        return None
    if not isinstance(score, dict) or score.get("version") != SCORE_VERSION:
        return None
    sentences = score.get("sentences")
    if not isinstance(sentences, dict):
        return None
    lists = [sentences.get(key) for key in ("hyps", "refs", "exact", "src_len")]
    if not all(isinstance(v, list) for v in lists) or len({len(v) for v in lists}) != 1:
        return None
    for key in ("exact_match", "bleu", "chrf"):
        value = score.get(key)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
    return score


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
