"""Fused GRU encoder and GRU + Bahdanau decoder with hand-written backpropagation through time.

``nn.GRU`` over packed sequences and ``RNNSeq2Seq._forward_loop`` record dozens of small
autograd nodes per time step; on a CPU with batch 64 and hidden 128 most of a training step
is then per-node overhead, and every weight gradient is accumulated step by step from small
matrix products. The two ``autograd.Function``s here compute the same recurrences as one
node each (attnlab.nn.rnn gives the equations):

- the forward loops run without autograd, write into preallocated buffers and keep only
  what the backward needs;
- everything that does not depend on the recurrent state is hoisted out of the loops: the
  input projection of the embeddings (one matrix product for all steps), the padding mask
  as an additive bias, the dropout mask of h̃ (one draw for all steps), the derivative
  factors of every gate (one vectorised pass before the backward loop);
- the decoder's two products of s_{t-1} (GRU W_hh and the attention's W) are one product;
- the backward loops carry only dL/ds (and dL/dh̃) from step to step; every weight gradient
  (and the embeddings' and the encoder states') is one large matrix product after the loop.

They are an optimisation only: ``tests/test_rnn_fused.py`` checks values and gradients
against nn.GRU / the reference loop in float64, and reference mode (attnlab.nn.reference)
switches them off. Bahdanau's score is ``BahdanauAttention.score_step`` (its parameters:
``step_weights``); the decoder here is its hand-differentiated form. On the CPU the
dropout masks are drawn from the same random stream as the reference, so even training
with dropout gives the same numbers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from attnlab.nn.fast_tanh import tanh, tanh_


def _gate_factors(
    s_prev: Tensor, r: Tensor, z: Tensor, n: Tensor, gh_n: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """For s' = n + z (s - n), n = tanh(gi_n + r gh_n), r, z = sigmoid(.): the factors that
    turn dL/ds' into dL/d(pre-activation) of n, z and (given that of n) r, all steps at once."""
    f_n = (1 - z) * (1 - n * n)
    f_z = (s_prev - n) * z * (1 - z)
    f_r = gh_n * r * (1 - r)
    return f_n, f_z, f_r


# -- decoder ------------------------------------------------------------------------------------


class DecoderInputs(NamedTuple):
    """FusedBahdanauGRU's inputs, in ``apply`` order; ``backward`` returns their gradients as
    one of these (None where there is none)."""

    emb: Any  # [B,T,E] target embeddings (dropout applied)
    h0: Any  # [B,H] bridged initial state
    keys: Any  # [B,S,A] U h_j (the attention's precompute)
    values: Any  # [B,S,D] encoder states
    bias: Any  # [B,S] 0 for real keys, -inf for padding
    any_key: Any  # [B,1] 1 / 0 (rows without keys), None when all have keys
    drop: Any  # [T,B,H] dropout mask of h̃ (scaled), or None
    w_q: Any  # [A,H] W
    w_v: Any  # [1,A] v
    w_ih: Any  # [3H, E+D(+H)]
    b_ih: Any  # [3H]
    w_hh: Any  # [3H,H]
    b_hh: Any  # [3H]
    w_c: Any  # [H, D+H]
    b_c: Any  # [H]
    feeding: Any  # bool: h̃_{t-1} is part of the GRU input


class DecoderSaved(NamedTuple):
    """What FusedBahdanauGRU's forward keeps for its backward (time-major buffers)."""

    emb_t: Tensor  # [T·B,E] the embeddings, time-major rows
    keys: Tensor  # [B,S,A]
    values: Tensor  # [B,S,D]
    drop: Tensor | None  # [T,B,H]
    w_q: Tensor
    w_v: Tensor
    w_ih: Tensor
    w_hh: Tensor
    w_c: Tensor
    states: Tensor  # [T+1,B,H] s_0..s_T
    rest: Tensor  # [T,B,D(+H)] [c_t; h̃_{t-1}]
    cs: Tensor  # [T,B,D+H] [c_t; s_t]
    sq: Tensor  # [T,B,3H+A] [W_hh s_{t-1} + b_hh; W s_{t-1}]
    gates: Tensor  # [T,B,2H] r, z
    gates_n: Tensor  # [T,B,H] n
    tanh_a: Tensor  # [T,B,H] tanh(W_c [c; s] + b_c)
    energies: Tensor  # [T,B,S,A] tanh(W s + U h)
    alphas: Tensor  # [T,B,S] attention weights


