"""``AttentionMap``: attention weights with their labels, role and reduction, as one value.

Weights are ``[L, H, T, S]`` (layers, heads, query rows, key columns). Two rules live here
and nowhere else:

- **"last layer, mean over heads"** — :func:`last_layer_head_mean` (and the method
  :meth:`AttentionMap.last_layer_mean`), the map the search keeps per hypothesis, the
  coverage penalty and alignment accuracy read, and ``sample`` events store;
- **"a ``</s>`` row label for a finished hypothesis"** — :func:`target_rows` (and
  :meth:`AttentionMap.for_target`).

A map also carries how its rows are normalised (``normalisation``: the producing variant's
``AttentionSpec.normalisation``, looked up per role by ``attnlab.nn.archs.normalisation_of``):
softmax rows sum to 1; sparse rows too, with exact zeros; sub-stochastic rows sum to at most 1
(:func:`unattended_mass` is the rest, the weight that went nowhere); signed rows may be
negative. The views and diagnostics read it.

A map of a block-sparse variant (``nsa``) may also carry ``selected``: a bool mask of the
weights' shape, True where the query read the key because its block was selected. Reductions
keep it by the rule **"marked if any head shown selected it"** (:func:`union_over_heads`: a
head keeps its own mask, a head average the union of its heads'); the views draw the marked
cells with :data:`SELECTED_MARK` on their weight colour and say :data:`SELECTED_NOTE`.

It sits on the ground floor (torch only), so decode, evaluate, interpret, viz and the front
ends all import it (torch is imported only when a map is built, so importing this module
stays cheap). The batched helpers take tensors with leading batch dimensions and also
numpy arrays (the lab keeps its maps as numpy), so the same code reduces both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported on use: the lab and the CLI start without it
    from torch import Tensor

EOS_LABEL = "</s>"
BOS_LABEL = "<s>"
ROLES = ("cross", "enc-self", "dec-self")
ROLE_NAMES = {
    "cross": "cross-attention",
    "enc-self": "encoder self-attention",
    "dec-self": "decoder self-attention",
}
ROLE_AXES = {  # (rows, columns) of each role's map
    "cross": ("target", "source"),
    "enc-self": ("source", "source"),
    "dec-self": ("target", "target"),
}
MODEL_KEYS = {"cross": "cross", "enc-self": "enc_self", "dec-self": "dec_self"}  # out.attentions
LAST_LAYER_MEAN = "last layer, head average"
SAMPLE_DECIMALS = 4  # what ``sample`` events keep of each weight
# A sample event holds at most this many weights inline; a larger map is stored beside the
# event, float16 (attnlab.runs.sample_maps): 2,048² weights of JSON would exceed an event line.
INLINE_MAX_CELLS = 64 * 64


def is_long_map(shape: Sequence[int]) -> bool:
    """Whether a [T, S] map of ``shape`` is stored beside its sample event, not inline."""
    return len(shape) == 2 and int(shape[0]) * int(shape[1]) > INLINE_MAX_CELLS


_HALF = ("torch.float16", "torch.bfloat16")  # averaged in float32

# How a variant's weight rows are normalised (AttentionSpec.normalisation; re-exported by
# attnlab.nn.attention.base): what tests, diagnostics, the coverage penalty and views assume.
NORM_SOFTMAX = "softmax"  # rows >= 0 summing to 1 over the unmasked keys
NORM_SPARSE = "sparse"  # rows >= 0 summing to 1, with exact zeros (sparsemax, entmax, NSA)
NORM_SUB_STOCHASTIC = "sub-stochastic"  # rows >= 0 summing to <= 1; the rest went nowhere
NORM_SIGNED = "signed"  # rows may be negative (differential attention)
# rows >= 0 with no bound on their sum (sigmoid attention: n·σ(s − log n) can exceed 1)
NORM_UNNORMALISED = "unnormalised"
NORMALISATIONS = (NORM_SOFTMAX, NORM_SPARSE, NORM_SUB_STOCHASTIC, NORM_SIGNED, NORM_UNNORMALISED)
UNATTENDED_LABEL = "∅"  # the column of a sub-stochastic map's unattended mass
SELECTED_MARK = "▪"  # a cell of a block the query selected (nsa), drawn on its weight colour
SELECTED_NOTE = f"{SELECTED_MARK} = key in a selected block (any head shown)"


def check_normalisation(kind: str) -> str:
    if kind not in NORMALISATIONS:
        raise ValueError(f"normalisation {kind!r} is not one of {', '.join(NORMALISATIONS)}")
    return kind


def unattended_mass(weights: Any) -> Any:
    """1 − row sum of a sub-stochastic map (tensor or numpy, rows on the last axis), clamped
    at 0 so float round-off of a full row never reads as negative mass."""
    rest = 1.0 - weights.sum(-1)
    return rest.clip(0.0, None) if hasattr(rest, "clip") else max(rest, 0.0)


def union_over_heads(selected: Any, head_dim: int = -3) -> Any:
    """THE rule for a head average's selection mask: a cell is marked when any head averaged
    marked it (tensor or numpy, heads at ``head_dim``; e.g. [L, H, T, S] -> [L, T, S])."""
    return selected.any(axis=head_dim)


def role_of(name: str) -> str:
    """``enc_self`` (the model's key) or ``enc-self`` (the CLI's word) -> ``enc-self``."""
    role = name.replace("_", "-")
    if role not in ROLES:
        raise ValueError(f"unknown attention role {name!r}; valid: {', '.join(ROLES)}")
    return role


def axes_text(role: str) -> str:
    """``target × source`` etc.: what the rows and columns of a role's map are."""
    rows, cols = ROLE_AXES[role_of(role)]
    return f"{rows} × {cols}"


