"""Gradient-weighted and value-norm-weighted attention, and the hooks that feed them.

- **Gradient-weighted attention** (Chefer et al. 2021a, arXiv:2012.09838):
  E_h[(∇A ⊙ A)⁺], ∇A the gradient of the inspected target token's log-probability with
  respect to the attention map A (the exact tensor the layer multiplied its values with).
  For a whole target sentence the rows come from one backward pass: the sentence is
  replicated once per target row, copy r's loss is log p(y_r), and copy r's gradients
  give row r (the copies are independent, so this equals one backward per token).
- **Value-norm-weighted attention** (Kobayashi et al. 2020, arXiv:2004.10102):
  ‖α_ij f(x_j)‖ with f_h(x) = (x W_V^h + b_V^h) W_O^h, the value projection followed by the
  slice of the output projection that reads head h; summed over heads before the norm
  (‖Σ_h α_hij f_h(x_j)‖, the paper's multi-head form). The classic single-head family has no
  projections: f = identity, ‖α_ij x_j‖.

The hooks: a forward hook on every attention (a Transformer's ``AttentionBlock``, an RNN's
``attnlab.nn.attention.Attention``), in reference mode (no fast path skips it), records the
values it read and the weights it returned and, with gradients, calls ``retain_grad`` on those
weights. Transformers call each module once per pass; an RNN
decoder calls its one module per step (the calls are joined along the query axis).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.interpret.rollout import (
    attention_rollout,
    encoder_decoder_relevancy,
    self_attention_relevancy,
)
from attnlab.nn.archs import ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_SELF

ROLES = ("enc_self", "dec_self", "cross")
METHODS = ("raw", "rollout", "relevancy", "gradient", "norm")
METHOD_HELP = {
    "raw": "last layer's cross-attention, head average",
    "rollout": "Chefer et al. 2021 relevancy from attention only (rollout-style)",
    "relevancy": "Chefer et al. 2021 relevancy with gradients (∇A ⊙ A)⁺",
    "gradient": "last layer's cross-attention, E_h[(∇A ⊙ A)⁺] (Chefer et al. 2021a)",
    "norm": "last layer's ‖α f(v)‖ (Kobayashi et al. 2020)",
}


def gradient_weighted(maps: Tensor, grads: Tensor) -> Tensor:
    """E_h[(∇A ⊙ A)⁺]: [..., H, Tq, Tk] twice -> [..., Tq, Tk]."""
    return (grads * maps).clamp_min(0.0).mean(dim=-3)


def value_vectors(
    values: Tensor,
    v_weight: Tensor | None,
    v_bias: Tensor | None,
    o_weight: Tensor | None,
    heads: int,
) -> Tensor:
    """f_h(x_j) for every head and key: values [..., Tk, D] -> [..., H, Tk, D_out].

    ``v_weight`` [H·dh, D] / ``v_bias`` [H·dh] / ``o_weight`` [D_out, H·dh] are nn.Linear's
    weights; all None means f = identity (one head)."""
    if v_weight is None or o_weight is None:
        return values.unsqueeze(-3)
    projected = values @ v_weight.transpose(0, 1)
    if v_bias is not None:
        projected = projected + v_bias
    *lead, tk, width = projected.shape
    dh = width // heads
    per_head = projected.view(*lead, tk, heads, dh).transpose(-2, -3)  # [..., H, Tk, dh]
    o_heads = o_weight.view(o_weight.shape[0], heads, dh).permute(1, 2, 0)  # [H, dh, D_out]
    return per_head @ o_heads


def value_norm_weighted(maps: Tensor, vectors: Tensor) -> tuple[Tensor, Tensor]:
    """maps [..., H, Tq, Tk], vectors f_h(x_j) [..., H, Tk, D] ->
    (combined ‖Σ_h α_hij f_h(x_j)‖ [..., Tq, Tk], per head α_hij ‖f_h(x_j)‖ [..., H, Tq, Tk])."""
    per_head = maps * vectors.norm(dim=-1).unsqueeze(-2)
    summed = torch.einsum("...hqk,...hkd->...qkd", maps, vectors)
    return summed.norm(dim=-1), per_head


# -- hooks ----------------------------------------------------------------------------------


# The role an AttentionBlock plays -> the model's map key (one self-attention of a decoder-only
# stack is causal like the encoder-decoder's decoder self-attention: both are "dec_self").
_MAP_KEY_OF_ROLE = {ROLE_SELF: "enc_self", ROLE_CAUSAL_SELF: "dec_self", ROLE_CROSS: "cross"}


def attention_modules(model: nn.Module) -> dict[tuple[str, int], nn.Module]:
    """(map key, layer) -> attention module, from the role each Transformer block declares
    (``AttentionBlock.role``), layers counted in module order; a model without blocks (the RNN)
    has its one attention module as ("cross", 0)."""
    from attnlab.nn.attention import Attention
    from attnlab.nn.transformer import AttentionBlock

    found: dict[tuple[str, int], nn.Module] = {}
    blocks = [m for m in model.modules() if isinstance(m, AttentionBlock)]
    for block in blocks:
        key = _MAP_KEY_OF_ROLE[block.role]
        layer = sum(1 for k, _ in found if k == key)
        found[(key, layer)] = block.attn
    if not blocks:
        first = next((m for m in model.modules() if isinstance(m, Attention)), None)
        if first is not None:
            found[("cross", 0)] = first
    return found


@dataclass
class _Record:
    weights: list[Tensor] = field(default_factory=list)
    values: Tensor | None = None


def _hook_targets(model: nn.Module) -> dict[tuple[str, int], nn.Module]:
    """(role, layer) -> the module whose call returns that attention's weights: a
    Transformer's ``AttentionBlock`` (it calls its variant's ``forward_layout``, which a hook on
    the variant would miss), else the attention module itself (an RNN calls it per step)."""
    from attnlab.nn.transformer import AttentionBlock

    blocks = (b for b in model.modules() if isinstance(b, AttentionBlock))
    parents = {id(block.attn): block for block in blocks}
    return {key: parents.get(id(mod), mod) for key, mod in attention_modules(model).items()}


def _called_with(module: nn.Module, args: tuple[Any, ...], output: Any) -> tuple[Any, Any]:
    """(weights, padded values [B, Tk, D] | None) of one call of a hook target."""
    from attnlab.nn.transformer import AttentionBlock

    if isinstance(module, AttentionBlock):  # (query, q_layout, keys, k_layout, ...) -> (y, w)
        values = args[3].unpack(args[2]) if len(args) >= 4 else None
        return output[1], values
    return getattr(output, "weights", None), (args[2] if len(args) >= 3 else None)


@contextmanager
def recording(model: nn.Module, retain: bool) -> Iterator[dict[tuple[str, int], _Record]]:
    """Record every attention module's values and weights during the block."""
    records: dict[tuple[str, int], _Record] = {}
    handles = []
    for key, module in _hook_targets(model).items():
        record = records.setdefault(key, _Record())

        def hook(
            mod: nn.Module, args: tuple[Any, ...], output: Any, record: _Record = record
        ) -> None:
            weights, values = _called_with(mod, args, output)
            if weights is None:
                return
            if retain and weights.requires_grad:
                weights.retain_grad()
            record.weights.append(weights)
            # The widest key set (a bidirectional prefix's first call reads the source only).
            if values is not None and (
                record.values is None or values.shape[-2] > record.values.shape[-2]
            ):
                record.values = values

        handles.append(module.register_forward_hook(hook))
    from attnlab.nn.reference import reference_mode

    try:
        # The fast paths (fused RNN kernels, the lean step) call no attention module: the
        # reference paths do, with the same values (attnlab.nn.reference).
        with reference_mode(model):
            yield records
    finally:
        for handle in handles:
            handle.remove()


