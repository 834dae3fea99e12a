"""sparsemax / α-entmax: the normalisers against float64 loop references (closed-form simplex
projection, KKT conditions, bisection on τ), their backward (gradcheck), and the attention
variants in every role against loop references, in the RNN model and under beam search."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny import batch

from attnlab.config import DecodeConfig
from attnlab.decode.beam import beam_search
from attnlab.decode.penalties import COVERAGE_FLOOR
from attnlab.errors import AttnlabError
from attnlab.experiment import load_preset
from attnlab.nn.attention import ATTENTION, build_attention
from attnlab.nn.attention.base import (
    ALL_ROLES,
    NORM_SPARSE,
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    ROLE_SELF,
)
from attnlab.nn.attention.sparsemax import entmax, entmax15, sparsemax
from attnlab.nn.rnn import RNNSeq2Seq

D = 16
VARIANTS = ["sparsemax", "entmax"]

# -- independent float64 references, written with loops -------------------------------------


def ref_sparsemax(z: list[float]) -> list[float]:
    """Closed form (Martins & Astudillo 2016): sort, cumulative sums, the support size k*,
    τ = (Σ_{j<=k*} z_(j) − 1) / k*, p = max(z − τ, 0)."""
    ordered = sorted(z, reverse=True)
    cum, k_star, cum_star = 0.0, 0, 0.0
    for k, value in enumerate(ordered, start=1):
        cum += value
        if 1.0 + k * value > cum:
            k_star, cum_star = k, cum
    tau = (cum_star - 1.0) / k_star
    return [max(value - tau, 0.0) for value in z]


def ref_entmax(z: list[float], alpha: float, iters: int = 200) -> list[float]:
    """Bisection on τ with Σ max((α−1)z − τ, 0)^{1/(α−1)} = 1 (no renormalisation)."""
    x = [(alpha - 1.0) * value for value in z]
    power = 1.0 / (alpha - 1.0)

    def total(tau: float) -> float:
        return sum(max(value - tau, 0.0) ** power for value in x)

    lo, hi = max(x) - 1.0, max(x)  # total(lo) >= 1 >= total(hi) = 0
    for _ in range(iters):
        mid = (lo + hi) / 2
        if total(mid) >= 1.0:
            lo = mid
        else:
            hi = mid
    return [max(value - lo, 0.0) ** power for value in x]


def ref_rows(fn, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Apply a 1-d reference to every row of scores[..., T] over its real keys (float64)."""
    flat_scores = scores.double().reshape(-1, scores.shape[-1])
    flat_mask = mask.expand_as(scores).reshape(-1, scores.shape[-1])
    out = torch.zeros_like(flat_scores)
    for r in range(flat_scores.shape[0]):
        keys = [j for j in range(flat_scores.shape[1]) if flat_mask[r, j]]
        if keys:
            probs = fn([float(flat_scores[r, j]) for j in keys])
            for n, j in enumerate(keys):
                out[r, j] = probs[n]
    return out.view(scores.shape)