class FusedBahdanauGRU(torch.autograd.Function):
    """Teacher-forced decoder: c_t = attend(s_{t-1}); s_t = GRU([E y_{t-1}; c_t; h̃_{t-1}],
    s_{t-1}); h̃_t = dropout(tanh(W_c [c_t; s_t] + b_c)). Inputs: ``DecoderInputs``.
    Returns h̃ [B,T,H], weights [B,T,S]."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        inp = DecoderInputs(*args)
        emb, h0, keys, values, bias = inp.emb, inp.h0, inp.keys, inp.values, inp.bias
        any_key, drop, feeding = inp.any_key, inp.drop, inp.feeding
        w_q, w_v, w_ih, b_ih = inp.w_q, inp.w_v, inp.w_ih, inp.b_ih
        w_hh, b_hh, w_c, b_c = inp.w_hh, inp.b_hh, inp.w_c, inp.b_c
        batch, steps, e_dim = emb.shape
        hidden, d_dim = h0.shape[1], values.shape[2]
        g3 = 3 * hidden
        emb_t = emb.transpose(0, 1).reshape(steps * batch, e_dim)  # time-major rows
        # The embeddings' part of the GRU input projection (+ b_ih) for all steps at once.
        gi_emb = torch.addmm(b_ih, emb_t, w_ih[:, :e_dim].t()).view(steps, batch, g3)
        w_rest_t = w_ih[:, e_dim:].t()  # context (and feed) part
        # s_{t-1} feeds the GRU (W_hh) and the attention query (W): one product for both.
        w_sq_t = torch.cat([w_hh, w_q]).t()
        b_sq = torch.cat([b_hh, b_hh.new_zeros(w_q.shape[0])])
        w_c_t, v = w_c.t(), w_v[0]
        new = emb.new_empty
        states = new(steps + 1, batch, hidden)  # s_0..s_T
        states[0] = h0
        rest = new(steps, batch, d_dim + (hidden if feeding else 0))  # [c_t; h̃_{t-1}]
        cs = new(steps, batch, d_dim + hidden)  # [c_t; s_t]
        sq = new(steps, batch, g3 + w_q.shape[0])  # [W_hh s_{t-1} + b_hh; W s_{t-1}]
        gates = new(steps, batch, 2 * hidden)  # r, z
        gates_n = new(steps, batch, hidden)
        tanh_a = new(steps, batch, hidden)  # tanh(W_c [c; s] + b_c)
        outs = new(steps, batch, hidden) if drop is not None else tanh_a  # h̃
        energies = new(steps, batch, keys.shape[1], keys.shape[2])  # tanh(W s + U h)
        alphas = new(steps, batch, keys.shape[1])
        feed = emb.new_zeros(batch, hidden)
        for t in range(steps):
            s = states[t]
            gq = torch.addmm(b_sq, s, w_sq_t, out=sq[t])
            gh, q = gq[:, :g3], gq[:, g3:]
            energy = tanh_(torch.add(keys, q.unsqueeze(1), out=energies[t]))
            alpha = torch.softmax(
                torch.addmv(bias.view(-1), energy.view(-1, energy.shape[-1]), v).view(batch, -1),
                dim=-1,
            )
            if any_key is not None:
                alpha = alpha * any_key
            alphas[t] = alpha
            # (bmm into a strided slice of ``rest`` would take a slow per-row path)
            c = torch.bmm(alpha.unsqueeze(1), values).view(batch, d_dim)
            x = rest[t]
            x[:, :d_dim] = c
            if feeding:
                x[:, d_dim:] = feed
            gi = torch.addmm(gi_emb[t], x, w_rest_t)
            rz = torch.add(gi[:, : 2 * hidden], gh[:, : 2 * hidden], out=gates[t]).sigmoid_()
            r, z = rz[:, :hidden], rz[:, hidden:]
            n = tanh(torch.addcmul(gi[:, 2 * hidden :], r, gh[:, 2 * hidden :]), out=gates_n[t])
            s_new = torch.addcmul(n, z, s - n, out=states[t + 1])  # (1 - z) n + z s
            cs_t = cs[t]
            cs_t[:, :d_dim] = c
            cs_t[:, d_dim:] = s_new
            a = tanh(torch.addmm(b_c, cs_t, w_c_t), out=tanh_a[t])
            feed = torch.mul(a, drop[t], out=outs[t]) if drop is not None else a
        ctx.feeding = feeding
        ctx.e_dim = e_dim
        ctx.save_for_backward(
            *DecoderSaved(
                emb_t=emb_t,
                keys=keys,
                values=values,
                drop=drop,
                w_q=w_q,
                w_v=w_v,
                w_ih=w_ih,
                w_hh=w_hh,
                w_c=w_c,
                states=states,
                rest=rest,
                cs=cs,
                sq=sq,
                gates=gates,
                gates_n=gates_n,
                tanh_a=tanh_a,
                energies=energies,
                alphas=alphas,
            )
        )
        weights = alphas.transpose(0, 1)
        ctx.mark_non_differentiable(weights)
        return outs.transpose(0, 1), weights

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor | None, _grad_weights: Any) -> tuple[Any, ...]:  # type: ignore[override]
        sv = DecoderSaved(*ctx.saved_tensors)
        keys, values, drop, w_q, w_ih, w_hh = sv.keys, sv.values, sv.drop, sv.w_q, sv.w_ih, sv.w_hh
        states, rest, cs, sq, tanh_a = sv.states, sv.rest, sv.cs, sv.sq, sv.tanh_a
        gates, energies, alphas = sv.gates, sv.energies, sv.alphas
        feeding, e_dim = ctx.feeding, ctx.e_dim
        steps, batch, hidden = tanh_a.shape
        d_dim, g3, a_dim = values.shape[2], 3 * hidden, w_q.shape[0]
        if grad_out is None:
            grad = tanh_a.new_zeros(tanh_a.shape)
        else:
            grad = grad_out.transpose(0, 1)  # [T,B,H]
        v = sv.w_v[0]
        # Derivative factors of every step, vectorised before the loop.
        f_a = 1 - tanh_a * tanh_a
        if drop is not None:
            f_a = f_a * drop
        r, z = gates[..., :hidden], gates[..., hidden:]
        f_n, f_z, f_r = _gate_factors(states[:-1], r, z, sv.gates_n, sq[..., 2 * hidden : g3])
        w_sq = torch.cat([w_hh, w_q])  # [3H+A, H]
        w_rest = w_ih[:, e_dim:]
        new = tanh_a.new_empty
        d_u = new(steps, batch, hidden)  # dL/d(W_c [c; s] + b_c)
        d_gi = new(steps, batch, g3)
        d_sq = new(steps, batch, g3 + a_dim)  # [dL/d(W_hh s + b_hh); dL/d(W s)]
        d_scores = new(steps, batch, keys.shape[1])
        d_ctx = new(steps, batch, d_dim)
        d_keys = torch.zeros_like(keys)
        d_s = tanh_a.new_zeros(batch, hidden)  # dL/ds_t carried backwards
        d_feed: Tensor | None = None  # dL/dh̃_t from step t+1's input
        for t in range(steps - 1, -1, -1):
            d_h = grad[t] if d_feed is None else grad[t] + d_feed
            du = torch.mul(d_h, f_a[t], out=d_u[t])
            d_cs = du @ sv.w_c  # [B, D+H]
            d_s = d_s + d_cs[:, d_dim:]
            gi, gq = d_gi[t], d_sq[t]
            d_n = torch.mul(d_s, f_n[t], out=gi[:, 2 * hidden :])
            torch.mul(d_s, f_z[t], out=gi[:, hidden : 2 * hidden])
            torch.mul(d_n, f_r[t], out=gi[:, :hidden])
            gq[:, : 2 * hidden] = gi[:, : 2 * hidden]
            torch.mul(d_n, r[t], out=gq[:, 2 * hidden : g3])
            d_rest = gi @ w_rest  # [B, D(+H)]
            dc = torch.add(d_cs[:, :d_dim], d_rest[:, :d_dim], out=d_ctx[t])
            d_feed = d_rest[:, d_dim:] if feeding else None
            # attention: c = alpha V, alpha = softmax(v·tanh(W s + U h) + bias)
            alpha = alphas[t]
            d_alpha = torch.bmm(values, dc.unsqueeze(2)).view(batch, -1)  # [B,S]
            d_alpha -= (alpha * d_alpha).sum(-1, keepdim=True)
            d_sc = torch.mul(alpha, d_alpha, out=d_scores[t])
            # dL/d(W s + U h) = (d_sc v)(1 - e²), per step: [B,S,A] stays in cache
            d_e = d_sc.unsqueeze(2) * v
            energy = energies[t]
            d_pre = torch.addcmul(d_e, d_e * energy, energy, value=-1)
            d_keys += d_pre
            torch.sum(d_pre, dim=1, out=gq[:, g3:])
            d_s = torch.addmm(d_s * z[t], gq, w_sq)
        # Weight (and input) gradients: one large product each over all T·B rows.
        rows = steps * batch
        d_gi2, d_sq2, d_u2 = d_gi.view(rows, -1), d_sq.view(rows, -1), d_u.view(rows, -1)
        g_w_ih = d_gi2.t() @ torch.cat([sv.emb_t, rest.view(rows, -1)], dim=1)
        g_emb = (d_gi2 @ w_ih[:, :e_dim]).view(steps, batch, e_dim).transpose(0, 1)
        g_w_sq = d_sq2.t() @ states[:-1].reshape(rows, hidden)  # [W_hh; W] together
        g_w_c = d_u2.t() @ cs.view(rows, -1)
        g_w_v = d_scores.reshape(1, -1) @ energies.reshape(-1, energies.shape[-1])  # [1,A]
        # dL/dV = sum_t alpha_t^T dc_t, batched over B
        g_values = torch.bmm(alphas.permute(1, 2, 0), d_ctx.transpose(0, 1))
        return tuple(
            DecoderInputs(
                emb=g_emb,
                h0=d_s,
                keys=d_keys,
                values=g_values,
                bias=None,
                any_key=None,
                drop=None,
                w_q=g_w_sq[g3:],
                w_v=g_w_v,
                w_ih=g_w_ih,
                b_ih=d_gi2.sum(0),
                w_hh=g_w_sq[:g3],
                b_hh=d_sq2[:, :g3].sum(0),
                w_c=g_w_c,
                b_c=d_u2.sum(0),
                feeding=None,
            )
        )


def fused_bahdanau_gru(
    emb: Tensor,
    h0: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor,
    attention: Any,  # BahdanauAttention
    rnn: torch.nn.GRU,
    combine: torch.nn.Linear,
    dropout: float,
    training: bool,
    feeding: bool,
) -> tuple[Tensor, Tensor]:
    """h̃ [B,T,H] and attention weights [B,T,S] of the teacher-forced decoder."""
    any_key = mask.any(dim=-1, keepdim=True)
    bias = torch.zeros(mask.shape, dtype=emb.dtype, device=mask.device)
    # A row with no real key keeps bias 0 and is zeroed by any_key (masked_softmax's rule).
    bias.masked_fill_(~mask & any_key, float("-inf"))
    key_rows = None if bool(any_key.all()) else any_key.to(emb.dtype)  # one check per batch
    drop = None
    if training and dropout > 0:
        # Drawn in the reference's order (on the CPU: the same numbers): with input feeding
        # nn.Dropout runs on each step's [B,1,H] in turn, without it once on [B,T,H].
        keep = 1.0 - dropout
        batch, steps = emb.shape[:2]
        if feeding:
            drop = emb.new_empty(steps, batch, rnn.hidden_size).bernoulli_(keep).div_(keep)
        else:
            drop = emb.new_empty(batch, steps, rnn.hidden_size).bernoulli_(keep).div_(keep)
            drop = drop.transpose(0, 1).contiguous()
    w_q, w_v = attention.step_weights()
    return FusedBahdanauGRU.apply(
        *DecoderInputs(
            emb=emb,
            h0=h0,
            keys=keys,
            values=values,
            bias=bias,
            any_key=key_rows,
            drop=drop,
            w_q=w_q,
            w_v=w_v,
            w_ih=rnn.weight_ih_l0,
            b_ih=rnn.bias_ih_l0,
            w_hh=rnn.weight_hh_l0,
            b_hh=rnn.bias_hh_l0,
            w_c=combine.weight,
            b_c=combine.bias,
            feeding=feeding,
        )
    )


# -- encoder ------------------------------------------------------------------------------------


def _reverse_index(lengths: Tensor, steps: int) -> Tensor:
    """[S,B] time index that reverses each sequence within its length (and keeps padding in
    place): an involution, so the same gather un-reverses and routes gradients back."""
    t = torch.arange(steps, device=lengths.device).unsqueeze(1)  # [S,1]
    return torch.where(t < lengths, lengths - 1 - t, t)


class FusedGRUEncoder(torch.autograd.Function):
    """1-layer (bi)directional GRU over padded sequences, as over packed ones: each direction
    reads only the real tokens (the backward one each sentence reversed within its length),
    padded outputs are zero, and each direction's final state is the one after its last
    real token. Both directions advance together (one batched product per step); buffers
    are time-major so that every step writes contiguous memory."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        emb: Tensor,  # [B,S,E]
        lengths: Tensor,  # [B] long, >= 1, on emb's device
        *weights: Tensor,  # per direction: w_ih [3H,E], w_hh [3H,H], b_ih [3H], b_hh [3H]
    ) -> tuple[Tensor, Tensor]:
        batch, steps, e_dim = emb.shape
        dirs = len(weights) // 4
        w_ih = [weights[4 * d] for d in range(dirs)]
        w_hh = torch.stack([weights[4 * d + 1] for d in range(dirs)])  # [D,3H,H]
        b_ih = [weights[4 * d + 2] for d in range(dirs)]
        b_hh = torch.stack([weights[4 * d + 3] for d in range(dirs)]).unsqueeze(1)  # [D,1,3H]
        hidden = w_hh.shape[2]
        rev = _reverse_index(lengths, steps)  # [S,B]
        cols = torch.arange(batch, device=emb.device).unsqueeze(0)
        x = emb.transpose(0, 1)  # [S,B,E] time-major
        xs = [x.reshape(steps * batch, e_dim)]
        if dirs == 2:
            xs.append(x[rev, cols].reshape(steps * batch, e_dim))  # each sentence reversed
        gi = torch.stack(  # input projections of all steps: [S,D,B,3H]
            [torch.addmm(b_ih[d], xs[d], w_ih[d].t()).view(steps, batch, -1) for d in range(dirs)],
            dim=1,
        )
        valid = (torch.arange(steps, device=emb.device).unsqueeze(1) < lengths).view(
            steps, 1, batch, 1
        )
        valid_f = valid.to(emb.dtype)
        new = emb.new_empty
        states = new(steps + 1, dirs, batch, hidden)  # s_0..s_S, held after the last token
        states[0] = 0
        outs = new(steps, dirs, batch, hidden)
        gh_all = new(steps, dirs, batch, 3 * hidden)  # W_hh s + b_hh
        gates = new(steps, dirs, batch, 2 * hidden)  # r, z
        gates_n = new(steps, dirs, batch, hidden)
        w_hh_t = w_hh.transpose(1, 2)
        for t in range(steps):
            s = states[t]
            gh = torch.baddbmm(b_hh, s, w_hh_t, out=gh_all[t])  # [D,B,3H]
            g = gi[t]
            rz = torch.add(g[..., : 2 * hidden], gh[..., : 2 * hidden], out=gates[t]).sigmoid_()
            r, z = rz[..., :hidden], rz[..., hidden:]
            n = tanh(torch.addcmul(g[..., 2 * hidden :], r, gh[..., 2 * hidden :]), out=gates_n[t])
            cand = torch.addcmul(n, z, s - n)
            torch.where(valid[t], cand, s, out=states[t + 1])
            torch.mul(cand, valid_f[t], out=outs[t])  # zeros past the end, as pad_packed_sequence
        ctx.save_for_backward(rev, valid_f, w_hh, *w_ih, *xs, states, gh_all, gates, gates_n)
        ctx.dirs = dirs
        parts = [outs[:, 0]]
        if dirs == 2:
            parts.append(outs[:, 1][rev, cols])  # back to source order
        enc_states = torch.cat(parts, dim=-1).transpose(0, 1)  # [B,S,D·H]
        return enc_states, states[steps].clone()  # final [D,B,H]

    @staticmethod
    def backward(
        ctx: Any, grad_states: Tensor | None, grad_final: Tensor | None
    ) -> tuple[Any, ...]:  # type: ignore[override]
        dirs = ctx.dirs
        rev, valid_f, w_hh, *rest = ctx.saved_tensors
        w_ih, xs = rest[:dirs], rest[dirs : 2 * dirs]
        states, gh_all, gates, gates_n = rest[2 * dirs :]
        steps, _, batch, hidden = gates_n.shape
        cols = torch.arange(batch, device=rev.device).unsqueeze(0)
        if grad_states is None:
            d_out = states.new_zeros(steps, dirs, batch, hidden)
        else:
            g = grad_states.transpose(0, 1)  # [S,B,D·H]
            parts = [g[..., :hidden]]
            if dirs == 2:
                parts.append(g[..., hidden:][rev, cols])  # into the reversed time order
            d_out = torch.stack(parts, dim=1) * valid_f  # padded outputs are constant zeros
        d_s = (
            grad_final.clone() if grad_final is not None else states.new_zeros(dirs, batch, hidden)
        )
        r, z = gates[..., :hidden], gates[..., hidden:]
        f_n, f_z, f_r = _gate_factors(states[:-1], r, z, gates_n, gh_all[..., 2 * hidden :])
        # Past a sentence's end the state is carried unchanged: dL/ds passes straight through.
        # Where valid, dL/ds_{t-1} gets dc·z = (d_out + d_s)·z; elsewhere d_s itself.
        f_keep = z * valid_f + (1 - valid_f)
        d_out_z = d_out * z
        d_gi = states.new_empty(steps, dirs, batch, 3 * hidden)
        d_gh = states.new_empty(steps, dirs, batch, 3 * hidden)
        for t in range(steps - 1, -1, -1):
            dc = torch.addcmul(d_out[t], d_s, valid_f[t])  # into the candidate state
            gi, gh = d_gi[t], d_gh[t]
            d_n = torch.mul(dc, f_n[t], out=gi[..., 2 * hidden :])
            torch.mul(dc, f_z[t], out=gi[..., hidden : 2 * hidden])
            torch.mul(d_n, f_r[t], out=gi[..., :hidden])
            gh[..., : 2 * hidden] = gi[..., : 2 * hidden]
            torch.mul(d_n, r[t], out=gh[..., 2 * hidden :])
            d_s = torch.baddbmm(torch.addcmul(d_out_z[t], d_s, f_keep[t]), gh, w_hh)
        rows = steps * batch
        grads: list[Tensor] = []
        d_x: Tensor | None = None
        for d in range(dirs):
            dgi, dgh = d_gi[:, d].reshape(rows, -1), d_gh[:, d].reshape(rows, -1)
            grads += [
                dgi.t() @ xs[d],
                dgh.t() @ states[:-1, d].reshape(rows, hidden),
                dgi.sum(0),
                dgh.sum(0),
            ]
            dx = (dgi @ w_ih[d]).view(steps, batch, -1)
            d_x = dx if d == 0 else d_x + dx[rev, cols]
        assert d_x is not None
        return (d_x.transpose(0, 1), None, *grads)


def fused_gru_encoder(emb: Tensor, lengths: Tensor, rnn: torch.nn.GRU) -> tuple[Tensor, Tensor]:
    """-> encoder states [B,S,D·H] (zeros at padding), final states [D,B,H] (nn.GRU's h_n)."""
    weights: list[Tensor] = []
    for suffix in ("_l0", "_l0_reverse")[: 2 if rnn.bidirectional else 1]:
        weights += [
            getattr(rnn, f"{name}{suffix}")
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
    return FusedGRUEncoder.apply(emb, lengths.to(emb.device), *weights)
