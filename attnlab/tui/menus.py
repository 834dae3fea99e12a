"""Setup menus generated from the registries, and the Setup form -> ExperimentConfig step.

No textual here. ``load_menus()`` imports the registries (the attention registry imports
torch, about a second), so the app calls it from a background thread after the first frame
and builds the Setup menus from the returned snapshot. A variant registered anywhere
(``@register_attention``, an ``attnlab.attention`` entry point, a test) appears with no UI edit;
so does an architecture: its ``ArchSpec`` (attnlab.nn.archs) declares its attention slots
and fields. Hyper-parameters belong to a variant: the form's values are keyed
``variant.name`` and each shows that variant's own default.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnlab.config import (
    CHOICES,
    INT_MAX,
    RANGES,
    ExperimentConfig,
    ModelConfig,
    params_for,
    to_dict,
)
from attnlab.errors import AttnlabError
from attnlab.nn.archs import ArchSpec, AttentionSlot

SAME_AS_ENCODER = ""  # an empty slot value: the slot's ``same_as`` rule (ArchSpec.resolve)


@dataclass(frozen=True)
class HParamInfo:
    name: str
    default: Any
    help: str
    low: float | None
    high: float | None
    choices: tuple[str, ...]
    variants: tuple[str, ...]  # the variant that owns it (one)

    @property
    def key(self) -> str:
        """``variant.name``: the form's key and the config's qualified ``model.<key>``."""
        return f"{self.variants[0]}.{self.name}"

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
    hparams: dict[str, HParamInfo]  # by "variant.name": every variant's own defaults
    presets: list[str] = field(default_factory=list)
    decoders: list[tuple[str, str]] = field(default_factory=list)  # (label, name), Inspect's
    arch_specs: dict[str, ArchSpec] = field(default_factory=dict)
    # task -> the data.* fields it reads (attnlab.data.task_registry.fields_read)
    task_fields: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def reads(self, task: str, key: str) -> bool:
        """Whether ``task`` reads data field ``key`` (a task not in the snapshot: every one)."""
        fields = self.task_fields.get(task)
        return fields is None or key in fields

    def data_fields(self) -> tuple[str, ...]:
        """Every data field a listed task reads (Setup's Data section, in the tasks' order)."""
        from attnlab.data.task_registry import declared_fields

        return declared_fields(self.task_fields.get(name, ()) for name, _ in self.tasks)

    def variants_for(self, role: str) -> list[str]:
        return [name for name, v in self.variants.items() if role in v.roles]

    def roles_of(self, name: str) -> frozenset[str]:
        info = self.variants.get(name)
        return info.roles if info else frozenset()

    def hparams_of(self, variant: str) -> list[HParamInfo]:
        info = self.variants.get(variant)
        return [self.hparams[f"{variant}.{h}"] for h in (info.hparams if info else ())]

    def slots(self, arch: str) -> tuple[AttentionSlot, ...]:
        spec = self.arch_specs.get(arch)
        return spec.slots if spec else ()

    def all_slots(self) -> list[AttentionSlot]:
        """Every architecture's slots, one per config key (first declaration wins)."""
        seen: dict[str, AttentionSlot] = {}
        for spec in self.arch_specs.values():
            for slot in spec.slots:
                seen.setdefault(slot.key, slot)
        return list(seen.values())

    def resolve(self, arch: str, values: Mapping[str, Any]) -> dict[str, str]:
        """Slot key -> variant, by the architecture's rule, with this snapshot's roles."""
        spec = self.arch_specs.get(arch)
        return spec.resolve(values, self.roles_of) if spec else {}


