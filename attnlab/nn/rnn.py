"""RNN encoder-decoder (GRU / LSTM) with any attention variant that has the role rnn-cross.

Encoder: embeddings -> (bi)directional multi-layer RNN over packed sequences; the final
states are bridged (h0 = tanh(W_b [h_fwd; h_bwd])) to the decoder's initial state.

Decoder wiring follows the variant's ``spec.query_timing``:

- "previous" (Bahdanau et al. 2015): c_t = attend(s_{t-1}); s_t = RNN([E y_{t-1}; c_t], s_{t-1})
- "current" (Luong et al. 2015): s_t = RNN(E y_{t-1}, s_{t-1}); c_t = attend(s_t)

then the attentional state h̃_t = tanh(W_c [c_t; s_t]) and p(y_t) = softmax(W_o h̃_t). With
input feeding (Luong et al. 2015, section 3.3) h̃_{t-1} is also part of the RNN input.

Speed: everything that does not depend on the step runs outside the time loop (target
embeddings, the attention's key projection via ``precompute``, W_c and W_o for all steps
at once). Luong-style wiring without input feeding under full teacher forcing needs no
loop at all: the RNN runs over the whole target and attention takes Tq = T queries.
Training a 1-layer GRU with Bahdanau attention under full teacher forcing uses
attnlab.nn.rnn_fused (encoder and decoder as one autograd node each with hand-written
backpropagation through time, the same numbers), and decoding it takes a lean step. One
predicate (``RNNSeq2Seq.fast_path``) decides where these run; reference mode
(attnlab.nn.reference) turns them all off.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError, unknown_choice
from attnlab.nn.attention import ATTENTION, ROLE_RNN_CROSS, Attention, build_attention
from attnlab.nn.attention.base import masked_softmax
from attnlab.nn.attention.classic import BahdanauAttention
from attnlab.nn.fast_tanh import tanh_
from attnlab.nn.output_layer import OutputLayer
from attnlab.nn.rnn_fused import fused_bahdanau_gru, fused_gru_encoder
from attnlab.nn.seq2seq import PAD_ID, DecoderState, EncoderOutput, ModelOutput, Seq2Seq

RNN_CELLS: dict[str, type[nn.RNNBase]] = {"gru": nn.GRU, "lstm": nn.LSTM}

# An RNN hidden state: h [L,B,H] (GRU) or (h, c) (LSTM), layer-first as torch's RNNs want it.
Hidden = Tensor | tuple[Tensor, Tensor]


def run_rnn(rnn: nn.RNNBase, inputs: Any, hidden: Hidden | None = None) -> tuple[Any, Hidden]:
    """``rnn(inputs, hidden)``. cuDNN's RNN has no backward in eval mode, and gradients do
    flow through an eval-mode model (attribution maps, head importance): there the call
    takes torch's native CUDA kernels instead."""
    if rnn.training or not torch.is_grad_enabled() or rnn.weight_ih_l0.device.type != "cuda":
        return rnn(inputs, hidden)
    with torch.backends.cudnn.flags(enabled=False):
        return rnn(inputs, hidden)


_PRE = "attn_pre"  # EncoderOutput.extras key(s) of the attention's precomputed key work
_CTX = "ctx_proj"  # a beam's grouped encoder output: H W_ctxᵀ (see RNNSeq2Seq.beam_encoder)


