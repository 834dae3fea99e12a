"""An experiment's configuration checked against the registries: parse, override, validate.

attnlab.config is the ground floor (plain dataclasses, TOML, the closed sets and ranges of the
fixed fields); it imports no registry. This module sits above the registries (tasks, attention
variants, architectures, decoders): it knows the attention hyper-parameters, so it turns TOML
tables and ``--set`` strings into configs (``from_dict``, ``apply_overrides``, ``load_preset``)
and runs the cross-field and registry checks (``validate``). Each variant owns its
parameters: ``[model.sliding-window] window = 16`` in TOML, ``--set
model.sliding-window.window=16`` on the command line; the older flat form ``model.window``
works where it is unambiguous. Every user mistake raises AttnlabError naming the key, the
value and what is valid.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from attnlab.config import (
    RESUME_FREE_MODEL_KEYS,
    SECTIONS,
    VOCABULARY_KEYS,
    ExperimentConfig,
    ModelConfig,
    TrainConfig,
    _check_value,
    _coerce,
    _put_param,
    check_name,
    load_toml,
    resolve_preset,
    safe_name,
    to_dict,
)
from attnlab.data.task_registry import task_metrics
from attnlab.data.tasks import TASKS
from attnlab.decode.resolve import check_coverage, check_decode
from attnlab.errors import AttnlabError, did_you_mean, unknown_choice
from attnlab.nn.archs import ARCHITECTURES, normalisation_of, variant_of
from attnlab.nn.attention import ATTENTION  # importing the package registers the variants


def _attention_hparams() -> dict[str, Any]:
    """All hyper-parameters declared by registered attention variants: name -> HParam."""
    found: dict[str, Any] = {}
    for entry in ATTENTION.entries():
        for hp in entry.meta.hparams:
            found.setdefault(hp.name, hp)
    return found


def _variant_hparam(key: str, source: str) -> tuple[str, Any]:
    """``variant.name`` -> (the key as stored, the variant's HParam); AttnlabError naming
    the variants or the variant's parameters when either is unknown."""
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
            f"{source}: unknown key model.{key}"
            f"{did_you_mean(name, [h.name for h in spec.hparams])}; "
            f"{variant}'s hyper-parameters: {own}"
        )
    return f"{variant}.{name}", hp


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
            raise AttnlabError(
                f"{source}: unknown section {key!r}{did_you_mean(key, valid)}; "
                f"valid: {', '.join(valid)}"
            )
    built = {name: SECTIONS[name](**values) for name, values in sections.items()}
    return ExperimentConfig(**top, **built)


def apply_overrides(
    config: ExperimentConfig, overrides: list[str] | tuple[str, ...]
) -> ExperimentConfig:
    """Apply ``SECTION.KEY=VALUE`` strings (the CLI's ``--set``); ``name=`` and
    ``description=`` set the top-level fields."""
    raw = to_dict(config)  # attention params are flat keys of raw["model"], as in a preset
    flat: list[tuple[str, str]] = []  # (the --set item, the flat attention parameter it sets)
    for item in overrides:
        if "=" not in item:
            raise AttnlabError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. model.attention=luong-general"
            )
        path, value = (part.strip() for part in item.split("=", 1))
        if path in ("name", "description"):
            raw[path] = check_name(value, f"--set {item!r}") if path == "name" else value
            continue
        if "." not in path:
            raise AttnlabError(
                f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. train.max_steps=500"
            )
        section, key = path.split(".", 1)
        if section not in SECTIONS:
            raise AttnlabError(
                f"--set {item!r}: unknown section {section!r}"
                f"{did_you_mean(section, SECTIONS)}; valid: {', '.join(SECTIONS)}"
            )
        checked: dict[str, Any] = {}
        _set_in(section, checked, key, value, "--set")  # errors name --set, not the preset
        if "attn_params" in checked:
            for param, param_value in checked["attn_params"].items():
                _put_param(raw[section], param, param_value)
                if "." not in param:
                    flat.append((item, param))
        else:
            raw[section][key] = checked[key]
    result = validate(from_dict(raw))
    _check_flat_overrides_are_read(result, flat)
    return result


def _check_flat_overrides_are_read(config: ExperimentConfig, flat: list[tuple[str, str]]) -> None:
    """A flat ``--set model.<name>=...`` that no chosen variant reads would change nothing:
    refuse it, naming the chosen variants and those that read it (a stored config may keep
    such a value from an earlier choice; only the command line is checked)."""
    m = config.model
    chosen = tuple(dict.fromkeys(ARCHITECTURES.get(m.arch).meta.variants(m)))
    for item, param in flat:
        if any(_declared(variant, param) for variant in chosen):
            continue
        readers = [e.name for e in ATTENTION.entries() if e.meta.hparam(param) is not None]
        raise AttnlabError(
            f"--set {item!r}: no chosen attention variant reads {param} (chosen: "
            f"{', '.join(chosen)}); it is read by {', '.join(readers)}"
        )


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
    if config.train.prefix_loss and not spec.reads_source_causally:
        raise AttnlabError(
            f"train.prefix_loss=true needs model.arch=decoder-only (model.arch={m.arch} "
            "reads its source with an encoder, which predicts nothing)"
        )
    declared = task_metrics(d.task)
    if declared and config.train.metric not in (*declared, TrainConfig.metric):
        raise AttnlabError(
            f"train.metric={config.train.metric}: data.task={d.task} reports "
            f"{', '.join(declared)}; pick one of those"
        )
    if d.task == "lm" and config.train.batch_tokens > 0:
        raise AttnlabError(
            f"train.batch_tokens={config.train.batch_tokens}: a language model's batch is "
            "train.batch_size windows of data.block_size tokens; set train.batch_tokens=0"
        )
    if d.task == "lm" and not spec.reads_source_causally:
        raise AttnlabError(
            f"data.task=lm needs model.arch=decoder-only (model.arch={m.arch} is an "
            "encoder-decoder, and a language model has no source to encode)"
        )
    for key, value in m.attn_params.items():
        if "." in key:
            continue  # qualified: checked against its variant when set
        for entry in ATTENTION.entries():
            hp = entry.meta.hparam(key)
            if hp is not None:
                hp.validate(value)
    check_decode(dec)  # the decoder registry: its name, flag conflicts, its own options
    check_coverage(dec, variant_of(config, "cross"), normalisation_of(config, "cross"))
    return config


def _declared(variant: str, key: str) -> Any:
    """``variant``'s hyper-parameter ``key`` (an HParam), or None (not declared, or no such
    variant: its name is refused elsewhere)."""
    return ATTENTION.get(variant).meta.hparam(key) if variant in ATTENTION else None


def _check_flat_params(m: ModelConfig, chosen: tuple[str, ...]) -> None:
    """A flat ``model.<name>`` must mean one thing: the chosen variants that read it (and
    have no qualified value) declare it with the same default; else name the qualified keys."""
    for key in (k for k in m.attn_params if "." not in k):
        readers = []
        for variant in dict.fromkeys(chosen):
            hp = _declared(variant, key)
            if hp is not None and f"{variant}.{key}" not in m.attn_params:
                readers.append((variant, hp))
        if len({(type(hp.default), hp.default) for _, hp in readers}) > 1:
            said = " and ".join(f"{v} (default {hp.default})" for v, hp in readers)
            keys = ", ".join(f"model.{v}.{key}" for v, _ in readers)
            raise AttnlabError(f"model.{key} is ambiguous: {said} both read it; set {keys} instead")


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
