"""Experiment configuration, the ground floor: frozen dataclasses, TOML and the fixed fields' rules.

A config is four sections (data, model, train, decode). This module imports no registry (only
attnlab.errors): it holds the dataclasses, the closed sets and ranges of the fixed fields, the
TOML reader/writer and the run-name rule. Attention hyper-parameters are not fixed fields:
their names, types and ranges come from the attention registry, so parsing TOML or ``--set``
strings and the registry checks live one floor up, in attnlab.experiment (``from_dict``,
``apply_overrides``, ``load_preset``, ``validate``, ``shaping_change``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError, unknown_choice
from attnlab.regular_files import read_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PRESETS_DIR = Path(__file__).resolve().parent.parent / "presets"


@dataclass(frozen=True)
class DataConfig:
    task: str = "reverse"  # a toy task name, or "corpus" for parallel text (data.path ...)
    train_size: int = 20000
    dev_size: int = 500
    test_size: int = 500
    min_len: int = 3
    max_len: int = 20
    vocab_size: int = 30  # toy tasks: number of symbols
    test_min_len: int = 0  # length generalisation: 0 = same as min_len
    test_max_len: int = 0  # 0 = same as max_len
    seed: int = 1234
    # Generated long-sequence tasks (attnlab.data.recall, attnlab.data.listops; docs/data.md)
    kv_pairs: int = 8  # mqar: key-value pairs per sequence
    power_a: float = 0.01  # mqar: Zoology's power law over the query positions (1 = uniform)
    copy_tokens: int = 16  # selective-copy: data tokens among the noise
    max_depth: int = 10  # listops: deepest operator nesting (LRA's max_depth)
    max_args: int = 10  # listops: most arguments of one operator (LRA's max_args)
    # Real corpora (see attnlab.data.corpus)
    path: str = ""  # folder with train/dev/test files, or a .tsv file
    src_file: str = ""
    tgt_file: str = ""
    columns: str = "0,1"  # TSV columns (source, target)
    src_lang: str = "de"
    tgt_lang: str = "en"
    tokenizer: str = "whitespace"  # whitespace | char | word | bpe | unigram
    subword_vocab: int = 8000
    lowercase: bool = False
    min_freq: int = 1
    max_vocab: int = 0  # 0 = unlimited
    shared_vocab: bool = False
    dev_fraction: float = 0.05
    test_fraction: float = 0.05
    max_pairs: int = 0  # corpora: keep only the first N pairs of each split (0 = all)
    # corpora: drop training pairs longer than N tokens (0 = keep all). On by default: one
    # stray 100k-token line would otherwise ask for gigabytes in its batch.
    train_max_tokens: int = 250
    # corpora: skip dev/test pairs longer than N tokens, and cut `translate` input to N tokens
    # (0 = no cap). One 100k-token dev line stalled the final evaluation for minutes.
    eval_max_tokens: int = 1000
    # Language modelling (data.task = "lm", attnlab.data.lm): windows of block_size tokens of
    # data.path; train batches are random offsets (nanoGPT's get_batch) or consecutive
    # windows; dev is its first dev_windows non-overlapping windows (0 = all of the dev split).
    block_size: int = 64
    windows: str = "random"  # random | sequential
    dev_windows: int = 0


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "rnn"  # rnn | transformer | decoder-only (architecture registry)
    # RNN encoder-decoder
    cell: str = "gru"
    attention: str = "bahdanau"
    hidden: int = 128
    emb: int = 64
    layers: int = 1
    bidirectional: bool = True
    input_feeding: bool = True
    dropout: float = 0.1
    # Transformer
    d_model: int = 128
    heads: int = 4
    ff: int = 256
    enc_layers: int = 2
    dec_layers: int = 2
    norm: str = "pre"  # pre | post
    activation: str = "relu"  # relu | gelu
    positions: str = "sinusoidal"  # sinusoidal | learned | none | rotary
    self_attention: str = "scaled-dot"  # encoder self-attention
    decoder_self_attention: str = ""  # "" = same as self_attention
    cross_attention: str = "scaled-dot"
    share_embeddings: bool = False
    tie_embeddings: bool = False
    # Decoder-only: how the source (the prefix) is read, causal (GPT) | bidirectional (prefix LM)
    prefix: str = "causal"
    # Attention hyper-parameters set explicitly (names from the attention registry), as
    # written: "variant.name" (qualified, that variant only) or "name" (older flat form:
    # every chosen variant that declares it).
    attn_params: dict[str, Any] = field(default_factory=dict)

    def params_for(self, variant: str) -> dict[str, Any]:
        """The explicit hyper-parameters of ``variant``: its qualified keys over flat ones
        (names the variant does not declare are ignored by ``build_attention``)."""
        return params_for(self.attn_params, variant)


def params_for(attn_params: dict[str, Any], variant: str) -> dict[str, Any]:
    out = {k: v for k, v in attn_params.items() if "." not in k}
    for key, value in attn_params.items():
        owner, _, name = key.rpartition(".")
        if owner == variant:
            out[name] = value
    return out


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 3000
    batch_size: int = 64
    batch_tokens: int = 0  # > 0: token-budget batches with length bucketing
    # Sort sentences of similar length into the same batch (less padding). Off: every batch
    # mixes lengths, which smooths the gradient (Transformers learn toy tasks much faster).
    bucket: bool = True
    lr: float = 2e-3
    weight_decay: float = 0.0
    # Which parameters weight decay reaches: all | matrices (nanoGPT: not biases and norms)
    weight_decay_scope: str = "all"
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "constant"  # constant | warmup-inverse-sqrt | cosine | plateau
    warmup: int = 100
    min_lr: float = 1e-5
    plateau_factor: float = 0.5
    plateau_patience: int = 2
    clip: float = 1.0
    label_smoothing: float = 0.0
    # Decoder-only prefix LMs: also train on predicting each source token from those before
    # it (GPT's plain LM loss over the whole sequence); off: the loss is over the target only.
    prefix_loss: bool = False
    teacher_forcing: float = 1.0  # ratio at step 0 (and throughout for "constant")
    tf_schedule: str = "constant"  # constant | linear | exponential | inverse-sigmoid
    tf_min: float = 0.0  # floor for linear decay
    tf_k: float = 0.0  # decay constant; 0 = pick from max_steps
    eval_every: int = 250
    eval_sentences: int = 500  # dev sentences scored at each eval (0 = all)
    samples: int = 3  # sample translations (with attention) logged per eval
    # Attention history (attnlab.runs.history): the cross-attention of N dev
    # sentences stored at each eval (0 = off), at most attention_history_keep snapshots.
    attention_history: int = 4
    attention_history_keep: int = 64
    # Which dev sentences: spread (evenly over source lengths) | first | longest | "3,17,42"
    attention_history_select: str = "spread"
    log_every: int = 25
    patience: int = 0  # early stopping: evals without improvement (0 = off)
    keep_last: int = 0  # > 0: also keep checkpoints/step-<N> copies of the last N saves
    # What "best" means: bleu | chrf | exact_match | loss; an LM: loss | perplexity |
    # bits_per_token (lower is better for the loss and the LM metrics)
    metric: str = "bleu"
    seed: int = 1234
    device: str = "auto"  # auto | cpu | cuda | mps
    amp: bool = True  # bf16 autocast on CUDA
    threads: int = 0  # torch CPU threads (0 = torch default; under --nproc N: cores // N)
    # Data-parallel processes (torchrun + DistributedDataParallel); 1 = this process only.
    nproc: int = 1
    compile: bool = False  # torch.compile the model (falls back to eager when it cannot)
    # Static shapes (attnlab.train.static_shapes): pad each batch's widths up to a multiple of
    # pad_multiple and its rows to one count per width bucket. auto: on CUDA (and wherever
    # CUDA graphs run); off on the CPU, where the padding-free layout makes padding pure cost.
    pad_buckets: str = "auto"  # auto | on | off
    pad_multiple: int = 8
    # Capture the whole training step (forward, backward, clipping, AdamW) as one CUDA graph
    # per bucket shape (attnlab.train.graphs). auto: on CUDA where the run allows it; a run
    # that cannot be captured trains eagerly with one note.
    cuda_graphs: str = "auto"  # auto | on | off


@dataclass(frozen=True)
class DecodeConfig:
    # The registered decoding strategy (``attnlab decoders``); "" = derived from the flags
    # below: sample -> sampling, beam > 1 -> beam (diverse-beam with groups > 1), else greedy.
    decoder: str = ""
    beam: int = 1
    alpha: float = 0.0  # length penalty exponent
    beta: float = 0.0  # coverage penalty weight
    length_norm: str = "gnmt"  # gnmt: ((5+|Y|)/6)^alpha | fairseq: |Y|^alpha
    groups: int = 1  # diverse beam search groups
    diversity: float = 0.0  # Hamming diversity strength
    sample: bool = False
    num_samples: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    nbest: int = 1
    max_len_ratio: float = 1.5
    max_len_const: int = 10
    min_len: int = 0
    seed: int = 0
    # Sentences per decoding batch; 0: as many as give ``batch_rows`` decoder rows per step
    # (beam K and num_samples n multiply the rows: 512 rows = 512 sentences greedy,
    # 102 with beam 5).
    batch_size: int = 0
    batch_rows: int = 512
    # MBR decoding (decoder = "mbr"): candidates per sentence, where they come from, utility.
    mbr_candidates: int = 16
    mbr_source: str = "sample"
    mbr_utility: str = "chrf"


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "experiment"
    description: str = ""
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()

    def replace(self, **sections: Any) -> ExperimentConfig:
        return dataclasses.replace(self, **sections)

    def attention_params(self) -> dict[str, Any]:
        return dict(self.model.attn_params)


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
}

# Closed sets checked at config time (registries are checked in validate()).
CHOICES: dict[str, tuple[str, ...]] = {
    "model.cell": ("gru", "lstm"),
    "model.norm": ("pre", "post"),
    "model.activation": ("relu", "gelu"),
    "model.positions": ("sinusoidal", "learned", "none", "rotary"),
    "model.prefix": ("causal", "bidirectional"),
    "train.schedule": ("constant", "warmup-inverse-sqrt", "cosine", "plateau"),
    "train.tf_schedule": ("constant", "linear", "exponential", "inverse-sigmoid"),
    "train.metric": ("bleu", "chrf", "exact_match", "loss", "perplexity", "bits_per_token"),
    "train.weight_decay_scope": ("all", "matrices"),
    "train.device": ("auto", "cpu", "cuda", "mps"),
    "train.pad_buckets": ("auto", "on", "off"),
    "train.cuda_graphs": ("auto", "on", "off"),
    "decode.length_norm": ("gnmt", "fairseq"),
    "decode.mbr_source": ("sample", "beam"),
    "decode.mbr_utility": ("chrf", "bleu"),
    "data.tokenizer": ("whitespace", "char", "word", "bpe", "unigram"),
    "data.windows": ("random", "sequential"),
}

# Every integer setting fits a signed 64-bit integer (as in SQLite and torch): a larger one
# is refused, never rounded through a float.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# Integer literals: decimal (digits may be grouped with "_", as in TOML), or 0x / 0o / 0b.
_INT_LITERAL = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|[0-9][0-9_]*)")
_INT_LITERAL_MAX = 40  # characters: more cannot be in range (and int() of 5,000 digits fails)


# (low, high) for numeric fields; None = unbounded on that side.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "data.train_size": (1, None),
    "data.dev_size": (1, None),
    "data.test_size": (1, None),
    "data.min_len": (1, None),
    "data.max_len": (1, None),
    "data.vocab_size": (2, 10000),
    "data.kv_pairs": (1, 4096),
    "data.power_a": (0.0001, 10.0),
    "data.copy_tokens": (1, 4096),
    "data.max_depth": (1, 64),
    "data.max_args": (2, 64),
    "data.subword_vocab": (50, 1_000_000),
    "data.min_freq": (1, None),
    "data.dev_fraction": (0.0, 0.5),
    "data.test_fraction": (0.0, 0.5),
    "data.max_pairs": (0, None),
    "data.train_max_tokens": (0, None),
    "data.eval_max_tokens": (0, None),
    "data.block_size": (1, 1_000_000),
    "data.dev_windows": (0, None),
    "model.hidden": (1, 16384),
    "model.emb": (1, 16384),
    "model.layers": (1, 16),
    "model.dropout": (0.0, 0.9),
    "model.d_model": (4, 16384),
    "model.heads": (1, 64),
    "model.ff": (1, 65536),
    "model.enc_layers": (0, 48),
    "model.dec_layers": (1, 48),
    "train.max_steps": (1, None),
    "train.batch_size": (1, None),
    "train.batch_tokens": (0, None),
    "train.lr": (0.0, 10.0),
    "train.warmup": (0, None),
    "train.clip": (0.0, None),
    "train.label_smoothing": (0.0, 0.99),
    "train.teacher_forcing": (0.0, 1.0),
    "train.tf_min": (0.0, 1.0),
    "train.tf_k": (0.0, None),
    "train.eval_every": (1, None),
    "train.log_every": (1, None),
    "train.attention_history": (0, 64),  # bounds what runs.history reads back
    "train.attention_history_keep": (2, 1000),
    "train.patience": (0, None),
    "train.keep_last": (0, None),
    "train.nproc": (1, 1024),
    "train.pad_multiple": (1, 1024),
    "train.threads": (0, 1024),  # also at most the cores here (distributed.check_threads)
    "train.seed": (0, INT_MAX),
    "data.seed": (0, INT_MAX),
    "decode.seed": (0, INT_MAX),
    "decode.beam": (1, 1000),
    "decode.alpha": (0.0, 10.0),
    "decode.beta": (0.0, 10.0),
    "decode.groups": (1, 100),
    "decode.diversity": (0.0, None),
    "decode.num_samples": (1, 1000),
    "decode.temperature": (1e-6, 100.0),
    "decode.top_k": (0, None),
    "decode.top_p": (1e-6, 1.0),
    "decode.nbest": (1, 1000),
    "decode.max_len_ratio": (0.0, 100.0),
    "decode.max_len_const": (0, 10000),
    "decode.min_len": (0, None),
    "decode.batch_size": (0, None),
    "decode.batch_rows": (1, None),
    "decode.mbr_candidates": (1, 1000),
}


# A run name (and a config's ``name``, the default run-name prefix) is one path component:
# it can never point outside ``--out`` ("..", "/", an absolute path) or hide (".").
NAME_MAX = 128
NAME_RULE = (
    'one path component of letters, digits, ".", "_" and "-", not "." or "..", '
    f"at most {NAME_MAX} characters"
)
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_name(value: str, what: str) -> str:
    """``value`` when it is a valid run name, else AttnlabError naming ``what`` and the rule."""
    text = str(value)
    if _NAME.fullmatch(text) is None or text in (".", "..") or len(text) > NAME_MAX:
        raise AttnlabError(f"{what}: {text!r} is not a valid run name; a run name is {NAME_RULE}")
    return text


def safe_name(text: str) -> str:
    """A valid name made from free text (a file stem, registry names): runs of other
    characters become "-"; never empty, "." or ".."."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:NAME_MAX].strip("-")
    return name if name.strip(".") else "experiment"


