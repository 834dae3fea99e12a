"""Built-in toy tasks: copy, reverse, sort, addition and dates.

Every task is deterministic from ``data.seed``: each split draws from its own
``random.Random`` seeded with (seed, task, split), so changing ``dev_size`` never changes the
training set. Dev and test sources never occur in train (nor test in dev) as long as the
input space leaves room; when it does not (tiny vocabularies and lengths) overlap is allowed
after a bounded number of redraws and counted in ``Splits.stats["overlap"]``.

Symbols for copy / reverse / sort are the integers ``0 .. vocab_size-1`` written as tokens
("5 9 2 7"), as in JoeyNMT's reverse task. Length generalisation: the test split draws its
lengths from ``[test_min_len, test_max_len]`` (0 = the training range); train and dev always
use ``[min_len, max_len]``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import random
from collections.abc import Callable

from attnlab.config import DataConfig
from attnlab.data.example import Example, Splits
from attnlab.data.task_registry import TASKS, TaskSpec
from attnlab.errors import AttnlabError

# A draw returns (source tokens, target tokens, gold alignment or None).
Draw = tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...] | None]
Drawer = Callable[[random.Random, int, int], Draw]

# How many redraws per example before accepting an overlapping source.
_MAX_TRIES = 50


def _split_rng(cfg: DataConfig, task: str, split: str) -> random.Random:
    # A string seed is hashed (sha512) by random.Random: stable across runs and platforms.
    return random.Random(f"attnlab/{task}/{split}/{cfg.seed}")


def _test_range(cfg: DataConfig) -> tuple[int, int]:
    low = cfg.test_min_len or cfg.min_len
    high = cfg.test_max_len or cfg.max_len
    if low > high:
        raise AttnlabError(
            f"data.test_min_len={low} is greater than data.test_max_len={high} "
            "(0 means the training range)"
        )
    return low, high


def _make_example(
    src: tuple[str, ...], tgt: tuple[str, ...], alignment: tuple[int, ...] | None
) -> Example:
    return Example(src, tgt, " ".join(src), " ".join(tgt), alignment)


def generate(cfg: DataConfig, task: str, draw: Drawer) -> Splits:
    """Draw train, then dev and test avoiding sources already used by earlier splits."""
    if cfg.min_len > cfg.max_len:
        raise AttnlabError(f"data.min_len={cfg.min_len} is greater than data.max_len={cfg.max_len}")
    ranges = {
        "train": (cfg.min_len, cfg.max_len),
        "dev": (cfg.min_len, cfg.max_len),
        "test": _test_range(cfg),
    }
    sizes = {"train": cfg.train_size, "dev": cfg.dev_size, "test": cfg.test_size}
    seen: set[tuple[str, ...]] = set()
    out: dict[str, list[Example]] = {}
    overlap = 0
    for split in ("train", "dev", "test"):
        rng = _split_rng(cfg, task, split)
        low, high = ranges[split]
        examples: list[Example] = []
        used_here: set[tuple[str, ...]] = set()
        for _ in range(sizes[split]):
            for _attempt in range(_MAX_TRIES):
                src, tgt, alignment = draw(rng, low, high)
                if split == "train" or src not in seen:
                    break
            else:
                overlap += 1  # the space is too small to keep the splits apart
            examples.append(_make_example(src, tgt, alignment))
            used_here.add(src)
        seen |= used_here
        out[split] = examples
    stats: dict[str, object] = {"task": task, "overlap": overlap}
    return Splits(out["train"], out["dev"], out["test"], stats)


# --- copy / reverse / sort ---------------------------------------------------------------


def _symbols(cfg: DataConfig) -> list[str]:
    return [str(i) for i in range(cfg.vocab_size)]


def _random_sequence(
    rng: random.Random, symbols: list[str], low: int, high: int
) -> tuple[str, ...]:
    return tuple(rng.choice(symbols) for _ in range(rng.randint(low, high)))


def copy_task(cfg: DataConfig) -> Splits:
    symbols = _symbols(cfg)

    def draw(rng: random.Random, low: int, high: int) -> Draw:
        src = _random_sequence(rng, symbols, low, high)
        return src, src, tuple(range(len(src)))

    return generate(cfg, "copy", draw)


def reverse_task(cfg: DataConfig) -> Splits:
    symbols = _symbols(cfg)

    def draw(rng: random.Random, low: int, high: int) -> Draw:
        src = _random_sequence(rng, symbols, low, high)
        n = len(src)
        return src, src[::-1], tuple(n - 1 - t for t in range(n))

    return generate(cfg, "reverse", draw)


def sort_alignment(src: tuple[str, ...]) -> tuple[int, ...]:
    """Source index of each sorted target token, sorting symbols by their integer value.

    Duplicates: a stable sort, so equal symbols keep their left-to-right source order
    (the first "4" in the target points at the first "4" in the source).
    """
    return tuple(sorted(range(len(src)), key=lambda i: int(src[i])))


def sort_task(cfg: DataConfig) -> Splits:
    symbols = _symbols(cfg)

    def draw(rng: random.Random, low: int, high: int) -> Draw:
        src = _random_sequence(rng, symbols, low, high)
        alignment = sort_alignment(src)
        return src, tuple(src[i] for i in alignment), alignment

    return generate(cfg, "sort", draw)


# --- addition ----------------------------------------------------------------------------


def _random_number(rng: random.Random, low: int, high: int) -> int:
    """A number with a uniformly drawn count of digits in [low, high] (no leading zeros)."""
    digits = rng.randint(low, high)
    if digits == 1:
        return rng.randint(0, 9)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def addition_task(cfg: DataConfig) -> Splits:
    """``4 7 + 1 5 -> 6 2``: each operand has min_len..max_len decimal digits, one token each."""

    def draw(rng: random.Random, low: int, high: int) -> Draw:
        a, b = _random_number(rng, low, high), _random_number(rng, low, high)
        src = (*str(a), "+", *str(b))
        return tuple(src), tuple(str(a + b)), None

    return generate(cfg, "addition", draw)


# --- dates -------------------------------------------------------------------------------

MONTHS = [calendar.month_name[m].lower() for m in range(1, 13)]
MONTHS_ABBR = [calendar.month_abbr[m].lower() for m in range(1, 13)]
WEEKDAYS = [calendar.day_name[d].lower() for d in range(7)]
# Two-digit years follow the POSIX strptime pivot: 69-99 -> 19xx, 00-68 -> 20xx.
FIRST_DAY = dt.date(1969, 1, 1)
LAST_DAY = dt.date(2068, 12, 31)


def _digits(number: int, width: int = 0) -> list[str]:
    return list(str(number).zfill(width))


def _ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


# Surface formats: numbers are split into digits, so the vocabulary stays small and closed;
# two numbers are never adjacent (their digits would run together).
DATE_FORMATS: dict[str, Callable[[dt.date], list[str]]] = {
    "march 5 , 2019": lambda d: [MONTHS[d.month - 1], *_digits(d.day), ",", *_digits(d.year)],
    "5 march 2019": lambda d: [*_digits(d.day), MONTHS[d.month - 1], *_digits(d.year)],
    "05/03/2019": lambda d: [*_digits(d.day, 2), "/", *_digits(d.month, 2), "/", *_digits(d.year)],
    "5 mar 19": lambda d: [*_digits(d.day), MONTHS_ABBR[d.month - 1], *_digits(d.year % 100, 2)],
    "mar 5th 2019": lambda d: [
        MONTHS_ABBR[d.month - 1],
        *_digits(d.day),
        _ordinal(d.day),
        *_digits(d.year),
    ],
    "5.3.2019": lambda d: [*_digits(d.day), ".", *_digits(d.month), ".", *_digits(d.year)],
    "tuesday , march 5th , 2019": lambda d: [
        WEEKDAYS[d.weekday()],
        ",",
        MONTHS[d.month - 1],
        *_digits(d.day),
        _ordinal(d.day),
        ",",
        *_digits(d.year),
    ],
}


def iso_tokens(day: dt.date) -> tuple[str, ...]:
    """``2019-03-05`` as tokens: ``2 0 1 9 - 0 3 - 0 5``."""
    return tuple(day.isoformat())  # one token per character


def dates_task(cfg: DataConfig) -> Splits:
    """A date in one of several surface formats -> the ISO date; lengths do not apply."""
    span = (LAST_DAY - FIRST_DAY).days
    formats = list(DATE_FORMATS.values())

    def draw(rng: random.Random, low: int, high: int) -> Draw:
        day = FIRST_DAY + dt.timedelta(days=rng.randint(0, span))
        src = tuple(rng.choice(formats)(day))
        return src, iso_tokens(day), None

    return generate(cfg, "dates", draw)


# --- alphabets: each task's vocabulary, from its definition (see TaskSpec.alphabet) ---------

DIGITS = tuple("0123456789")


def symbols_alphabet(cfg: DataConfig) -> tuple[list[str], list[str]]:
    return _symbols(cfg), _symbols(cfg)


def addition_alphabet(cfg: DataConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return (*DIGITS, "+"), DIGITS


def dates_alphabet(cfg: DataConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Every token any DATE_FORMATS entry writes ("may" is a month and its abbreviation).
    words = (*MONTHS, *MONTHS_ABBR, *WEEKDAYS, "st", "nd", "rd", "th", ",", "/", ".")
    return (*DIGITS, *words), (*DIGITS, "-")


TASKS.add(
    "copy",
    copy_task,
    TaskSpec("copy the source symbols", True, "5 9 2 7 -> 5 9 2 7", alphabet=symbols_alphabet),
)
TASKS.add(
    "reverse",
    reverse_task,
    TaskSpec("reverse the source symbols", True, "5 9 2 7 -> 7 2 9 5", alphabet=symbols_alphabet),
)
TASKS.add(
    "sort",
    sort_task,
    TaskSpec(
        "sort the symbols by value (stable)", True, "5 9 2 7 -> 2 5 7 9", alphabet=symbols_alphabet
    ),
)
TASKS.add(
    "addition",
    addition_task,
    TaskSpec(
        "add two decimal numbers digit by digit",
        False,
        "4 7 + 1 5 -> 6 2",
        alphabet=addition_alphabet,
    ),
)
TASKS.add(
    "dates",
    dates_task,
    TaskSpec(
        "normalise dates in several formats to ISO",
        False,
        "march 5 , 2 0 1 9 -> 2 0 1 9 - 0 3 - 0 5",
        alphabet=dates_alphabet,
    ),
)