class RNNEncoder(nn.Module):
    """Embeddings + a (bi)directional RNN over packed sequences (padding never read)."""

    def __init__(
        self,
        vocab_size: int,
        emb: int,
        hidden: int,
        layers: int,
        bidirectional: bool,
        cell: str,
        dropout: float,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CELLS[cell](
            emb,
            hidden,
            layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.layers = layers
        self.directions = 2 if bidirectional else 1
        self.out_dim = hidden * self.directions

    def forward(
        self, src: Tensor, src_mask: Tensor, fused: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """-> encoder_states [B,S,D], final h [L,B,D], final c [L,B,D] (LSTM) or None.
        ``fused``: the fused 1-layer GRU (attnlab.nn.rnn_fused; the model decides), else
        nn.GRU / nn.LSTM over packed sequences (the reference)."""
        # An empty source still needs one step for packing; its mask keeps it unseen.
        lengths = src_mask.sum(dim=1).clamp(min=1)
        embedded = self.dropout(self.embed(src))
        if fused:
            states, final = fused_gru_encoder(embedded, lengths, self.rnn)
            return states, self._merge_directions(final), None
        packed = pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        outputs, final = run_rnn(self.rnn, packed)
        states, _ = pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])
        states = states.contiguous()  # a transposed view otherwise: every step would copy it
        if isinstance(final, tuple):
            return states, self._merge_directions(final[0]), self._merge_directions(final[1])
        return states, self._merge_directions(final), None

    def _merge_directions(self, final: Tensor) -> Tensor:
        """[L·dirs,B,H] -> [L,B,dirs·H].

        Each layer's forward and backward final states side by side.
        """
        _, batch, hidden = final.shape
        final = final.view(self.layers, self.directions, batch, hidden)
        return final.transpose(1, 2).reshape(self.layers, batch, self.directions * hidden)


@dataclass
class _Memory:
    """What every decoder step reads from the encoder."""

    states: Tensor  # [B,S,D]
    mask: Tensor  # [B,S]
    precomputed: Any  # the attention's key-side work (or the encoder summary for "none")


class FastPath(Enum):
    """The RNN model's fast paths; each computes what its reference computes."""

    ENCODER = "encoder"  # fused GRU encoder (reference: nn.GRU over packed sequences)
    DECODER = "decoder"  # fused teacher-forced GRU + Bahdanau decoder (reference: the step loop)
    STEP = "step"  # lean eval decoding step (reference: the general step)


class RNNSeq2Seq(Seq2Seq):
    """Attentional RNN encoder-decoder (Bahdanau et al. 2015; Luong et al. 2015)."""

    # True: every fast path off (attnlab.nn.reference); tests compare the two.
    reference_mode: bool = False

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        *,
        cell: str = "gru",
        attention: str = "bahdanau",
        emb: int = 64,
        hidden: int = 128,
        layers: int = 1,
        bidirectional: bool = True,
        input_feeding: bool = True,
        dropout: float = 0.1,
        heads: int = 1,
        attn_params: dict[str, Any] | None = None,
    ):
        super().__init__()
        if cell not in RNN_CELLS:
            raise unknown_choice("model.cell", cell, RNN_CELLS)
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.cell = cell
        self.layers = layers
        self.hidden = hidden
        self.input_feeding = input_feeding
        self.encoder = RNNEncoder(src_vocab_size, emb, hidden, layers, bidirectional, cell, dropout)
        enc_dim = self.encoder.out_dim
        self.attention: Attention = build_attention(
            attention,
            hidden,
            enc_dim,
            role=ROLE_RNN_CROSS,
            heads=heads,
            dropout=dropout,
            hparams=attn_params,
        )
        self.attend_previous = self.attention.spec.query_timing == "previous"
        self.uses_summary = bool(getattr(self.attention, "uses_encoder_summary", False))
        context_dim = self.attention.out_dim
        rnn_input = emb + (context_dim if self.attend_previous else 0)
        rnn_input += hidden if input_feeding else 0
        self.embed = nn.Embedding(tgt_vocab_size, emb, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.rnn = RNN_CELLS[cell](
            rnn_input, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.bridge = nn.Linear(enc_dim, hidden)  # h0 = tanh(W_b h_enc)
        self.bridge_cell = nn.Linear(enc_dim, hidden) if cell == "lstm" else None
        self.combine = nn.Linear(context_dim + hidden, hidden)  # W_c: h̃ = tanh(W_c [c; s])
        self.output = OutputLayer(hidden, tgt_vocab_size)  # W_o

    def fast_path(self, path: FastPath, like: Tensor) -> bool:
        """The one eligibility predicate of the fast paths, for a computation on ``like``'s
        device and dtype. All need a 1-layer GRU in float32/64 without autocast on the CPU
        (where per-node autograd overhead dominates; cuDNN's GRU is faster elsewhere); the
        decoder's also Bahdanau attention exactly (its backward is written for that math).
        The fused encoder pays off in the backward only; the lean step is for eval decoding."""
        if (
            self.reference_mode
            or like.device.type != "cpu"
            or like.dtype not in (torch.float32, torch.float64)
            or torch.is_autocast_enabled(like.device.type)
            or self.cell != "gru"
            or self.layers != 1
        ):
            return False
        if path is FastPath.ENCODER:
            return torch.is_grad_enabled()
        if type(self.attention) is not BahdanauAttention:
            return False
        return path is FastPath.DECODER or not (self.training or torch.is_grad_enabled())

    # -- encoder side ---------------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor) -> EncoderOutput:
        fused = self.fast_path(FastPath.ENCODER, self.encoder.embed.weight)
        states, final_h, final_c = self.encoder(src, src_mask, fused)
        extras = {"final_h": final_h.transpose(0, 1)}  # [B,L,D], batch-first for beams
        if final_c is not None:
            extras["final_c"] = final_c.transpose(0, 1)
        if self.uses_summary:
            extras[_PRE] = final_h[-1]  # the top layer's final state: Cho et al.'s c
        else:
            extras.update(_pack(self.attention.precompute(states)))
        return EncoderOutput(states, src_mask, extras)

    def beam_encoder(self, enc: EncoderOutput, beams: int) -> EncoderOutput:
        """Where the lean step runs: one row per sentence (its beams share it, nothing is
        copied) and the context's share of the GRU input and of W_c applied to every source
        state once: c_t W_ctxᵀ = Σ_j α_tj (h_j W_ctxᵀ), so a step multiplies K·S weights by
        [S, 4H] per sentence instead of K contexts by [D, 4H]. (Greedy's one row per sentence
        would gain nothing: it takes about S steps.)"""
        if beams == 1 or not self.fast_path(FastPath.STEP, enc.states):
            return super().beam_encoder(enc, beams)
        d = enc.states.shape[-1]
        e = self.embed.embedding_dim
        w_ctx = torch.cat([self.rnn.weight_ih_l0[:, e : e + d], self.combine.weight[:, :d]])
        extras = {**enc.extras, _CTX: F.linear(enc.states, w_ctx)}  # [B,S,3H+H]
        return EncoderOutput(enc.states, enc.mask, extras, group=beams)

    def _memory(self, enc: EncoderOutput) -> _Memory:
        return _Memory(enc.states, enc.mask, _unpack(enc.extras))

    def _initial_hidden(self, enc: EncoderOutput) -> Hidden:
        """Bridge the encoder's final states (per layer) to the decoder: [L,B,H]."""
        h = torch.tanh(self.bridge(enc.extras["final_h"].transpose(0, 1))).contiguous()
        if self.bridge_cell is None:
            return h
        return h, self.bridge_cell(enc.extras["final_c"].transpose(0, 1)).contiguous()

    # -- one decoder step (shared by forward's loop and step) -----------------------------

    def _advance(
        self,
        embedded: Tensor,
        hidden: Hidden,
        feed: Tensor | None,
        pos: Tensor,
        memory: _Memory,
        need_weights: bool,
    ) -> tuple[Tensor, Tensor, Hidden, Any]:
        """embedded [B,1,E] -> (s_t [B,1,H], c_t [B,1,C], new hidden, AttentionOutput)."""
        parts = [embedded]
        if self.attend_previous:
            top = hidden[0][-1] if isinstance(hidden, tuple) else hidden[-1]
            attended = self._attend(top.unsqueeze(1), pos, memory, need_weights)
            parts.append(attended.context)
        if feed is not None:
            parts.append(feed)
        rnn_in = torch.cat(parts, dim=-1) if len(parts) > 1 else embedded
        output, hidden = run_rnn(self.rnn, rnn_in, hidden)
        if not self.attend_previous:
            attended = self._attend(output, pos, memory, need_weights)
        return output, attended.context, hidden, attended

    def _attend(self, query: Tensor, pos: Tensor, memory: _Memory, need_weights: bool) -> Any:
        return self.attention(
            query,
            memory.states,
            memory.states,
            memory.mask,
            need_weights=need_weights,
            query_pos=pos,
            precomputed=memory.precomputed,
        )

    def _attentional(self, output: Tensor, context: Tensor) -> Tensor:
        """h̃ = dropout(tanh(W_c [c; s])) for any number of steps: [B,T,H]."""
        # In place on the linear layer's fresh output (its backward does not read it).
        return self.dropout(tanh_(self.combine(torch.cat([context, output], dim=-1))))

    # -- the Seq2Seq contract ---------------------------------------------------------------

    def start_state(self, enc: EncoderOutput) -> DecoderState:
        hidden = self._initial_hidden(enc)
        batch = enc.states.shape[0]
        state: DecoderState = {}
        if isinstance(hidden, tuple):
            state["hidden"], state["cell"] = hidden[0].transpose(0, 1), hidden[1].transpose(0, 1)
        else:
            state["hidden"] = hidden.transpose(0, 1)  # [B,L,H]
        if self.input_feeding:
            state["feed"] = enc.states.new_zeros(batch, self.hidden)  # h̃_0 = 0
        state["pos"] = torch.zeros(batch, dtype=torch.long, device=enc.states.device)
        return state

    def step(
        self,
        prev_tokens: Tensor,
        state: DecoderState,
        enc: EncoderOutput,
        need_weights: bool = False,
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        if self.fast_path(FastPath.STEP, enc.states):
            if enc.group > 1:
                return self._lean_grouped_step(prev_tokens, state, enc, need_weights)
            return self._lean_step(prev_tokens, state, enc, need_weights)
        enc = enc.ungrouped()
        hidden: Hidden = state["hidden"].transpose(0, 1).contiguous()
        if "cell" in state:
            hidden = (hidden, state["cell"].transpose(0, 1).contiguous())
        feed = state["feed"].unsqueeze(1) if "feed" in state else None
        embedded = self.dropout(self.embed(prev_tokens)).unsqueeze(1)  # [B,1,E]
        output, context, hidden, attended = self._advance(
            embedded, hidden, feed, state["pos"].unsqueeze(1), self._memory(enc), need_weights
        )
        attentional = self._attentional(output, context)  # [B,1,H]
        logits = self.output.step_logits(attentional.squeeze(1))  # [B,V]
        new_state: DecoderState = {}
        if isinstance(hidden, tuple):
            new_state["hidden"], new_state["cell"] = (h.transpose(0, 1) for h in hidden)
        else:
            new_state["hidden"] = hidden.transpose(0, 1)
        if self.input_feeding:
            new_state["feed"] = attentional.squeeze(1)
        new_state["pos"] = state["pos"] + 1
        cross = None
        if need_weights and attended.weights is not None:
            cross = attended.weights.squeeze(2).unsqueeze(1)  # [B,H,1,S] -> [B,1,H,S]
        return logits, new_state, cross

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        teacher_forcing: float = 1.0,
        need_weights: bool = False,
    ) -> ModelOutput:
        enc = self.encode(src, src_mask)
        memory = self._memory(enc)
        hidden = self._initial_hidden(enc)
        sampling = teacher_forcing < 1.0
        if not (self.attend_previous or self.input_feeding or sampling):
            return self._forward_parallel(tgt_in, hidden, memory, need_weights)
        if not sampling and self.fast_path(FastPath.DECODER, memory.states):
            return self._forward_fused(tgt_in, hidden, memory, need_weights)
        return self._forward_loop(tgt_in, hidden, memory, teacher_forcing, need_weights)

    def _lean_step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput, need_weights: bool
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """``step`` where ``fast_path(STEP)`` holds: the same ops on the same shapes (so the
        same numbers), without the module calls, eval-mode dropouts and reshapes of the general
        step. A search over a few rows (a beam of one sentence, a batch's last unfinished
        sentences) pays for the calls, not the arithmetic."""
        attention: BahdanauAttention = self.attention  # type: ignore[assignment]
        h = state["hidden"][:, 0]  # [B,H], the one layer
        embedded = torch.embedding(self.embed.weight, prev_tokens).unsqueeze(1)  # [B,1,E]
        scores = attention.score_step(h.unsqueeze(1), enc.extras[_PRE])  # [B,1,S]
        weights = masked_softmax(scores, enc.mask.unsqueeze(1))  # [B,1,S]
        context = torch.bmm(weights, enc.states)  # [B,1,D]
        parts = (
            [embedded, context, state["feed"].unsqueeze(1)]
            if self.input_feeding
            else [embedded, context]
        )
        rnn = self.rnn
        h_new = torch.gru_cell(
            torch.cat(parts, dim=-1).squeeze(1),
            h,
            rnn.weight_ih_l0,
            rnn.weight_hh_l0,
            rnn.bias_ih_l0,
            rnn.bias_hh_l0,
        )  # [B,H], nn.GRU's own cell
        combined = F.linear(
            torch.cat([context, h_new.unsqueeze(1)], dim=-1), self.combine.weight, self.combine.bias
        )
        attentional = tanh_(combined).squeeze(1)  # [B,H]
        cross = weights.unsqueeze(1) if need_weights else None  # [B,1,1,S]
        return self._lean_result(h_new, attentional, state, cross)

    def _lean_result(
        self, h_new: Tensor, attentional: Tensor, state: DecoderState, cross: Tensor | None
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """The lean steps' logits and new state from s_t [R,H] and h̃_t [R,H]."""
        new_state: DecoderState = {"hidden": h_new.unsqueeze(1)}
        if self.input_feeding:
            new_state["feed"] = attentional
        new_state["pos"] = state["pos"] + 1
        return self.output.step_logits(attentional), new_state, cross

    def _lean_grouped_step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput, need_weights: bool
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """``_lean_step`` over an encoder output shared by each sentence's K beams
        (``beam_encoder``): the beams are the K queries of their sentence's attention, and
        the context enters the GRU input and W_c through H W_ctxᵀ. The same function; the
        sums run in another order, so values agree to float rounding, not bitwise."""
        attention: BahdanauAttention = self.attention  # type: ignore[assignment]
        rnn, beams = self.rnn, enc.group
        h = state["hidden"][:, 0]  # [R,H], R = A·K rows
        rows, hidden = h.shape
        d, e, g3 = enc.states.shape[-1], self.embed.embedding_dim, 3 * hidden
        scores = attention.score_step(h.view(-1, beams, hidden), enc.extras[_PRE])  # [A,K,S]
        weights = masked_softmax(scores, enc.mask.unsqueeze(1))  # [A,K,S]
        shared = torch.bmm(weights, enc.extras[_CTX]).view(rows, -1)  # [R,3H+H]: c W_ctxᵀ
        w_ih = rnn.weight_ih_l0  # columns: [embedding; context; h̃_{t-1}]
        embedded = torch.embedding(self.embed.weight, prev_tokens)  # [R,E]
        gi = torch.addmm(shared[:, :g3], embedded, w_ih[:, :e].t())
        if self.input_feeding:
            gi.addmm_(state["feed"], w_ih[:, e + d :].t())
        gi += rnn.bias_ih_l0
        gh = torch.addmm(rnn.bias_hh_l0, h, rnn.weight_hh_l0.t())
        # nn.GRU's cell: r, z = σ(.), n = tanh(gi_n + r·gh_n), h' = (1 − z)·n + z·h
        rz = torch.add(gi[:, : 2 * hidden], gh[:, : 2 * hidden]).sigmoid_()
        r, z = rz[:, :hidden], rz[:, hidden:]
        n = tanh_(torch.addcmul(gi[:, 2 * hidden :], r, gh[:, 2 * hidden :]))
        h_new = torch.addcmul(n, z, h - n)
        combined = torch.addmm(shared[:, g3:], h_new, self.combine.weight[:, d:].t())
        attentional = tanh_(combined.add_(self.combine.bias))  # [R,H]
        cross = weights.view(rows, 1, 1, -1) if need_weights else None  # [R,1,1,S]
        return self._lean_result(h_new, attentional, state, cross)

    def _forward_fused(
        self, tgt_in: Tensor, hidden: Hidden, memory: _Memory, need_weights: bool
    ) -> ModelOutput:
        """Teacher-forced GRU + Bahdanau decoder as one autograd node (attnlab.nn.rnn_fused)."""
        assert isinstance(hidden, Tensor)
        attentional, weights = fused_bahdanau_gru(
            self.dropout(self.embed(tgt_in)),
            hidden[0],
            memory.precomputed,
            memory.states,
            memory.mask,
            self.attention,
            self.rnn,
            self.combine,
            self.dropout.p,
            self.training,
            self.input_feeding,
        )
        out = ModelOutput(self.output(attentional))  # W_o once for all steps
        if need_weights:
            out.attentions["cross"] = weights[:, None, None]  # [B,L=1,H=1,T,S]
        return out

    def _forward_parallel(
        self, tgt_in: Tensor, hidden: Hidden, memory: _Memory, need_weights: bool
    ) -> ModelOutput:
        """Luong wiring, no input feeding, gold inputs: one RNN call, attention with Tq = T."""
        steps = tgt_in.shape[1]
        output, _ = run_rnn(self.rnn, self.dropout(self.embed(tgt_in)), hidden)  # [B,T,H]
        positions = torch.arange(steps, device=tgt_in.device).unsqueeze(0)  # [1,T]
        attended = self._attend(output, positions, memory, need_weights)
        logits = self.output(self._attentional(output, attended.context))  # [B,T,V]
        return self._model_output(logits, [attended], need_weights)

    def _forward_loop(
        self,
        tgt_in: Tensor,
        hidden: Hidden,
        memory: _Memory,
        teacher_forcing: float,
        need_weights: bool,
    ) -> ModelOutput:
        batch, steps = tgt_in.shape
        sampling = teacher_forcing < 1.0
        # Gold inputs are embedded once; scheduled sampling embeds per step (tokens vary).
        gold_embedded = None if sampling else self.dropout(self.embed(tgt_in))  # [B,T,E]
        feed = memory.states.new_zeros(batch, 1, self.hidden) if self.input_feeding else None
        # h̃ (and logits) are needed inside the loop only for input feeding / sampling.
        readout_in_loop = self.input_feeding or sampling
        positions = torch.arange(steps, device=tgt_in.device)
        outputs, contexts, attentionals, step_logits, attended_steps = [], [], [], [], []
        prev_prediction: Tensor | None = None
        for t in range(steps):
            if gold_embedded is not None:
                embedded = gold_embedded[:, t : t + 1]
            else:
                tokens = tgt_in[:, t]
                if t > 0 and prev_prediction is not None:
                    # Scheduled sampling (Bengio et al. 2015): per token, gold with prob. tf.
                    use_gold = torch.rand(batch, device=tgt_in.device) < teacher_forcing
                    tokens = torch.where(use_gold, tokens, prev_prediction)
                embedded = self.dropout(self.embed(tokens)).unsqueeze(1)
            output, context, hidden, attended = self._advance(
                embedded, hidden, feed, positions[t].view(1, 1), memory, need_weights
            )
            attended_steps.append(attended)
            if readout_in_loop:
                attentional = self._attentional(output, context)  # [B,1,H]
                if self.input_feeding:
                    feed = attentional
                if sampling:
                    logits_t = self.output(attentional)  # [B,1,V]
                    prev_prediction = logits_t.squeeze(1).argmax(-1)
                    step_logits.append(logits_t)
                else:
                    attentionals.append(attentional)
            else:
                outputs.append(output)
                contexts.append(context)
        if sampling:
            logits = torch.cat(step_logits, dim=1)
        elif readout_in_loop:
            logits = self.output(torch.cat(attentionals, dim=1))  # W_o once for all steps
        else:
            attentional = self._attentional(torch.cat(outputs, 1), torch.cat(contexts, 1))
            logits = self.output(attentional)  # [B,T,V]
        return self._model_output(logits, attended_steps, need_weights)

    def _model_output(self, logits: Tensor, attended: list[Any], need_weights: bool) -> ModelOutput:
        out = ModelOutput(logits)
        if not need_weights or attended[0].weights is None:
            return out
        weights = torch.cat([a.weights for a in attended], dim=2)  # [B,H,T,S]
        out.attentions["cross"] = weights.unsqueeze(1)  # [B,L=1,H,T,S]
        if "position" in attended[0].extras:
            # local-m / local-p: the window centre p_t of every step, [B,T]
            positions = [a.extras["position"].expand(logits.shape[0], -1) for a in attended]
            out.extras["attention_position"] = torch.cat(positions, dim=1)
        return out


# -- precomputed attention work in EncoderOutput.extras (batch-first tensors only) ---------


def _pack(precomputed: Any) -> dict[str, Tensor]:
    """Store ``Attention.precompute``'s result as extras so beam search can reorder it."""
    if precomputed is None:
        return {}
    if isinstance(precomputed, Tensor):
        return {_PRE: precomputed}
    if isinstance(precomputed, (tuple, list)):
        return {f"{_PRE}.{i}": t for i, t in enumerate(precomputed)}
    raise TypeError(
        "precompute() must return a tensor or a tuple of batch-first tensors, "
        f"got {type(precomputed)}"
    )


def _unpack(extras: dict[str, Tensor]) -> Any:
    if _PRE in extras:
        return extras[_PRE]
    parts = sorted(
        (k for k in extras if k.startswith(_PRE + ".")), key=lambda k: int(k.rsplit(".", 1)[1])
    )
    return tuple(extras[k] for k in parts) if parts else None


# -- registration -----------------------------------------------------------------------------


def rnn_attention_names() -> list[str]:
    return [e.name for e in ATTENTION.entries() if ROLE_RNN_CROSS in e.meta.roles]


def check_rnn_config(config: ExperimentConfig) -> None:
    """Config-time checks: the attention can serve an RNN decoder at these sizes."""
    m = config.model
    if m.attention not in ATTENTION:
        raise unknown_choice("model.attention", m.attention, rnn_attention_names())
    spec = ATTENTION.get(m.attention).meta
    if ROLE_RNN_CROSS not in spec.roles:
        raise AttnlabError(
            f'model.attention="{m.attention}" cannot be used by the RNN decoder (it supports '
            f"{', '.join(sorted(spec.roles))}); RNN variants: {', '.join(rnn_attention_names())}"
        )
    enc_dim = m.hidden * (2 if m.bidirectional else 1)
    with torch.device("meta"):  # sizes only: nothing is allocated
        build_attention(
            m.attention,
            m.hidden,
            enc_dim,
            role=ROLE_RNN_CROSS,
            heads=m.heads,
            dropout=m.dropout,
            hparams=m.params_for(m.attention),
        )
    if config.data.task != "corpus":  # a length-limited variant says so in its spec
        longest = max(config.data.max_len, config.data.test_max_len)
        spec.check_length(m.attn_params, longest, f"data.max_len={longest}")


def build_rnn(config: ExperimentConfig, src_vocab_size: int, tgt_vocab_size: int) -> RNNSeq2Seq:
    m = config.model
    return RNNSeq2Seq(
        src_vocab_size,
        tgt_vocab_size,
        cell=m.cell,
        attention=m.attention,
        emb=m.emb,
        hidden=m.hidden,
        layers=m.layers,
        bidirectional=m.bidirectional,
        input_feeding=m.input_feeding,
        dropout=m.dropout,
        heads=m.heads,
        attn_params=m.params_for(m.attention),
    )


# Registered (with its attention slot and Setup fields) in attnlab.nn.archs.

__all__ = ["RNNEncoder", "RNNSeq2Seq", "build_rnn", "check_rnn_config"]