def parse_int(key: str, value: Any) -> int:
    """An integer setting from TOML (an integer) or the command line (an integer literal:
    ``500``, ``1_000``, ``0x10``); ``1e3`` and ``2.0`` are not integers, and values
    outside [-2^63, 2^63 - 1] are refused."""
    wanted = "an integer (e.g. 1000, 1_000 or 0x3e8)"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise AttnlabError(f"{key} must be {wanted}, got {_shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > _INT_LITERAL_MAX or not _INT_LITERAL.fullmatch(text):
            raise AttnlabError(f"{key} must be {wanted}, got {_shown(value)}")
        try:
            value = int(text, 0)
        except ValueError:  # "007" (base 0 refuses leading zeros) or a misplaced "_"
            try:
                value = int(text, 10)
            except ValueError:
                raise AttnlabError(f"{key} must be {wanted}, got {_shown(value)}") from None
    if not INT_MIN <= value <= INT_MAX:
        raise AttnlabError(f"{key}={_shown(value)} is out of range [-2^63, 2^63 - 1]")
    return value


def _shown(value: Any) -> str:
    """A value for an error line: at most 40 characters of it."""
    if isinstance(value, int) and value.bit_length() > 128:  # str() of 4,300+ digits fails
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# auto | on | off settings: a TOML boolean or true/false on the command line means on / off.
SWITCHES = ("train.pad_buckets", "train.cuda_graphs")


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Coerce a TOML or command-line value to the type of the field's default."""
    kind = type(default)
    if key in SWITCHES and (isinstance(value, bool) or str(value).lower() in ("true", "false")):
        return "on" if str(value).lower() == "true" else "off"
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (
            "true",
            "false",
            "1",
            "0",
            "yes",
            "no",
            "on",
            "off",
        ):
            return value.lower() in ("true", "1", "yes", "on")
        raise AttnlabError(f"{key} must be true or false, got {value!r}")
    if kind is tuple:
        if isinstance(value, str):
            value = [v for v in value.replace("(", "").replace(")", "").split(",") if v.strip()]
        try:
            numbers = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            raise AttnlabError(f"{key} must be a list of numbers, got {value!r}") from None
        if not all(math.isfinite(v) for v in numbers):
            raise AttnlabError(f"{key} must be a list of finite numbers, got {value!r}")
        return numbers
    if kind is int:
        return parse_int(key, value)
    if kind is float:
        if isinstance(value, bool):
            raise AttnlabError(f"{key} must be a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise AttnlabError(f"{key} must be a number, got {value!r}") from None
        if not math.isfinite(number):
            raise AttnlabError(f"{key}={value} must be a finite number")
        return number
    if kind is str:
        return str(value)
    return value


# Fixed-length lists: key -> (length, low, high), every element in [low, high).
TUPLES: dict[str, tuple[int, float, float]] = {
    "train.betas": (2, 0.0, 1.0),  # Adam's decay rates: each in [0, 1)
}


HISTORY_SELECTIONS = ("spread", "first", "longest")


def history_selection(value: str) -> tuple[str, list[int]]:
    """train.attention_history_select -> (rule, explicit dev indices): a rule of
    HISTORY_SELECTIONS with no indices, or ("list", [i, ...]) for "3,17,42"."""
    text = str(value).strip()
    if text in HISTORY_SELECTIONS:
        return text, []
    parts = [p.strip() for p in text.split(",")]
    if not text or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise AttnlabError(
            f"train.attention_history_select={value}: must be one of "
            f"{', '.join(HISTORY_SELECTIONS)} or distinct dev sentence indices such as 3,17,42"
        )
    return "list", [int(p) for p in parts]


def _check_value(key: str, value: Any) -> None:
    if key == "train.attention_history_select":
        history_selection(value)
    if key in TUPLES:
        length, low, high = TUPLES[key]
        if len(value) != length or not all(low <= v < high for v in value):
            shown = ",".join(f"{v:g}" for v in value)
            raise AttnlabError(
                f"{key}={shown} must be {length} numbers, each in [{low:g}, {high:g})"
            )
    if key in CHOICES and value not in CHOICES[key]:
        raise unknown_choice(key, str(value), CHOICES[key])
    if key in RANGES and isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = RANGES[key]
        if (low is not None and value < low) or (high is not None and value > high):
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            raise AttnlabError(f"{key}={value} is out of range [{lo}, {hi}]")


def to_dict(config: ExperimentConfig) -> dict[str, Any]:
    """The TOML-shaped dict of a config: only sections; attention params in model, flat ones
    as keys, qualified ones as one table per variant (``model["sliding-window"]["window"]``)."""
    out: dict[str, Any] = {"name": config.name, "description": config.description}
    for name in SECTIONS:
        section = dataclasses.asdict(getattr(config, name))
        extra = section.pop("attn_params", {}) or {}
        section = {k: (list(v) if isinstance(v, tuple) else v) for k, v in section.items()}
        for key, value in extra.items():
            _put_param(section, key, value)
        out[name] = section
    return out


def _put_param(model: dict[str, Any], key: str, value: Any) -> None:
    """Store attention parameter ``key`` (flat or ``variant.name``) in a model table."""
    variant, _, name = key.rpartition(".")
    if variant:
        model.setdefault(variant, {})[name] = value
    else:
        model[key] = value


# A preset or config.toml larger than this is not one (a sparse giant, a device).
TOML_MAX_BYTES = 16 << 20


def load_toml(path: Path) -> dict[str, Any]:
    """A TOML file: a regular file (a FIFO never blocks), at most TOML_MAX_BYTES."""
    try:
        data = read_bounded(path, TOML_MAX_BYTES, "TOML file")
        return tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise AttnlabError(f"{path}: invalid TOML: {err}") from None
    except UnicodeDecodeError as err:  # tomllib decodes the whole file first
        line = err.object[: err.start].count(b"\n") + 1
        raise AttnlabError(
            f"{path}:{line}: invalid UTF-8 (byte 0x{err.object[err.start]:02x}); "
            "save the file as UTF-8"
        ) from None
    except (ValueError, RecursionError) as err:  # a 5,000-digit integer, nesting too deep
        reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise AttnlabError(f"{path}: invalid TOML: {reason}") from None
    except OSError as err:
        raise AttnlabError(f"{path}: cannot read: {err.strerror}") from None


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def resolve_preset(name_or_file: str) -> Path:
    """A preset name (``reverse-bahdanau``) or a path to a TOML file."""
    candidate = Path(name_or_file)
    if candidate.suffix == ".toml" or candidate.exists() or "/" in name_or_file:
        if not candidate.is_file():
            raise AttnlabError(f"{name_or_file}: no such preset file")
        return candidate
    path = PRESETS_DIR / f"{name_or_file}.toml"
    if not path.is_file():
        raise unknown_choice("preset", name_or_file, preset_names())
    return path


def dumps_toml(config: ExperimentConfig) -> str:
    """Serialise a config as TOML (a tiny writer: sections of scalars and lists, then one
    ``[model.<variant>]`` table per variant with qualified hyper-parameters)."""
    raw = to_dict(config)
    lines = [
        f"name = {_toml_value(raw['name'])}",
        f"description = {_toml_value(raw['description'])}",
    ]
    for section in SECTIONS:
        lines.append("")
        lines.append(f"[{section}]")
        tables = {k: v for k, v in raw[section].items() if isinstance(v, dict)}
        for key, value in raw[section].items():
            if key not in tables:
                lines.append(f"{key} = {_toml_value(value)}")
        for table, values in tables.items():
            lines.append(f"[{section}.{table}]")
            lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


# What a resumed run must keep: every model.* key builds the weights (dropout aside, it has
# none), and these data keys build the vocabularies the embeddings are indexed by.
RESUME_FREE_MODEL_KEYS = ("dropout",)
VOCABULARY_KEYS = (
    "task",
    "vocab_size",
    "tokenizer",
    "subword_vocab",
    "lowercase",
    "min_freq",
    "max_vocab",
    "shared_vocab",
)