def _join(parts: list[Tensor], grad: bool) -> Tensor | None:
    tensors = [p.grad if grad else p.detach() for p in parts]
    if any(t is None for t in tensors):
        return None
    tensors = [t if t.dim() == 4 else t.unsqueeze(1) for t in tensors]  # [B,H,Tq,Tk]
    # A bidirectional prefix's two calls: the source rows over the source, the target rows
    # over everything; the source rows read no target (zeros there).
    keys = max(t.shape[-1] for t in tensors)
    tensors = [torch.nn.functional.pad(t, (0, keys - t.shape[-1])) for t in tensors]
    return torch.cat(tensors, dim=-2)


@dataclass
class Traced:
    """One teacher-forced pass: per role [B, L, H, Tq, Tk] maps (and gradients)."""

    maps: dict[str, Tensor]
    grads: dict[str, Tensor]
    vectors: dict[str, list[Tensor]]  # role -> per layer f_h(x_j) [B, H, Tk, D]
    log_probs: Tensor  # [B, T] log-probability of each target token


def _vectors_of(module: nn.Module, values: Tensor) -> Tensor | None:
    from attnlab.nn.attention.multihead import MultiHeadBase

    if isinstance(module, MultiHeadBase):
        if type(module).gate is not MultiHeadBase.gate:
            return None  # a query-dependent gate between values and output: f depends on i
        # The values each query head sums (grouped or latent ones included), through W_o^h.
        per_head = module.head_values(values)  # [B,H,Tk,dv]
        o_weight = module.out_proj.weight
        heads, dv = per_head.shape[-3], per_head.shape[-1]
        return per_head @ o_weight.view(o_weight.shape[0], heads, dv).permute(1, 2, 0)
    return value_vectors(values, None, None, None, 1)


