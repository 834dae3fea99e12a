"""Architecture registry and what each architecture declares (no torch at import).

An ``ArchSpec`` says which config keys pick its attention variants (``AttentionSlot``: key,
role, labels, what an empty value means), which other ``model.*`` fields it reads, and how
to summarise a config in a line. The CLI, the lab (menus, queue-every-variant, Setup
summary), run names and the run list all read these declarations, so a new architecture is
one registration here (or anywhere) and no edit in the lab.

The model classes import torch; the built-in factories and checks import them on first use,
so listing runs or naming them never loads torch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnlab.registry import Registry

if TYPE_CHECKING:
    from attnlab.config import ExperimentConfig, ModelConfig

# Roles a variant can play (the attention registry's names, repeated here without torch).
ROLE_RNN_CROSS, ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS = (
    "rnn-cross",
    "self",
    "causal-self",
    "cross",
)

# variant name -> its roles, or None when unknown (the registry is not loaded, or no such name)
RolesOf = Callable[[str], "frozenset[str] | None"]


@dataclass(frozen=True)
class AttentionSlot:
    """One place in an architecture that takes an attention variant.

    An empty value means the variant of the slot ``same_as`` (a config key), when that
    variant can play ``role``; otherwise ``fallback``.
    """

    key: str  # the config key, "model.self_attention"
    role: str  # the role a variant must declare to fill it
    name: str  # short id in run records (the start event's "roles"): "enc_self"
    label: str  # the Setup menu's label: "enc self-attn"
    title: str  # the hyper-parameter group's title: "enc self"
    same_as: str = ""
    fallback: str = ""
    empty_label: str = ""  # the menu entry for the empty value, e.g. "same as encoder"

    @property
    def field(self) -> str:
        return self.key.split(".", 1)[1]


@dataclass(frozen=True)
class ArchSpec:
    description: str
    # Config-time checks (attention roles, sizes); raise AttnlabError with a one-line reason.
    check: Callable[[ExperimentConfig], None]
    slots: tuple[AttentionSlot, ...] = ()
    # Other model.* fields the architecture reads, as (config key, Setup label), in menu order.
    fields: tuple[tuple[str, str], ...] = ()
    sweep: str = ""  # the slot key "queue every variant" varies ("" = the first slot)
    # (model config, slot key -> resolved variant) -> the model part of summaries.
    short: Callable[[ModelConfig, Mapping[str, str]], str] | None = None
    long: Callable[[ModelConfig, Mapping[str, str]], str] | None = None
    # Maps that are a block of a slot's map, as (model key, slot name): the decoder-only
    # model's "cross" is the target-over-prompt block of its one self-attention "dec_self".
    blocks: tuple[tuple[str, str], ...] = ()
    # The model.* key counting the layers of its cross map ("" = one: the RNN's attention).
    cross_layers: str = ""
    # Why a training step cannot be one CUDA graph ("" = it can).
    graph_refusal: str = ""
    abbrev: str = ""  # the run list's short name ("" = the registered name)
    reads_source_causally: bool = False  # its source positions predict (train.prefix_loss)

    def slot(self, key: str) -> AttentionSlot:
        return next(s for s in self.slots if s.key == key)

    @property
    def sweep_slot(self) -> AttentionSlot | None:
        if self.sweep:
            return self.slot(self.sweep)
        return self.slots[0] if self.slots else None

    def resolve(
        self, model: ModelConfig | Mapping[str, Any], roles_of: RolesOf | None = None
    ) -> dict[str, str]:
        """Slot key -> the variant the engine builds there (the one rule for an empty value).

        ``model`` is a ModelConfig or a mapping of field names (``self_attention``) or config
        keys (``model.self_attention``). ``roles_of`` defaults to the attention registry
        (imports torch); a ``roles_of`` that does not know a variant keeps ``same_as``.
        """
        lookup = _roles_from_registry if roles_of is None else roles_of
        chosen = {s.key: _value(model, s) for s in self.slots}
        out: dict[str, str] = {}
        for s in self.slots:
            name = chosen[s.key]
            if not name and s.same_as:
                name = out.get(s.same_as) or chosen.get(s.same_as, "")
                roles = lookup(name) if name else None
                if roles is not None and s.role not in roles:
                    name = s.fallback
            out[s.key] = name or s.fallback
        return out

    def variants(
        self, model: ModelConfig | Mapping[str, Any], roles_of: RolesOf | None = None
    ) -> tuple[str, ...]:
        return tuple(self.resolve(model, roles_of).values())

    def roles(self, model: ModelConfig, roles_of: RolesOf | None = None) -> dict[str, str]:
        """What a run records: ``{"arch": ..., slot name: variant}``."""
        resolved = self.resolve(model, roles_of)
        return {"arch": model.arch, **{s.name: resolved[s.key] for s in self.slots}}

    def summary(self, config: ExperimentConfig, roles_of: RolesOf | None = None) -> str:
        """The model in a few words (Setup's status line): ``gru+bahdanau``, ``a/b/c``."""
        resolved = self.resolve(config.model, roles_of)
        if self.short is not None:
            return self.short(config.model, resolved)
        return "/".join(resolved.values())

    def describe(self, config: ExperimentConfig, roles_of: RolesOf | None = None) -> str:
        """The model in a sentence (what Setup → Save writes as the description)."""
        resolved = self.resolve(config.model, roles_of)
        if self.long is not None:
            return self.long(config.model, resolved)
        slots = ", ".join(f"{s.title} {resolved[s.key]}" for s in self.slots)
        return f"{config.model.arch}: {self.description}; {slots}"


def _value(model: Any, slot: AttentionSlot) -> str:
    if isinstance(model, Mapping):
        value = model.get(slot.field, model.get(slot.key, ""))
    else:
        value = getattr(model, slot.field, "")
    return "" if value is None else str(value)


def _roles_from_registry(name: str) -> frozenset[str] | None:
    from attnlab.nn.attention import ATTENTION  # imports torch and registers the variants

    # An unregistered name plays no role (the engine then builds the fallback).
    return frozenset(ATTENTION.get(name).meta.roles) if name in ATTENTION else frozenset()


def roles_if_loaded(name: str) -> frozenset[str] | None:
    """The registry's roles of ``name`` only when the registry is already imported (listing
    runs must not import torch); None (unknown) otherwise."""
    if "attnlab.nn.attention" not in sys.modules:
        return None
    return _roles_from_registry(name)


def arch_spec(arch: str) -> ArchSpec | None:
    return ARCHITECTURES.get(arch).meta if arch in ARCHITECTURES else None


def _model_of(config: Any) -> Any:
    """An ExperimentConfig's model section; a ModelConfig as given."""
    return getattr(config, "model", config)


def variant_of(config: Any, role: str) -> str | None:
    """The variant the engine builds for map ``role`` (``cross`` / ``enc-self`` / ``dec-self``,
    or the model's keys ``enc_self`` …) of ``config`` (an ExperimentConfig or a ModelConfig);
    None when the architecture has no such role (an RNN's self-attention). The RNN's
    cross-attention is ``model.attention``."""
    from attnlab.attention_map import MODEL_KEYS, role_of

    model = _model_of(config)
    spec = arch_spec(model.arch)
    if spec is None:
        return None
    key = MODEL_KEYS[role_of(role)]
    key = dict(spec.blocks).get(key, key)
    slot = next((s for s in spec.slots if s.name == key), None)
    return None if slot is None else spec.resolve(model)[slot.key]


def cross_layer_count(config: Any) -> int:
    """How many layers the config's cross map has (the architecture's ``cross_layers`` key)."""
    model = _model_of(config)
    spec = arch_spec(model.arch)
    if spec is None or not spec.cross_layers:
        return 1
    return int(getattr(model, spec.cross_layers.split(".", 1)[1]))


def normalisation_of(config: Any, role: str) -> str:
    """THE lookup of how the weights of map ``role`` are normalised: the registered variant's
    ``AttentionSpec.normalisation`` (softmax / sparse / sub-stochastic / signed). A role the
    architecture lacks, or a variant the registry does not know, reads as softmax."""
    from attnlab.attention_map import (
        MODEL_KEYS,
        NORM_SOFTMAX,
        NORM_SPARSE,
        NORM_SUB_STOCHASTIC,
        role_of,
    )
    from attnlab.nn.attention import ATTENTION  # imports torch and registers the variants

    name = variant_of(config, role)
    if not name or name not in ATTENTION:
        return NORM_SOFTMAX
    kind = str(ATTENTION.get(name).meta.normalisation)
    spec = arch_spec(_model_of(config).arch)
    is_block = spec is not None and MODEL_KEYS[role_of(role)] in dict(spec.blocks)
    # A block of a row-stochastic map: its rows hold part of the mass (the rest is elsewhere).
    if is_block and kind in (NORM_SOFTMAX, NORM_SPARSE):
        return NORM_SUB_STOCHASTIC
    return kind


def normalisations_of(config: Any) -> dict[str, str]:
    """Model key (``cross``, ``enc_self``, ``dec_self``: ``ModelOutput.attentions``' keys) ->
    normalisation, for every attention slot of the config's architecture."""
    spec = arch_spec(_model_of(config).arch)
    slots = spec.slots if spec is not None else ()
    names = [s.name for s in slots] + [key for key, _ in (spec.blocks if spec else ())]
    return {name: normalisation_of(config, name) for name in names}


def _lazy(target: str) -> Callable[..., Any]:
    """``module:function`` imported on the first call (the model modules import torch)."""
    module, name = target.split(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    return call


ARCHITECTURES: Registry[Callable[..., Any]] = Registry("architecture")


# -- the built-in architectures ---------------------------------------------------------------


def _rnn_short(m: ModelConfig, resolved: Mapping[str, str]) -> str:
    return f"{m.cell}+{resolved['model.attention']}"


def _rnn_long(m: ModelConfig, resolved: Mapping[str, str]) -> str:
    return (
        f"{m.cell.upper()} encoder-decoder (hidden {m.hidden}) "
        f"with {resolved['model.attention']} attention"
    )


def _transformer_long(m: ModelConfig, resolved: Mapping[str, str]) -> str:
    return (
        f"Transformer d_model={m.d_model}, {m.heads} heads, {m.enc_layers}+{m.dec_layers} layers; "
        f"encoder self-attention {resolved['model.self_attention']}, "
        f"decoder self-attention {resolved['model.decoder_self_attention']}, "
        f"cross-attention {resolved['model.cross_attention']}"
    )


RNN = ArchSpec(
    "RNN encoder-decoder (GRU/LSTM, bidirectional encoder, bridge, input feeding) "
    "with a classic attention",
    _lazy("attnlab.nn.rnn:check_rnn_config"),
    slots=(AttentionSlot("model.attention", ROLE_RNN_CROSS, "cross", "attention", "attention"),),
    fields=(
        ("model.cell", "RNN cell"),
        ("model.hidden", "hidden size"),
        ("model.emb", "embedding"),
        ("model.layers", "layers"),
        ("model.bidirectional", "bidirectional"),
        ("model.input_feeding", "input feeding"),
    ),
    short=_rnn_short,
    long=_rnn_long,
    graph_refusal="the RNN encoder packs its sequences with lengths read on the host",
)

TRANSFORMER = ArchSpec(
    "Encoder-decoder Transformer; any registered attention in each role",
    _lazy("attnlab.nn.transformer:check_transformer"),
    slots=(
        AttentionSlot("model.self_attention", ROLE_SELF, "enc_self", "enc self-attn", "enc self"),
        AttentionSlot(
            "model.decoder_self_attention",
            ROLE_CAUSAL_SELF,
            "dec_self",
            "dec self-attn",
            "dec self",
            same_as="model.self_attention",
            fallback="scaled-dot",
            empty_label="same as encoder",
        ),
        AttentionSlot("model.cross_attention", ROLE_CROSS, "cross", "cross-attn", "cross"),
    ),
    fields=(
        ("model.d_model", "d_model"),
        ("model.heads", "heads"),
        ("model.ff", "feed-forward"),
        ("model.enc_layers", "encoder layers"),
        ("model.dec_layers", "decoder layers"),
        ("model.norm", "norm"),
        ("model.positions", "positions"),
    ),
    sweep="model.cross_attention",
    long=_transformer_long,
    cross_layers="model.dec_layers",
    abbrev="tfm",
)


def _decoder_only_long(m: ModelConfig, resolved: Mapping[str, str]) -> str:
    return (
        f"Decoder-only Transformer d_model={m.d_model}, {m.heads} heads, {m.dec_layers} layers, "
        f"{m.prefix} prefix; self-attention {resolved['model.self_attention']}"
    )


DECODER_ONLY = ArchSpec(
    "Decoder-only (GPT-style) Transformer: one causal stack; sequence tasks as prefix LMs",
    _lazy("attnlab.nn.decoder_only:check_decoder_only"),
    slots=(
        AttentionSlot("model.self_attention", ROLE_CAUSAL_SELF, "dec_self", "self-attn", "self"),
    ),
    fields=(
        ("model.d_model", "d_model"),
        ("model.heads", "heads"),
        ("model.ff", "feed-forward"),
        ("model.dec_layers", "layers"),
        ("model.norm", "norm"),
        ("model.positions", "positions"),
        ("model.prefix", "prefix"),
    ),
    short=lambda m, resolved: f"gpt+{resolved['model.self_attention']}",
    long=_decoder_only_long,
    blocks=(("cross", "dec_self"),),
    cross_layers="model.dec_layers",
    abbrev="gpt",
    reads_source_causally=True,
)

ARCHITECTURES.add("rnn", _lazy("attnlab.nn.rnn:build_rnn"), RNN)
ARCHITECTURES.add("transformer", _lazy("attnlab.nn.transformer:build_transformer"), TRANSFORMER)
ARCHITECTURES.add("decoder-only", _lazy("attnlab.nn.decoder_only:build_decoder_only"), DECODER_ONLY)
