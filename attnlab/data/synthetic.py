"""Tasks where attention variants differ: associative recall, selective copying, induction.

Each draws whole splits at once with numpy (a split is an integer matrix, one row per
example), deterministic from ``data.seed``: every split has its own generator seeded with
(task, split, seed). Dev and test rows that repeat a source of an earlier split are redrawn
(a bounded number of times; what still repeats is counted in ``Splits.stats["overlap"]``).

Symbols are the integers ``0 .. vocab_size-1`` written as tokens, as the other toy tasks.
The source length is ``data.max_len`` (``data.test_max_len`` for test, when set).

- ``mqar``: Zoology's multi-query associative recall (Arora et al. 2023,
  ``zoology/data/multiquery_ar.py``): ``data.kv_pairs`` distinct keys from ``1 .. V/2-1``
  bound to distinct values from ``V/2 .. V-1``, the context ``k1 v1 … kN vN``, then a query
  region of the remaining length, filler ``0``, in which each key appears once at an even
  offset ``2g``; the gaps g are drawn without replacement with probability proportional to
  ``a·(g+1)^(a-1)`` (``data.power_a``; Zoology's power law, ``random_non_queries=False``).
  The target: the queried keys' values in query order.
- ``selective-copy``: Mamba's selective copying (Gu & Dao 2023): ``data.copy_tokens`` data
  tokens from ``1 .. V-1`` at random positions among the noise token ``0``; the target is
  the data tokens in order.
- ``induction``: Mamba's induction heads in sequence-to-sequence form: random tokens from
  ``2 .. V-1``; the special token ``1`` occurs once, followed by a token X, and again as the
  source's last token; the target is X.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from attnlab.config import DataConfig
from attnlab.data.arrays import ArrayExamples, ragged
from attnlab.data.example import Example, Splits
from attnlab.data.task_registry import TASKS, TaskSpec
from attnlab.errors import AttnlabError

# (generator, rows, length) -> (source [rows, length], target [rows, n], alignment [rows, n])
Drawer = Callable[[np.random.Generator, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]

_MAX_REDRAWS = 50
SYNTHETIC_FIELDS = (
    "data.max_len",
    "data.train_size",
    "data.dev_size",
    "data.test_size",
    "data.vocab_size",
    "data.test_max_len",
    "data.seed",
)


def split_generator(task: str, split: str, seed: int) -> np.random.Generator:
    digest = hashlib.sha256(f"attnlab/{task}/{split}/{seed}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _examples(src: np.ndarray, tgt: np.ndarray, alignment: np.ndarray) -> ArrayExamples:
    """The split's matrices as examples built when read (attnlab.data.arrays)."""
    symbols = [str(i) for i in range(int(max(src.max(), tgt.max())) + 1)]
    return ArrayExamples(symbols, ragged(src), ragged(tgt), ragged(alignment))


def row_bytes(matrix: np.ndarray) -> list[bytes]:
    """Each row's bytes (one C loop over a void view, not a tobytes call per row)."""
    matrix = np.ascontiguousarray(matrix)
    width = matrix.shape[1] * matrix.itemsize
    return (
        matrix.view(np.dtype((np.void, width))).ravel().tolist() if width else [b""] * len(matrix)
    )


def id_matrix(rows: int, length: int, vocab_size: int) -> np.ndarray:
    """A zero (filler) matrix of the smallest integer type that holds the task's ids."""
    return np.zeros((rows, length), dtype=np.min_scalar_type(max(vocab_size - 1, 0)))


def scatter_rows(matrix: np.ndarray, columns: np.ndarray, values: np.ndarray) -> None:
    """matrix[r, columns[r, j]] = values[r, j] for every row r (put_along_axis, through one
    flat index: put_along_axis's broadcast indices cost more than the draw)."""
    rows, width = matrix.shape
    flat = (np.arange(rows, dtype=np.int64) * width)[:, None] + columns
    matrix.reshape(-1)[flat.ravel()] = values.ravel()


