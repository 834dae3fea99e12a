"""Names and one-line descriptions of experiments, shared by the CLI and the lab.

One rule names every run: ``<task>-<arch>-<variants>-<YYYYmmdd-HHMMSS>``. ``<variants>`` is
the RNN's attention, or the Transformer's three roles resolved the way the engine builds
them (an empty decoder self-attention means the encoder's variant, see
``attnlab.nn.transformer.decoder_self_attention_name``): one name when all three agree,
else ``<enc-self>_<dec-self>_<cross>``. Names are one path component of ``[A-Za-z0-9._-]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from attnlab.config import NAME_MAX, ExperimentConfig, ModelConfig, safe_name

STAMP_FORMAT = "%Y%m%d-%H%M%S"
# Room for "-YYYYmmdd-HHMMSS" and the lab's "-N" collision suffix within NAME_MAX.
EXPERIMENT_NAME_MAX = NAME_MAX - 24


@dataclass(frozen=True)
class Roles:
    """The attention variant in each role of a model, as the engine builds it."""

    arch: str
    enc_self: str = ""
    dec_self: str = ""
    cross: str = ""

    @property
    def variants(self) -> tuple[str, ...]:
        if self.arch != "transformer":
            return (self.cross,)
        return (self.enc_self, self.dec_self, self.cross)


def resolved_decoder_self_attention(model: ModelConfig) -> str:
    """The decoder self-attention the engine builds (same rule as the Transformer's)."""
    if model.decoder_self_attention:
        return model.decoder_self_attention
    # The registry imports torch; the engine rule lives next to the model that uses it.
    from attnlab.nn.transformer import decoder_self_attention_name

    return decoder_self_attention_name(model)


def attention_roles(model: ModelConfig) -> Roles:
    if model.arch != "transformer":
        return Roles(model.arch, cross=model.attention)
    return Roles(model.arch, model.self_attention, resolved_decoder_self_attention(model), model.cross_attention)


def roles_text(roles: Roles, sep: str = "_") -> str:
    """``bahdanau``; ``scaled-dot``; ``performer_relative_linformer`` (enc / dec / cross)."""
    variants = roles.variants
    return variants[0] if len(set(variants)) == 1 else sep.join(variants)


def variants_text(model: ModelConfig, sep: str = "_") -> str:
    return roles_text(attention_roles(model), sep)


def experiment_name(config: ExperimentConfig) -> str:
    """``<task>-<arch>-<variants>``: what the experiment is, without a time stamp; a valid run
    name (``attnlab.config.safe_name``, the run-name rule) short enough for a stamp and suffix."""
    text = f"{config.data.task}-{config.model.arch}-{variants_text(config.model)}"
    return safe_name(text)[:EXPERIMENT_NAME_MAX].rstrip("-")


def run_name_for(config: ExperimentConfig, now: float | None = None) -> str:
    """A new run's name: ``<task>-<arch>-<variants>-<YYYYmmdd-HHMMSS>`` (local time)."""
    return f"{experiment_name(config)}-{time.strftime(STAMP_FORMAT, time.localtime(now))}"


def describe(config: ExperimentConfig) -> str:
    """A one-line description of the experiment (what Setup → Save writes)."""
    m = config.model
    roles = attention_roles(m)
    if m.arch == "transformer":
        model = (
            f"Transformer d_model={m.d_model}, {m.heads} heads, {m.enc_layers}+{m.dec_layers} layers; "
            f"encoder self-attention {roles.enc_self}, decoder self-attention {roles.dec_self}, "
            f"cross-attention {roles.cross}"
        )
    else:
        model = f"{m.cell.upper()} encoder-decoder (hidden {m.hidden}) with {roles.cross} attention"
    return f"{config.data.task}: {model}; {config.train.max_steps} steps"