def random_scores(shape, scale=2.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale


def random_mask(shape, seed=0):
    gen = torch.Generator().manual_seed(seed + 1)
    mask = torch.rand(*shape, generator=gen) > 0.3
    mask[..., 0] = True
    mask.view(-1, shape[-1])[1] = False  # one row with every key masked
    return mask


# -- the normalisers ---------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_sparsemax_equals_the_closed_form_projection(masked):
    z = random_scores((3, 4, 9))
    mask = random_mask(z.shape) if masked else torch.ones_like(z, dtype=torch.bool)
    p = sparsemax(z, mask)
    torch.testing.assert_close(p, ref_rows(ref_sparsemax, z, mask), atol=1e-12, rtol=0)
    assert torch.all(p[~mask] == 0)
    assert (p[mask] == 0).any(), "the inputs must exercise exact zeros"
    if masked:
        assert torch.all(p.view(-1, 9)[1] == 0)  # the row without a real key


def test_sparsemax_is_the_euclidean_projection_by_its_kkt_conditions():
    """p = argmin_{q∈Δ} ‖q − z‖² iff p ∈ Δ and ⟨z − p, e_j − p⟩ <= 0 for every vertex e_j
    (the variational inequality; enough on the vertices since it is linear in q). Also: on
    the support z − p is one constant τ, off it z <= τ; and random simplex points are farther."""
    torch.manual_seed(3)
    simplex = torch.distributions.Dirichlet(torch.ones(7, dtype=torch.float64))
    for row in random_scores((40, 7), scale=1.5, seed=2):
        p = sparsemax(row)
        assert torch.all(p >= 0) and abs(float(p.sum()) - 1.0) < 1e-12
        r = row - p
        for j in range(7):
            vertex = torch.zeros(7, dtype=torch.float64)
            vertex[j] = 1.0
            assert float(r @ (vertex - p)) <= 1e-12
        support = p > 0
        tau = r[support]
        assert float(tau.max() - tau.min()) < 1e-12
        assert torch.all(row[~support] <= tau[0] + 1e-12)
        others = simplex.sample((50,))
        assert torch.all(((others - row) ** 2).sum(-1) >= ((p - row) ** 2).sum() - 1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_entmax15_equals_the_bisection_reference(masked):
    z = random_scores((3, 4, 9))
    mask = random_mask(z.shape) if masked else torch.ones_like(z, dtype=torch.bool)
    p = entmax15(z, mask)
    torch.testing.assert_close(
        p, ref_rows(lambda r: ref_entmax(r, 1.5), z, mask), atol=1e-10, rtol=0
    )
    assert torch.all(p[~mask] == 0)
    assert (p[mask] == 0).any()


@pytest.mark.parametrize("alpha", [1.05, 1.25, 1.75, 2.0])
def test_other_alphas_equal_the_bisection_reference(alpha):
    z = random_scores((2, 3, 8), seed=4)
    mask = random_mask(z.shape, seed=4)
    p = entmax(z, mask, alpha)
    ref = ref_rows(lambda r: ref_entmax(r, alpha), z, mask)
    torch.testing.assert_close(p, ref, atol=1e-10, rtol=0)
    if alpha == 2.0:  # α = 2 is sparsemax
        torch.testing.assert_close(p, ref_rows(ref_sparsemax, z, mask), atol=1e-12, rtol=0)


@pytest.mark.parametrize("fn", [sparsemax, entmax15, lambda z, m: entmax(z, m, 1.3)])
def test_rows_sum_to_one_in_float32_and_all_masked_rows_are_zero(fn):
    z = random_scores((5, 6, 11), seed=5).float()
    mask = random_mask(z.shape, seed=5)
    p = fn(z, mask)
    sums = p.sum(-1)
    has_key = mask.any(-1)
    assert torch.all(p >= 0) and torch.all(p[~mask] == 0)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), atol=1e-6, rtol=0)
    assert torch.all(sums[~has_key] == 0)


@pytest.mark.parametrize("alpha", [2.0, 1.5, 1.3])
def test_a_peaked_row_is_exactly_one_hot(alpha):
    z = torch.tensor([[0.0, 5.0, 0.5, -1.0], [3.0, 3.0, -3.0, 0.0]], dtype=torch.float64)
    p = entmax(z, None, alpha)
    assert torch.equal(p[0], torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64))
    # Two tied winners share the mass equally; the rest are exact zeros.
    assert torch.equal(p[1] == 0, torch.tensor([False, False, True, True]))
    torch.testing.assert_close(p[1, :2], torch.tensor([0.5, 0.5], dtype=torch.float64))


@pytest.mark.parametrize(
    "fn",
    [sparsemax, entmax15, lambda z, m: entmax(z, m, 1.3), lambda z, m: entmax(z, m, 1.8)],
    ids=["sparsemax", "entmax15", "entmax1.3", "entmax1.8"],
)
def test_backward_passes_gradcheck_with_masks_and_an_all_masked_row(fn):
    z = random_scores((3, 7), scale=1.5, seed=6).requires_grad_()
    mask = random_mask(z.shape, seed=6)
    assert torch.autograd.gradcheck(lambda t: fn(t, mask), (z,), eps=1e-6, atol=1e-6)
    # The all-masked row and the masked keys get no gradient, and nothing is NaN.
    (grad,) = torch.autograd.grad((fn(z, mask) * torch.randn(3, 7, dtype=z.dtype)).sum(), z)
    assert torch.isfinite(grad).all() and torch.all(grad[~mask] == 0)


def test_sparsemax_backward_is_the_closed_form_jacobian():
    """∂p/∂z = diag(s) − s sᵀ/|S| with s the support's indicator, built with loops."""
    z = random_scores((6,), seed=7).requires_grad_()
    p = sparsemax(z)
    support = [float(v > 0) for v in p.detach()]
    size = sum(support)
    for i in range(6):
        (row,) = torch.autograd.grad(p[i], z, retain_graph=True)
        expected = [support[i] * ((i == j) - support[j] / size) for j in range(6)]
        torch.testing.assert_close(row, torch.tensor(expected, dtype=torch.float64))


def test_entmax_refuses_alpha_outside_its_range():
    with pytest.raises(ValueError, match="alpha"):
        entmax(torch.zeros(3), None, 1.0)
    with pytest.raises(AttnlabError, match=r"model\.alpha=2\.5 is out of range"):
        build_attention("entmax", D, D, role=ROLE_SELF, hparams={"alpha": 2.5})
    with pytest.raises(AttnlabError, match=r"model\.alpha=1\.0 is out of range"):
        build_attention("entmax", D, D, role=ROLE_SELF, hparams={"alpha": 1.0})


