"""Attention rollout (Abnar & Zuidema 2020) and encoder-decoder relevancy (Chefer et al. 2021).

Shapes follow the models: one role's maps are ``[..., L, H, Tq, Tk]`` (any leading batch dims).

**Rollout** (arXiv:2005.00928): per layer the head-averaged map A_l, the residual folded in as
Ã_l = 0.5·A_l + 0.5·I with rows renormalised to sum 1, and R = Ã_L · … · Ã_1 (the last layer
on the left: R_l = Ã_l · R_{l-1}). Row i of R: how much of token i's top representation
flows from each input token.

**Encoder-decoder relevancy** (Chefer et al. 2021, "Generic Attention-model Explainability",
arXiv:2103.15679, section 3.3, eqs. 6-11). Relevancy matrices start as R^{ss} = I (source),
R^{tt} = I (target), R^{ts} = 0 (target × source). With Ā the layer's aggregated map:

- encoder self-attention:  R^{ss} += Ā · R^{ss}                           (eq. 6)
- decoder self-attention:  R^{tt} += Ā · R^{tt};  R^{ts} += Ā · R^{ts}      (eqs. 6-7)
- cross-attention:         R^{ts} += (R̄^{tt})ᵀ · Ā · R̄^{ss}                (eq. 10)

where R̄ = row-normalise(R − I) + I (eqs. 8-9; a row of R − I that sums to 0 stays 0), the
decoder layers taken in their order (self, then cross, per layer), after the whole encoder.
Eq. 11's R^{tt} += Ā · R^{st} adds nothing here: the encoder never attends to the target
(R^{st} = 0). A decoder-only model is one self-attention stack over prompt ⊕ target: eq. 6
alone, R += Ā · R per layer from R = I, and its target × prompt block is the relevancy.
Ā is E_h[(∇A ⊙ A)⁺] when gradients are given (the paper's rule, gradients of
the inspected target token's log-probability) and E_h[A] without them (the paper's
attention-only ablation, "raw attention" relevancy).
"""

from __future__ import annotations

import torch
from torch import Tensor


def renormalise_rows(matrix: Tensor) -> Tensor:
    """Rows scaled to sum 1; an all-zero row stays zero (no NaN)."""
    total = matrix.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, matrix / total.clamp_min(torch.finfo(matrix.dtype).tiny), matrix)


def aggregate_heads(maps: Tensor, grads: Tensor | None = None) -> Tensor:
    """[..., H, Tq, Tk] -> [..., Tq, Tk]: E_h[(∇A ⊙ A)⁺] with gradients, else E_h[A]."""
    if grads is None:
        return maps.mean(dim=-3)
    return (grads * maps).clamp_min(0.0).mean(dim=-3)


def attention_rollout(maps: Tensor, residual: float = 0.5) -> Tensor:
    """[..., L, H, S, S] (self-attention of L layers) -> rollout [..., S, S]."""
    averaged = maps.mean(dim=-3)  # [..., L, S, S]
    size = averaged.shape[-1]
    eye = torch.eye(size, dtype=averaged.dtype, device=averaged.device)
    result = eye.expand(averaged.shape[:-3] + (size, size))
    for layer in averaged.unbind(dim=-3):
        mixed = renormalise_rows((1.0 - residual) * layer + residual * eye)
        result = mixed @ result
    return result


def _normalised_self(relevancy: Tensor) -> Tensor:
    """R̄ = row-normalise(R − I) + I (Chefer et al. 2021, eqs. 8-9)."""
    eye = torch.eye(relevancy.shape[-1], dtype=relevancy.dtype, device=relevancy.device)
    return renormalise_rows(relevancy - eye) + eye


def encoder_decoder_relevancy(
    enc_self: Tensor | None,
    dec_self: Tensor | None,
    cross: Tensor,
    grads: dict[str, Tensor] | None = None,
) -> Tensor:
    """Target × source relevancy R^{ts} [..., T, S] from enc_self [..., Le, H, S, S],
    dec_self [..., Ld, H, T, T] and cross [..., Ld, H, T, S] (either self role may be None:
    an RNN has only cross-attention). ``grads``: the same keys and shapes, or None for the
    attention-only variant."""
    grads = grads or {}
    batch = cross.shape[:-4]
    t, s = cross.shape[-2], cross.shape[-1]
    opts = {"dtype": cross.dtype, "device": cross.device}
    r_ss = torch.eye(s, **opts).expand(batch + (s, s))
    r_tt = torch.eye(t, **opts).expand(batch + (t, t))
    r_ts = torch.zeros(batch + (t, s), **opts)
    if enc_self is not None:
        for layer in range(enc_self.shape[-4]):
            a = aggregate_heads(enc_self[..., layer, :, :, :], _layer(grads.get("enc_self"), layer))
            r_ss = r_ss + a @ r_ss
    r_ss_bar = _normalised_self(r_ss)
    for layer in range(cross.shape[-4]):
        if dec_self is not None:
            a = aggregate_heads(dec_self[..., layer, :, :, :], _layer(grads.get("dec_self"), layer))
            r_tt = r_tt + a @ r_tt
            r_ts = r_ts + a @ r_ts
        a = aggregate_heads(cross[..., layer, :, :, :], _layer(grads.get("cross"), layer))
        r_ts = r_ts + _normalised_self(r_tt).transpose(-1, -2) @ a @ r_ss_bar
    return r_ts


def _layer(grads: Tensor | None, layer: int) -> Tensor | None:
    return None if grads is None else grads[..., layer, :, :, :]


def self_attention_relevancy(maps: Tensor, grads: Tensor | None = None) -> Tensor:
    """Chefer et al. 2021 eq. 6 over one stack: [..., L, H, N, N] (and gradients) -> R [..., N, N],
    R = I, then R += Ā_l · R for each layer in order."""
    n = maps.shape[-1]
    r = torch.eye(n, dtype=maps.dtype, device=maps.device).expand(maps.shape[:-4] + (n, n))
    for layer in range(maps.shape[-4]):
        r = r + aggregate_heads(maps[..., layer, :, :, :], _layer(grads, layer)) @ r
    return r
