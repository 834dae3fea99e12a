"""attnlab's TransformerSeq2Seq -> a CTranslate2 ``TransformerSpec``, weight by weight.

The mapping (attnlab.nn.transformer on the left):

- ``src_embed`` / ``tgt_embed`` -> ``encoder.embeddings_0`` / ``decoder.embeddings`` with
  ``scale_embeddings`` (× √d_model, as ``TransformerSeq2Seq._embed``); shared or tied
  weights are equal arrays, which CTranslate2 stores once (its aliasing);
- the position table -> ``position_encodings.encodings``, always explicit: the model's own
  sinusoidal buffer or learned table, zeros for ``positions = none`` (never CTranslate2's
  built-in sinusoids, whose channel order differs); absent for a relative or rotary stack;
- each ``Sublayer``'s norm -> the sublayer's ``layer_norm`` (``pre_norm`` says where it sits),
  ``encoder_norm`` / ``decoder_norm`` -> the final ``layer_norm`` (pre-norm only); ε = 1e-5,
  torch's ``nn.LayerNorm`` default, in ``config.json``;
- self-attention q, k, v -> one fused ``linear_0``; cross-attention q -> ``linear_0``, k, v
  -> fused ``linear_1``; ``out_proj`` -> the last linear; gqa's ``kv_heads`` ->
  ``num_heads_kv`` per attention; Shaw's ``rel_keys`` / ``rel_values`` ->
  ``relative_position_keys`` / ``_values`` (CTranslate2 clips j - i as attnlab does);
  rotary -> ``rotary_dim = 0`` (every channel), interleaved pairs, base 10000;
- ``output`` -> ``decoder.projection`` with its bias, where <pad> and <s> get -inf: attnlab's
  searches never produce them and renormalise over the rest (``step_log_probs``), and so
  does a softmax over that bias.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab.config import ExperimentConfig
from attnlab.data.vocab import BOS, BOS_ID, EOS, PAD_ID, UNK
from attnlab.exporters.ct2_check import RELATIVE, check_exportable
from attnlab.nn.archs import DECODER_ONLY, TRANSFORMER
from attnlab.nn.transformer import TransformerSeq2Seq

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which attnlab's norms use


def _array(tensor: torch.Tensor) -> np.ndarray:
    """A float32 copy: CTranslate2 quantizes its arrays in place, never the model's weights."""
    return tensor.detach().to("cpu", torch.float32).numpy().copy()


def _set_linear(spec: Any, *linears: nn.Linear) -> None:
    """One CTranslate2 linear from one or more torch linears stacked along the outputs."""
    spec.weight = np.concatenate([_array(lin.weight) for lin in linears], axis=0)
    spec.bias = np.concatenate([_array(lin.bias) for lin in linears], axis=0)


def _set_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _kv_heads(attn: nn.Module) -> int:
    return int(attn.kv_heads)


def _set_attention(spec: Any, attn: nn.Module, norm: nn.LayerNorm, fused_qkv: bool) -> None:
    _set_norm(spec.layer_norm, norm)
    if fused_qkv:
        _set_linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    else:
        _set_linear(spec.linear[0], attn.q_proj)
        _set_linear(spec.linear[1], attn.k_proj, attn.v_proj)
    _set_linear(spec.linear[-1], attn.out_proj)
    if hasattr(spec, "relative_position_keys"):
        spec.relative_position_keys = _array(attn.rel_keys.weight)
        spec.relative_position_values = _array(attn.rel_values.weight)
    spec.num_heads_kv = np.int32(_kv_heads(attn))


def _set_ffn(spec: Any, layer: nn.Module) -> None:
    _set_norm(spec.layer_norm, layer.sub_ff.norm)
    _set_linear(spec.linear_0, layer.ff.inner)
    _set_linear(spec.linear_1, layer.ff.outer)


def _position_table(model: TransformerSeq2Seq) -> np.ndarray:
    positions = model.positions
    if positions.kind == "sinusoidal":
        return _array(positions.table)
    if positions.kind == "learned":
        return _array(positions.embedding.weight)
    return np.zeros((positions.max_positions, model.d_model), dtype=np.float32)


def _output_bias(model: TransformerSeq2Seq) -> np.ndarray:
    bias = _array(model.output.bias)
    bias[[PAD_ID, BOS_ID]] = -np.inf
    return bias


