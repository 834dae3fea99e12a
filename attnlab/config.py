"""Experiment configuration: frozen dataclasses, TOML presets and ``SECTION.KEY=VALUE`` overrides.

A config is four sections (data, model, train, decode). Attention hyper-parameters are not
fixed fields: their names, types and ranges come from the attention registry, so a new
variant's parameters are config keys with no edit here. Each variant owns its parameters:
``[model.sliding-window] window = 16`` in TOML, ``--set model.sliding-window.window=16`` on
the command line (one value per variant, shared by every role that variant plays). The older
flat form ``model.window`` still works where it is unambiguous: it applies to every chosen
variant that declares ``window``, and is refused (naming the qualified keys) when chosen
variants declare it with different defaults. Every user mistake raises AttnlabError naming
the key, the value and what is valid.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from attnlab.errors import AttnlabError, did_you_mean, unknown_choice

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


@dataclass(frozen=True)
class ModelConfig:
    arch: str = "rnn"  # rnn | transformer (architecture registry)
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
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "constant"  # constant | warmup-inverse-sqrt | cosine | plateau
    warmup: int = 100
    min_lr: float = 1e-5
    plateau_factor: float = 0.5
    plateau_patience: int = 2
    clip: float = 1.0
    label_smoothing: float = 0.0
    teacher_forcing: float = 1.0  # ratio at step 0 (and throughout for "constant")
    tf_schedule: str = "constant"  # constant | linear | exponential | inverse-sigmoid
    tf_min: float = 0.0  # floor for linear decay
    tf_k: float = 0.0  # decay constant; 0 = pick from max_steps
    eval_every: int = 250
    eval_sentences: int = 500  # dev sentences scored at each eval (0 = all)
    samples: int = 3  # sample translations (with attention) logged per eval
    log_every: int = 25
    patience: int = 0  # early stopping: evals without improvement (0 = off)
    keep_last: int = 0  # > 0: also keep checkpoints/step-<N> copies of the last N saves
    metric: str = "bleu"  # bleu | chrf | exact_match | loss: what "best" means
    seed: int = 1234
    device: str = "auto"  # auto | cpu | cuda | mps
    amp: bool = True  # bf16 autocast on CUDA
    threads: int = 0  # torch CPU threads (0 = torch default; under --nproc N: cores // N)
    # Data-parallel processes (torchrun + DistributedDataParallel); 1 = this process only.
    nproc: int = 1
    compile: bool = False  # torch.compile the model (falls back to eager when it cannot)


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
    # (beam K and num_samples n multiply the rows: 512 rows = 512 sentences greedy, 102 with beam 5).
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
    "train.schedule": ("constant", "warmup-inverse-sqrt", "cosine", "plateau"),
    "train.tf_schedule": ("constant", "linear", "exponential", "inverse-sigmoid"),
    "train.metric": ("bleu", "chrf", "exact_match", "loss"),
    "train.device": ("auto", "cpu", "cuda", "mps"),
    "decode.length_norm": ("gnmt", "fairseq"),
    "decode.mbr_source": ("sample", "beam"),
    "decode.mbr_utility": ("chrf", "bleu"),
    "data.tokenizer": ("whitespace", "char", "word", "bpe", "unigram"),
}

# (low, high) for numeric fields; None = unbounded on that side.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "data.train_size": (1, None),
    "data.dev_size": (1, None),
    "data.test_size": (1, None),
    "data.min_len": (1, None),
    "data.max_len": (1, None),
    "data.vocab_size": (2, 10000),
    "data.subword_vocab": (50, 1_000_000),
    "data.min_freq": (1, None),
    "data.dev_fraction": (0.0, 0.5),
    "data.test_fraction": (0.0, 0.5),
    "data.max_pairs": (0, None),
    "data.train_max_tokens": (0, None),
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
    "train.patience": (0, None),
    "train.keep_last": (0, None),
    "train.nproc": (1, 1024),
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


def _attention_hparams() -> dict[str, Any]:
    """All hyper-parameters declared by registered attention variants: name -> HParam."""
    from attnlab.nn.attention import ATTENTION  # registry import registers the variants

    found: dict[str, Any] = {}
    for entry in ATTENTION.entries():
        for hp in entry.meta.hparams:
            found.setdefault(hp.name, hp)
    return found


def _variant_hparam(key: str, source: str) -> tuple[str, Any]:
    """``variant.name`` -> (the key as stored, the variant's HParam); AttnlabError naming
    the variants or the variant's parameters when either is unknown."""
    from attnlab.nn.attention import ATTENTION

    variant, _, name = key.rpartition(".")
    if variant not in ATTENTION:
        raise AttnlabError(
            f"{source}: unknown key model.{key}: no attention variant {variant!r}"
            f"{did_you_mean(variant, ATTENTION.names())}"
        )
    spec = ATTENTION.get(variant).meta
    hp = spec.hparam(name)
    if hp is None:
        own = ", ".join(f"model.{variant}.{h.name}" for h in spec.hparams) or "none"
        raise AttnlabError(
            f"{source}: unknown key model.{key}{did_you_mean(name, [h.name for h in spec.hparams])}; "
            f"{variant}'s hyper-parameters: {own}"
        )
    return f"{variant}.{name}", hp


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Coerce a TOML or command-line value to the type of the field's default."""
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
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
        if isinstance(value, bool):
            raise AttnlabError(f"{key} must be an integer, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise AttnlabError(f"{key} must be an integer, got {value!r}") from None
        if not number.is_integer():
            raise AttnlabError(f"{key} must be an integer, got {value!r}")
        return int(number)
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


def _check_value(key: str, value: Any) -> None:
    if key in TUPLES:
        length, low, high = TUPLES[key]
        if len(value) != length or not all(low <= v < high for v in value):
            shown = ",".join(f"{v:g}" for v in value)
            raise AttnlabError(f"{key}={shown} must be {length} numbers, each in [{low:g}, {high:g})")
    if key in CHOICES and value not in CHOICES[key]:
        raise unknown_choice(key, str(value), CHOICES[key])
    if key in RANGES and isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = RANGES[key]
        if (low is not None and value < low) or (high is not None and value > high):
            lo = "-inf" if low is None else f"{low:g}"
            hi = "inf" if high is None else f"{high:g}"
            raise AttnlabError(f"{key}={value} is out of range [{lo}, {hi}]")


def _set_in(section_name: str, values: dict[str, Any], key: str, raw: Any, source: str) -> None:
    """Validate one key of a section and store the coerced value in ``values``."""
    cls = SECTIONS[section_name]
    defaults = {f.name: f.default for f in fields(cls) if f.name != "attn_params"}
    full = f"{section_name}.{key}"
    if section_name == "model" and isinstance(raw, dict):  # a [model.<variant>] table
        for name, value in raw.items():
            _set_in(section_name, values, f"{key}.{name}", value, source)
        return
    qualified = section_name == "model" and "." in key  # model.<variant>.<name>
    if qualified:
        stored, hp = _variant_hparam(key, source)
    try:
        if qualified:
            values.setdefault("attn_params", {})[stored] = hp.validate(
                _coerce(full, raw, hp.default), key=full
            )
            return
        if key in defaults:
            value = _coerce(full, raw, defaults[key])
            _check_value(full, value)
            values[key] = value
            return
        hparams = _attention_hparams() if section_name == "model" else {}
        if key in hparams:
            values.setdefault("attn_params", {})[key] = hparams[key].validate(
                _coerce(full, raw, hparams[key].default)
            )
            return
    except AttnlabError as err:
        if source in ("--set", "config"):
            raise
        raise AttnlabError(f"{source}: {err}") from None  # name the preset / file it came from
    if section_name == "model":
        valid = list(defaults) + [k for k in hparams if k not in defaults]
    else:
        valid = list(defaults)
    raise AttnlabError(
        f"{source}: unknown key {full}{did_you_mean(key, valid)}; "
        f"valid keys in [{section_name}]: {', '.join(valid)}"
    )


def from_dict(raw: dict[str, Any], source: str = "config") -> ExperimentConfig:
    """Build a config from a TOML-shaped dict (top-level name/description + sections)."""
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for key, value in raw.items():
        if key in ("name", "description"):
            top[key] = str(value)
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise AttnlabError(f"{source}: [{key}] must be a table")
            for sub, sub_value in value.items():
                _set_in(key, sections[key], sub, sub_value, source)
        else:
            valid = ["name", "description", *SECTIONS]
            raise AttnlabError(f"{source}: unknown section {key!r}{did_you_mean(key, valid)}; valid: {', '.join(valid)}")
    built = {name: SECTIONS[name](**values) for name, values in sections.items()}
    return ExperimentConfig(**top, **built)


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


def apply_overrides(config: ExperimentConfig, overrides: list[str] | tuple[str, ...]) -> ExperimentConfig:
    """Apply ``SECTION.KEY=VALUE`` strings (the CLI's ``--set``); ``name=`` and
    ``description=`` set the top-level fields."""
    raw = to_dict(config)  # attention params are flat keys of raw["model"], as in a preset
    for item in overrides:
        if "=" not in item:
            raise AttnlabError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. model.attention=luong-general")
        path, value = (part.strip() for part in item.split("=", 1))
        if path in ("name", "description"):
            raw[path] = check_name(value, f"--set {item!r}") if path == "name" else value
            continue
        if "." not in path:
            raise AttnlabError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. train.max_steps=500")
        section, key = path.split(".", 1)
        if section not in SECTIONS:
            raise AttnlabError(
                f"--set {item!r}: unknown section {section!r}{did_you_mean(section, SECTIONS)}; valid: {', '.join(SECTIONS)}"
            )
        checked: dict[str, Any] = {}
        _set_in(section, checked, key, value, "--set")  # errors name --set, not the preset
        if "attn_params" in checked:
            for param, param_value in checked["attn_params"].items():
                _put_param(raw[section], param, param_value)
        else:
            raw[section][key] = checked[key]
    return validate(from_dict(raw))


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise AttnlabError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as err:
        raise AttnlabError(f"{path}: invalid TOML: {err}") from None
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


def load_preset(name_or_file: str) -> ExperimentConfig:
    path = resolve_preset(name_or_file)
    raw = load_toml(path)
    if "name" in raw:  # a shared preset must not place run directories anywhere
        check_name(raw["name"], f"{path}: name")
    else:
        raw["name"] = safe_name(path.stem)
    return validate(from_dict(raw, source=str(path)))


def validate(config: ExperimentConfig) -> ExperimentConfig:
    """Cross-field checks and registry lookups; returns the config unchanged when valid."""
    from attnlab.data.tasks import TASKS
    from attnlab.decode.strategy import check_decode
    from attnlab.nn.archs import ARCHITECTURES
    from attnlab.nn.attention import ATTENTION

    d, m, dec = config.data, config.model, config.decode
    if d.task != "corpus" and d.task not in TASKS:
        raise unknown_choice("data.task", d.task, [*TASKS.names(), "corpus"])
    if d.min_len > d.max_len:
        raise AttnlabError(f"data.min_len={d.min_len} is greater than data.max_len={d.max_len}")
    if m.arch not in ARCHITECTURES:
        raise unknown_choice("model.arch", m.arch, ARCHITECTURES.names())
    spec = ARCHITECTURES.get(m.arch).meta
    _check_flat_params(m, spec.variants(m))
    spec.check(config)  # arch-specific: roles, sizes
    for key, value in m.attn_params.items():
        if "." in key:
            continue  # qualified: checked against its variant when set
        for entry in ATTENTION.entries():
            hp = entry.meta.hparam(key)
            if hp is not None:
                hp.validate(value)
    check_decode(dec)  # the decoder registry: its name, flag conflicts, its own options
    return config


def _check_flat_params(m: ModelConfig, chosen: tuple[str, ...]) -> None:
    """A flat ``model.<name>`` must mean one thing: the chosen variants that read it (and
    have no qualified value) declare it with the same default; else name the qualified keys."""
    from attnlab.nn.attention import ATTENTION

    for key in (k for k in m.attn_params if "." not in k):
        readers = []
        for variant in dict.fromkeys(chosen):
            hp = ATTENTION.get(variant).meta.hparam(key) if variant in ATTENTION else None
            if hp is not None and f"{variant}.{key}" not in m.attn_params:
                readers.append((variant, hp))
        if len({(type(hp.default), hp.default) for _, hp in readers}) > 1:
            said = " and ".join(f"{v} (default {hp.default})" for v, hp in readers)
            keys = ", ".join(f"model.{v}.{key}" for v, _ in readers)
            raise AttnlabError(
                f"model.{key} is ambiguous: {said} both read it; set {keys} instead"
            )


def dumps_toml(config: ExperimentConfig) -> str:
    """Serialise a config as TOML (a tiny writer: sections of scalars and lists, then one
    ``[model.<variant>]`` table per variant with qualified hyper-parameters)."""
    raw = to_dict(config)
    lines = [f"name = {_toml_value(raw['name'])}", f"description = {_toml_value(raw['description'])}"]
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
    "task", "vocab_size", "tokenizer", "subword_vocab", "lowercase", "min_freq", "max_vocab",
    "shared_vocab",
)


def shaping_change(
    saved: dict[str, Any], config: ExperimentConfig, source: str
) -> tuple[str, Any, Any] | None:
    """The first ``(key, saved value, new value)`` where ``config`` builds a different model or
    vocabulary than ``saved`` (a checkpoint's config table), or None."""
    before = to_dict(from_dict(saved, source=source))  # fills keys an older version did not write
    after = to_dict(config)
    model_keys = sorted(set(before["model"]) | set(after["model"]))
    checked = [("model", k) for k in model_keys if k not in RESUME_FREE_MODEL_KEYS]
    for section, key in [*checked, *(("data", k) for k in VOCABULARY_KEYS)]:
        old, new = before[section].get(key), after[section].get(key)
        if old != new:
            return f"{section}.{key}", old, new
    return None
