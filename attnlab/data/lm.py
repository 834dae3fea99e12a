"""Language modelling on one plain text file: ``data.task = "lm"`` (nanoGPT's data path).

- **Reading**: ``data.path`` is one UTF-8 text file (at most ``LM_MAX_BYTES``), found the way
  corpus paths are (``attnlab.data.corpus.resolve_path``). An empty file, a binary one (a NUL
  byte, invalid UTF-8) and one too short for a window of each split are refused in one line.
- **Split** (nanoGPT's ``prepare.py``): the text's first ``int(n * (1 - data.dev_fraction))``
  characters are train, the rest dev (set ``data.dev_fraction = 0.1`` for nanoGPT's 90/10;
  the LM presets do); each part is tokenised on its own. Test is the dev split.
- **Tokens**: ``data.tokenizer``: ``char`` (nanoGPT's ``shakespeare_char``: the vocabulary is
  the sorted set of the file's characters, after the four specials) or ``whitespace``,
  ``word``, ``bpe``, ``unigram`` (subword models trained on the train split; the vocabulary
  is the train split's tokens). One vocabulary serves both sides. Ids are int64 numpy arrays.
- **Windows** of ``data.block_size`` = T tokens: an example is ``x = ids[i : i + T]`` as
  ``tgt_in`` and ``y = ids[i + 1 : i + T + 1]`` as ``tgt_out`` with an empty source (no <s>,
  no </s>; every position is scored), as nanoGPT's ``get_batch``. Train batches
  (``data.windows``): ``random``, offsets uniform in ``[0, len - T)`` drawn fresh each step
  from ``(train.seed, step)`` (so a resumed run and any number of DDP ranks draw the same
  global batch); ``sequential``, the consecutive non-overlapping windows ``0, T, 2T, ...`` in
  order, wrapping around at the end of the split.
- **Dev windows** (fixed, so two runs score the same tokens): the first ``data.dev_windows``
  (0 = all) non-overlapping windows ``0, T, 2T, ...`` of the dev split.

API: ``load_lm_dataset(cfg, reuse=None) -> Dataset`` (``dataset.streams`` is a
``TokenStreams``; the sentence-pair splits are empty); ``TokenStreams.train_batch(step, rows,
seed, rank, world)`` and ``TokenStreams.eval_batches(split, rows)`` give
``attnlab.data.batching.Batch`` values (``examples`` empty, ``tgt_mask`` all true: no target
is padding, so the loss's ignore index, ``PAD_ID``, masks nothing). The scores are
``attnlab.evaluate.evaluate_lm`` (the fixed windows; ``evaluate_split`` dispatches to it) and
``attnlab.evaluate.nanogpt_estimate`` (nanoGPT's random-window estimate).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.config import DataConfig
from attnlab.data.batching import Batch
from attnlab.data.example import Splits
from attnlab.data.indexed import Dataset
from attnlab.data.task_registry import TASKS, TaskSpec
from attnlab.data.tokenizers import SUBWORD, Tokenizer, make_tokenizer
from attnlab.data.vocab import UNK_ID, Vocab
from attnlab.errors import AttnlabError
from attnlab.regular_files import read_bounded

LM_TASK = "lm"
LM_MAX_BYTES = 256 << 20  # a larger text is not read whole into memory
WINDOWS = ("random", "sequential")
LM_FIELDS: tuple[str, ...] = (
    "data.path",
    "data.tokenizer",
    "data.subword_vocab",
    "data.lowercase",
    "data.dev_fraction",
    "data.block_size",
    "data.windows",
    "data.dev_windows",
)
# What an LM run is scored by, and which way is better (attnlab.study.metrics holds the rows).
LM_METRICS: tuple[str, ...] = ("loss", "perplexity", "bits_per_token")


def window_starts(length: int, block: int, cap: int = 0) -> np.ndarray:
    """Starts ``0, T, 2T, ...`` of the non-overlapping windows of ``block`` + 1 tokens that fit
    in ``length`` tokens (a window's target reaches one token past its input); at most ``cap``
    of them (0 = all)."""
    starts = np.arange(0, max(length - block, 0), block, dtype=np.int64)
    return starts[:cap] if cap > 0 else starts


def window_batch(ids: np.ndarray, starts: np.ndarray, block: int) -> Batch:
    """The LM batch of the windows at ``starts``: an empty source, ``tgt_in`` the window's
    first ``block`` tokens, ``tgt_out`` the same shifted by one; every position is scored."""
    rows = ids[starts[:, None] + np.arange(block + 1, dtype=np.int64)[None, :]]
    window = torch.from_numpy(rows)
    empty = torch.zeros((len(starts), 0), dtype=torch.long)
    tgt_in, tgt_out = window[:, :-1].contiguous(), window[:, 1:].contiguous()
    ones = torch.ones_like(tgt_out, dtype=torch.bool)
    return Batch(empty, empty.bool(), tgt_in, tgt_out, ones, ())


def random_starts(length: int, block: int, rows: int, seed: int, step: int) -> np.ndarray:
    """nanoGPT's ``torch.randint(len(data) - block_size, (batch_size,))``: ``rows`` offsets
    uniform in ``[0, length - block)``, a pure function of (seed, step)."""
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, length - block, size=rows, dtype=np.int64)


@dataclass(frozen=True)
class TokenStreams:
    """The two splits as int64 id arrays, and how they are cut into windows."""

    train: np.ndarray
    dev: np.ndarray
    block_size: int
    windows: str = "random"
    dev_windows: int = 0

    def split(self, name: str) -> np.ndarray:
        if name == "train":
            return self.train
        if name in ("dev", "val", "valid", "test"):  # test: the dev split (documented)
            return self.dev
        from attnlab.errors import unknown_choice

        raise unknown_choice("split", name, ["train", "dev", "test"])

    def train_starts(self, step: int, rows: int, seed: int) -> np.ndarray:
        """The global batch of step ``step`` (0-based): ``rows`` window starts."""
        t = self.block_size
        if self.windows == "sequential":
            starts = window_starts(len(self.train), t)
            return starts[(step * rows + np.arange(rows, dtype=np.int64)) % len(starts)]
        return random_starts(len(self.train), t, rows, seed, step)

    def train_batch(self, step: int, rows: int, seed: int, rank: int = 0, world: int = 1) -> Batch:
        """This rank's ``rows`` windows of the ``world * rows`` windows of step ``step``."""
        starts = self.train_starts(step, rows * world, seed)[rank * rows : (rank + 1) * rows]
        return window_batch(self.train, starts, self.block_size)

    def eval_starts(self, split: str) -> np.ndarray:
        """The fixed windows ``split`` is scored on (train: every window, for a check)."""
        cap = 0 if split == "train" else self.dev_windows
        return window_starts(len(self.split(split)), self.block_size, cap)

    def eval_batches(self, split: str, rows: int) -> Iterator[Batch]:
        starts = self.eval_starts(split)
        ids = self.split(split)
        for i in range(0, len(starts), max(rows, 1)):
            yield window_batch(ids, starts[i : i + rows], self.block_size)


# -- reading ------------------------------------------------------------------------------------


def read_text(path: Path, shown: str) -> str:
    """The text of ``path`` (``shown`` is how the config named it); one line per refusal."""
    try:
        data = read_bounded(path, LM_MAX_BYTES, "language-modelling text")
    except FileNotFoundError:
        raise AttnlabError(f"data.path={shown}: no such file") from None
    except OSError as err:
        raise AttnlabError(f"data.path={shown}: cannot read: {err.strerror}") from None
    if not data.strip():
        raise AttnlabError(f"data.path={shown}: the file is empty; data.task=lm needs text")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise AttnlabError(
            f"data.path={shown}: not a text file (a NUL byte at offset {nul}); "
            "data.task=lm reads UTF-8 text"
        )
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise AttnlabError(
            f"data.path={shown}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); data.task=lm reads UTF-8 text"
        ) from None


def split_text(text: str, dev_fraction: float) -> tuple[str, str]:
    """nanoGPT's split: the first ``int(n * (1 - dev_fraction))`` characters, then the rest."""
    cut = int(len(text) * (1.0 - dev_fraction))
    return text[:cut], text[cut:]


def char_ids(text: str, tokenizer: Tokenizer, vocab: Vocab | None) -> tuple[np.ndarray, Vocab]:
    """Vectorised char encoding: each distinct code point is looked up once. Without ``vocab``
    it is built from ``text``'s characters in sorted order (nanoGPT's ``sorted(set(data))``)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    distinct, inverse = np.unique(codes, return_inverse=True)
    tokens = [tokenizer.encode(chr(int(c)))[0] for c in distinct]  # " " -> "▁"
    if vocab is None:
        vocab = Vocab(list(dict.fromkeys(tokens)))
    lookup = np.array([vocab.stoi.get(t, UNK_ID) for t in tokens], dtype=np.int64)
    return lookup[inverse.reshape(-1)], vocab


def token_ids(tokens: list[str], vocab: Vocab) -> np.ndarray:
    ids = (vocab.stoi.get(t, UNK_ID) for t in tokens)
    return np.fromiter(ids, dtype=np.int64, count=len(tokens))


def load_lm_dataset(cfg: DataConfig, reuse: Any = None) -> Dataset:
    """The dataset of ``cfg`` (``data.task = "lm"``). ``reuse``: a Dataset whose tokenizer and
    vocabulary encode the text instead of new ones (a checkpoint's, so the ids match its
    weights)."""
    from attnlab.data.corpus import resolve_path

    if not cfg.path:
        raise AttnlabError("data.task=lm needs data.path, a plain text file")
    if cfg.windows not in WINDOWS:
        raise AttnlabError(f"data.windows={cfg.windows!r}: valid: {', '.join(WINDOWS)}")
    if not 0.0 < cfg.dev_fraction < 1.0:
        raise AttnlabError(
            f"data.dev_fraction={cfg.dev_fraction}: data.task=lm needs a dev split (0 < f < 1)"
        )
    path = resolve_path(cfg.path, "data.path")
    text = read_text(path, cfg.path)
    tokenizer: Tokenizer
    if reuse is not None:
        tokenizer, vocab = reuse.tgt_tokenizer, reuse.tgt_vocab
    else:
        # A subword model learns from the train split alone (nanoGPT's BPE is fixed: GPT-2's).
        train_lines = split_text(text, cfg.dev_fraction)[0].splitlines(keepends=True)
        subword = cfg.tokenizer in SUBWORD
        tokenizer = make_tokenizer(
            cfg.tokenizer, cfg.lowercase, train_lines if subword else None, cfg.subword_vocab
        )
        vocab = None
    if tokenizer.name == "char":
        normalised = tokenizer.normalise(text)
        ids, vocab = char_ids(normalised, tokenizer, vocab)
        cut = len(split_text(normalised, cfg.dev_fraction)[0])
        train, dev = ids[:cut], ids[cut:]
    else:
        train_tokens, dev_tokens = (tokenizer.encode(t) for t in split_text(text, cfg.dev_fraction))
        if vocab is None:
            vocab = Vocab.build([train_tokens], cfg.min_freq, cfg.max_vocab)
        train, dev = token_ids(train_tokens, vocab), token_ids(dev_tokens, vocab)
    need = cfg.block_size + 1
    if len(train) < need or len(dev) < need:
        raise AttnlabError(
            f"data.path={cfg.path}: {len(train):,} train and {len(dev):,} dev tokens, but a "
            f"window needs data.block_size + 1 = {need:,} tokens in each split; "
            "use a longer text or a smaller data.block_size"
        )
    streams = TokenStreams(train, dev, cfg.block_size, cfg.windows, cfg.dev_windows)
    stats: dict[str, object] = {
        "task": LM_TASK,
        "tokenizer": tokenizer.describe(),
        "train_tokens": int(len(train)),
        "dev_tokens": int(len(dev)),
        "dev_windows": int(len(streams.eval_starts("dev"))),
        "files": [str(path)],
    }
    splits = Splits([], [], [], stats)
    return Dataset(splits, vocab, vocab, tokenizer, tokenizer, False, LM_TASK, streams)


def _splits(cfg: DataConfig) -> Splits:
    """The registry's generator: an LM has no sentence pairs (its data is ``streams``)."""
    return load_lm_dataset(cfg).splits


TASKS.add(
    LM_TASK,
    _splits,
    TaskSpec(
        "language modelling on a plain text file (data.path), nanoGPT's windows",
        False,
        "First Citizen: Before we proceed -> irst Citizen: Before we proceed a",
        reads=LM_FIELDS,
        dataset=load_lm_dataset,
        metrics=LM_METRICS,
    ),
)
