"""Parallel corpora: readers for folders, file pairs and TSV files, seeded splits, caching.

Sources (``data.task = "corpus"``):
- ``data.path`` = a folder with ``{train,dev|val|valid,test*}.{lang}`` files (``.gz`` read
  transparently; ``test_2016_flickr.de`` counts as test), direction from
  ``data.src_lang`` / ``data.tgt_lang``; or with ``train.tsv`` / ``dev.tsv`` / ``test.tsv``;
- ``data.path`` = one ``.tsv`` file, columns chosen with ``data.columns`` (extra ignored);
- ``data.path`` = a SCAN file or split folder (``IN: ... OUT: ...`` lines, attnlab.data.scan);
- ``data.src_file`` + ``data.tgt_file``: one pair of line-aligned files.
Splits missing from the source (all of dev/test for a single file) are split off the
training data with ``data.seed``, grouping identical source sentences so that no dev or test
source also appears in training. Lines are whitespace-normalised (runs of spaces -> one);
pairs with an empty side are skipped and counted. Errors name the file and the line.

Preparing (reading, training a subword model, tokenising) is cached on disk in
``$ATTNLAB_CACHE`` or ``./.attnlab-cache``, keyed by a hash of the files' bytes and every
setting that changes the result.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.config import PRESETS_DIR, DataConfig
from attnlab.data.example import Example, Splits
from attnlab.data.scan import FORMAT as SCAN
from attnlab.data.scan import looks_like_scan_file, parse_scan_lines, scan_split_files
from attnlab.errors import AttnlabError
from attnlab.regular_files import LineTooLong, bounded_lines, open_regular

SPLITS = ("train", "dev", "test")
DEV_NAMES = ("dev", "val", "valid", "validation")
CACHE_VERSION = 1
Pair = tuple[str, str]


# --- reading -----------------------------------------------------------------------------


def resolve_path(raw: str, field_name: str) -> Path:
    """A path from the config, tried in this order (docs/data.md): as given (relative paths
    against the current directory), then relative to the repository root (where presets'
    ``../shared/...`` paths point). The error names every resolved path tried."""
    path = Path(raw).expanduser()
    if path.exists():
        return path
    tried = [path.absolute()]
    if not path.is_absolute():
        beside_repo = (PRESETS_DIR.parent / path).resolve()
        if beside_repo.exists():
            return beside_repo
        tried.append(beside_repo)
    hint = MULTI30K_HINT if "multi30k" in raw.lower() else ""
    # an absolute path was tried as written: listing it again would add nothing
    listed = ", ".join(str(t) for t in dict.fromkeys(tried))
    shown = "" if path.is_absolute() else f" (tried {listed})"
    raise AttnlabError(f"{field_name}={raw}: no such file or folder{shown}{hint}")


# Multi30k is not shipped with attnlab (its licence and size): where to get it (docs/data.md).
MULTI30K_HINT = (
    "; Multi30k is not shipped with attnlab: download it from "
    "https://github.com/multi30k/dataset (data/task1/raw) and point data.path at that folder"
)


def check_source_paths(cfg: DataConfig) -> None:
    """Refuse a missing corpus file or folder (or an LM's text file) before anything is
    created (a run directory)."""
    if cfg.task == "lm" and cfg.path:
        resolve_path(cfg.path, "data.path")
    if cfg.task != "corpus":
        return
    for raw, name in ((cfg.src_file, "data.src_file"), (cfg.tgt_file, "data.tgt_file")):
        if raw:
            resolve_path(raw, name)
    if cfg.path and not (cfg.src_file or cfg.tgt_file):
        resolve_path(cfg.path, "data.path")


# The longest corpus line read (bytes): past it a file is not a sentence-per-line corpus
# (``/dev/zero``-like data, a binary file), and reading on would only exhaust memory.
MAX_LINE_BYTES = 1 << 20


def read_raw_lines(path: Path) -> list[str]:
    """Decoded lines of a text file (``.gz`` transparently), without line endings.

    Only a regular file is opened (a FIFO or a device is one error, never a hang), and each
    line is read with a bound: one longer than MAX_LINE_BYTES is an error naming it."""
    raw: list[bytes] = []
    try:
        with open_regular(path) as handle:
            stream: Any = gzip.GzipFile(fileobj=handle) if path.name.endswith(".gz") else handle
            raw.extend(bounded_lines(stream, MAX_LINE_BYTES))
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except LineTooLong as err:
        line = str(err).split()[1]
        raise AttnlabError(
            f"{path}:{line}: line longer than {MAX_LINE_BYTES:,} bytes, the most a corpus line "
            "may have (is this a sentence-per-line text file?)"
        ) from None
    except (OSError, EOFError) as err:
        raise AttnlabError(f"{path}: cannot read: {err}") from None
    lines = []
    for number, data in enumerate(raw, start=1):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise AttnlabError(
                f"{path}:{number}: invalid UTF-8 (byte 0x{data[err.start]:02x}); "
                "save the file as UTF-8"
            ) from None
        lines.append(text.removesuffix("\n").removesuffix("\r"))
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines


def read_lines(path: Path) -> list[str]:
    """Lines of a text file, whitespace-normalised (runs of spaces -> one, stripped)."""
    return [" ".join(line.split()) for line in read_raw_lines(path)]


@dataclass
class Side:
    """Where one split's pairs came from, for messages and stats."""

    description: str
    pairs: list[Pair]
    empty_skipped: int = 0
    files: tuple[Path, ...] = ()
    format: str = "parallel"  # parallel | tsv | scan: part of the cache key


def read_parallel(src_path: Path, tgt_path: Path) -> Side:
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        shorter, longer = (
            (src_path, tgt_path) if len(src_lines) < len(tgt_lines) else (tgt_path, src_path)
        )
        n = min(len(src_lines), len(tgt_lines))
        raise AttnlabError(
            f"{longer}:{n + 1}: line has no partner: {shorter} ends after {n} lines "
            f"but {longer} has {max(len(src_lines), len(tgt_lines))}"
        )
    return _keep_non_empty(
        f"{src_path} + {tgt_path.name}",
        zip(src_lines, tgt_lines, strict=True),
        (src_path, tgt_path),
    )


def parse_columns(raw: str) -> tuple[int, int]:
    try:
        cols = tuple(int(c) for c in raw.replace(" ", "").split(","))
    except ValueError:
        cols = ()
    if len(cols) != 2 or min(cols) < 0 or cols[0] == cols[1]:
        raise AttnlabError(
            f'data.columns="{raw}": expected two different 0-based column numbers '
            '"SRC,TGT", e.g. "0,1"'
        )
    return cols[0], cols[1]


def read_tsv(path: Path, columns: tuple[int, int]) -> Side:
    need = max(columns) + 1
    pairs: list[Pair] = []
    for number, line in enumerate(read_raw_lines(path), start=1):
        if not line.strip():
            pairs.append(("", ""))  # an empty line: skipped and counted below
            continue
        fields = line.split("\t")
        if len(fields) < need:
            raise AttnlabError(
                f"{path}:{number}: expected at least {need} tab-separated columns "
                f"(data.columns={columns[0]},{columns[1]}), found {len(fields)}"
            )
        pairs.append((" ".join(fields[columns[0]].split()), " ".join(fields[columns[1]].split())))
    side = _keep_non_empty(str(path), pairs, (path,))
    side.format = "tsv"
    return side


def read_scan(path: Path, lines: list[str] | None = None) -> Side:
    """A SCAN file: the command words are the source, the action tokens the target."""
    pairs, blank = parse_scan_lines(path, read_raw_lines(path) if lines is None else lines)
    return Side(str(path), pairs, blank, (path,), SCAN)


def _keep_non_empty(description: str, pairs: Any, files: tuple[Path, ...]) -> Side:
    kept: list[Pair] = []
    skipped = 0
    for src, tgt in pairs:
        if src and tgt:
            kept.append((src, tgt))
        else:
            skipped += 1
    return Side(description, kept, skipped, files)


def _find_split_file(
    folder: Path, names: Sequence[str], lang: str, glob_prefix: bool
) -> Path | None:
    for name in names:
        for candidate in (folder / f"{name}.{lang}", folder / f"{name}.{lang}.gz"):
            if candidate.is_file():
                return candidate
    if glob_prefix:  # e.g. test_2016_flickr.de: the alphabetically first "test*" file
        found = sorted(
            [*folder.glob(f"{names[0]}*.{lang}"), *folder.glob(f"{names[0]}*.{lang}.gz")]
        )
        if found:
            return found[0]
    return None


def _partner(path: Path, src_lang: str, tgt_lang: str) -> Path:
    name = path.name
    gz = name.endswith(".gz")
    stem = name[: -len(f".{src_lang}.gz")] if gz else name[: -len(f".{src_lang}")]
    return path.with_name(f"{stem}.{tgt_lang}" + (".gz" if gz else ""))


def read_folder(folder: Path, cfg: DataConfig) -> dict[str, Side | None]:
    scan = scan_split_files(folder)
    if scan is not None:
        return {split: (read_scan(p) if p else None) for split, p in scan.items()}
    columns = parse_columns(cfg.columns)
    tsv = {
        "train": _find_split_file(folder, ("train",), "tsv", False),
        "dev": _find_split_file(folder, DEV_NAMES, "tsv", False),
        "test": _find_split_file(folder, ("test",), "tsv", True),
    }
    if tsv["train"] is not None:
        return {split: (read_tsv(p, columns) if p else None) for split, p in tsv.items()}
    src, tgt = cfg.src_lang, cfg.tgt_lang
    out: dict[str, Side | None] = {}
    for split, names in (("train", ("train",)), ("dev", DEV_NAMES), ("test", ("test",))):
        src_path = _find_split_file(folder, names, src, split == "test")
        if src_path is None:
            out[split] = None
            continue
        tgt_path = _partner(src_path, src, tgt)
        if not tgt_path.is_file():
            raise AttnlabError(
                f"{tgt_path}: no such file (the {tgt} side of {src_path.name}; "
                f"data.tgt_lang={tgt}, languages here: {', '.join(_languages(folder)) or 'none'})"
            )
        out[split] = read_parallel(src_path, tgt_path)
    if out["train"] is None:
        langs = _languages(folder)
        raise AttnlabError(
            f"{folder}: no train.{src} (data.src_lang={src}; "
            f"languages here: {', '.join(langs) or 'none'}; "
            "expected train/dev/test files such as train.de + train.en, or train.tsv)"
        )
    return out


def _languages(folder: Path) -> list[str]:
    langs = set()
    for path in folder.glob("train.*"):
        parts = path.name.split(".")
        if len(parts) >= 2 and parts[1] not in ("tsv",):
            langs.add(parts[1])
    return sorted(langs)


def read_source(cfg: DataConfig) -> dict[str, Side | None]:
    """Read whatever the config points at: split -> Side (None = split it off the train)."""
    if cfg.src_file or cfg.tgt_file:
        if not (cfg.src_file and cfg.tgt_file):
            raise AttnlabError("data.src_file and data.tgt_file must be given together")
        src_path = resolve_path(cfg.src_file, "data.src_file")
        tgt_path = resolve_path(cfg.tgt_file, "data.tgt_file")
        return {"train": read_parallel(src_path, tgt_path), "dev": None, "test": None}
    if not cfg.path:
        raise AttnlabError(
            'data.task="corpus" needs data.path (a folder or a .tsv file) '
            "or data.src_file + data.tgt_file"
        )
    path = resolve_path(cfg.path, "data.path")
    if path.is_dir():
        return read_folder(path, cfg)
    if path.name.endswith((".tsv", ".tsv.gz")):
        return {"train": read_tsv(path, parse_columns(cfg.columns)), "dev": None, "test": None}
    lines = read_raw_lines(path)
    if looks_like_scan_file(path, lines):
        return {"train": read_scan(path, lines), "dev": None, "test": None}
    raise AttnlabError(
        f"data.path={cfg.path}: expected a folder with train/dev/test files, a .tsv file or a "
        "SCAN file ('IN: ... OUT: ...' lines) "
        "(for two line-aligned files use data.src_file and data.tgt_file)"
    )


# --- splitting ---------------------------------------------------------------------------


def split_off(
    pairs: list[Pair], fractions: dict[str, float], seed: int
) -> tuple[list[Pair], dict[str, list[Pair]]]:
    """Take ``fractions`` of the pairs out of ``pairs`` by whole source-sentence groups.

    Identical sources form one group, so a held-out source never also appears in training.
    Groups are visited in a seeded random order and fill the held-out splits in the order
    given until each reaches its share of the pairs.
    """
    groups: dict[str, list[int]] = {}
    for i, (src, _) in enumerate(pairs):
        groups.setdefault(src, []).append(i)
    keys = list(groups)
    random.Random(f"attnlab/split/{seed}").shuffle(keys)
    held: dict[str, list[int]] = {name: [] for name in fractions}
    targets = {name: round(len(pairs) * frac) for name, frac in fractions.items()}
    names = [n for n in fractions if targets[n] > 0]
    train_idx: list[int] = []
    for key in keys:
        while names and len(held[names[0]]) >= targets[names[0]]:
            names.pop(0)
        if names:
            held[names[0]].extend(groups[key])
        else:
            train_idx.extend(groups[key])
    return [pairs[i] for i in sorted(train_idx)], {
        n: [pairs[i] for i in sorted(idx)] for n, idx in held.items()
    }


def assemble_splits(
    cfg: DataConfig, sides: dict[str, Side | None]
) -> tuple[dict[str, list[Pair]], dict[str, Any]]:
    """Pairs per split (splitting off what is missing) and reading stats."""
    train = sides["train"]
    assert train is not None
    missing = [s for s in ("dev", "test") if sides[s] is None]
    pairs: dict[str, list[Pair]] = {}
    stats: dict[str, Any] = {"sources": {}, "empty_skipped": {}, "split_off": missing}
    train_pairs = train.pairs[: cfg.max_pairs] if cfg.max_pairs > 0 else train.pairs
    train_pairs_read = train_pairs
    if missing:
        fractions = {"test": cfg.test_fraction, "dev": cfg.dev_fraction}
        train_pairs, held = split_off(train_pairs, {s: fractions[s] for s in missing}, cfg.seed)
        pairs.update(held)
    pairs["train"] = train_pairs
    for split in SPLITS:
        side = sides[split]
        if side is not None:
            if split != "train":
                pairs[split] = side.pairs[: cfg.max_pairs] if cfg.max_pairs > 0 else side.pairs
            stats["sources"][split] = side.description
            stats["empty_skipped"][split] = side.empty_skipped
        else:
            stats["sources"][split] = f"split off {train.description} (seed {cfg.seed})"
            stats["empty_skipped"][split] = 0
    for split in SPLITS:
        if not pairs[split]:
            side = sides[split] or train
            if sides[split] is None:
                key = "test_fraction" if split == "test" else "dev_fraction"
                reason = (
                    f"data.{key}={getattr(cfg, key)} of {len(train.pairs)} pairs "
                    f"leaves no {split} pairs"
                )
            elif split == "train" and missing and train_pairs_read:
                # Splitting off dev/test takes whole groups of identical sources.
                distinct = len({src for src, _ in train_pairs_read})
                reason = (
                    f"its {len(train_pairs_read)} pairs have only {distinct} distinct source "
                    f"sentence(s), and the split-off {'/'.join(missing)} take whole groups of "
                    "identical sources; give dev/test files or more distinct sentences"
                )
            else:
                reason = f"no non-empty pairs ({side.empty_skipped} empty lines skipped)"
            raise AttnlabError(f"{side.description}: the {split} split is empty: {reason}")
    return pairs, stats


# --- preparing (tokenise + vocab) with a disk cache ----------------------------------------


def default_cache_dir() -> Path:
    return Path(os.environ.get("ATTNLAB_CACHE", "") or Path.cwd() / ".attnlab-cache")


# Settings that change what a prepared corpus looks like (the cache key).
_KEY_FIELDS = (
    "path",
    "src_file",
    "tgt_file",
    "columns",
    "src_lang",
    "tgt_lang",
    "tokenizer",
    "subword_vocab",
    "lowercase",
    "min_freq",
    "max_vocab",
    "shared_vocab",
    "dev_fraction",
    "test_fraction",
    "seed",
    "max_pairs",
    "train_max_tokens",
    "eval_max_tokens",
)


def cache_key(cfg: DataConfig, files: Sequence[Path], formats: Sequence[str] = ()) -> str:
    digest = hashlib.sha256(f"attnlab-corpus-v{CACHE_VERSION}".encode())
    digest.update(f"formats={','.join(formats)};".encode())
    for name in _KEY_FIELDS:
        digest.update(f"{name}={getattr(cfg, name)!r};".encode())
    for path in files:
        digest.update(path.name.encode())
        content = hashlib.sha256()
        try:
            with open_regular(path) as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    content.update(chunk)
        except OSError as err:
            raise AttnlabError(f"{path}: cannot read: {err.strerror}") from None
        digest.update(content.digest())
    return digest.hexdigest()[:24]


@dataclass
class Prepared:
    meta: dict[str, Any]  # Dataset.meta(): vocabularies + tokenizers
    tokens: dict[str, dict[str, list[str]]]  # split -> src/tgt -> space-joined tokens per pair
    pairs: dict[str, list[Pair]]
    stats: dict[str, Any] = field(default_factory=dict)


def _join(tokens: Sequence[str]) -> str:
    # No tokenizer emits a token containing " " (spaces become ▁ or separate tokens).
    return " ".join(tokens)


def _split(joined: str) -> tuple[str, ...]:
    return tuple(joined.split(" ")) if joined else ()


def prepare(cfg: DataConfig, pairs: dict[str, list[Pair]]) -> Prepared:
    """Train / build the tokenizers, tokenise every split, build the vocabularies."""
    from attnlab.data.indexed import build_vocabs
    from attnlab.data.tokenizers import SUBWORD, make_tokenizer

    train_src = [s for s, _ in pairs["train"]]
    train_tgt = [t for _, t in pairs["train"]]
    if cfg.tokenizer in SUBWORD and cfg.shared_vocab:
        src_tok = make_tokenizer(
            cfg.tokenizer, cfg.lowercase, [*train_src, *train_tgt], cfg.subword_vocab
        )
        tgt_tok = src_tok
    else:
        src_tok = make_tokenizer(cfg.tokenizer, cfg.lowercase, train_src, cfg.subword_vocab)
        tgt_tok = make_tokenizer(cfg.tokenizer, cfg.lowercase, train_tgt, cfg.subword_vocab)
    tokens: dict[str, dict[str, list[str]]] = {}
    dropped = dict.fromkeys(SPLITS, 0)  # pairs over the split's token cap
    for split in SPLITS:
        src_tokens = src_tok.encode_batch([s for s, _ in pairs[split]])
        tgt_tokens = tgt_tok.encode_batch([t for _, t in pairs[split]])
        cap = cfg.train_max_tokens if split == "train" else cfg.eval_max_tokens
        if cap > 0:
            keep = [
                i
                for i in range(len(src_tokens))
                if len(src_tokens[i]) <= cap and len(tgt_tokens[i]) <= cap
            ]
            dropped[split] = len(src_tokens) - len(keep)
            src_tokens = [src_tokens[i] for i in keep]
            tgt_tokens = [tgt_tokens[i] for i in keep]
            pairs[split] = [pairs[split][i] for i in keep]
        if not src_tokens and split != "train" and dropped[split]:
            raise AttnlabError(
                f"the {split} split is empty: all {dropped[split]} of its pairs are longer than "
                f"data.eval_max_tokens={cap} tokens (raise it, or 0 for no cap)"
            )
        tokens[split] = {
            "src": [_join(t) for t in src_tokens],
            "tgt": [_join(t) for t in tgt_tokens],
        }
    src_vocab, tgt_vocab = build_vocabs(
        [_split(t) for t in tokens["train"]["src"]],
        [_split(t) for t in tokens["train"]["tgt"]],
        cfg,
    )
    meta = {
        "version": 1,
        "task": "corpus",
        "has_alignment": False,
        "src_vocab": src_vocab.to_list(),
        "tgt_vocab": tgt_vocab.to_list(),
        "src_tokenizer": src_tok.to_dict(),
        "tgt_tokenizer": tgt_tok.to_dict(),
    }
    stats = {
        "tokenizer": {"src": src_tok.describe(), "tgt": tgt_tok.describe()},
        "train_too_long_dropped": dropped["train"],
        "dev_too_long_dropped": dropped["dev"],  # over data.eval_max_tokens
        "test_too_long_dropped": dropped["test"],
    }
    return Prepared(meta, tokens, pairs, stats)


def _save(path: Path, prepared: Prepared) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": prepared.meta,
        "tokens": prepared.tokens,
        "pairs": {s: [list(p) for p in prepared.pairs[s]] for s in SPLITS},
        "stats": prepared.stats,
    }
    # O_EXCL with mode 0o666: the umask's mode, as every file attnlab writes (mkstemp's is 0600).
    tmp = str(path.parent / f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, ensure_ascii=False, separators=(",", ":"))
        os.replace(tmp, path)  # atomic: a crash never leaves a half-written cache entry
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path) -> Prepared | None:
    """The cache entry at ``path``, or None when it is missing, damaged or inconsistent
    (then the corpus is prepared again and the entry rewritten)."""
    try:
        with open_regular(path) as handle:
            data = handle.read()
        payload = json.loads(data)  # deep nesting: RecursionError, caught below
        pairs = {s: [(p[0], p[1]) for p in payload["pairs"][s]] for s in SPLITS}
        prepared = Prepared(payload["meta"], payload["tokens"], pairs, payload.get("stats", {}))
    except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError, AttnlabError):
        return None  # missing or damaged: prepare again
    return prepared if _consistent(prepared) else None


