"""Decoder-only (GPT-style) Transformer: one causal stack over ``source ⊕ target``.

A sequence-to-sequence task is a prefix LM: the model reads ``src ⊕ tgt_in`` (``tgt_in``
begins with <s>, which is the separator) and predicts the target positions. With an empty
source (``src`` of shape [B, 0]) it is a plain language model. ``model.prefix`` decides how
the source positions see each other: ``causal`` (GPT: the prefix is read left to right) or
``bidirectional`` (T5's prefix LM, UniLM: every source position sees the whole source; the
target stays causal).

Sources arrive right-padded ([B,S] with a prefix of real tokens per row). Inside, every row is
*left*-aligned (padding first, then the source, then the target) so that the first target
position is the same index S in every row and a decoding step appends at one index for the
whole batch; the padding is hidden from every query by a real key mask, and absolute positions
count from each row's first real token. Relative schemes (rotary, ALiBi, windows) see the same
distances as in an unpadded row. Maps come back in the caller's right-padded layout.

Shapes: B batch, S source length, T target length, L layers, H heads, D d_model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.config import ExperimentConfig, ModelConfig
from attnlab.errors import AttnlabError
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.dropout import Dropout
from attnlab.nn.output_layer import OutputLayer
from attnlab.nn.packing import DENSE, PADDED, Layout
from attnlab.nn.positions import AbsolutePositions, Rotary
from attnlab.nn.seq2seq import PAD_ID, DecoderState, EncoderOutput, ModelOutput, Seq2Seq
from attnlab.nn.transformer import DecoderLayer, TransformerSeq2Seq, check_variant_fits

PREFIX_MODES = ("causal", "bidirectional")


def left_align(src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded src [B,S] -> (left-padded src [B,S], its mask [B,S], shift [B]): row b's
    token at index i moves to i + shift[b] (shift = number of padding positions)."""
    width = src.shape[1]
    shift = width - src_mask.sum(dim=1)
    old = torch.arange(width, device=src.device)[None, :] - shift[:, None]  # [B,S]
    mask = old >= 0
    ids = src.gather(1, old.clamp(min=0)).masked_fill(~mask, PAD_ID)
    return ids, mask, shift


def caller_index(shift: Tensor, width: int, total: int) -> Tensor:
    """[B, total]: for each index of the caller's layout (right-padded source of ``width``,
    then the target) the index of the same position in the left-aligned layout. Source
    positions i < length move to i + shift; padding takes the slots left free; targets stay."""
    index = torch.arange(total, device=shift.device)[None, :].expand(shift.shape[0], -1)
    length = (width - shift)[:, None]
    in_source = index < length
    in_padding = (index >= length) & (index < width)
    return torch.where(
        in_source, index + shift[:, None], torch.where(in_padding, index - length, index)
    )


def _to_caller(maps: Tensor, index: Tensor, rows: bool) -> Tensor:
    """maps [B, ..., Tq, Tk] in the left-aligned layout -> the caller's: key axis (and query
    axis when ``rows``) permuted back by ``index`` [B, Tk] (``caller_index``)."""
    shape = (maps.shape[0],) + (1,) * (maps.dim() - 2) + (index.shape[1],)
    cols = index.view(shape).expand(*maps.shape[:-1], index.shape[1])
    out = maps.gather(-1, cols)
    if rows:
        tq = maps.shape[-2]
        row_shape = (maps.shape[0],) + (1,) * (maps.dim() - 3) + (tq, 1)
        row_index = index[:, :tq].view(row_shape).expand_as(out)
        out = out.gather(-2, row_index)
    return out


@contextmanager
def rows_from(model: nn.Module, shift: Tensor) -> Iterator[None]:
    """Rotary positions counted from each row's first real token (``Rotary.origin``) for the
    duration of one pass; nothing to do when no row is padded."""
    rotaries = getattr(model, "rotaries", None)
    if rotaries is None:
        rotaries = [m for m in model.modules() if isinstance(m, Rotary)]
    if not rotaries or not bool(shift.any()):
        yield
        return
    for rotary in rotaries:
        rotary.origin = shift
    try:
        yield
    finally:
        for rotary in rotaries:
            rotary.origin = None