def generate_splits(cfg: DataConfig, task: str, draw: Drawer) -> Splits:
    """Train, dev and test drawn by ``draw``; later splits avoid earlier splits' sources."""
    lengths = {"train": cfg.max_len, "dev": cfg.max_len, "test": cfg.test_max_len or cfg.max_len}
    sizes = {"train": cfg.train_size, "dev": cfg.dev_size, "test": cfg.test_size}
    seen: set[bytes] = set()
    out: dict[str, Sequence[Example]] = {}
    overlap = 0
    for split in ("train", "dev", "test"):
        rng = split_generator(task, split, cfg.seed)
        src, tgt, alignment = draw(rng, sizes[split], lengths[split])
        if split != "train" and len(src):
            for _ in range(_MAX_REDRAWS):
                repeated = np.array([row in seen for row in row_bytes(src)], dtype=bool)
                if not repeated.any():
                    break
                again = draw(rng, int(repeated.sum()), lengths[split])
                src[repeated], tgt[repeated], alignment[repeated] = again
            else:
                overlap += int(repeated.sum())  # the space is too small to keep splits apart
        seen.update(row_bytes(src))
        out[split] = _examples(src, tgt, alignment) if len(src) else []
    return Splits(out["train"], out["dev"], out["test"], {"task": task, "overlap": overlap})


TOP_K_CHUNK_CELLS = 1 << 20  # keys drawn per chunk of rows: cache-sized, not 51M at once


