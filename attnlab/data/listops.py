"""ListOps as Long Range Arena generates it (Tay et al. 2020, ``lra_benchmarks/data/listops.py``).

An expression is a tree: above depth ``data.max_depth`` a node is, with probability 0.25, an
operator over 2 .. ``data.max_args`` sub-trees, otherwise a digit 0-9; at that depth it is a
digit. Operators: ``[MIN``, ``[MAX``, ``[MED``
(the median, truncated to an integer as LRA's ``int(np.median(…))``) and ``[SM`` (the sum
modulo 10); an operator's list ends with ``]``. LRA counts a tree's length as one per digit
and two per operator (its name and ``]``) and keeps a tree of ``min_length < length <
max_length`` tokens; here the bounds are ``data.min_len <= length <= data.max_len``. The
source is the flat token sequence (LRA's parentheses around each argument are layout of its
TSV files and carry no information). The target is the value,
one token.
"""

from __future__ import annotations

import random
import statistics

from attnlab.config import DataConfig
from attnlab.data.example import Splits
from attnlab.data.task_registry import TASKS, TaskSpec
from attnlab.data.toy import Draw, generate
from attnlab.errors import AttnlabError

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VALUE_P = 0.25  # LRA: a node is an operator when random() <= VALUE_P
_MAX_DRAWS = 100_000  # trees drawn for one example before the length bounds are called unmet


def draw_tree(rng: random.Random, depth: int, max_depth: int, max_args: int) -> list[str]:
    """LRA's ``generate_tree`` as a flat token list (its length is LRA's tree length)."""
    r = rng.random() if depth < max_depth else 1.0
    if r > VALUE_P:
        return [str(rng.choice(range(10)))]
    args = [draw_tree(rng, depth + 1, max_depth, max_args) for _ in range(rng.randint(2, max_args))]
    op = rng.choice(OPERATORS)
    return [op, *(token for arg in args for token in arg), END]


def apply_operator(op: str, args: list[int]) -> int:
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        return int(statistics.median(args))
    return sum(args) % 10


def evaluate(tokens: list[str] | tuple[str, ...]) -> int:
    """The value of a flat ListOps expression (a stack machine)."""
    stack: list[list] = []
    value = None
    for token in tokens:
        if token in OPERATORS:
            stack.append([token])
        elif token == END:
            op, *args = stack.pop()
            value = apply_operator(op, args)
            if stack:
                stack[-1].append(value)
        else:
            value = int(token)
            if stack:
                stack[-1].append(value)
    if value is None or stack:
        raise ValueError("not a complete ListOps expression")
    return value


def listops_task(cfg: DataConfig) -> Splits:
    def draw(rng: random.Random, low: int, high: int) -> Draw:
        for _ in range(_MAX_DRAWS):
            tokens = draw_tree(rng, 1, cfg.max_depth, cfg.max_args)
            if low <= len(tokens) <= high:
                return tuple(tokens), (str(evaluate(tokens)),), None
        raise AttnlabError(
            f"listops drew {_MAX_DRAWS} trees without one of {low}..{high} tokens "
            f"(data.max_depth={cfg.max_depth}, data.max_args={cfg.max_args}): "
            "widen data.min_len..data.max_len or raise data.max_depth / data.max_args"
        )

    return generate(cfg, "listops", draw)


def listops_alphabet(cfg: DataConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    digits = tuple(str(d) for d in range(10))
    return (*OPERATORS, END, *digits), digits


TASKS.add(
    "listops",
    listops_task,
    TaskSpec(
        "ListOps (Long Range Arena): the value of a nested MIN/MAX/MED/SM expression",
        False,
        "[MAX 2 9 [MIN 4 7 ] 0 ] -> 9",
        reads=(
            "data.min_len",
            "data.max_len",
            "data.train_size",
            "data.dev_size",
            "data.test_size",
            "data.test_min_len",
            "data.test_max_len",
            "data.max_depth",
            "data.max_args",
            "data.seed",
        ),
        alphabet=listops_alphabet,
    ),
)