class DecoderOnlyTransformer(Seq2Seq):
    # True: explicit attention everywhere (attnlab.nn.reference), as the encoder-decoder.
    reference_mode: bool = False

    def __init__(
        self,
        m: ModelConfig,
        src_vocab_size: int,
        tgt_vocab_size: int,
        *,
        max_positions: int,
        share_source_table: bool,
        prefix_loss: bool = False,
    ):
        super().__init__()
        # train.prefix_loss: forward also returns extras["prefix_logits"] (see forward).
        self.prefix_loss = prefix_loss
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.d_model = m.d_model
        self.bidirectional = m.prefix == "bidirectional"
        self.tgt_embed = nn.Embedding(tgt_vocab_size, m.d_model, padding_idx=PAD_ID)
        # One table when the two sides share a vocabulary (an LM: its prompt is a "source");
        # else the prefix is embedded with its own vocabulary's table.
        if share_source_table:
            self.src_embed = self.tgt_embed
        else:
            self.src_embed = nn.Embedding(src_vocab_size, m.d_model, padding_idx=PAD_ID)
        for emb in {
            id(self.src_embed): self.src_embed,
            id(self.tgt_embed): self.tgt_embed,
        }.values():
            nn.init.normal_(emb.weight, std=m.d_model**-0.5)
            with torch.no_grad():
                emb.weight[PAD_ID].zero_()
        self.positions = AbsolutePositions(m.positions, m.d_model, max_positions)
        self.embed_dropout = Dropout(m.dropout)
        hparams = dict(m.attn_params)
        self.layers = nn.ModuleList(
            DecoderLayer(m, hparams, cross=False, self_attention=m.self_attention)
            for _ in range(m.dec_layers)
        )
        self.norm = nn.LayerNorm(m.d_model) if m.norm == "pre" else nn.Identity()
        self.output = OutputLayer(m.d_model, tgt_vocab_size)
        if m.tie_embeddings:
            self.output.weight = self.tgt_embed.weight
        for depth, layer in enumerate(self.layers, start=1):
            attn = layer.self_attn.attn
            if isinstance(attn, MultiHeadBase):
                attn.set_positions(layer.self_attn.role, m.positions == "rotary")
                attn.set_depth(depth)
        # rows_from's modules, found once: walking the module tree took a tenth of a cached
        # generation step (a plain tuple attribute: not registered, not in the state dict)
        self.rotaries = tuple(mod for mod in self.modules() if isinstance(mod, Rotary))

    # -- embeddings -----------------------------------------------------------------------------

    def _embed(self, src: Tensor, tgt: Tensor, shift: Tensor, start: int = 0) -> Tensor:
        """Left-aligned src [B,S] ⊕ tgt [B,T] at indices start.. -> [B,S+T,D]: token embeddings
        · √D + each row's absolute positions (counted from its first real token)."""
        parts = [
            e(ids) for e, ids in ((self.src_embed, src), (self.tgt_embed, tgt)) if ids.shape[1]
        ] or [self.tgt_embed(tgt)]  # both empty (a one-token prompt's prefill): [B,0,D]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        index = torch.arange(start, start + x.shape[1], device=x.device)
        positions = (index[None, :] - shift[:, None]).clamp(min=0)
        x = self.positions(x, math.sqrt(self.d_model), positions, start + x.shape[1])
        return self.embed_dropout(x)

    # -- the stack ------------------------------------------------------------------------------

    def _layer(
        self,
        layer: DecoderLayer,
        x: Tensor,
        key_mask: Tensor,
        prefix: int,
        layout: Layout,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """One block over x [B,N,D] whose first ``prefix`` positions are the source. Causal
        prefix: one causal attention over all N. Bidirectional: the source attends to itself
        without causality, the rest causally to everything before it (two calls)."""
        h = layer.sub_self.inp(x)
        if not self.bidirectional or prefix == 0:
            y, weights, selected = layer.self_attn(
                h, layout, h, layout, key_mask, True, need_weights
            )
        else:
            head, tail = h[:, :prefix], h[:, prefix:]
            y_head, w_head, s_head = layer.self_attn(
                head, PADDED, head, PADDED, key_mask[:, :prefix], False, need_weights
            )
            y_tail, w_tail, s_tail = layer.self_attn(
                tail, PADDED, h, PADDED, key_mask, True, need_weights
            )
            y = torch.cat([y_head, y_tail], dim=1)
            weights = _join_blocks(w_head, w_tail)
            selected = _join_blocks(s_head, s_tail)
        x = layer.feed_forward(layer.sub_self.out(x, y))
        return x, weights, selected

    def _run(
        self, src: Tensor, src_mask: Tensor, tgt: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor, list[Tensor | None], list[Tensor | None]]:
        """The full pass -> (final states [B,S+T,D] left-aligned, shift, per-layer weights,
        per-layer selected cells)."""
        src_l, mask_l, shift = left_align(src, src_mask)
        x = self._embed(src_l, tgt, shift)
        ones = mask_l.new_ones(tgt.shape)
        key_mask = torch.cat([mask_l, ones], dim=1)
        # No padding anywhere (a language model's windows): the fused causal kernel needs no mask.
        dense = not self.reference_mode and not need_weights and bool(src_mask.all())
        layout = DENSE if dense else PADDED
        weights, selected = [], []
        with rows_from(self, shift):
            for layer in self.layers:
                x, w, sel = self._layer(layer, x, key_mask, src.shape[1], layout, need_weights)
                weights.append(w)
                selected.append(sel)
        return self.norm(x), shift, weights, selected

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        teacher_forcing: float = 1.0,
        need_weights: bool = False,
    ) -> ModelOutput:
        """Logits [B,T,V] at the target positions (+ maps on request: ``dec_self`` the whole
        sequence's self-attention [B,L,H,S+T,S+T], ``cross`` its target-over-source block
        [B,L,H,T,S], both in the caller's layout: source right-padded, then the target)."""
        if teacher_forcing < 1.0:
            with torch.no_grad():
                states = self._run(src, src_mask, tgt_in, False)[0]
                predictions = self.output(states[:, src.shape[1] :]).argmax(-1)
            tgt_in = TransformerSeq2Seq._mix_predictions(tgt_in, predictions, teacher_forcing)
        states, shift, weights, selected = self._run(src, src_mask, tgt_in, need_weights)
        logits = self.output(states[:, src.shape[1] :])
        extras = {}
        if self.prefix_loss and src.shape[1] > 1:
            # [B,S-1,V] in the caller's layout: source position i predicts src[:, i + 1]
            # (train.prefix_loss; the positions past a row's end predict padding, ignored).
            index = caller_index(shift, src.shape[1], src.shape[1])[:, :-1]
            rows = states.gather(1, index[..., None].expand(-1, -1, states.shape[-1]))
            extras["prefix_logits"] = self.output(rows)
        if not need_weights:
            return ModelOutput(logits=logits, extras=extras)
        attentions, cells = {}, {}
        index = caller_index(shift, src.shape[1], states.shape[1])
        for per_layer, out in ((weights, attentions), (selected, cells)):
            if per_layer and all(w is not None for w in per_layer):
                full = _to_caller(torch.stack(per_layer, dim=1), index, rows=True)  # type: ignore[arg-type]
                out["dec_self"] = full
                out["cross"] = full[..., src.shape[1] :, : src.shape[1]]
        return ModelOutput(logits=logits, attentions=attentions, extras=extras, selected=cells)

    # -- incremental decoding -------------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:
        """Reads the source (the prompt) once and keeps every layer's cache of it, so that
        ``step`` continues it. ``states`` are the source's final states (unused by ``step``)."""
        src_l, mask_l, shift = left_align(src, src_mask)
        x = self._embed(src_l, src_l[:, :0], shift)
        extras: dict[str, Tensor] = {"key_mask": mask_l, "shift": shift}
        with rows_from(self, shift):
            for i, layer in enumerate(self.layers):
                h = layer.sub_self.inp(x)
                extras[f"self_cache{i}"] = layer.self_attn.attn.cache_entries(h, 0)
                if src.shape[1]:  # an empty prompt has nothing to attend
                    y, _, _ = layer.self_attn(
                        h, PADDED, h, PADDED, mask_l, not self.bidirectional, False
                    )
                    x = layer.feed_forward(layer.sub_self.out(x, y))
        return EncoderOutput(states=self.norm(x), mask=src_mask, extras=extras)

    def start_state(self, enc: EncoderOutput) -> DecoderState:
        return dict(enc.extras)

    def step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        enc: EncoderOutput,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        position = state["self_cache0"].shape[-2]  # positions read so far (source included)
        shift = state["shift"]
        key_mask = torch.cat([state["key_mask"], state["key_mask"].new_ones(len(shift), 1)], dim=1)
        x = self._embed(
            prev_tokens.new_zeros(len(shift), 0), prev_tokens[:, None], shift, start=position
        )
        new_state: DecoderState = {"key_mask": key_mask, "shift": shift}
        maps = []
        with rows_from(self, shift):
            for i, layer in enumerate(self.layers):
                h = layer.sub_self.inp(x)
                new = layer.self_attn.attn.cache_entries(h, position)
                cache = torch.cat([state[f"self_cache{i}"], new], dim=-2)
                new_state[f"self_cache{i}"] = cache
                y, weights, _ = layer.self_attn(
                    h, PADDED, h, PADDED, key_mask, True, need_weights, precomputed=cache
                )
                x = layer.feed_forward(layer.sub_self.out(x, y))
                maps.append(weights)
        logits = self.output.step_logits(self.norm(x)[:, 0])
        if not need_weights or any(w is None for w in maps):
            return logits, new_state, None
        width = enc.mask.shape[1]
        source = torch.stack(maps, dim=1)[..., 0, :width]  # type: ignore[arg-type]  # [B,L,H,S]
        index = caller_index(shift, width, width)
        return logits, new_state, _to_caller(source[..., None, :], index, rows=False)[..., 0, :]