def load_menus() -> Menus:
    """Read the task, architecture and attention registries (imports torch)."""
    from attnlab.config import preset_names
    from attnlab.data.tasks import TASKS
    from attnlab.nn.archs import ARCHITECTURES
    from attnlab.nn.attention import ATTENTION

    tasks = [(e.name, getattr(e.meta, "description", "")) for e in TASKS.entries()]
    tasks.append(("corpus", "parallel text from data.path (folder or .tsv)"))
    archs = [(e.name, getattr(e.meta, "description", "")) for e in ARCHITECTURES.entries()]
    variants: dict[str, VariantInfo] = {}
    hparams: dict[str, HParamInfo] = {}
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
        for hp in spec.hparams:  # each variant's own declaration (its default, its range)
            hparams[f"{entry.name}.{hp.name}"] = HParamInfo(
                hp.name, hp.default, hp.help, hp.low, hp.high, tuple(hp.choices), (entry.name,)
            )
    try:
        presets = preset_names()
    except OSError:
        presets = []
    from attnlab.tui.inspect_engine import decoder_choices

    specs = {e.name: e.meta for e in ARCHITECTURES.entries() if isinstance(e.meta, ArchSpec)}
    from attnlab.data.task_registry import fields_read

    task_fields = {name: fields_read(name) for name, _ in tasks}
    return Menus(tasks, archs, variants, hparams, presets, decoder_choices(), specs, task_fields)


def chosen_variants(menus: Menus, arch: str, values: Mapping[str, Any]) -> list[str]:
    """The distinct variants the form's slots resolve to, in slot order."""
    return [name for name in dict.fromkeys(menus.resolve(arch, values).values()) if name]


def hparam_groups(
    menus: Menus, arch: str, values: Mapping[str, Any]
) -> list[tuple[str, list[HParamInfo]]]:
    """The chosen variants' hyper-parameters grouped by variant, titled with the slots that
    use it (``"enc self + dec self: performer"``). Each variant has its own values and
    defaults; a variant in several slots has one set (values are per variant, not per slot)."""
    titles: dict[str, list[str]] = {}
    resolved = menus.resolve(arch, values)
    for slot in menus.slots(arch):
        name = resolved.get(slot.key, "")
        if name:
            titles.setdefault(name, []).append(slot.title)
    return [(f"{' + '.join(t)}: {name}", menus.hparams_of(name)) for name, t in titles.items()]


def effective_model(
    menus: Menus, model: ModelConfig
) -> tuple[ModelConfig, dict[str, dict[str, Any]]]:
    """``model`` without its raw parameters, and each chosen variant's values over its
    defaults: two configs that build the same model compare equal (flat or qualified keys)."""
    resolved = menus.resolve(model.arch, {"model." + k: v for k, v in vars(model).items()})
    values = {}
    for name in dict.fromkeys(resolved.values()):
        explicit = params_for(model.attn_params, name)
        values[name] = {h.name: explicit.get(h.name, h.default) for h in menus.hparams_of(name)}
    return dataclasses.replace(model, attn_params={}), values


def field_range_text(key: str) -> str:
    """Placeholder text for a numeric or closed-choice config field."""
    if key in CHOICES:
        return " | ".join(CHOICES[key])
    if key in RANGES:
        lo, hi = RANGES[key]
        if hi is not None and hi >= INT_MAX:  # a 64-bit bound is no range a user reads
            hi = None
        return f"[{'-inf' if lo is None else _bound(lo)}, {'inf' if hi is None else _bound(hi)}]"
    return ""


def _bound(value: float) -> str:
    """``1000000`` as it is (not ``1e+06``); fractions as ``:g`` writes them."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# section.key, or model.<variant>.<name> for a variant's hyper-parameter
_KEY_IN_MESSAGE = re.compile(r"\b(data|model|train|decode)\.([A-Za-z_]+|[\w-]+\.[A-Za-z_]+)")


def key_in_message(message: str) -> str | None:
    """The first ``section.key`` an AttnlabError message names (to mark that field)."""
    match = _KEY_IN_MESSAGE.search(message)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def check_field(key: str, value: Any) -> str | None:
    """The one-line error for one field on its own (type, range, closed choices), or None."""
    from attnlab.experiment import from_dict  # the registries import torch: lazily

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
    the config module); ``hparams`` maps the chosen variants' ``variant.name`` keys to values.
    Fields not in the form keep ``base``'s values.
    """
    from attnlab.experiment import from_dict, validate  # the registries import torch: lazily

    raw = to_dict(base)
    model_fields = set(to_dict(ExperimentConfig())["model"])
    # Drop base's attention hyper-parameters: the form's inputs are the source of truth.
    raw["model"] = {k: v for k, v in raw["model"].items() if k in model_fields}
    for key, value in values.items():
        section, name = key.split(".", 1)
        raw[section][name] = value
    for key, value in hparams.items():
        raw["model"][key] = value  # "variant.name": that variant's own value
    return validate(from_dict(raw, source="setup"))