def trace(
    model: nn.Module,
    src: Tensor,
    src_mask: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    target_rows: Tensor | None = None,
) -> Traced:
    """Teacher-forced pass with every map; with ``target_rows`` [B] (row r of copy b) also the
    gradients of Σ_b log p(tgt_out[b, r_b]) with respect to every map."""
    gradients = target_rows is not None
    with torch.set_grad_enabled(gradients), recording(model, gradients) as records:
        out = model(src, src_mask, tgt_in, need_weights=True)
        log_probs = torch.log_softmax(out.logits.to(torch.float64), dim=-1)
        chosen = log_probs.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # [B,T]
        if gradients:
            rows = torch.arange(src.shape[0], device=src.device)
            chosen[rows, target_rows].sum().backward()
    maps: dict[str, Tensor] = {}
    grads: dict[str, Tensor] = {}
    vectors: dict[str, list[Tensor]] = {}
    for role in ROLES:
        keys = sorted(k for k in records if k[0] == role)
        if not keys or any(not records[k].weights for k in keys):
            continue
        layers = [_join(records[k].weights, False) for k in keys]
        maps[role] = torch.stack(layers, dim=1)  # type: ignore[arg-type]
        if gradients:
            layer_grads = [_join(records[k].weights, True) for k in keys]
            if all(g is not None for g in layer_grads):
                grads[role] = torch.stack(layer_grads, dim=1)  # type: ignore[arg-type]
        with torch.no_grad():
            modules = attention_modules(model)
            vecs = [
                _vectors_of(modules[k], records[k].values.detach())  # type: ignore[union-attr]
                if records[k].values is not None
                else None
                for k in keys
            ]
        if all(v is not None for v in vecs):
            vectors[role] = vecs  # type: ignore[assignment]
    return Traced(maps, grads, vectors, chosen.detach())


def explain(
    model: nn.Module,
    src_ids: list[int],
    tgt_ids: list[int],
    eos: bool = True,
    layer: int = -1,
    head: int | None = None,
) -> dict[str, Tensor]:
    """Every method's target × source map for one sentence pair (teacher-forced on
    ``tgt_ids``): rows = target tokens (+ ``</s>`` when ``eos``), columns = source tokens.
    Methods a model cannot give (no gradient path through its weights, no value vectors)
    are absent. ``layer`` picks the cross-attention layer of raw / gradient / norm, ``head``
    one head of them (None: raw and gradient average the heads, norm sums them inside ‖·‖)."""
    from attnlab.nn.decoder_only import DecoderOnlyTransformer
    from attnlab.nn.seq2seq import BOS_ID, EOS_ID

    device = next(model.parameters()).device
    out_ids = [*tgt_ids, EOS_ID] if eos else list(tgt_ids)
    rows = len(out_ids)
    src = torch.tensor([src_ids] * rows, device=device)
    tgt_in = torch.tensor([[BOS_ID, *tgt_ids][:rows]] * rows, device=device)
    tgt_out = torch.tensor([out_ids] * rows, device=device)
    was_training = model.training
    model.eval()
    try:
        traced = trace(model, src, src != 0, tgt_in, tgt_out, torch.arange(rows, device=device))
    finally:
        model.train(was_training)
    if isinstance(model, DecoderOnlyTransformer):
        return methods_of_one_stack(traced, len(src_ids), layer, head)
    return methods_from_trace(traced, layer, head)


