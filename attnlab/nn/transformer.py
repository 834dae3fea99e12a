"""Encoder-decoder Transformer (Vaswani et al. 2017) with swappable attention in every role.

Encoder self-, decoder self- and cross-attention each take any registered variant that
declares the role (``model.self_attention``, ``model.decoder_self_attention``,
``model.cross_attention``). ``forward(..., need_weights=True)`` returns every layer's and
head's weights; A block-sparse variant's selected cells (nsa) come with the weights, in
``ModelOutput.selected`` (same keys and shapes, bool). ``step`` decodes one token with a cache
kept in the decoder state: one
tensor per layer and role whose content each attention class decides
(``MultiHeadBase.cache_entries``: projected keys / values, grouped ones, or a latent),
batch-first so beam search can reorder it with ``index_select``, time at dim -2 so a step
appends to it.

Every layer is written once against a ``Layout`` (attnlab.nn.packing) carried beside its
activations: padded [B,T,D] (weights, decoding, accelerators, reference mode) or packed [N,D]
real rows (training on the CPU: the same logits at the real positions, no work on padding).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.config import ExperimentConfig, ModelConfig, params_for
from attnlab.errors import AttnlabError
from attnlab.nn.archs import TRANSFORMER
from attnlab.nn.attention import ATTENTION, Attention, build_attention
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_SELF, SELECTED_CELLS
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.dropout import Dropout
from attnlab.nn.output_layer import OutputLayer
from attnlab.nn.packing import PADDED, Layout, Packing
from attnlab.nn.positions import AbsolutePositions
from attnlab.nn.seq2seq import PAD_ID, DecoderState, EncoderOutput, ModelOutput, Seq2Seq


def decoder_self_attention_name(model: ModelConfig) -> str:
    """The decoder self-attention built: the architecture's one rule for an empty value
    (the encoder's variant when it can be causal, else scaled-dot; attnlab.nn.archs)."""
    return TRANSFORMER.resolve(model)["model.decoder_self_attention"]


class AttentionBlock(nn.Module):
    """An attention variant in a Transformer role, with a projection when its width ≠ d_model."""

    def __init__(
        self,
        name: str,
        role: str,
        d_model: int,
        heads: int,
        dropout: float,
        hparams: dict[str, Any],
    ):
        super().__init__()
        self.role = role
        self.width = d_model  # what a cache-less decoder keeps per token (attnlab.nn.kv_cache)
        self.attn: Attention = build_attention(  # the variant's own values (qualified or flat)
            name,
            d_model,
            d_model,
            role=role,
            heads=heads,
            dropout=dropout,
            hparams=params_for(hparams, name),
        )
        out_dim = getattr(self.attn, "out_dim", d_model)
        self.proj = nn.Identity() if out_dim == d_model else nn.Linear(out_dim, d_model)
        # A multi-head variant keeps its own cache (MultiHeadBase.cache_entries); any other
        # variant recomputes from the decoder's inputs so far.
        self.cacheable = isinstance(self.attn, MultiHeadBase)

    def forward(
        self,
        query: Tensor,
        q_layout: Layout,
        keys: Tensor,
        k_layout: Layout,
        key_mask: Tensor,
        causal: bool,
        need_weights: bool,
        precomputed: Any = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """query rows in ``q_layout``, keys (= values) rows in ``k_layout`` (``keys is query``
        for self-attention) -> (context rows in ``q_layout``, weights [B,H,Tq,Tk] | None,
        selected cells [B,H,Tq,Tk] bool | None: a block-sparse variant's, with weights only)."""
        if isinstance(self.attn, MultiHeadBase):  # works on any layout's rows
            out = self.attn.forward_layout(
                query, q_layout, keys, keys, k_layout, key_mask, causal, need_weights, precomputed
            )
            context = out.context
        else:  # any other variant: its own forward on the padded layout
            padded_query = q_layout.unpack(query)
            padded_keys = padded_query if keys is query else k_layout.unpack(keys)
            out = self.attn(
                padded_query,
                padded_keys,
                padded_keys,
                key_mask,
                causal=causal,
                need_weights=need_weights,
                precomputed=precomputed,
            )
            context = q_layout.pack(out.context)
        weights = out.weights
        if weights is not None and weights.dim() == 3:  # a single-head variant: [B,Tq,Tk]
            weights = weights.unsqueeze(1)
        selected = out.extras.get(SELECTED_CELLS) if weights is not None else None
        return self.proj(context), weights, selected


class FeedForward(nn.Module):
    def __init__(self, d_model: int, ff: int, activation: str, dropout: float):
        super().__init__()
        self.inner = nn.Linear(d_model, ff)
        self.outer = nn.Linear(ff, d_model)
        self.activation = F.gelu if activation == "gelu" else F.relu
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(self.dropout(self.activation(self.inner(x))))


class Sublayer(nn.Module):
    """Residual + layer norm around a sublayer: pre-LN x + f(LN(x)) or post-LN LN(x + f(x))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def inp(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def out(self, x: Tensor, y: Tensor) -> Tensor:
        x = self.dropout.residual(x, y)
        return x if self.pre_norm else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, m: ModelConfig, hparams: dict[str, Any]):
        super().__init__()
        pre = m.norm == "pre"
        self.self_attn = AttentionBlock(
            m.self_attention, ROLE_SELF, m.d_model, m.heads, m.dropout, hparams
        )
        self.ff = FeedForward(m.d_model, m.ff, m.activation, m.dropout)
        self.sub_attn = Sublayer(m.d_model, m.dropout, pre)
        self.sub_ff = Sublayer(m.d_model, m.dropout, pre)

    def forward(
        self, x: Tensor, layout: Layout, mask: Tensor, need_weights: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: the source's activations in ``layout``; mask [B,S] its real tokens.
        -> (x, weights, selected cells) as AttentionBlock gives them."""
        h = self.sub_attn.inp(x)
        y, weights, selected = self.self_attn(h, layout, h, layout, mask, False, need_weights)
        x = self.sub_attn.out(x, y)
        x = self.sub_ff.out(x, self.ff(self.sub_ff.inp(x)))
        return x, weights, selected


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention (optional) and feed-forward. Without
    cross-attention (``cross=False``) it is the GPT block of the decoder-only stack
    (attnlab.nn.decoder_only), which calls its parts directly."""

    def __init__(
        self,
        m: ModelConfig,
        hparams: dict[str, Any],
        *,
        cross: bool = True,
        self_attention: str | None = None,
    ):
        super().__init__()
        pre = m.norm == "pre"
        name = decoder_self_attention_name(m) if self_attention is None else self_attention
        self.self_attn = AttentionBlock(
            name, ROLE_CAUSAL_SELF, m.d_model, m.heads, m.dropout, hparams
        )
        self.cross_attn: AttentionBlock | None = None
        if cross:
            self.cross_attn = AttentionBlock(
                m.cross_attention, ROLE_CROSS, m.d_model, m.heads, m.dropout, hparams
            )
            self.sub_cross = Sublayer(m.d_model, m.dropout, pre)
        self.ff = FeedForward(m.d_model, m.ff, m.activation, m.dropout)
        self.sub_self = Sublayer(m.d_model, m.dropout, pre)
        self.sub_ff = Sublayer(m.d_model, m.dropout, pre)

    def feed_forward(self, x: Tensor) -> Tensor:
        return self.sub_ff.out(x, self.ff(self.sub_ff.inp(x)))

    def forward(
        self,
        x: Tensor,
        layout: Layout,
        enc_states: Tensor,
        enc_layout: Layout,
        enc_mask: Tensor,
        need_weights: bool,
        self_keys: Tensor | None = None,
        self_cache: Tensor | None = None,
        cross_cache: Any = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None, dict[str, Tensor]]:
        """x: the target's activations in ``layout``; enc_states the source's in ``enc_layout``.
        -> (x, self weights, cross weights, selected cells by model key: ``dec_self`` /
        ``cross`` when that role's variant gave them).
        Full pass: keys are this layer's own inputs. Cached step (padded): ``self_cache`` =
        the self-attention's cache of every position so far (time at dim -2), or
        ``self_keys`` = the inputs so far [B,Tk,D] for variants without a cache of their own."""
        h = self.sub_self.inp(x)
        keys = h if self_keys is None else self_keys
        batch, tk = layout.batch_shape(keys)
        if self_cache is not None:
            tk = self_cache.shape[-2]
        # Decoder positions are never padding as keys: causality alone hides what follows.
        self_mask = torch.ones(batch, tk, dtype=torch.bool, device=x.device)
        y, self_weights, self_selected = self.self_attn(
            h, layout, keys, layout, self_mask, True, need_weights, precomputed=self_cache
        )
        x = self.sub_self.out(x, y)
        assert self.cross_attn is not None  # the encoder-decoder's layers always have it
        y, cross_weights, cross_selected = self.cross_attn(
            self.sub_cross.inp(x),
            layout,
            enc_states,
            enc_layout,
            enc_mask,
            False,
            need_weights,
            precomputed=cross_cache,
        )
        x = self.sub_cross.out(x, y)
        x = self.feed_forward(x)
        selected = {"dec_self": self_selected, "cross": cross_selected}
        return x, self_weights, cross_weights, {k: v for k, v in selected.items() if v is not None}


def _stack(weights: list[Tensor | None]) -> Tensor | None:
    """Per-layer [B,H,Tq,Tk] -> [B,L,H,Tq,Tk] (None if any layer gave none)."""
    if not weights or any(w is None for w in weights):
        return None
    return torch.stack(weights, dim=1)  # type: ignore[arg-type]


def _stacked(per_key: dict[str, list[Tensor | None]]) -> dict[str, Tensor]:
    """``_stack`` per model key, keeping the keys every layer gave."""
    stacked = {key: _stack(layers) for key, layers in per_key.items()}
    return {key: value for key, value in stacked.items() if value is not None}


class TransformerSeq2Seq(Seq2Seq):
    # True: always the padded layout and explicit attention (attnlab.nn.reference).
    reference_mode: bool = False

    def __init__(self, m: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, *, max_len: int):
        """``m`` is the model section alone; ``max_len`` the longest sequence the data holds
        (it sizes the learned position table; the builder reads it from the data section)."""
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.d_model = m.d_model
        hparams = dict(m.attn_params)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, m.d_model, padding_idx=PAD_ID)
        if m.share_embeddings:
            if src_vocab_size != tgt_vocab_size:
                raise AttnlabError(
                    "model.share_embeddings=true needs one vocabulary for both sides, "
                    f"but the source has {src_vocab_size} tokens and the target "
                    f"{tgt_vocab_size}; set data.shared_vocab=true"
                )
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
        max_positions = max(1024, 4 * max_len + 64)
        self.positions = AbsolutePositions(m.positions, m.d_model, max_positions)
        self.embed_dropout = Dropout(m.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(m, hparams) for _ in range(m.enc_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(m, hparams) for _ in range(m.dec_layers))
        pre = m.norm == "pre"
        self.encoder_norm = nn.LayerNorm(m.d_model) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(m.d_model) if pre else nn.Identity()
        self.output = OutputLayer(m.d_model, tgt_vocab_size)
        if m.tie_embeddings:
            self.output.weight = self.tgt_embed.weight
        for block in self._attention_blocks():  # rotary self-attention (and MLA's own)
            if isinstance(block.attn, MultiHeadBase):
                block.attn.set_positions(block.role, m.positions == "rotary")
        # Each stack counts its layers from 1 (differential's depth-dependent λ_init).
        for stack in (self.encoder_layers, self.decoder_layers):
            for depth, layer in enumerate(stack, start=1):
                for block in (layer.self_attn, getattr(layer, "cross_attn", None)):
                    if block is not None and isinstance(block.attn, MultiHeadBase):
                        block.attn.set_depth(depth)

    def _attention_blocks(self) -> list[AttentionBlock]:
        blocks = [layer.self_attn for layer in self.encoder_layers]
        for layer in self.decoder_layers:
            blocks += [layer.self_attn, layer.cross_attn]
        return blocks

    # -- embeddings ---------------------------------------------------------------------------

    def _embed(
        self, embedding: nn.Embedding, tokens: Tensor, start: int = 0, layout: Layout = PADDED
    ) -> Tensor:
        """Token embeddings · √d_model + positions, dropped out, in ``layout`` (a packed batch
        embeds its real tokens only: ``Layout.token_rows``)."""
        ids, positions, end = layout.token_rows(tokens, start)
        x = self.positions(embedding(ids), math.sqrt(self.d_model), positions, end)
        return self.embed_dropout(x)

    # -- encoder ------------------------------------------------------------------------------

    def _encode(
        self, src: Tensor, src_mask: Tensor, need_weights: bool, layout: Layout = PADDED
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """-> the source's final states in ``layout`` (+ every layer's weights and selected
        cells [B,L,H,S,S] on request, None when not asked or not given)."""
        x = self._embed(self.src_embed, src, layout=layout)
        weights, selected = [], []
        for layer in self.encoder_layers:
            x, w, sel = layer(x, layout, src_mask, need_weights)
            weights.append(w)
            selected.append(sel)
        if not need_weights:
            return self.encoder_norm(x), None, None
        return self.encoder_norm(x), _stack(weights), _stack(selected)

    def encode(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:
        states, _, _ = self._encode(src, src_mask, need_weights=False)
        return EncoderOutput(states=states, mask=src_mask)

    # -- decoder: full pass ---------------------------------------------------------------------

    def _decode(
        self,
        tgt_in: Tensor,
        enc_states: Tensor,
        enc_layout: Layout,
        enc_mask: Tensor,
        need_weights: bool,
        layout: Layout = PADDED,
    ) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
        """-> logits [B,T,V] (zeros at padding in the packed layout), the weights by model key
        (``dec_self``, ``cross``) and the selected cells by model key (both empty without
        need_weights)."""
        x = self._embed(self.tgt_embed, tgt_in, layout=layout)
        weights: dict[str, list[Tensor | None]] = {"dec_self": [], "cross": []}
        selected: dict[str, list[Tensor | None]] = {"dec_self": [], "cross": []}
        for layer in self.decoder_layers:
            x, sw, cw, sel = layer(x, layout, enc_states, enc_layout, enc_mask, need_weights)
            weights["dec_self"].append(sw)
            weights["cross"].append(cw)
            for key in selected:
                selected[key].append(sel.get(key))
        logits = layout.project(self.decoder_norm(x), self.output)
        if not need_weights:
            return logits, {}, {}
        return logits, _stacked(weights), _stacked(selected)

    def _layouts(
        self, src_mask: Tensor, tgt_in: Tensor, need_weights: bool
    ) -> tuple[Layout, Layout]:
        """Source and target layouts of a full pass: packed (padding-free) on the CPU without
        weights, where the matmuls are the cost and the real rows are found on the host for
        free; padded otherwise (on an accelerator that would be a device sync per batch, for
        launch-bound kernels), and in reference mode."""
        if self.reference_mode or need_weights or src_mask.device.type != "cpu":
            return PADDED, PADDED
        return Packing(src_mask), Packing(tgt_in != PAD_ID)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        teacher_forcing: float = 1.0,
        need_weights: bool = False,
    ) -> ModelOutput:
        """Logits [B,T,V] of teacher-forced decoding (+ every layer's weights on request).
        Without weights on CPU this runs padding-free (``_layouts``): the same logits at the
        real target positions, zeros at the padded ones."""
        src_layout, tgt_layout = self._layouts(src_mask, tgt_in, need_weights)
        states, enc_self, enc_selected = self._encode(src, src_mask, need_weights, src_layout)
        if teacher_forcing < 1.0:
            tgt_in = self._scheduled_sampling_inputs(
                tgt_in, states, src_layout, src_mask, teacher_forcing, tgt_layout
            )
            # A new batch: a predicted <pad> is padding to the packed layout, as it always was.
            tgt_layout = self._layouts(src_mask, tgt_in, need_weights)[1]
        logits, dec_maps, dec_selected = self._decode(
            tgt_in, states, src_layout, src_mask, need_weights, tgt_layout
        )
        attentions = {} if enc_self is None else {"enc_self": enc_self}
        selected = {} if enc_selected is None else {"enc_self": enc_selected}
        attentions.update(dec_maps)
        selected.update(dec_selected)
        return ModelOutput(logits=logits, attentions=attentions, selected=selected)

    def _scheduled_sampling_inputs(
        self,
        tgt_in: Tensor,
        enc_states: Tensor,
        enc_layout: Layout,
        enc_mask: Tensor,
        teacher_forcing: float,
        layout: Layout,
    ) -> Tensor:
        """Two passes (Bengio et al. 2015 adapted to parallel decoding): predict every position
        with the gold prefix, then feed the model's previous prediction at each position t > 0
        with probability 1 - teacher_forcing, decided per token."""
        with torch.no_grad():
            logits, _, _ = self._decode(tgt_in, enc_states, enc_layout, enc_mask, False, layout)
            predictions = logits.argmax(-1)  # [B,T]: prediction for position t + 1
        return self._mix_predictions(tgt_in, predictions, teacher_forcing)

    @staticmethod
    def _mix_predictions(tgt_in: Tensor, predictions: Tensor, teacher_forcing: float) -> Tensor:
        previous = torch.cat([tgt_in[:, :1], predictions[:, :-1]], dim=1)
        use_model = torch.rand(tgt_in.shape, device=tgt_in.device) >= teacher_forcing
        use_model[:, 0] = False  # <s> stays
        use_model &= tgt_in != PAD_ID  # padding stays padding
        return torch.where(use_model, previous, tgt_in)

    # -- decoder: incremental ---------------------------------------------------------------------

    def start_state(self, enc: EncoderOutput) -> DecoderState:
        """Per layer: an empty self-attention cache (``self_cache{i}``, or the inputs so far
        ``self_x{i}`` for a variant without one) and the cross-attention's cache of the encoder
        states (``cross_cache{i}``), each in the form its attention class chose."""
        bsz = enc.states.shape[0]
        state: DecoderState = {}
        for i, layer in enumerate(self.decoder_layers):
            self_block, cross_block = layer.self_attn, layer.cross_attn
            if self_block.cacheable:
                state[f"self_cache{i}"] = self_block.attn.empty_cache(bsz, enc.states)
            else:
                state[f"self_x{i}"] = enc.states.new_zeros(bsz, 0, self.d_model)
            if cross_block.cacheable:
                state[f"cross_cache{i}"] = cross_block.attn.precompute(enc.states)
        return state

    def step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        enc: EncoderOutput,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        first = self.decoder_layers[0]
        key = "self_cache0" if first.self_attn.cacheable else "self_x0"
        position = state[key].shape[-2]  # tokens decoded so far
        x = self._embed(self.tgt_embed, prev_tokens[:, None], start=position)  # [B,1,D]
        new_state: DecoderState = {}
        cross_weights = []
        for i, layer in enumerate(self.decoder_layers):
            h = layer.sub_self.inp(x)
            self_cache = None
            if layer.self_attn.cacheable:
                new = layer.self_attn.attn.cache_entries(h, position)
                self_cache = torch.cat([state[f"self_cache{i}"], new], dim=-2)
                new_state[f"self_cache{i}"] = self_cache
                self_keys = h
            else:
                self_keys = torch.cat([state[f"self_x{i}"], h], dim=1)
                new_state[f"self_x{i}"] = self_keys
            cross_cache = state.get(f"cross_cache{i}")
            if cross_cache is not None:
                new_state[f"cross_cache{i}"] = cross_cache
            x, _, cw, _ = layer(
                x,
                PADDED,
                enc.states,
                PADDED,
                enc.mask,
                need_weights,
                self_keys,
                self_cache,
                cross_cache,
            )
            cross_weights.append(cw)
        logits = self.output.step_logits(self.decoder_norm(x)[:, 0])
        cross = _stack(cross_weights) if need_weights else None
        return logits, new_state, None if cross is None else cross[:, :, :, 0]


# -- registration ---------------------------------------------------------------------------------


def _check_role(key: str, name: str, role: str) -> None:
    entry = ATTENTION.get(name)  # unknown names raise with "did you mean"
    roles = entry.meta.roles
    if role not in roles:
        raise AttnlabError(
            f"{key}={name}: {name} cannot be used for {role} attention; "
            f"it supports: {', '.join(sorted(roles))}"
        )


def check_transformer(config: ExperimentConfig) -> None:
    """Config-time checks for model.arch = transformer.

    One-line AttnlabError on a bad combination.
    """
    m = config.model
    if m.d_model % m.heads:
        raise AttnlabError(f"model.d_model={m.d_model} must be divisible by model.heads={m.heads}")
    resolved = TRANSFORMER.resolve(m)  # each slot asks its variant's spec for the role
    for slot in TRANSFORMER.slots:
        if slot.key == "model.self_attention" and m.enc_layers == 0:
            ATTENTION.get(m.self_attention)  # no encoder layer: only the name must exist
        else:
            _check_role(slot.key, resolved[slot.key], slot.role)
    dec_name = resolved["model.decoder_self_attention"]
    used = [m.self_attention] * (m.enc_layers > 0) + [dec_name, m.cross_attention]
    check_variant_fits(config, used, rotated={m.self_attention, dec_name})


def check_variant_fits(
    config: ExperimentConfig, used: list[str], rotated: set[str], longest: int | None = None
) -> None:
    """The checks every Transformer stack shares for the variants ``used``: hyper-parameters
    that must fit model.heads, rotary positions (applied to the self-attention variants
    ``rotated``) and a length-limited variant's longest sequence (``longest``, by default the
    data's longest sentence)."""
    m, d = config.model, config.data
    rotated = rotated if m.positions == "rotary" else set()
    for name in dict.fromkeys(used):  # hyper-parameters that must fit model.heads
        entry = ATTENTION.get(name)
        if issubclass(entry.factory, MultiHeadBase):
            values = {**entry.meta.defaults(), **m.params_for(name)}
            head_dim = m.d_model // m.heads
            entry.factory.check_hparams(m.heads, values, head_dim=head_dim, rotary=name in rotated)
    if m.positions == "rotary":
        if (m.d_model // m.heads) % 2:
            raise AttnlabError(
                "model.positions=rotary needs an even head size; "
                f"model.d_model/model.heads = {m.d_model // m.heads}"
            )
        for name in rotated:
            cls = ATTENTION.get(name).factory
            if not getattr(cls, "supports_rotary", False):
                raise AttnlabError(
                    f"model.positions=rotary is not supported by the {name} attention"
                )
    if d.task != "corpus":  # a length-limited variant says so in its spec
        longest = max(d.max_len, d.test_max_len) if longest is None else longest
        rows = batch_rows(config, longest)
        for name in dict.fromkeys(used):
            meta = ATTENTION.get(name).meta
            meta.check_length(m.attn_params, longest, f"data.max_len={longest}")
            # both lengths taken as the longest sequence (targets are rarely known here)
            where = f"data.max_len={d.max_len}" + (
                f", train.batch_tokens={config.train.batch_tokens}"
                if config.train.batch_tokens > 0
                else f", train.batch_size={config.train.batch_size}"
            )
            meta.check_memory(rows, m.heads, m.d_model // m.heads, longest, longest, where)


def batch_rows(config: ExperimentConfig, longest: int) -> int:
    """The most sequences of ``longest`` tokens one training batch holds: train.batch_size,
    or under a token budget the rows it pays for (at least one: a longer sentence gets a
    batch of its own)."""
    budget = config.train.batch_tokens
    return max(1, budget // max(longest, 1)) if budget > 0 else config.train.batch_size


def build_transformer(
    config: ExperimentConfig, src_vocab_size: int, tgt_vocab_size: int
) -> TransformerSeq2Seq:
    check_transformer(config)
    longest = max(config.data.max_len, config.data.test_max_len)
    return TransformerSeq2Seq(config.model, src_vocab_size, tgt_vocab_size, max_len=longest)


# Registered (with its attention slots and Setup fields) in attnlab.nn.archs.