# -- the attention variants --------------------------------------------------------------------


def build(name, role=ROLE_SELF, heads=2, dq=D, dk=D, **hparams):
    torch.manual_seed(0)
    attn = build_attention(name, dq, dk, role=role, heads=heads, hparams=hparams).eval()
    with torch.no_grad():
        attn.q_proj.weight.mul_(8.0)  # sharper scores: the maps hold exact zeros
    return attn


def make_inputs(b=2, tq=6, tk=6, dq=D, dk=D, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(b, tq, dq, generator=gen)
    keys = torch.randn(b, tk, dk, generator=gen)
    key_mask = torch.ones(b, tk, dtype=torch.bool)
    key_mask[1, tk - 2 :] = False  # second sentence: last two keys are padding
    return query, keys, key_mask


def heads64(x, linear, heads):
    y = x.double() @ linear.weight.double().t() + linear.bias.double()
    b, t, d = y.shape
    return y.view(b, t, heads, d // heads).transpose(1, 2)


def normaliser_ref(name, hparams):
    if name == "sparsemax":
        return ref_sparsemax
    alpha = hparams.get("alpha", 1.5)
    return lambda r: ref_entmax(r, alpha)


def loop_reference(attn, name, hparams, query, keys, key_mask, causal):
    """Per (b, h, i): scores q·k/√d_h over the visible real keys, the reference normaliser,
    Σ_j p_j v_j; concat heads, W_o. Returns (output [B,Tq,D], weights [B,H,Tq,Tk]) float64."""
    h = attn.heads
    q, k, v = (
        heads64(x, p, h)
        for x, p in ((query, attn.q_proj), (keys, attn.k_proj), (keys, attn.v_proj))
    )
    b, _, tq, dh = q.shape
    tk = k.shape[2]
    norm = normaliser_ref(name, hparams)
    weights = torch.zeros(b, h, tq, tk, dtype=torch.float64)
    ctx = torch.zeros(b, h, tq, dh, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(tq):
                visible = [
                    j for j in range(tk) if key_mask[bi, j] and (not causal or j <= tk - tq + i)
                ]
                if not visible:
                    continue
                s = [float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh) for j in visible]
                for j, p in zip(visible, norm(s), strict=True):
                    weights[bi, hi, i, j] = p
                    ctx[bi, hi, i] += p * v[bi, hi, j]
    merged = ctx.transpose(1, 2).reshape(b, tq, h * dh)
    out = merged @ attn.out_proj.weight.double().t() + attn.out_proj.bias.double()
    return out, weights


CASES = [
    pytest.param(name, hp, role, id=f"{name}{hp.get('alpha', '')}-{role}")
    for name, hp in (("sparsemax", {}), ("entmax", {}), ("entmax", {"alpha": 1.3}))
    for role in ALL_ROLES
]


@pytest.mark.parametrize("name,hparams,role", CASES)
@torch.no_grad()
def test_variant_equals_the_loop_reference(name, hparams, role):
    dk = 12 if role == ROLE_RNN_CROSS else D
    tq = {ROLE_RNN_CROSS: 1, ROLE_CROSS: 4}.get(role, 6)
    heads = 1 if role == ROLE_RNN_CROSS else 2
    attn = build(name, role=role, heads=heads, dk=dk, **hparams)
    query, keys, key_mask = make_inputs(tq=tq, tk=6, dk=dk)
    if role in (ROLE_SELF, ROLE_CAUSAL_SELF):
        keys = query
    causal = role == ROLE_CAUSAL_SELF
    ref_out, ref_w = loop_reference(attn, name, hparams, query, keys, key_mask, causal)
    for need_weights in (False, True):
        out = attn(query, keys, keys, key_mask, causal=causal, need_weights=need_weights)
        torch.testing.assert_close(out.context.double(), ref_out, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.weights.double(), ref_w, atol=2e-6, rtol=0)
    assert torch.equal(out.weights == 0, ref_w == 0), "the exact zeros are the reference's"
    visible = key_mask[:, None, None, :].expand_as(ref_w).clone()
    if causal:
        visible &= torch.ones(tq, 6, dtype=torch.bool).tril()
    assert (out.weights[visible] == 0).any(), "the inputs must exercise exact zeros"


@pytest.mark.parametrize("name", VARIANTS)
@torch.no_grad()
def test_one_cached_query_equals_the_reference_row(name):
    """Incremental decoding: the last query alone over the cached (precomputed) keys gives the
    full causal pass's last row, which is the loop reference's."""
    attn = build(name, role=ROLE_CAUSAL_SELF)
    x, _, key_mask = make_inputs(tq=6, tk=6)
    cache = attn.precompute(x)
    last = attn(x[:, -1:], x, x, key_mask, causal=True, need_weights=True, precomputed=cache)
    ref_out, ref_w = loop_reference(attn, name, {}, x, x, key_mask, causal=True)
    torch.testing.assert_close(last.context.double(), ref_out[:, -1:], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(last.weights.double(), ref_w[:, :, -1:], atol=2e-6, rtol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_all_masked_rows_train_without_nan(name):
    attn = build(name, role=ROLE_CROSS).train()
    query, keys, key_mask = make_inputs(tq=3)
    key_mask[0] = False
    out = attn(query, keys, keys, key_mask, need_weights=True)
    assert torch.all(out.weights[0] == 0)
    out.context.square().sum().backward()
    for param in attn.parameters():
        assert torch.isfinite(param.grad).all()


def test_entmax_at_alpha_two_is_the_sparsemax_variant():
    query, keys, key_mask = make_inputs(tq=4)
    with torch.no_grad():
        a = build("entmax", role=ROLE_CROSS, alpha=2.0)(
            query, keys, keys, key_mask, need_weights=True
        )
        b = build("sparsemax", role=ROLE_CROSS)(query, keys, keys, key_mask, need_weights=True)
    torch.testing.assert_close(a.weights, b.weights, atol=0, rtol=0)
    torch.testing.assert_close(a.context, b.context, atol=0, rtol=0)


@pytest.mark.parametrize("name", VARIANTS)
def test_spec_declares_sparse_rows_every_role_and_a_paper(name):
    spec = ATTENTION.get(name).meta
    assert spec.normalisation == NORM_SPARSE
    assert spec.roles == frozenset(ALL_ROLES)
    assert "arXiv" in spec.paper and spec.formula and spec.known_for


# -- in the RNN model and under beam search ---------------------------------------------------


def sharp_rnn(name: str) -> RNNSeq2Seq:
    torch.manual_seed(0)
    model = RNNSeq2Seq(11, 13, attention=name, emb=6, hidden=8, heads=2, dropout=0.0)
    with torch.no_grad():
        model.attention.q_proj.weight.mul_(8.0)
        model.attention.k_proj.weight.mul_(8.0)
    return model.eval()


SOURCES = [[4, 5, 6, 7, 8, 9, 10], [9, 4], [5, 10, 6]]
TARGETS = [[4, 5, 6, 7, 8], [9], [5, 10, 12]]


@pytest.mark.parametrize("name", VARIANTS)
@torch.no_grad()
def test_rnn_cross_weights_are_stochastic_with_exact_zeros(name):
    model = sharp_rnn(name)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    cross = model(src, src_mask, tgt_in, need_weights=True).attentions["cross"]  # [B,1,H,T,S]
    real = src_mask[:, None, None, None, :].expand_as(cross)
    assert torch.all(cross >= 0) and torch.all(cross[~real] == 0)
    torch.testing.assert_close(cross.sum(-1), torch.ones_like(cross[..., 0]), atol=1e-6, rtol=0)
    assert (cross[real] == 0).any()


@torch.no_grad()
def test_coverage_penalty_stays_finite_with_sparse_maps():
    """Beam search with a coverage penalty on an RNN sparsemax model: a source word that got
    exactly zero weight is floored (COVERAGE_FLOOR), not log(0) = -inf."""
    model = sharp_rnn("sparsemax")
    src, src_mask, _ = batch(SOURCES, TARGETS)
    beta = 0.4
    cfg = DecodeConfig(beam=3, nbest=3, beta=beta, max_len_const=4)
    hyps = beam_search(model, src, src_mask, cfg, torch.full((3,), 4), need_attention=True)
    floored = 0
    for sentence, n_src in zip(hyps, src_mask.sum(-1).tolist(), strict=True):
        for hyp in sentence:
            assert math.isfinite(hyp.score) and math.isfinite(hyp.coverage_penalty)
            coverage = hyp.attention.double().sum(0)[:n_src]
            floored += int((coverage == 0).sum())
            expected = beta * sum(
                math.log(min(max(float(c), COVERAGE_FLOOR), 1.0)) for c in coverage
            )
            assert hyp.coverage_penalty == pytest.approx(expected, rel=1e-6)
    assert floored > 0, "some source word must get exactly zero coverage"


# -- the preset ----------------------------------------------------------------------------------


def test_the_sparsemax_preset_loads_and_validates():
    config = load_preset("reverse-sparsemax")
    assert config.model.arch == "rnn"
    assert config.model.attention == "sparsemax"
    assert config.data.task == "reverse"