def top_k_without_replacement(
    rng: np.random.Generator, weights: np.ndarray, rows: int, k: int
) -> np.ndarray:
    """[rows, k] indices drawn without replacement, each row in draw order, with probability
    proportional to ``weights`` (the Gumbel-top-k trick: the same law as drawing one at a time
    and renormalising, as ``numpy.random.choice(replace=False, p=…)`` does).

    Drawn a chunk of rows at a time, in place: the generator fills the keys element by
    element in row order, so the chunks draw the very keys one [rows, n] call would."""
    n = weights.size
    log_weights = np.log(weights)
    out = np.empty((rows, k), dtype=np.int64)
    step = max(1, TOP_K_CHUNK_CELLS // max(n, 1))
    for start in range(0, rows, step):
        keys = rng.gumbel(size=(min(step, rows - start), n))
        keys += log_weights
        np.negative(keys, out=keys)  # the k largest keys are the k smallest negated
        top = np.argpartition(keys, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(keys, top, axis=1), axis=1)
        out[start : start + len(keys)] = np.take_along_axis(top, order, axis=1)
    return out


def power_law_weights(space: int, a: float) -> np.ndarray:
    """Zoology's query-gap law over g = 0 .. space-1: p(g) ∝ a·(g+1)^(a-1)."""
    weights = a * np.arange(1, space + 1, dtype=np.float64) ** (a - 1)
    return weights / weights.sum()


# --- mqar ----------------------------------------------------------------------------------


def check_mqar(cfg: DataConfig, length: int) -> None:
    keys = cfg.vocab_size // 2 - 1
    values = cfg.vocab_size - cfg.vocab_size // 2
    if cfg.kv_pairs > min(keys, values):
        raise AttnlabError(
            f"data.kv_pairs={cfg.kv_pairs} needs {cfg.kv_pairs} distinct keys and values: "
            f"data.vocab_size={cfg.vocab_size} has {keys} keys (1..{cfg.vocab_size // 2 - 1}) "
            f"and {values} values; raise data.vocab_size to at least {2 * cfg.kv_pairs + 2}"
        )
    if length < 4 * cfg.kv_pairs:
        raise AttnlabError(
            f"mqar with data.kv_pairs={cfg.kv_pairs} needs a sequence of at least "
            f"{4 * cfg.kv_pairs} tokens (the context and one query slot per key); "
            f"data.max_len/test_max_len is {length}"
        )


def mqar_task(cfg: DataConfig) -> Splits:
    n, half = cfg.kv_pairs, cfg.vocab_size // 2

    def draw(rng: np.random.Generator, rows: int, length: int):
        check_mqar(cfg, length)
        keys = 1 + top_k_without_replacement(rng, np.ones(half - 1), rows, n)  # [rows, n]
        values = half + top_k_without_replacement(rng, np.ones(cfg.vocab_size - half), rows, n)
        src = id_matrix(rows, length, cfg.vocab_size)  # filler 0 in the query region
        src[:, 0 : 2 * n : 2], src[:, 1 : 2 * n : 2] = keys, values  # the context
        space = (length - 2 * n) // 2
        gaps = top_k_without_replacement(rng, power_law_weights(space, cfg.power_a), rows, n)
        scatter_rows(src, 2 * n + 2 * gaps, keys)
        order = np.argsort(gaps, axis=1)  # the queries in the order they appear
        target = np.take_along_axis(values, order, axis=1)
        alignment = 2 * order + 1  # each answer's value in the context
        return src, target, alignment

    return generate_splits(cfg, "mqar", draw)


# --- selective copying ---------------------------------------------------------------------


def selective_copy_task(cfg: DataConfig) -> Splits:
    k = cfg.copy_tokens

    def draw(rng: np.random.Generator, rows: int, length: int):
        if k > length:
            raise AttnlabError(
                f"data.copy_tokens={k} does not fit a source of data.max_len={length} tokens"
            )
        if cfg.vocab_size < 2:
            raise AttnlabError("selective-copy needs data.vocab_size >= 2 (noise 0 + data)")
        positions = np.sort(top_k_without_replacement(rng, np.ones(length), rows, k), axis=1)
        tokens = rng.integers(1, cfg.vocab_size, size=(rows, k))
        src = id_matrix(rows, length, cfg.vocab_size)
        scatter_rows(src, positions, tokens)
        return src, tokens.astype(np.int64), positions

    return generate_splits(cfg, "selective-copy", draw)


# --- induction heads -----------------------------------------------------------------------

INDUCTION_SPECIAL = 1


def induction_task(cfg: DataConfig) -> Splits:
    def draw(rng: np.random.Generator, rows: int, length: int):
        if length < 4 or cfg.vocab_size < 3:
            raise AttnlabError(
                "induction needs data.max_len >= 4 and data.vocab_size >= 3 "
                f"(got {length} and {cfg.vocab_size})"
            )
        src = rng.integers(2, cfg.vocab_size, size=(rows, length))
        where = rng.integers(0, length - 2, size=rows)  # the special token, X after it
        src[np.arange(rows), where] = INDUCTION_SPECIAL
        src[:, -1] = INDUCTION_SPECIAL
        target = src[np.arange(rows), where + 1][:, None]
        return src, target, (where + 1)[:, None]

    return generate_splits(cfg, "induction", draw)


# --- alphabets (TaskSpec.alphabet): what each task can write, from its definition ----------


def _range(low: int, high: int) -> list[str]:
    return [str(i) for i in range(low, high)]


def mqar_alphabet(cfg: DataConfig) -> tuple[list[str], list[str]]:
    return _range(0, cfg.vocab_size), _range(cfg.vocab_size // 2, cfg.vocab_size)  # values


def selective_copy_alphabet(cfg: DataConfig) -> tuple[list[str], list[str]]:
    return _range(0, cfg.vocab_size), _range(1, cfg.vocab_size)  # noise 0 is never copied


def induction_alphabet(cfg: DataConfig) -> tuple[list[str], list[str]]:
    return _range(1, cfg.vocab_size), _range(2, cfg.vocab_size)  # X is never the special 1


TASKS.add(
    "mqar",
    mqar_task,
    TaskSpec(
        "multi-query associative recall (Zoology): the value of each queried key",
        True,
        "1 130 7 141 7 0 1 0 -> 141 130",
        reads=(*SYNTHETIC_FIELDS, "data.kv_pairs", "data.power_a"),
        alphabet=mqar_alphabet,
    ),
)
TASKS.add(
    "selective-copy",
    selective_copy_task,
    TaskSpec(
        "selective copying (Mamba): the data tokens among noise, in order",
        True,
        "0 5 0 0 9 0 2 0 -> 5 9 2",
        reads=(*SYNTHETIC_FIELDS, "data.copy_tokens"),
        alphabet=selective_copy_alphabet,
    ),
)
TASKS.add(
    "induction",
    induction_task,
    TaskSpec(
        "induction heads (Mamba): the token that followed the special token",
        True,
        "4 1 7 9 5 1 -> 7",
        reads=SYNTHETIC_FIELDS,
        alphabet=induction_alphabet,
    ),
)
