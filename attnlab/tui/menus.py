"""Setup menus generated from the registries, and the Setup form -> ExperimentConfig step.

No textual here. ``load_menus()`` imports the registries (the attention registry imports
torch, about a second), so the app calls it from a background thread after the first frame
and builds the Setup menus from the returned snapshot. A variant registered anywhere
(``@register_attention``, an ``attnlab.attention`` entry point, a test) appears with no UI edit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnlab.config import CHOICES, RANGES, ExperimentConfig, from_dict, to_dict, validate
from attnlab.errors import AttnlabError

# Which config key picks the attention for which role, per architecture.
RNN_ATTENTION_KEYS = {"model.attention": "rnn-cross"}
TRANSFORMER_ATTENTION_KEYS = {
    "model.self_attention": "self",
    "model.decoder_self_attention": "causal-self",
    "model.cross_attention": "cross",
}
SAME_AS_ENCODER = ""  # model.decoder_self_attention = "" means "same as encoder self"


@dataclass(frozen=True)
class HParamInfo:
    name: str
    default: Any
    help: str
    low: float | None
    high: float | None
    choices: tuple[str, ...]
    variants: tuple[str, ...]  # variants that read it

    def range_text(self) -> str:
        if self.choices:
            return " | ".join(self.choices)
        if isinstance(self.default, bool):
            return "true | false"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return f"[{lo}, {hi}]"


@dataclass(frozen=True)
class VariantInfo:
    name: str
    roles: frozenset[str]
    formula: str
    complexity: str
    known_for: str
    paper: str
    hparams: tuple[str, ...]


@dataclass(frozen=True)
class Menus:
    """A snapshot of the registries, enough to build every Setup menu."""

    tasks: list[tuple[str, str]]  # (name, one-line description)
    archs: list[tuple[str, str]]
    variants: dict[str, VariantInfo]
    hparams: dict[str, HParamInfo]
    presets: list[str] = field(default_factory=list)
    decoders: list[tuple[str, str]] = field(default_factory=list)  # (label, name), Inspect's

    def variants_for(self, role: str) -> list[str]:
        return [name for name, v in self.variants.items() if role in v.roles]

    def hparams_of(self, names: list[str]) -> list[HParamInfo]:
        """The union of the hyper-parameters the chosen variants read (first-seen order)."""
        seen: dict[str, HParamInfo] = {}
        for name in names:
            info = self.variants.get(name)
            for hp in info.hparams if info else ():
                seen.setdefault(hp, self.hparams[hp])
        return list(seen.values())


def load_menus() -> Menus:
    """Read the task, architecture and attention registries (imports torch)."""
    from attnlab.config import preset_names
    from attnlab.data.tasks import TASKS
    from attnlab.nn.attention import ATTENTION
    from attnlab.nn.model import ARCHITECTURES

    tasks = [(e.name, getattr(e.meta, "description", "")) for e in TASKS.entries()]
    tasks.append(("corpus", "parallel text from data.path (folder or .tsv)"))
    archs = [(e.name, getattr(e.meta, "description", "")) for e in ARCHITECTURES.entries()]
    variants: dict[str, VariantInfo] = {}
    hparams: dict[str, HParamInfo] = {}
    users: dict[str, list[str]] = {}
    for entry in ATTENTION.entries():
        spec = entry.meta
        variants[entry.name] = VariantInfo(
            entry.name,
            frozenset(spec.roles),
            spec.formula,
            spec.complexity,
            spec.known_for,
            getattr(spec, "paper", ""),
            tuple(h.name for h in spec.hparams),
        )
        for hp in spec.hparams:
            users.setdefault(hp.name, []).append(entry.name)
            if hp.name not in hparams:
                hparams[hp.name] = HParamInfo(
                    hp.name, hp.default, hp.help, hp.low, hp.high, tuple(hp.choices), ()
                )
    hparams = {
        k: HParamInfo(v.name, v.default, v.help, v.low, v.high, v.choices, tuple(users[k]))
        for k, v in hparams.items()
    }
    try:
        presets = preset_names()
    except OSError:
        presets = []
    from attnlab.tui.inspect_engine import decoder_choices

    return Menus(tasks, archs, variants, hparams, presets, decoder_choices())


def attention_keys(arch: str) -> dict[str, str]:
    """Config key -> role of the attention menus shown for an architecture."""
    return TRANSFORMER_ATTENTION_KEYS if arch == "transformer" else RNN_ATTENTION_KEYS


def chosen_variants(arch: str, values: Mapping[str, Any]) -> list[str]:
    names = []
    for key in attention_keys(arch):
        name = values.get(key)
        if key == "model.decoder_self_attention" and not name:
            name = values.get("model.self_attention")
        if name and name not in names:
            names.append(str(name))
    return names


ROLE_TITLES = {
    "model.attention": "attention",
    "model.self_attention": "enc self",
    "model.decoder_self_attention": "dec self",
    "model.cross_attention": "cross",
}


def hparam_groups(menus: Menus, arch: str, values: Mapping[str, Any]) -> list[tuple[str, list[HParamInfo]]]:
    """The chosen variants' hyper-parameters grouped by variant, titled with the roles that
    use it (``"enc self + dec self: performer"``); a parameter read by several chosen variants
    is listed once, under the first (they share one ``model.<name>`` value)."""
    roles: dict[str, list[str]] = {}
    for key in attention_keys(arch):
        name = values.get(key)
        if key == "model.decoder_self_attention" and not name:
            name = values.get("model.self_attention")
        if name:
            roles.setdefault(str(name), []).append(ROLE_TITLES[key])
    seen: set[str] = set()
    groups = []
    for name, titles in roles.items():
        info = menus.variants.get(name)
        params = [menus.hparams[h] for h in (info.hparams if info else ()) if h not in seen]
        seen.update(h.name for h in params)
        groups.append((f"{' + '.join(titles)}: {name}", params))
    return groups


def field_range_text(key: str) -> str:
    """Placeholder text for a numeric or closed-choice config field."""
    if key in CHOICES:
        return " | ".join(CHOICES[key])
    if key in RANGES:
        lo, hi = RANGES[key]
        return f"[{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"
    return ""


_KEY_IN_MESSAGE = re.compile(r"\b(data|model|train|decode)\.([A-Za-z_]+)")


def key_in_message(message: str) -> str | None:
    """The first ``section.key`` an AttnlabError message names (to mark that field)."""
    match = _KEY_IN_MESSAGE.search(message)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def check_field(key: str, value: Any) -> str | None:
    """The one-line error for one field on its own (type, range, closed choices), or None."""
    section, name = key.split(".", 1)
    try:
        from_dict({section: {name: value}}, source="setup")
    except AttnlabError as err:
        return str(err)
    return None


def config_from_form(
    base: ExperimentConfig, values: Mapping[str, Any], hparams: Mapping[str, Any]
) -> ExperimentConfig:
    """The experiment the Setup form describes; raises AttnlabError (one line) when invalid.

    ``values`` maps ``section.key`` to the widget value (strings from inputs are coerced by
    the config module); ``hparams`` maps the chosen variants' hyper-parameter names to values.
    Fields not in the form keep ``base``'s values.
    """
    raw = to_dict(base)
    model_fields = set(to_dict(ExperimentConfig())["model"])
    # Drop base's attention hyper-parameters: the form's inputs are the source of truth.
    raw["model"] = {k: v for k, v in raw["model"].items() if k in model_fields}
    for key, value in values.items():
        section, name = key.split(".", 1)
        raw[section][name] = value
    for name, value in hparams.items():
        raw["model"][name] = value
    return validate(from_dict(raw, source="setup"))
