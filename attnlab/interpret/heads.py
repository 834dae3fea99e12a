"""Head gates, head importance (Michel et al. 2019) and the pruning order.

A head gate ξ_h multiplies head h's context before the output projection
(o = W_O [ξ_1 c_1; …; ξ_H c_H] + b_O), done at run time by a forward pre-hook on the
attention's ``out_proj``: ξ_h = 0 removes head h's contribution exactly (its slice of the
projection input is zero; b_O is no head's) and no weight is edited, so checkpoints never
change. Every variant of the multi-head family (``MultiHeadBase``) can be gated; the classic
single-head family has no heads to gate.

**Importance** (Michel et al. 2019, arXiv:1905.10650, eq. 2 and section 4.2):
I_h = E_x |∂L(x)/∂ξ_h| at ξ = 1, accumulated over dev batches (|·| per batch, as their code
does), L the summed token cross-entropy divided by the number of target tokens, then
normalised per layer by the layer's ℓ2 norm. A "layer" is one attention (role, layer) pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.interpret.attribution import ROLES, attention_modules

HeadKey = tuple[str, int, int]  # (role, layer, head)


def gated_modules(model: nn.Module) -> dict[tuple[str, int], nn.Module]:
    """(role, layer) -> a multi-head attention module that gates can mask."""
    from attnlab.nn.attention.multihead import MultiHeadBase

    found = {k: m for k, m in attention_modules(model).items() if isinstance(m, MultiHeadBase)}
    return dict(sorted(found.items(), key=lambda kv: (ROLES.index(kv[0][0]), kv[0][1])))


def all_ones(model: nn.Module, requires_grad: bool = False) -> dict[tuple[str, int], Tensor]:
    """ξ = 1 for every gated module, in the model's dtype and device."""
    gates = {}
    for key, module in gated_modules(model).items():
        weight = module.out_proj.weight
        gates[key] = torch.ones(
            module.heads, dtype=weight.dtype, device=weight.device, requires_grad=requires_grad
        )
    return gates


@contextmanager
def head_gates(model: nn.Module, gates: dict[tuple[str, int], Tensor]) -> Iterator[None]:
    """Multiply each head's context by its gate during the block (pre-hooks on out_proj)."""
    modules = gated_modules(model)
    handles = []
    for key, gate in gates.items():
        if key not in modules:
            raise AttnlabError(f"no multi-head attention at {key[0]} layer {key[1]} to gate")
        module = modules[key]

        def hook(
            mod: nn.Module, args: tuple[Any, ...], gate: Tensor = gate, heads: int = module.heads
        ) -> Any:
            x = args[0]
            shape = x.shape
            gated = x.view(*shape[:-1], heads, shape[-1] // heads) * gate.to(x.dtype)[:, None]
            return (gated.view(shape), *args[1:])

        handles.append(module.out_proj.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def mask_gates(model: nn.Module, masked: Iterable[HeadKey]) -> dict[tuple[str, int], Tensor]:
    """Gates with ξ = 0 at the ``masked`` heads, 1 elsewhere."""
    gates = all_ones(model)
    for role, layer, head in masked:
        gates[(role, layer)][head] = 0.0
    return gates


def head_importance(
    model: nn.Module, batches: Iterable[Any], loss_fn: Any
) -> dict[tuple[str, int], Tensor]:
    """Raw Σ_batches |∂L/∂ξ_h| / tokens per (role, layer) [H]; ``batches`` yield attnlab
    Batch objects, ``loss_fn(logits, targets)`` returns the summed token loss."""
    gates = all_ones(model, requires_grad=True)
    if not gates:
        raise AttnlabError(
            "this model has no multi-head attention (only single-head classic variants)"
        )
    totals = {k: torch.zeros_like(g, dtype=torch.float64) for k, g in gates.items()}
    tokens = 0
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad(), head_gates(model, gates):
            for batch in batches:
                out = model(batch.src, batch.src_mask, batch.tgt_in, teacher_forcing=1.0)
                loss = loss_fn(out.logits, batch.tgt_out) / max(batch.n_tokens, 1)
                grads = torch.autograd.grad(loss, list(gates.values()), allow_unused=True)
                for key, grad in zip(gates, grads, strict=True):
                    if grad is not None:
                        totals[key] += grad.detach().abs().to(torch.float64) * batch.n_tokens
                tokens += batch.n_tokens
    finally:
        model.train(was_training)
    return {k: v / max(tokens, 1) for k, v in totals.items()}


def normalise_per_layer(importance: dict[tuple[str, int], Tensor]) -> dict[tuple[str, int], Tensor]:
    """Each layer's scores divided by their ℓ2 norm (Michel et al. 2019; zeros stay zero)."""
    out = {}
    for key, scores in importance.items():
        norm = scores.norm()
        out[key] = scores / norm if norm > 0 else scores.clone()
    return out


def pruning_order(importance: dict[tuple[str, int], Tensor]) -> list[HeadKey]:
    """Every head, least important first (ties: role order, layer, head)."""
    heads = [
        (float(scores[h]), ROLES.index(role), layer, h, role)
        for (role, layer), scores in importance.items()
        for h in range(scores.shape[0])
    ]
    heads.sort()
    return [(role, layer, h) for _score, _r, layer, h, role in heads]


def as_grid(importance: dict[tuple[str, int], Tensor]) -> dict[str, list[list[float]]]:
    """{role: [[score per head] per layer]} for JSON and the lab's grid."""
    grid: dict[str, list[list[float]]] = {}
    for (role, _layer), scores in importance.items():
        grid.setdefault(role, []).append([float(x) for x in scores.tolist()])
    return grid
