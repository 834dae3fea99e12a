"""What a CTranslate2 Transformer can represent, checked on the config alone (no ctranslate2).

CTranslate2 runs one computation graph: embeddings · √d_model + a position table, then
pre- or post-norm layers of softmax dot-product attention (optionally Shaw relative positions
or rotary queries/keys in self-attention, fewer key/value heads than query heads) and a
ReLU/GELU feed-forward block; at least one encoder layer. A decoder-only model is one causal
stack of the same layers (a Generator, which also has ALiBi). Anything else is refused here, in
one line that names the setting and what CTranslate2 supports.
"""

from __future__ import annotations

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError
from attnlab.nn.archs import DECODER_ONLY, TRANSFORMER

# Variants with CTranslate2's exact computation, per role (self = encoder or decoder self).
SELF_VARIANTS = ("scaled-dot", "gqa", "relative")
CROSS_VARIANTS = ("scaled-dot", "gqa")
ACTIVATIONS = ("relu", "gelu")
NORMS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned", "none", "rotary")
RELATIVE = "relative"
# Weight types the CLI (--quantization) and the lab offer; CTranslate2 converts to more, and
# attnlab.exporters.ctranslate2 accepts them all.
OFFERED_QUANTIZATIONS = ("int8", "int8_float32", "float16", "bfloat16")

# Variants of a decoder-only stack's one self-attention that a Generator computes exactly.
GENERATOR_VARIANTS = ("scaled-dot", "gqa", "relative", "alibi")

_WHY_NOT = {
    "alibi": "CTranslate2 has ALiBi only in decoder-only models (model.arch=decoder-only), "
    "not in an encoder–decoder",
}


# CTranslate2's decoder-only models (its Generator) have a causal stack only.
GENERATOR_PREFIXES = ("causal",)


def _slots(config: ExperimentConfig) -> dict[str, str]:
    """Config key -> the variant built there (the empty decoder self-attention resolved)."""
    spec = DECODER_ONLY if config.model.arch == "decoder-only" else TRANSFORMER
    return spec.resolve(config.model)


def check_exportable(config: ExperimentConfig) -> None:
    """Refuse a model CTranslate2 cannot compute exactly: one AttnlabError line."""
    m = config.model
    if m.arch not in ("transformer", "decoder-only"):
        raise AttnlabError(
            f"model.arch={m.arch}: CTranslate2 export takes Transformers only "
            "(model.arch=transformer as a Translator, decoder-only as a Generator)"
        )
    if m.arch == "decoder-only":
        if m.prefix not in GENERATOR_PREFIXES:
            raise AttnlabError(
                f"model.prefix={m.prefix}: a CTranslate2 Generator reads its prompt causally; "
                "export needs model.prefix=causal"
            )
    elif m.enc_layers < 1:
        raise AttnlabError(
            f"model.enc_layers={m.enc_layers}: a CTranslate2 Transformer needs at least one "
            "encoder layer"
        )
    for key, value, valid in (
        ("model.activation", m.activation, ACTIVATIONS),
        ("model.norm", m.norm, NORMS),
        ("model.positions", m.positions, POSITIONS),
    ):
        if value not in valid:
            raise AttnlabError(
                f"{key}={value}: CTranslate2 export supports {', '.join(valid)} here"
            )
    slots = _slots(config)
    for key, name in slots.items():
        cross = key == "model.cross_attention"
        valid = CROSS_VARIANTS if cross else SELF_VARIANTS
        if m.arch == "decoder-only":
            valid = GENERATOR_VARIANTS
        if name not in valid:
            why = _WHY_NOT.get(
                name,
                "CTranslate2 computes exact softmax(q·k/√d_h) attention (with optional "
                f"relative or rotary positions and shared key/value heads), which {name} is not",
            )
            raise AttnlabError(
                f"{key}={name}: {why}; exportable {'cross' if cross else 'self'}-attention "
                f"variants: {', '.join(valid)}"
            )
    relative_keys = [key for key, name in slots.items() if name == RELATIVE]
    if relative_keys and m.positions != "none":
        raise AttnlabError(
            f"{relative_keys[0]}=relative with model.positions={m.positions}: CTranslate2 "
            "drops absolute positions in a stack with relative positions; export needs "
            "model.positions=none (as presets/reverse-transformer-relative.toml has)"
        )