def build_spec(
    model: TransformerSeq2Seq,
    config: ExperimentConfig,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    alignment_heads: int = 0,
) -> Any:
    """A validated ``ctranslate2.specs.TransformerSpec`` computing ``model`` exactly.

    ``alignment_heads``: how many heads of the last decoder layer CTranslate2 averages
    into ``return_attention`` (the first ones); 0 = all heads, attnlab's "last layer, head
    average" map.
    """
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(config)
    m = config.model
    slots = TRANSFORMER.resolve(m)
    enc_relative = slots["model.self_attention"] == RELATIVE
    dec_relative = slots["model.decoder_self_attention"] == RELATIVE
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    rotary: dict[str, Any] = {}
    if m.positions == "rotary":
        rotary = {"rotary_dim": 0, "rotary_interleave": True, "rotary_base": 10000.0}
    pre_norm = m.norm == "pre"
    heads = m.heads
    encoder = transformer_spec.TransformerEncoderSpec(
        m.enc_layers,
        heads,
        pre_norm=pre_norm,
        activation=activation[m.activation],
        relative_position=enc_relative,
        num_heads_kv=heads,  # set per attention below
        **rotary,
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        m.dec_layers,
        heads,
        pre_norm=pre_norm,
        activation=activation[m.activation],
        relative_position=dec_relative,
        alignment_layer=-1,
        alignment_heads=alignment_heads or heads,
        num_heads_kv=heads,
        **rotary,
    )
    encoder.embeddings[0].weight = _array(model.src_embed.weight)
    encoder.scale_embeddings = True
    decoder.embeddings.weight = _array(model.tgt_embed.weight)
    decoder.scale_embeddings = True
    table = _position_table(model)
    for stack in (encoder, decoder):
        if hasattr(stack, "position_encodings"):
            if m.positions == "rotary":  # the rotation is the position signal
                del stack.position_encodings
            else:
                stack.position_encodings.encodings = table
    for spec, layer in zip(encoder.layer, model.encoder_layers, strict=True):
        _set_attention(spec.self_attention, layer.self_attn.attn, layer.sub_attn.norm, True)
        _set_ffn(spec.ffn, layer)
    for spec, layer in zip(decoder.layer, model.decoder_layers, strict=True):
        _set_attention(spec.self_attention, layer.self_attn.attn, layer.sub_self.norm, True)
        _set_attention(spec.attention, layer.cross_attn.attn, layer.sub_cross.norm, False)
        _set_ffn(spec.ffn, layer)
    if pre_norm:
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = _array(model.output.weight)
    decoder.projection.bias = _output_bias(model)

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.register_source_vocabulary(list(src_tokens))
    spec.register_target_vocabulary(list(tgt_tokens))
    spec.validate()
    return spec


# -- decoder-only -> a CTranslate2 Generator ----------------------------------------------------

# A prefix LM with two vocabularies (a seq2seq task) has two embedding tables; a Generator has
# one. Its vocabulary is the target's followed by the source's tokens, each behind this mark
# (a private-use character no tokenizer emits), with the two tables stacked: the prompt's
# tokens are looked up in the source table and the target's in the target table, as in
# attnlab. The source entries get a -inf output bias, as attnlab never predicts them.
SOURCE_MARK = "\ue000"


def generator_vocabulary(
    src_tokens: Sequence[str], tgt_tokens: Sequence[str], shared_table: bool
) -> list[str]:
    """The Generator's vocabulary: the target's, then (two tables) the marked source's."""
    if shared_table:
        return list(tgt_tokens)
    return [*tgt_tokens, *(SOURCE_MARK + token for token in src_tokens)]


def build_generator_spec(
    model: nn.Module,
    config: ExperimentConfig,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
) -> Any:
    """A validated ``ctranslate2.specs.TransformerDecoderModelSpec`` computing a
    ``DecoderOnlyTransformer`` (causal prefix) exactly: the prompt ``source ⊕ <s>`` then the
    target, one causal stack, embeddings · √d_model + the position table (or rotary / ALiBi)."""
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(config)
    m = config.model
    variant = DECODER_ONLY.resolve(m)["model.self_attention"]
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
    extra: dict[str, Any] = {}
    if m.positions == "rotary":
        extra.update(rotary_dim=0, rotary_interleave=True, rotary_base=10000.0)
    if variant == "alibi":
        extra.update(alibi=True, alibi_use_positive_positions=False, scale_alibi=False)
    pre_norm = m.norm == "pre"
    decoder = transformer_spec.TransformerDecoderSpec(
        m.dec_layers,
        m.heads,
        pre_norm=pre_norm,
        activation=activation[m.activation],
        with_encoder_attention=False,
        no_final_norm=not pre_norm,
        relative_position=variant == RELATIVE,
        num_heads_kv=m.heads,  # set per attention below
        **extra,
    )
    shared_table = model.src_embed is model.tgt_embed
    tables = [model.tgt_embed.weight]
    if not shared_table:
        tables.append(model.src_embed.weight)
    decoder.embeddings.weight = np.concatenate([_array(t) for t in tables], axis=0)
    decoder.scale_embeddings = True
    if hasattr(decoder, "position_encodings"):
        if m.positions == "rotary":  # the rotation is the position signal
            del decoder.position_encodings
        else:
            decoder.position_encodings.encodings = _position_table(model)
    for spec, layer in zip(decoder.layer, model.layers, strict=True):
        _set_attention(spec.self_attention, layer.self_attn.attn, layer.sub_self.norm, True)
        _set_ffn(spec.ffn, layer)
    if pre_norm:
        _set_norm(decoder.layer_norm, model.norm)
    vocabulary = generator_vocabulary(src_tokens, tgt_tokens, shared_table)
    weight = _array(model.output.weight)
    bias = _output_bias(model)
    extra_rows = len(vocabulary) - weight.shape[0]  # the source entries: never predicted
    if extra_rows:
        weight = np.concatenate([weight, np.zeros((extra_rows, weight.shape[1]), np.float32)])
        bias = np.concatenate([bias, np.full(extra_rows, -np.inf, np.float32)])
    decoder.projection.weight = weight
    decoder.projection.bias = bias

    spec = transformer_spec.TransformerDecoderModelSpec(decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.register_vocabulary(vocabulary)
    spec.validate()
    return spec


__all__ = [
    "LAYER_NORM_EPSILON",
    "SOURCE_MARK",
    "build_generator_spec",
    "build_spec",
    "generator_vocabulary",
]