def last_layer_head_mean(weights: Any, layer_dim: int = -4) -> Any:
    """THE rule "last layer, mean over heads": heads are the dimension right after layers.

    ``weights`` is a tensor or numpy array with layers at ``layer_dim`` (e.g. ``[L,H,T,S]``,
    ``[B,L,H,T,S]``, decoding's ``[N,T,L,H,S]`` with ``layer_dim=2``, one step's
    ``[R,L,H,S]`` with ``layer_dim=1``). Half-precision tensors are averaged in float32.
    """
    ndim = weights.ndim
    dim = layer_dim % ndim
    picked = weights[(slice(None),) * dim + (-1,)]  # the head dim is now at ``dim``
    if str(getattr(picked, "dtype", "")) in _HALF:
        picked = picked.float()
    return picked.mean(axis=dim)  # torch and numpy both read ``axis``


def target_rows(tokens: Sequence[str], finished: bool, unfinished: str | None = None) -> list[str]:
    """THE rule for target row labels: the tokens, then ``</s>`` when the hypothesis ended
    with it (else ``unfinished`` when given, e.g. ``…`` for a row a forced pass adds)."""
    end = EOS_LABEL if finished else unfinished
    return [*tokens, end] if end is not None else list(tokens)


def _as_tensor(weights: Any) -> Tensor:
    import torch

    if isinstance(weights, torch.Tensor):
        return weights
    # nested floats (JSON) and numpy arrays keep float64 so nothing is rounded on the way in
    return torch.as_tensor(weights, dtype=torch.float64)


