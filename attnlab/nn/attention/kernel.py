"""Linear-complexity attention: Linformer (low-rank length projection), Performer (FAVOR+),
linear (elu + 1 feature map).

Kernel methods never build the T×T matrix in the training path: with feature maps φ,
``context_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j)``, and causally the two sums are
prefix sums, computed chunk by chunk (a C×C masked block inside each chunk plus the running
sums of the chunks before it). The weight matrix ``φ(q_i)·φ(k_j) / Σ_j'`` is only formed when
``need_weights`` is set, for viewing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.errors import AttnlabError
from attnlab.nn.attention.base import (
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_SELF,
    SCORES_LINEAR,
    AttentionSpec,
    HParam,
    causal_mask,
    masked_softmax,
    register_attention,
)
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.dropout import dropout

KERNEL_ROLES = frozenset({ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS})


def _safe_divide(num: Tensor, den: Tensor) -> Tensor:
    """num / den[..., None] where den > 0, else 0 (a query with no visible key)."""
    positive = den > 0
    return (
        num
        / torch.where(positive, den, torch.ones_like(den)).unsqueeze(-1)
        * positive.unsqueeze(-1)
    )


def kernel_weights(phi_q: Tensor, phi_k: Tensor, key_mask: Tensor, causal: bool) -> Tensor:
    """The implied normalised weights φ(q_i)·φ(k_j) / Σ_j' [B,H,Tq,Tk] (quadratic; viewing and
    reference only)."""
    # Zero padded keys before the product (not the product after): a padded φ(k) may be huge
    # or inf, and inf·0 = NaN.
    phi_k = phi_k.masked_fill(~key_mask[:, None, :, None], 0.0)
    scores = phi_q @ phi_k.transpose(-1, -2)
    if causal:
        scores = scores.masked_fill(~causal_mask(phi_q.shape[2], phi_k.shape[2], phi_q.device), 0.0)
    return _safe_divide(scores, scores.sum(-1))


def kernel_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, chunk: int = 64
) -> Tensor:
    """Linear-time kernel attention. phi_q [B,H,Tq,m], phi_k [B,H,Tk,m], v [B,H,Tk,dv],
    key_mask [B,Tk] -> context [B,H,Tq,dv]."""
    tq, tk = phi_q.shape[2], phi_k.shape[2]
    # Padded keys contribute nothing. masked_fill, not a product: inf·0 would be NaN.
    padded = ~key_mask[:, None, :, None]
    phi_k, v = phi_k.masked_fill(padded, 0.0), v.masked_fill(padded, 0.0)
    if not causal or tq == 1:
        # Bottom-right causal with one query (a cached decoding step) sees every key.
        kv = phi_k.transpose(-1, -2) @ v  # Σ_j φ(k_j) v_jᵀ  [B,H,m,dv]
        z = phi_k.sum(2)  # Σ_j φ(k_j)  [B,H,m]
        return _safe_divide(phi_q @ kv, (phi_q * z.unsqueeze(2)).sum(-1))
    if tq != tk:  # causal block of several queries over a longer cache: rare, use the matrix
        return kernel_weights(phi_q, phi_k, key_mask, causal) @ v
    return causal_prefix_attention(phi_q, phi_k, v, chunk)


def causal_prefix_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, chunk: int) -> Tensor:
    """Causal kernel attention by prefix sums over chunks: O(T·C·m + T/C·m·dv) memory."""
    bsz, heads, length, m = phi_q.shape
    dv = v.shape[-1]
    c = min(chunk, length)
    n = -(-length // c)
    extra = n * c - length
    q = F.pad(phi_q, (0, 0, 0, extra)).view(bsz, heads, n, c, m)
    k = F.pad(phi_k, (0, 0, 0, extra)).view(bsz, heads, n, c, m)
    vv = F.pad(v, (0, 0, 0, extra)).view(bsz, heads, n, c, dv)
    # Inside a chunk: the masked C×C block.
    intra = (q @ k.transpose(-1, -2)) * torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    # Across chunks: exclusive prefix sums of Σ φ(k) vᵀ and Σ φ(k).
    kv = k.transpose(-1, -2) @ vv  # [B,H,n,m,dv]
    kv_before = torch.cat([torch.zeros_like(kv[:, :, :1]), kv.cumsum(2)[:, :, :-1]], dim=2)
    z = k.sum(3)  # [B,H,n,m]
    z_before = torch.cat([torch.zeros_like(z[:, :, :1]), z.cumsum(2)[:, :, :-1]], dim=2)
    num = intra @ vv + q @ kv_before
    den = intra.sum(-1) + (q * z_before.unsqueeze(3)).sum(-1)
    return _safe_divide(num, den).reshape(bsz, heads, n * c, dv)[:, :, :length]


@register_attention
class LinformerAttention(MultiHeadBase):
    """softmax(Q (P K)ᵀ/√d_h) (P V), P [k×T] a learned length projection; Wang et al. 2020."""

    supports_rotary = True
    spec = AttentionSpec(
        name="linformer",
        score_memory=SCORES_LINEAR,
        roles=frozenset({ROLE_SELF, ROLE_CROSS}),
        formula="softmax(Q (P K)ᵀ/√d_h)(P V), P = softmax_j(E)[k × T] over real keys",
        complexity="O(T·k·d) time, O(T·k) memory",
        known_for="Self-attention is low rank: project the keys' length T down to k.",
        paper="Wang et al. 2020 (Linformer)",
        hparams=(
            HParam("rank", 32, "linformer: projected length k", 1, 4096),
            HParam(
                "max_len", 512, "linformer: longest key sequence the projection covers", 2, 10**6
            ),
        ),
        max_length_param="max_len",
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        rank: int = 32,
        max_len: int = 512,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.rank, self.max_len = rank, max_len
        # One projection shared by keys and values (the paper's key-value sharing). Its rows are
        # softmax-normalised over the real keys, so padding never leaks in and the implied weight
        # matrix is a proper distribution over keys.
        self.length_logits = nn.Parameter(torch.randn(rank, max_len))

    def projection(self, key_mask: Tensor) -> Tensor:
        """P [B,k,Tk]: rows sum to 1 over the real keys."""
        tk = key_mask.shape[1]
        if tk > self.max_len:
            raise AttnlabError(
                f"linformer: {tk} keys exceed model.max_len={self.max_len}; raise model.max_len"
            )
        logits = self.length_logits[:, :tk].unsqueeze(0).expand(key_mask.shape[0], -1, -1)
        return masked_softmax(logits, key_mask[:, None, :])

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        if causal:
            raise AttnlabError(
                "linformer cannot be used for causal-self attention; it supports: cross, self"
            )
        p = self.projection(key_mask)[:, None]  # [B,1,k,Tk]
        k_low, v_low = p @ k, p @ v  # [B,H,k,dh]
        pooled_mask = key_mask.any(-1)[:, None].expand(-1, self.rank)  # no real key -> nothing
        scores = q @ k_low.transpose(-1, -2) / math.sqrt(self.head_dim)  # [B,H,Tq,k]
        low_weights = masked_softmax(scores, pooled_mask[:, None, None, :])
        context = dropout(low_weights, self.dropout_p, self.training) @ v_low
        weights = low_weights @ p if need_weights else None  # implied [B,H,Tq,Tk]
        return context, weights


class KernelAttention(MultiHeadBase):
    """Shared forward of the kernel variants; subclasses define the feature maps."""

    def feature_map(
        self, x: Tensor, mask: Tensor | None, is_query: bool
    ) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        phi_q = self.feature_map(q, None, is_query=True)
        phi_k = self.feature_map(k, key_mask, is_query=False)
        context = kernel_attention(phi_q, phi_k, v, key_mask, causal)
        weights = kernel_weights(phi_q, phi_k, key_mask, causal) if need_weights else None
        return context, weights


def orthogonal_features(m: int, dim: int, generator: torch.Generator | None = None) -> Tensor:
    """[m, dim] orthogonal random features (FAVOR+): blocks of `dim` orthonormal directions,
    each block Haar-distributed, each row rescaled to the norm of an independent N(0, I_dim)
    vector (χ(dim)). Every row is then marginally N(0, I_dim), so the estimator is unbiased."""
    n_blocks = -(-m // dim)
    gaussian = torch.randn(n_blocks, dim, dim, generator=generator)
    q, r = torch.linalg.qr(gaussian)
    # QR is unique only up to column signs, and LAPACK's choice biases Q (its diagonal leans
    # negative). Making diag(R) positive gives a Haar-distributed Q (Mezzadri 2007).
    signs = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))
    q = q * torch.where(signs == 0, torch.ones_like(signs), signs).unsqueeze(-2)
    rows = q.transpose(-1, -2).reshape(n_blocks * dim, dim)[:m]
    norms = torch.randn(m, dim, generator=generator).norm(dim=1, keepdim=True)
    return rows * norms


def favor_features(x: Tensor, omega: Tensor, mask: Tensor | None, is_query: bool) -> Tensor:
    """Positive random features φ(x) = exp(ωᵀx − |x|²/2) / √m with x scaled by d^(-1/4), so that
    E[φ(q)·φ(k)] = exp(q·k/√d). x [B,H,T,d], omega [m,d] -> [B,H,T,m]."""
    x = x * x.shape[-1] ** -0.25
    projection = x @ omega.t()  # [B,H,T,m]
    log_phi = projection - (x * x).sum(-1, keepdim=True) / 2
    # A per-row (query) or per-sequence (keys) constant cancels in the normalised ratio;
    # subtracting the max keeps exp() in range. Keys use their real positions only.
    scale = 1.0 / math.sqrt(omega.shape[0])
    if is_query:
        return torch.exp(log_phi - log_phi.amax(-1, keepdim=True).detach()) * scale
    if mask is not None:
        # Padded keys go to -inf *before* exp: their log φ can exceed the real keys' max and
        # overflow to inf, and a later inf·0 would turn the whole sentence into NaN.
        log_phi = log_phi.masked_fill(~mask[:, None, :, None], float("-inf"))
    stabiliser = log_phi.amax(dim=(-1, -2), keepdim=True)
    stabiliser = torch.where(torch.isfinite(stabiliser), stabiliser, torch.zeros_like(stabiliser))
    return torch.exp(log_phi - stabiliser.detach()) * scale


@register_attention
class PerformerAttention(KernelAttention):
    """exp(q·k/√d) ≈ φ(q)·φ(k), φ(x) = exp(ωᵀx − |x|²/2)/√m; Choromanski et al. 2021 (FAVOR+)."""

    spec = AttentionSpec(
        name="performer",
        score_memory=SCORES_LINEAR,
        constant_decode_state=True,
        roles=KERNEL_ROLES,
        formula=(
            "softmax kernel ≈ φ(q)·φ(k), φ(x) = exp(ωᵀx − ‖x‖²/2)/√m, ω orthogonal, ω_r ~ N(0,I)"
        ),
        complexity="O(T·m·d) time, O(T·m) memory; causal by prefix sums",
        known_for="Unbiased positive random features for softmax; error falls as m grows.",
        paper="Choromanski et al. 2021",
        hparams=(
            HParam("features", 64, "performer: number of random features m", 1, 16384),
            HParam(
                "redraw",
                100,
                "performer: redraw features every N training calls (0 = never)",
                0,
                10**9,
            ),
        ),
    )

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        heads: int = 1,
        dropout: float = 0.0,
        features: int = 64,
        redraw: int = 100,
    ):
        super().__init__(query_dim, key_dim, heads, dropout)
        self.features = features
        self.redraw = redraw
        self._calls = 0
        # Data-parallel training sets one generator seeded alike on every rank (features
        # must agree across ranks); None draws from the global RNG.
        self.redraw_generator: torch.Generator | None = None
        # Persistent: a checkpoint keeps the features it was evaluated with.
        self.register_buffer("omega", orthogonal_features(features, self.head_dim))

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        self.omega.copy_(orthogonal_features(self.features, self.head_dim, generator))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, key_mask: Tensor, causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        if self.training and self.redraw > 0:
            self._calls += 1
            if self._calls % self.redraw == 0:
                self.redraw_features(self.redraw_generator)
        return super().attend(q, k, v, key_mask, causal, need_weights)

    def feature_map(self, x: Tensor, mask: Tensor | None, is_query: bool) -> Tensor:
        return favor_features(x, self.omega.to(x.dtype), mask, is_query)


@register_attention
class LinearAttention(KernelAttention):
    """sim(q, k) = φ(q)·φ(k), φ(x) = elu(x) + 1.

    Katharopoulos et al. 2020 ("Transformers are RNNs").
    """

    spec = AttentionSpec(
        name="linear",
        score_memory=SCORES_LINEAR,
        constant_decode_state=True,
        roles=KERNEL_ROLES,
        formula="z_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_i)ᵀ Σ_j φ(k_j),  φ = elu + 1",
        complexity="O(T·d²) time, O(T·d) memory; causal by prefix sums",
        known_for="Attention as an RNN: a constant-size state per step when decoding.",
        paper="Katharopoulos et al. 2020",
    )

    def feature_map(self, x: Tensor, mask: Tensor | None, is_query: bool) -> Tensor:
        return F.elu(x) + 1.0