def _consistent(prepared: Prepared) -> bool:
    """Every split has as many source and target token lines as pairs, all strings."""
    if not isinstance(prepared.meta, dict) or not isinstance(prepared.stats, dict):
        return False
    for split in SPLITS:
        tokens = prepared.tokens.get(split) if isinstance(prepared.tokens, dict) else None
        if not isinstance(tokens, dict):
            return False
        pairs = prepared.pairs[split]
        for side in ("src", "tgt"):
            lines = tokens.get(side)
            if not isinstance(lines, list) or len(lines) != len(pairs):
                return False
            if not all(isinstance(line, str) for line in lines):
                return False
        if not all(isinstance(a, str) and isinstance(b, str) for a, b in pairs):
            return False
    return True


def load_corpus_dataset(cfg: DataConfig, cache_dir: Path | None = None):  # -> Dataset
    """Read, split, tokenise and index a parallel corpus (cached)."""
    from attnlab.data.indexed import Dataset, vocab_and_tokenizers_from_meta

    start = time.perf_counter()
    sides = read_source(cfg)
    pairs, stats = assemble_splits(cfg, sides)
    read = [side for side in sides.values() if side]
    key = cache_key(cfg, [f for side in read for f in side.files], [side.format for side in read])
    cache_file = (cache_dir or default_cache_dir()) / "corpora" / f"{key}.json"
    prepared = _load(cache_file)
    stats["cache"] = "hit" if prepared is not None else "miss"
    if prepared is not None:
        try:  # a cache entry whose vocabularies or tokenizers do not load: prepare again
            built = vocab_and_tokenizers_from_meta(prepared.meta)
        except (AttnlabError, ValueError, KeyError, IndexError, TypeError, RecursionError):
            prepared, stats["cache"] = None, "damaged (prepared again)"
    if prepared is None:
        prepared = prepare(cfg, pairs)
        try:
            _save(cache_file, prepared)
        except OSError:
            stats["cache"] = "unwritable"  # a read-only cwd must not stop training
        try:
            built = vocab_and_tokenizers_from_meta(prepared.meta)
        except AttnlabError as err:  # what prepare built: a bug, but name the cache entry
            raise AttnlabError(f"{cache_file}: {err}") from None
    stats["cache_file"] = str(cache_file)
    stats.update(prepared.stats)
    src_vocab, tgt_vocab, src_tok, tgt_tok = built
    examples: dict[str, list[Example]] = {}
    for split in SPLITS:
        toks = prepared.tokens[split]
        examples[split] = [
            Example(_split(s), _split(t), src_text, tgt_text)
            for s, t, (src_text, tgt_text) in zip(
                toks["src"], toks["tgt"], prepared.pairs[split], strict=True
            )
        ]
    stats["prepare_seconds"] = round(time.perf_counter() - start, 3)
    splits = Splits(examples["train"], examples["dev"], examples["test"], stats)
    return Dataset(splits, src_vocab, tgt_vocab, src_tok, tgt_tok, False, "corpus")