@dataclass(frozen=True)
class AttentionMap:
    weights: Tensor  # [L, H, T, S]
    rows: list[str]  # T labels (queries)
    cols: list[str]  # S labels (keys)
    role: str = "cross"  # cross | enc-self | dec-self
    reduction: str = "none"  # how the weights were reduced, in words (for titles)
    normalisation: str = NORM_SOFTMAX  # one of NORMALISATIONS: the producing variant's
    # bool, the weights' shape: cells of the blocks the query selected (nsa); None: no marks
    selected: Tensor | None = None

    def __post_init__(self) -> None:
        check_normalisation(self.normalisation)
        weights = _as_tensor(self.weights)
        if weights.ndim == 2:  # one [T, S] matrix: a single layer and head
            weights = weights[None, None]
        if weights.ndim != 4:
            raise ValueError(f"attention weights must be [L, H, T, S]; got {tuple(weights.shape)}")
        object.__setattr__(self, "weights", weights)
        if self.selected is not None:
            selected = _as_tensor(self.selected).bool()
            selected = selected[None, None] if selected.ndim == 2 else selected
            if tuple(selected.shape) != tuple(weights.shape):
                raise ValueError(
                    f"selected mask {tuple(selected.shape)} is not the weights' shape "
                    f"{tuple(weights.shape)}"
                )
            object.__setattr__(self, "selected", selected)
        object.__setattr__(self, "role", role_of(self.role))
        object.__setattr__(self, "rows", list(self.rows))
        object.__setattr__(self, "cols", list(self.cols))

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def for_target(
        cls,
        weights: Any,
        tokens: Sequence[str],
        finished: bool,
        cols: Sequence[str],
        role: str = "cross",
        unfinished: str | None = None,
        reduction: str = "none",
        normalisation: str = NORM_SOFTMAX,
        selected: Any = None,
    ) -> AttentionMap:
        """A map whose rows are a hypothesis's target tokens (+ ``</s>`` when finished)."""
        rows = target_rows(tokens, finished, unfinished)
        return cls(weights, rows, list(cols), role, reduction, normalisation, selected)

    def with_eos_row(self, finished: bool = True) -> AttentionMap:
        """The same map with ``</s>`` appended to the row labels when ``finished``."""
        return replace(self, rows=target_rows(self.rows, finished))

    @classmethod
    def from_json(
        cls,
        matrix: Any,
        rows: Sequence[str],
        cols: Sequence[str],
        normalisation: str | None = None,
    ) -> AttentionMap:
        """A ``sample`` event's ``attention`` (hyp_len × src_len, last-layer head mean) and its
        ``normalisation`` (absent in older events: softmax)."""
        import torch

        if not matrix:  # a sample without attention
            weights = torch.zeros(0, 0, dtype=torch.float64)
        else:
            weights = torch.as_tensor(matrix, dtype=torch.float64)
        kind = normalisation or NORM_SOFTMAX
        return cls(weights, rows, cols, "cross", LAST_LAYER_MEAN, kind)

    # -- shape ----------------------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.weights.shape[1])

    @property
    def matrix(self) -> Tensor:
        """The one [T, S] matrix of a reduced map (one layer, one head)."""
        if self.weights.shape[:2] != (1, 1):
            raise ValueError(
                f"{self.reduction!r} map has {self.n_layers} layers and "
                f"{self.n_heads} heads; reduce it to one first"
            )
        return self.weights[0, 0]

    @property
    def selected_matrix(self) -> Tensor | None:
        """The [T, S] selection mask of a reduced map (None when the map has none)."""
        return None if self.selected is None else self.selected[0, 0]

    def _pick(self, pick: Any) -> Tensor | None:
        """``pick`` (a function of an [L, H, T, S] tensor) applied to the mask, if any."""
        return None if self.selected is None else pick(self.selected)

    def crop(self, n_rows: int | None = None, n_cols: int | None = None) -> AttentionMap:
        """The first ``n_rows`` rows and ``n_cols`` columns (labels cut alike)."""
        return replace(
            self,
            weights=self.weights[:, :, :n_rows, :n_cols],
            rows=self.rows[:n_rows],
            cols=self.cols[:n_cols],
            selected=self._pick(lambda m: m[:, :, :n_rows, :n_cols]),
        )

    def fitted(self) -> AttentionMap:
        """Labels and weights cut to their common size (a label may name a row the weights
        lack, e.g. ``</s>`` of a search that kept no step for it)."""
        n_rows = min(len(self.rows), int(self.weights.shape[2]))
        n_cols = min(len(self.cols), int(self.weights.shape[3]))
        return self.crop(n_rows, n_cols)

    # -- reductions -----------------------------------------------------------------------

    def layer(self, index: int) -> AttentionMap:
        """Layer ``index`` (negative counts from the end) as a one-layer map."""
        picked = self.weights[index][None]
        where = f"layer {index % self.n_layers}/{self.n_layers}"
        return replace(
            self,
            weights=picked,
            reduction=_joined(self.reduction, where),
            selected=self._pick(lambda m: m[index][None]),
        )

    def head(self, index: int) -> AttentionMap:
        """Head ``index`` of every layer as a one-head map."""
        picked = self.weights[:, index][:, None]
        which = f"head {index % self.n_heads}/{self.n_heads}"
        return replace(
            self,
            weights=picked,
            reduction=_joined(self.reduction, which),
            selected=self._pick(lambda m: m[:, index][:, None]),
        )

    def mean_heads(self) -> AttentionMap:
        """The head average of every layer as a one-head map."""
        averaged = self.weights.mean(dim=1, keepdim=True)
        return replace(
            self,
            weights=averaged,
            reduction=_joined(self.reduction, "head average"),
            selected=self._pick(lambda m: union_over_heads(m, 1)[:, None]),
        )

    def last_layer_mean(self) -> AttentionMap:
        """Last layer, mean over heads: a [1, 1, T, S] map (``.matrix`` is the [T, S])."""
        matrix = last_layer_head_mean(self.weights)
        return replace(
            self,
            weights=matrix[None, None],
            reduction=LAST_LAYER_MEAN,
            selected=self._pick(lambda m: union_over_heads(m[-1], 0)[None, None]),
        )

    def select(self, layer: int | None, head: int | None) -> AttentionMap:
        """The CLI's / Inspect's choice: ``layer`` (None = last) and ``head`` (None = mean)."""
        chosen = self.layer(self.n_layers - 1 if layer is None else layer)
        return chosen.mean_heads() if head is None else chosen.head(head)

    # -- output ---------------------------------------------------------------------------

    @property
    def role_name(self) -> str:
        return ROLE_NAMES[self.role]

    @property
    def axes(self) -> str:
        return axes_text(self.role)

    @property
    def unattended(self) -> Tensor | None:
        """[L, H, T] weight each row gave to nothing (sub-stochastic maps; None otherwise)."""
        if self.normalisation != NORM_SUB_STOCHASTIC:
            return None
        return unattended_mass(self.weights)

    def exact_zeros(self) -> int:
        """How many weights are exactly 0 (what a sparse map's view reports)."""
        return int((self.weights == 0).sum())

    def title(self) -> str:
        """e.g. ``cross-attention (target × source), layer 1/2, head average``."""
        base = f"{self.role_name} ({self.axes})"
        return base if self.reduction in ("", "none") else f"{base}, {self.reduction}"

    def to_json(self) -> list[list[float]]:
        """What a ``sample`` event stores: the [T, S] matrix, each weight to 4 decimals."""
        rows = self.matrix.float().cpu().tolist()
        return [[round(float(w), SAMPLE_DECIMALS) for w in row] for row in rows]


def _joined(before: str, what: str) -> str:
    return what if before in ("", "none") else f"{before}, {what}"
