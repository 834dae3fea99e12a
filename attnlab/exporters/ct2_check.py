"""What a CTranslate2 Transformer can represent, checked on the config alone (no ctranslate2).

CTranslate2 runs one computation graph: embeddings · √d_model + a position table, then
pre- or post-norm layers of softmax dot-product attention (optionally Shaw relative positions
or rotary queries/keys in self-attention, fewer key/value heads than query heads) and a
ReLU/GELU feed-forward block; at least one encoder layer. Anything else is refused here, in
one line that names the setting and what CTranslate2 supports.
"""

from __future__ import annotations

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError
from attnlab.nn.archs import TRANSFORMER

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

_WHY_NOT = {
    "alibi": "CTranslate2 has ALiBi only in decoder-only models, not in an encoder–decoder",
}


def _slots(config: ExperimentConfig) -> dict[str, str]:
    """Config key -> the variant built there (the empty decoder self-attention resolved)."""
    return TRANSFORMER.resolve(config.model)


def check_exportable(config: ExperimentConfig) -> None:
    """Refuse a model CTranslate2 cannot compute exactly: one AttnlabError line."""
    m = config.model
    if m.arch != "transformer":
        raise AttnlabError(
            f"model.arch={m.arch}: CTranslate2 export takes Transformer encoder–decoders only "
            "(model.arch=transformer); the RNN and the decoder-only model are not exported there"
        )
    if m.enc_layers < 1:
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
