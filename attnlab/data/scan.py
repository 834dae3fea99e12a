"""SCAN (Lake & Baroni 2018): ``IN: <command words> OUT: <action tokens>`` lines.

Detection, used by the corpus reader (attnlab.data.corpus):
- a file is SCAN when its name is ``tasks_*.txt`` (``.gz`` allowed) or its first non-empty line
  starts with ``IN:``; every non-empty line must then read ``IN: words OUT: actions``, else
  one error names the file and line (a typo never silently falls through to another format);
- a folder is SCAN when it holds exactly one ``tasks_train_*.txt`` (SCAN's own repository
  layout for a split); ``tasks_test_*.txt`` beside it is the test set, and ``tasks_dev_*.txt``
  the dev set when present. Missing splits are held out of train with ``data.seed``.
A single file is all pairs (dev and test held out of it); point at the folder to keep SCAN's
own test set.
"""

from __future__ import annotations

from pathlib import Path

from attnlab.errors import AttnlabError

FORMAT = "scan"
_SUFFIXES = (".txt", ".txt.gz")


def _named_like_scan(path: Path) -> bool:
    return path.name.startswith("tasks_") and path.name.endswith(_SUFFIXES)


def looks_like_scan_file(path: Path, lines: list[str]) -> bool:
    """SCAN by name (``tasks_*.txt``) or by content (the first non-empty line starts ``IN:``)."""
    if _named_like_scan(path):
        return True
    first = next((line for line in lines if line.strip()), "")
    return first.split(maxsplit=1)[:1] == ["IN:"]


def parse_scan_lines(path: Path, lines: list[str]) -> tuple[list[tuple[str, str]], int]:
    """(command, actions) pairs, whitespace-normalised, and the number of blank lines skipped."""
    pairs: list[tuple[str, str]] = []
    blank = 0
    for number, line in enumerate(lines, start=1):
        words = line.split()
        if not words:
            blank += 1
            continue
        problem = _problem(words)
        if problem:
            raise AttnlabError(
                f"{path}:{number}: {problem}; SCAN lines read 'IN: <command words> OUT: <actions>'"
                f", got {line.strip()!r:.80}"
            )
        out = words.index("OUT:")
        pairs.append((" ".join(words[1:out]), " ".join(words[out + 1 :])))
    return pairs, blank


def _problem(words: list[str]) -> str:
    if words[0] != "IN:":
        return "line does not start with 'IN:'"
    if words.count("OUT:") != 1:
        return "no 'OUT:'" if "OUT:" not in words else "more than one 'OUT:'"
    out = words.index("OUT:")
    if out == 1:
        return "no command words between 'IN:' and 'OUT:'"
    if out == len(words) - 1:
        return "no actions after 'OUT:'"
    if "IN:" in words[1:]:
        return "more than one 'IN:'"
    return ""


def scan_split_files(folder: Path) -> dict[str, Path | None] | None:
    """split -> file for a folder laid out as SCAN's repository lays out a split, else None."""

    def one(split: str) -> Path | None:
        found = sorted(p for s in _SUFFIXES for p in folder.glob(f"tasks_{split}_*{s}"))
        if len(found) > 1:
            raise AttnlabError(
                f"{folder}: more than one SCAN {split} file "
                f"({', '.join(p.name for p in found)}); keep one per folder or point "
                "data.path at a single file"
            )
        return found[0] if found else None

    train = one("train")
    if train is None:
        return None
    return {"train": train, "dev": one("dev"), "test": one("test")}