def _join_blocks(head: Tensor | None, tail: Tensor | None) -> Tensor | None:
    """The bidirectional prefix's two blocks [B,H,S,S] and [B,H,T,S+T] as one [B,H,S+T,S+T]
    map (the source rows see no target: zeros there)."""
    if head is None or tail is None:
        return None
    pad = head.new_zeros(*head.shape[:-1], tail.shape[-2])
    return torch.cat([torch.cat([head, pad], dim=-1), tail], dim=-2)


# -- registration -------------------------------------------------------------------------------


def check_decoder_only(config: ExperimentConfig) -> None:
    """Config-time checks for model.arch = decoder-only: one AttnlabError line each."""
    m = config.model
    if m.d_model % m.heads:
        raise AttnlabError(f"model.d_model={m.d_model} must be divisible by model.heads={m.heads}")
    if m.dec_layers < 1:
        raise AttnlabError(f"model.dec_layers={m.dec_layers}: a decoder-only model needs ≥ 1 layer")
    if m.prefix not in PREFIX_MODES:
        raise AttnlabError(f"model.prefix={m.prefix!r}: valid: {', '.join(PREFIX_MODES)}")
    name = m.self_attention
    roles = ATTENTION.get(name).meta.roles  # unknown names raise with "did you mean"
    if "causal-self" not in roles:
        raise AttnlabError(
            f"model.self_attention={name}: {name} cannot be causal, so it cannot be the "
            f"decoder-only self-attention; it supports: {', '.join(sorted(roles))}"
        )
    if m.prefix == "bidirectional" and name not in BIDIRECTIONAL_PREFIX:
        raise AttnlabError(
            f"model.prefix=bidirectional: {name} cannot read a bidirectional prefix; "
            f"use model.prefix=causal or one of: {', '.join(sorted(BIDIRECTIONAL_PREFIX))}"
        )
    check_variant_fits(config, [name], rotated={name}, longest=max_positions_for(config, 0))
    if config.train.prefix_loss and not (
        m.share_embeddings or config.data.shared_vocab or config.data.task == "lm"
    ):
        raise AttnlabError(
            "train.prefix_loss=true predicts source tokens with the target's output layer: "
            "set data.shared_vocab=true (one vocabulary for both sides)"
        )


