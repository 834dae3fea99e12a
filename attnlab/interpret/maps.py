"""Which attention map ``attnlab translate`` shows for a hypothesis, and computing it.

A ``MapChoice`` names the attention of a role (cross, enc-self, dec-self) at a layer and head,
or an attribution of the cross-attention (``--method``: rollout, relevancy, gradient, norm).
``chosen_map`` turns it into one labelled [rows, cols] matrix; the command line draws it.
Mistakes (a layer or head the model does not have, a method that cannot apply) are one-line
AttnlabErrors naming the flag.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnlab.attention_map import BOS_LABEL, MODEL_KEYS, AttentionMap, axes_text, target_rows
from attnlab.errors import AttnlabError
from attnlab.interpret.where import map_where

ROLES = MODEL_KEYS  # --role word -> the model's attentions key
METHODS = ("raw", "rollout", "relevancy", "gradient", "norm")  # attnlab.interpret.attribution


@dataclasses.dataclass(frozen=True)
class ChosenMap:
    """One map to show: [rows, cols] ``matrix`` with its labels, a title, its row
    normalisation and (nsa's self-attention only) the same-shaped selected cells."""

    matrix: Any
    rows: list[str]
    cols: list[str]
    title: str
    normalisation: str
    selected: Any = None


@dataclasses.dataclass(frozen=True)
class MapChoice:
    """Which map ``translate`` prints: the attention of --role at --layer/--head, or --method's
    attribution of the cross-attention (rollout / relevancy span every layer and head)."""

    role: str = "cross"
    layer: int | None = None
    head: int | None = None
    method: str = "raw"

    def check(self) -> None:
        if self.method == "raw":
            return
        if self.role != "cross":
            raise AttnlabError(
                f"--method {self.method} explains target tokens by source tokens: "
                "it needs --role cross (or --method raw for self-attention)"
            )
        if self.method in ("rollout", "relevancy") and (self.layer, self.head) != (None, None):
            raise AttnlabError(
                f"--method {self.method} combines every layer and head; "
                "--layer/--head apply to --method raw, gradient or norm"
            )


def check_index(flag: str, value: int | None, count: int) -> None:
    if value is not None and not 0 <= value < count:
        raise AttnlabError(
            f"{flag} {value}: this model has {count} "
            f"{flag[2:]}{'s' if count != 1 else ''}; valid: 0..{count - 1}"
        )


def chosen_map(
    loaded: Any,
    source_tokens: list[str],
    hyp: Any,
    tokens: list[str],
    choice: MapChoice,
    device: Any,
) -> ChosenMap | None:
    """The map ``choice`` picks for one hypothesis (None where the model kept none).
    Attribution maps (--method) are scores with no row sum ("unnormalised", or "signed" where
    one is negative) and have no selected cells (only nsa's self-attention maps do)."""
    if choice.method == "raw":
        from attnlab.nn.archs import normalisation_of

        maps, selected = role_maps(loaded, source_tokens, hyp, choice.role, device)
        if maps is None:
            return None
        kind = normalisation_of(loaded.config, choice.role)
        chosen = map_of(
            maps, tokens, source_tokens, hyp, choice.role, choice.layer, choice.head, kind, selected
        )
        return ChosenMap(
            chosen.matrix,
            chosen.rows,
            chosen.cols,
            chosen.title(),
            chosen.normalisation,
            chosen.selected_matrix,
        )
    from attnlab.interpret.reports import map_kind

    cross = hyp.attention_layers
    n_layers, n_heads = (int(cross.shape[0]), int(cross.shape[1])) if cross is not None else (1, 1)
    check_index("--layer", choice.layer, n_layers)
    check_index("--head", choice.head, n_heads)
    layer = n_layers - 1 if choice.layer is None else choice.layer
    matrix = method_map(loaded, source_tokens, hyp, choice.method, layer, choice.head)
    rows = target_rows(tokens, hyp.finished)[: matrix.shape[0]]
    cols = list(source_tokens)[: matrix.shape[1]]
    where = map_where(choice.method, layer, n_layers, choice.head, n_heads)
    title = f"{choice.method} ({axes_text('cross')}), {where}"
    shown = matrix[: len(rows), : len(cols)]
    # scores, not weights: no row sum of 1 (signed where one is negative, as compare reads them)
    kind = map_kind(loaded.config, choice.method, shown)
    return ChosenMap(shown, rows, cols, title, kind)


def role_maps(
    loaded: Any, source_tokens: list[str], hyp: Any, role: str, device: Any
) -> tuple[Any, Any]:
    """([L, H, rows, cols] weights of ``role`` for one hypothesis (None when not kept), the
    same-shaped selected cells of a block-sparse variant (nsa) or None).

    Cross-attention comes from decoding itself; the self-attentions from one teacher-forced
    pass over the hypothesis (the same maps the decoder computed, all at once)."""
    if role == "cross":
        cross = hyp.attention_layers
        return (cross.float() if cross is not None else None), None
    import torch

    from attnlab.nn.seq2seq import BOS_ID, PAD_ID

    src = torch.tensor([loaded.src_vocab.encode(source_tokens)], device=device)
    tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]], device=device)
    with torch.no_grad():
        out = loaded.model(src, src != PAD_ID, tgt_in, need_weights=True)
    weights, selected = out.attentions.get(ROLES[role]), out.selected.get(ROLES[role])
    if weights is None:
        return None, None
    return weights[0].float().cpu(), (selected[0].cpu() if selected is not None else None)


def map_of(
    maps: Any,
    tokens: list[str],
    source_tokens: list[str],
    hyp: Any,
    role: str,
    layer: int | None,
    head: int | None,
    normalisation: str = "softmax",
    selected: Any = None,
) -> AttentionMap:
    """The [rows, cols] map chosen by --layer/--head (labelled, titled) from [L, H, rows, cols]
    (with ``selected``, the same-shaped mask of nsa's selected cells, reduced alike)."""
    n_layers, n_heads = maps.shape[:2]
    check_index("--layer", layer, n_layers)
    check_index("--head", head, n_heads)
    if role == "cross":
        labelled = AttentionMap.for_target(
            maps, tokens, hyp.finished, source_tokens, role, normalisation=normalisation
        )
    elif role == "enc-self":
        labelled = AttentionMap(
            maps, source_tokens, source_tokens, role, "none", normalisation, selected
        )
    else:  # dec-self: the decoder's inputs attend to each other
        inputs = [BOS_LABEL, *tokens]
        if maps.shape[-1] > len(inputs):  # a decoder-only model: one map over prompt ⊕ target
            inputs = [*source_tokens, *inputs]
        labelled = AttentionMap(maps, inputs, inputs, role, "none", normalisation, selected)
    return labelled.select(layer, head).fitted()


def method_map(
    loaded: Any,
    source_tokens: list[str],
    hyp: Any,
    method: str,
    layer: int = -1,
    head: int | None = None,
) -> Any:
    """[T(+1), S] map of ``method`` for one hypothesis (``raw`` with the defaults is the
    search's own map); ``layer`` / ``head`` pick the cross layer and head of raw / gradient /
    norm (head None = the methods' own head combination)."""
    from attnlab.interpret.attribution import explain

    if method == "raw" and hyp.attention is not None and (layer, head) == (-1, None):
        return hyp.attention.float()
    maps = explain(
        loaded.model,
        loaded.src_vocab.encode(source_tokens),
        list(hyp.tokens),
        eos=hyp.finished,
        layer=layer,
        head=head,
    )
    if method not in maps:
        raise AttnlabError(
            f"--method {method} is not available for this model (available: {', '.join(maps)})"
        )
    return maps[method].float()