def methods_of_one_stack(
    traced: Traced, prompt: int, layer: int = -1, head: int | None = None
) -> dict[str, Tensor]:
    """methods_from_trace for a decoder-only model: its one self-attention ``dec_self``
    [B, L, H, S+T, S+T] over prompt ⊕ target, each method's target × prompt block (rows S..,
    columns ..S). Rollout and relevancy are Chefer et al.'s eq. 6 over the stack, without and
    with gradients; gradient and norm the chosen layer's block."""
    full = traced.maps.get("dec_self")
    if full is None:
        raise AttnlabError("this model returns no attention weights to explain")
    rows = torch.arange(full.shape[0], device=full.device)
    n_layers, heads = full.shape[1], full.shape[2]
    index = layer if -n_layers <= layer < n_layers else -1
    if head is not None and not 0 <= head < heads:
        raise AttnlabError(f"head {head}: this model has {heads} heads; valid: 0..{heads - 1}")
    pick = slice(None) if head is None else slice(head, head + 1)
    block = (..., slice(prompt, None), slice(None, prompt))  # target rows × prompt columns
    out: dict[str, Tensor] = {"raw": full[0, index, pick][block].mean(dim=0)}
    out["rollout"] = self_attention_relevancy(full[0])[block]
    grads = traced.grads.get("dec_self")
    if grads is not None:
        out["relevancy"] = self_attention_relevancy(full, grads)[block][rows, rows]
        weighted = gradient_weighted(full[:, index, pick][block], grads[:, index, pick][block])
        out["gradient"] = weighted[rows, rows]
    vectors = traced.vectors.get("dec_self")
    if vectors is not None:
        combined, per_head = value_norm_weighted(full[0, index], vectors[index][0])
        out["norm"] = (combined if head is None else per_head[head])[block]
    return out


def methods_from_trace(
    traced: Traced, layer: int = -1, head: int | None = None
) -> dict[str, Tensor]:
    """Per-method [T, S] maps from a trace of T copies (copy r explains row r); with ``head``
    raw, gradient and norm are that head's own α, (∇A ⊙ A)⁺ and α‖f_h(x)‖."""
    cross = traced.maps.get("cross")
    if cross is None:
        raise AttnlabError("this model returns no cross-attention weights to explain")
    rows = torch.arange(cross.shape[0], device=cross.device)
    n_layers = cross.shape[1]
    index = layer if -n_layers <= layer < n_layers else -1
    heads = cross.shape[2]
    if head is not None and not 0 <= head < heads:
        raise AttnlabError(f"head {head}: this model has {heads} heads; valid: 0..{heads - 1}")
    pick = slice(None) if head is None else slice(head, head + 1)  # keeps the head axis
    out: dict[str, Tensor] = {"raw": cross[0, index, pick].mean(dim=0)}
    enc, dec = traced.maps.get("enc_self"), traced.maps.get("dec_self")
    first = [None if m is None else m[0] for m in (enc, dec)]
    out["rollout"] = encoder_decoder_relevancy(first[0], first[1], cross[0])
    if (
        "cross" in traced.grads
        and (enc is None or "enc_self" in traced.grads)
        and (dec is None or "dec_self" in traced.grads)
    ):
        relevancy = encoder_decoder_relevancy(enc, dec, cross, traced.grads)  # [B, T, S]
        out["relevancy"] = relevancy[rows, rows]
        weighted = gradient_weighted(cross[:, index, pick], traced.grads["cross"][:, index, pick])
        out["gradient"] = weighted[rows, rows]
    vectors = traced.vectors.get("cross")
    if vectors is not None:
        combined, per_head = value_norm_weighted(cross[0, index], vectors[index][0])
        out["norm"] = combined if head is None else per_head[head]
    return out


def encoder_rollout(maps: dict[str, Tensor]) -> Tensor | None:
    """Rollout of the encoder self-attention [L, H, S, S] -> [S, S] (None without it)."""
    enc = maps.get("enc_self")
    return None if enc is None else attention_rollout(enc)