# Variants whose causal attention of T queries over S + T keys (bottom-right aligned) and whose
# non-causal self-attention both hold, so a source can be read bidirectionally before a causal
# target (tests/nn/test_decoder_only.py checks each against its own full-mask reference).
BIDIRECTIONAL_PREFIX = frozenset(
    {
        "scaled-dot",
        "additive",
        "gated",
        "relative",
        "alibi",
        "sliding-window",
        "dilated",
        "gqa",
        "mla",
        "differential",
        "sigmoid",
        "sinks",
        "qk-norm",
        "sparsemax",
        "entmax",
    }
)


def max_positions_for(config: ExperimentConfig, spare: int = 1024) -> int:
    """The longest sequence the data can hold (source ⊕ <s> ⊕ target, or an LM's window);
    with ``spare``, the position table's size (room to spare, as the encoder-decoder keeps)."""
    d = config.data
    longest = 2 * max(d.max_len, d.test_max_len) + 2
    block = int(getattr(d, "block_size", 0) or 0)
    if spare == 0:
        return max(longest, block)
    return max(spare, 2 * longest + 64, block + 1)


def build_decoder_only(
    config: ExperimentConfig, src_vocab_size: int, tgt_vocab_size: int
) -> DecoderOnlyTransformer:
    check_decoder_only(config)
    m = config.model
    shared = (
        m.share_embeddings
        or config.data.shared_vocab
        or config.data.task == "lm"
        or src_vocab_size == 0
    )
    if shared and src_vocab_size not in (0, tgt_vocab_size):
        raise AttnlabError(
            "model.share_embeddings=true needs one vocabulary for both sides, "
            f"but the source has {src_vocab_size} tokens and the target {tgt_vocab_size}; "
            "set data.shared_vocab=true"
        )
    return DecoderOnlyTransformer(
        m,
        src_vocab_size,
        tgt_vocab_size,
        max_positions=max_positions_for(config),
        share_source_table=shared,
        prefix_loss=config.train.prefix_loss,
    )


__all__: list[Any] = ["DecoderOnlyTransformer", "build_decoder_only", "check_decoder_only"]
