"""The modern attention variants against torch's own modules and float64 loop references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.errors import AttnlabError
from attnlab.nn.attention import ATTENTION, build_attention
from attnlab.nn.attention.base import (
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    ROLE_SELF,
    masked_softmax,
)
from attnlab.nn.attention.kernel import (
    causal_prefix_attention,
    favor_features,
    kernel_attention,
    kernel_weights,
    orthogonal_features,
)
from attnlab.nn.attention.multihead import ScaledDotAttention

D = 16


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def make_inputs(b=2, tq=6, tk=6, dq=D, dk=D, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(b, tq, dq, generator=gen)
    keys = torch.randn(b, tk, dk, generator=gen)
    key_mask = torch.ones(b, tk, dtype=torch.bool)
    key_mask[1, tk - 2 :] = False  # second sentence: last two keys are padding
    return query, keys, key_mask


def build(name, role=ROLE_SELF, heads=2, dq=D, dk=D, **hparams):
    torch.manual_seed(0)
    return build_attention(name, dq, dk, role=role, heads=heads, hparams=hparams).eval()


def variants_with(role):
    return [e.name for e in ATTENTION.entries() if role in e.meta.roles]


def heads_proj(x64, linear, heads):
    """float64 projection split into heads: [B,T,D] -> [B,H,T,dh]."""
    y = x64 @ linear.weight.double().t() + linear.bias.double()
    b, t, d = y.shape
    return y.view(b, t, heads, d // heads).transpose(1, 2)


def out_proj(ctx64, attn):
    b, h, t, dh = ctx64.shape
    return (
        ctx64.transpose(1, 2).reshape(b, t, h * dh) @ attn.out_proj.weight.double().t()
        + attn.out_proj.bias.double()
    )


def loop_softmax_attention(scores_fn, value_fn, allowed_fn, b, h, tq, tk, key_mask):
    """Reference: for every (b, h, i) a softmax over the allowed real keys, by explicit loops.
    Returns context [B,H,Tq,dh] and weights [B,H,Tq,Tk] in float64."""
    weights = torch.zeros(b, h, tq, tk, dtype=torch.float64)
    contexts = []
    for bi in range(b):
        per_head = []
        for hi in range(h):
            rows = []
            for i in range(tq):
                keys = [j for j in range(tk) if key_mask[bi, j] and allowed_fn(hi, i, j)]
                if not keys:  # no visible real key: zero context, zero weights
                    rows.append(torch.zeros_like(value_fn(bi, hi, i, 0)))
                    continue
                s = torch.tensor([scores_fn(bi, hi, i, j) for j in keys], dtype=torch.float64)
                a = torch.exp(s - s.max()) / torch.exp(s - s.max()).sum()
                ctx = sum(a[n] * value_fn(bi, hi, i, j) for n, j in enumerate(keys))
                for n, j in enumerate(keys):
                    weights[bi, hi, i, j] = a[n]
                rows.append(ctx)
            per_head.append(torch.stack(rows))
        contexts.append(torch.stack(per_head))
    return torch.stack(contexts), weights


# -- scaled-dot against torch.nn.MultiheadAttention ------------------------------------------------


def copy_into_mha(attn, mha):
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(
                torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
            )
        else:
            mha.q_proj_weight.copy_(attn.q_proj.weight)
            mha.k_proj_weight.copy_(attn.k_proj.weight)
            mha.v_proj_weight.copy_(attn.v_proj.weight)
        mha.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
        mha.out_proj.weight.copy_(attn.out_proj.weight)
        mha.out_proj.bias.copy_(attn.out_proj.bias)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("case", ["self", "self-causal", "cross", "rnn-cross-kdim"])
def test_scaled_dot_equals_torch_multihead_attention(case, need_weights):
    heads = 4
    dk = 12 if case == "rnn-cross-kdim" else D
    tq = 1 if case == "rnn-cross-kdim" else (6 if case.startswith("self") else 4)
    role = {"self": ROLE_SELF, "self-causal": ROLE_CAUSAL_SELF, "cross": ROLE_CROSS}.get(
        case, ROLE_RNN_CROSS
    )
    attn = build("scaled-dot", role=role, heads=heads, dk=dk)
    mha = torch.nn.MultiheadAttention(D, heads, batch_first=True, kdim=dk, vdim=dk).eval()
    copy_into_mha(attn, mha)
    query, keys, key_mask = make_inputs(tq=tq, tk=6, dk=dk)
    if case.startswith("self"):
        keys = query
    causal = case == "self-causal"
    ours = attn(query, keys, keys, key_mask, causal=causal, need_weights=need_weights)
    attn_mask = ~torch.ones(tq, 6, dtype=torch.bool).tril() if causal else None
    ref, ref_weights = mha(
        query,
        keys,
        keys,
        key_padding_mask=~key_mask,
        attn_mask=attn_mask,
        need_weights=True,
        average_attn_weights=False,
    )
    torch.testing.assert_close(ours.context, ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(ours.weights, ref_weights, atol=1e-6, rtol=1e-5)
    else:
        assert ours.weights is None


def _multi_head_cases():
    """Every registered multi-head variant in every role it declares (a role it does not
    declare cannot be built: build_attention refuses it, tested elsewhere)."""
    from attnlab.nn.attention.multihead import MultiHeadBase

    for entry in ATTENTION.entries():
        if not issubclass(entry.factory, MultiHeadBase):
            continue  # the classic family: one path only
        for role in (ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_RNN_CROSS):
            if role in entry.meta.roles:
                yield entry.name, role


def _role_inputs(role):
    """query, keys, key_mask, causal for ``role`` (self roles attend over the query itself)."""
    if role == ROLE_RNN_CROSS:
        query, keys, key_mask = make_inputs(tq=1, tk=6)
    elif role == ROLE_CROSS:
        query, keys, key_mask = make_inputs(tq=4, tk=6)
    else:
        query, _, key_mask = make_inputs()
        keys = query
    return query, keys, key_mask, role == ROLE_CAUSAL_SELF


def test_the_fused_kernel_serves_exactly_the_plain_softmax_variants():
    from attnlab.nn.attention.multihead import MultiHeadBase

    multi_head = [e for e in ATTENTION.entries() if issubclass(e.factory, MultiHeadBase)]
    fused = {e.name for e in multi_head if e.factory.uses_sdpa}
    assert {"scaled-dot", "multihead", "gated", "alibi"} <= fused
    own_scores = {
        "additive",
        "relative",
        "sliding-window",
        "dilated",
        "linformer",
        "performer",
        "linear",
    }
    assert not fused & own_scores


@pytest.mark.parametrize("name,role", list(_multi_head_cases()))
def test_sdpa_path_equals_explicit_path(name, role):
    """Without weights (the fused kernel, banded or kernel paths) = with weights (the explicit
    softmax) = reference mode without weights, for every registered multi-head variant."""
    from attnlab.nn.reference import reference_mode

    attn = build(name, role=role, heads=4, window=2, dilation=2)
    if name in ("scaled-dot", "gated", "alibi"):
        assert attn.uses_sdpa
    query, keys, key_mask, causal = _role_inputs(role)
    fast = attn(query, keys, keys, key_mask, causal=causal, need_weights=False)
    explicit = attn(query, keys, keys, key_mask, causal=causal, need_weights=True)
    with reference_mode(attn):
        reference = attn(query, keys, keys, key_mask, causal=causal, need_weights=False)
    assert explicit.weights is not None
    if attn.uses_sdpa:
        assert fast.weights is None  # the fused kernel gives none
    torch.testing.assert_close(fast.context, explicit.context, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(reference.context, explicit.context, atol=1e-6, rtol=1e-5)


class CosineAttention(ScaledDotAttention):
    """A user's subclass that changes only ``scores``: cosine similarity times 5."""

    def scores(self, q, k):
        return 5.0 * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)


def cosine_reference(attn, query, keys, key_mask, causal):
    """float64 loops: softmax over the visible real keys of 5·cos(q_h, k_h), then W_o."""
    q, k, v = _reference_setup(attn, query, keys)
    b, h, tq, _ = q.shape
    tk = k.shape[2]
    context, _ = loop_softmax_attention(
        lambda bi, hi, i, j: 5.0 * float(F.cosine_similarity(q[bi, hi, i], k[bi, hi, j], dim=0)),
        lambda bi, hi, i, j: v[bi, hi, j],
        lambda hi, i, j: not causal or j <= i + tk - tq,
        b,
        h,
        tq,
        tk,
        key_mask,
    )
    return out_proj(context, attn)


@pytest.mark.parametrize("role", [ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_RNN_CROSS])
def test_a_scores_override_is_honoured_without_weights(role):
    """The bug this guards: a subclass overriding ``scores`` trained as plain scaled-dot (the
    fused kernel) while displaying its own weights."""
    torch.manual_seed(0)
    attn = CosineAttention(D, D, heads=2).eval()
    assert not attn.uses_sdpa and not attn.plain
    query, keys, key_mask, causal = _role_inputs(role)
    fast = attn(query, keys, keys, key_mask, causal=causal, need_weights=False)
    explicit = attn(query, keys, keys, key_mask, causal=causal, need_weights=True)
    expected = cosine_reference(attn, query, keys, key_mask, causal)
    torch.testing.assert_close(fast.context, explicit.context, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fast.context.double(), expected, atol=1e-5, rtol=1e-5)


# -- float64 references from each formula -------------------------------------------------------


def _reference_setup(attn, query, keys):
    q = heads_proj(query.double(), attn.q_proj, attn.heads)
    k = heads_proj(keys.double(), attn.k_proj, attn.heads)
    v = heads_proj(keys.double(), attn.v_proj, attn.heads)
    return q, k, v


def _offset(tq, tk):
    return tk - tq


@pytest.mark.parametrize("causal", [False, True])
def test_additive_matches_loop_reference(causal):
    attn = build("additive", role=ROLE_CAUSAL_SELF if causal else ROLE_SELF)
    query, _, key_mask = make_inputs()
    q, k, v = _reference_setup(attn, query, query)
    vv = attn.v.double()
    b, h, t, _ = q.shape
    ctx, w = loop_softmax_attention(
        lambda bi, hi, i, j: float(vv[hi] @ torch.tanh(q[bi, hi, i] + k[bi, hi, j])),
        lambda bi, hi, i, j: v[bi, hi, j],
        lambda hi, i, j: not causal or j <= i,
        b,
        h,
        t,
        t,
        key_mask,
    )
    out = attn(query, query, query, key_mask, causal=causal, need_weights=True)
    torch.testing.assert_close(out.weights.double(), w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)


def test_gated_matches_loop_reference():
    attn = build("gated")
    query, keys, key_mask = make_inputs()
    q, k, v = _reference_setup(attn, query, query)
    b, h, t, dh = q.shape
    ctx, w = loop_softmax_attention(
        lambda bi, hi, i, j: float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh),
        lambda bi, hi, i, j: v[bi, hi, j],
        lambda hi, i, j: True,
        b,
        h,
        t,
        t,
        key_mask,
    )
    gate = torch.sigmoid(heads_proj(query.double(), attn.gate_proj, h))
    out = attn(query, query, query, key_mask, need_weights=True)
    torch.testing.assert_close(
        out.context.double(), out_proj(gate * ctx, attn), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
def test_relative_matches_shaw_formula(causal):
    clip = 2
    attn = build("relative", role=ROLE_CAUSAL_SELF if causal else ROLE_SELF, max_relative=clip)
    query, _, key_mask = make_inputs(tq=7, tk=7)
    q, k, v = _reference_setup(attn, query, query)
    a_k, a_v = attn.rel_keys.weight.double(), attn.rel_values.weight.double()
    b, h, t, dh = q.shape

    def rel(i, j):
        return max(-clip, min(clip, j - i)) + clip

    ctx, w = loop_softmax_attention(
        lambda bi, hi, i, j: float(q[bi, hi, i] @ (k[bi, hi, j] + a_k[rel(i, j)])) / math.sqrt(dh),
        lambda bi, hi, i, j: v[bi, hi, j] + a_v[rel(i, j)],
        lambda hi, i, j: not causal or j <= i,
        b,
        h,
        t,
        t,
        key_mask,
    )
    out = attn(query, query, query, key_mask, causal=causal, need_weights=True)
    torch.testing.assert_close(out.weights.double(), w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_matches_linear_distance_penalty(causal):
    heads = 4
    attn = build("alibi", role=ROLE_CAUSAL_SELF if causal else ROLE_SELF, heads=heads)
    query, _, key_mask = make_inputs()
    q, k, v = _reference_setup(attn, query, query)
    b, h, t, dh = q.shape
    slopes = [2 ** (-8 * (n + 1) / heads) for n in range(heads)]
    ctx, w = loop_softmax_attention(
        lambda bi, hi, i, j: (
            float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh) - slopes[hi] * abs(i - j)
        ),
        lambda bi, hi, i, j: v[bi, hi, j],
        lambda hi, i, j: not causal or j <= i,
        b,
        h,
        t,
        t,
        key_mask,
    )
    for need_weights in (True, False):
        out = attn(query, query, query, key_mask, causal=causal, need_weights=need_weights)
        torch.testing.assert_close(out.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)
    weights = attn(query, query, query, key_mask, causal=causal, need_weights=True).weights
    torch.testing.assert_close(weights.double(), w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "window,dilation,causal,length",
    [
        (1, 1, False, 9),
        (2, 1, True, 23),
        (3, 2, False, 37),
        (2, 3, True, 40),
        (5, 2, True, 11),
    ],
)
def test_sparse_patterns_match_loop_reference(window, dilation, causal, length):
    name = "sliding-window" if dilation == 1 else "dilated"
    params = {"window": window} | ({"dilation": dilation} if name == "dilated" else {})
    attn = build(name, role=ROLE_CAUSAL_SELF if causal else ROLE_SELF, heads=2, **params)
    query, _, key_mask = make_inputs(tq=length, tk=length)
    q, k, v = _reference_setup(attn, query, query)
    b, h, t, dh = q.shape
    # dilated: head 0 local (d = 1), head 1 strided (d); sliding-window: d = 1 for both heads
    head_dilation = [1, dilation]

    def allowed(hi, i, j):
        d = head_dilation[hi]
        return abs(i - j) <= window * d and (i - j) % d == 0 and (not causal or j <= i)

    ctx, w = loop_softmax_attention(
        lambda bi, hi, i, j: float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh),
        lambda bi, hi, i, j: v[bi, hi, j],
        allowed,
        b,
        h,
        t,
        t,
        key_mask,
    )
    banded = attn(query, query, query, key_mask, causal=causal, need_weights=False)
    explicit = attn(query, query, query, key_mask, causal=causal, need_weights=True)
    torch.testing.assert_close(banded.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit.weights.double(), w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_sliding_window_wider_than_sequence_equals_full_attention(causal, need_weights):
    role = ROLE_CAUSAL_SELF if causal else ROLE_SELF
    full = build("scaled-dot", role=role, heads=2)
    local = build("sliding-window", role=role, heads=2, window=20)
    local.load_state_dict(full.state_dict())
    query, _, key_mask = make_inputs(tq=20, tk=20)
    a = full(query, query, query, key_mask, causal=causal, need_weights=True)
    b = local(query, query, query, key_mask, causal=causal, need_weights=need_weights)
    torch.testing.assert_close(b.context, a.context, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(b.weights, a.weights, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["sliding-window", "dilated"])
@pytest.mark.parametrize("causal", [False, True])
def test_a_window_far_wider_than_the_sequence_costs_what_the_sequence_does(
    name, causal, monkeypatch
):
    """window ≥ T sees every key: the banded path must give the loop reference's full (or
    per-residue-class) softmax and build no more score cells than window = T - 1 does. The
    bug: blocks of b + 2w keys with b = max(w, 16) -- a 12-token sentence with window=100000
    asked for ~10^11 score cells per head."""
    import attnlab.nn.attention.sparse as sparse

    seen: list[int] = []

    def spy(scores, mask):
        seen.append(scores.numel())
        return masked_softmax(scores, mask)

    monkeypatch.setattr(sparse, "masked_softmax", spy)
    role = ROLE_CAUSAL_SELF if causal else ROLE_SELF
    t, dilation = 12, 3
    query, _, key_mask = make_inputs(tq=t, tk=t)
    extra = {"dilation": dilation} if name == "dilated" else {}
    narrow, wide = (build(name, role=role, heads=2, window=w, **extra) for w in (t - 1, 100_000))
    assert all(
        torch.equal(a, b) for a, b in zip(narrow.parameters(), wide.parameters(), strict=True)
    )
    q, k, v = _reference_setup(narrow, query, query)
    b, h, _, dh = q.shape
    step = [1, dilation] if name == "dilated" else [1, 1]  # head 0 local, head 1 strided
    ctx, _ = loop_softmax_attention(
        lambda bi, hi, i, j: float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh),
        lambda bi, hi, i, j: v[bi, hi, j],
        lambda hi, i, j: (i - j) % step[hi] == 0 and (not causal or j <= i),
        b,
        h,
        t,
        t,
        key_mask,
    )
    cells = []
    for attn in (narrow, wide):
        seen.clear()
        banded = attn(query, query, query, key_mask, causal=causal, need_weights=False)
        cells.append(sum(seen))
        torch.testing.assert_close(
            banded.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5
        )
    assert cells[1] == cells[0], cells


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_dilated_with_dilation_one_equals_sliding_window(causal, need_weights):
    role = ROLE_CAUSAL_SELF if causal else ROLE_SELF
    local = build("sliding-window", role=role, heads=4, window=3)
    dilated = build("dilated", role=role, heads=4, window=3, dilation=1)
    dilated.load_state_dict(local.state_dict())
    query, _, key_mask = make_inputs(tq=30, tk=30)
    a = local(query, query, query, key_mask, causal=causal, need_weights=need_weights)
    b = dilated(query, query, query, key_mask, causal=causal, need_weights=need_weights)
    torch.testing.assert_close(b.context, a.context, atol=1e-6, rtol=1e-5)


def test_linear_attention_matches_loop_reference():
    attn = build("linear", role=ROLE_CAUSAL_SELF)
    query, _, key_mask = make_inputs(tq=9, tk=9)
    q, k, v = _reference_setup(attn, query, query)
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    b, h, t, _ = q.shape
    for causal in (False, True):
        ctx = torch.zeros_like(v)
        for bi in range(b):
            for hi in range(h):
                for i in range(t):
                    js = [j for j in range(t) if key_mask[bi, j] and (not causal or j <= i)]
                    sims = [float(phi_q[bi, hi, i] @ phi_k[bi, hi, j]) for j in js]
                    ctx[bi, hi, i] = sum(
                        s * v[bi, hi, j] for s, j in zip(sims, js, strict=True)
                    ) / sum(sims)
        out = attn(query, query, query, key_mask, causal=causal)
        torch.testing.assert_close(out.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length", [5, 64, 150])
@pytest.mark.parametrize("kind", ["linear", "performer"])
def test_causal_prefix_sums_equal_masked_quadratic_form(kind, length):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, length, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, length, dtype=torch.bool)
    if kind == "linear":
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    else:
        omega = orthogonal_features(32, 8, gen).double()
        phi_q, phi_k = favor_features(q, omega, None, True), favor_features(k, omega, mask, False)
    quadratic = kernel_weights(phi_q, phi_k, mask, causal=True) @ v
    prefix = causal_prefix_attention(phi_q, phi_k, v, chunk=16)
    torch.testing.assert_close(prefix, quadratic, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(kernel_attention(phi_q, phi_k, v, mask, causal=True), quadratic)


def test_performer_error_against_softmax_falls_as_features_grow():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        0.5 * torch.randn(1, 2, 32, 16, generator=gen, dtype=torch.float64) for _ in range(3)
    )
    mask = torch.ones(1, 32, dtype=torch.bool)
    exact = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v
    errors = []
    for m in (4, 32, 256, 2048):
        trials = []
        for seed in range(4):
            omega = orthogonal_features(m, 16, torch.Generator().manual_seed(100 + seed)).double()
            approx = kernel_attention(
                favor_features(q, omega, None, True),
                favor_features(k, omega, mask, False),
                v,
                mask,
                False,
            )
            trials.append((approx - exact).abs().mean())
        errors.append(float(torch.stack(trials).mean()))
    assert errors == sorted(errors, reverse=True), errors
    assert errors[-1] < errors[0] / 4, errors


def test_performer_redraws_features_only_while_training():
    attn = build("performer", role=ROLE_SELF, features=8, redraw=2)
    query, _, key_mask = make_inputs()
    before = attn.omega.clone()
    attn(query, query, query, key_mask)
    attn(query, query, query, key_mask)
    assert torch.equal(attn.omega, before)  # eval: never redrawn
    attn.train()
    attn(query, query, query, key_mask)
    assert torch.equal(attn.omega, before)
    attn(query, query, query, key_mask)  # second training call: redraw
    assert not torch.equal(attn.omega, before)


def test_linformer_matches_low_rank_formula_and_refuses_long_inputs():
    attn = build("linformer", role=ROLE_SELF, heads=2, rank=3, max_len=8)
    query, _, key_mask = make_inputs(tq=6, tk=6)
    q, k, v = _reference_setup(attn, query, query)
    b, h, t, dh = q.shape
    logits = attn.length_logits.double()[:, :t]
    out = attn(query, query, query, key_mask, need_weights=True)
    ctx = torch.zeros_like(q)
    weights = torch.zeros(b, h, t, t, dtype=torch.float64)
    for bi in range(b):
        real = [j for j in range(t) if key_mask[bi, j]]
        proj = torch.softmax(logits[:, real], dim=-1)  # [k, real]
        for hi in range(h):
            k_low, v_low = proj @ k[bi, hi, real], proj @ v[bi, hi, real]
            p = torch.softmax(q[bi, hi] @ k_low.t() / math.sqrt(dh), dim=-1)
            ctx[bi, hi] = p @ v_low
            weights[bi, hi][:, real] = p @ proj
    torch.testing.assert_close(out.context.double(), out_proj(ctx, attn), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
    long_query, _, long_mask = make_inputs(tq=9, tk=9)
    with pytest.raises(AttnlabError, match="model.max_len=8"):
        attn(long_query, long_query, long_query, long_mask)


# -- properties over the whole registry ----------------------------------------------------------


@pytest.mark.parametrize("name", variants_with(ROLE_CAUSAL_SELF))
@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_self_attention_ignores_future_tokens(name, need_weights):
    attn = build(
        name,
        role=ROLE_CAUSAL_SELF,
        heads=2,
        **({"window": 2} if name in ("sliding-window", "dilated") else {}),
    )
    x, _, _ = make_inputs(tq=12, tk=12)
    mask = torch.ones(2, 12, dtype=torch.bool)
    changed = x.clone()
    changed[:, 7:] = torch.randn(2, 5, D)
    a = attn(x, x, x, mask, causal=True, need_weights=need_weights)
    b = attn(changed, changed, changed, mask, causal=True, need_weights=need_weights)
    torch.testing.assert_close(a.context[:, :7], b.context[:, :7], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a.context[:, 7:], b.context[:, 7:])
    if need_weights:
        assert torch.all(a.weights[..., :7, 7:] == 0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", variants_with(ROLE_CAUSAL_SELF))
def test_one_cached_query_sees_what_the_full_pass_sees(name, causal):
    """Bottom-right alignment: the last query alone over all keys = the full pass's last row."""
    attn = build(name, role=ROLE_CAUSAL_SELF, heads=2)
    x, _, _ = make_inputs(tq=10, tk=10)
    mask = torch.ones(2, 10, dtype=torch.bool)
    full = attn(x, x, x, mask, causal=True)
    last = attn(x[:, -1:], x, x, mask, causal=True)
    torch.testing.assert_close(last.context, full.context[:, -1:], atol=1e-5, rtol=1e-5)


def _role_and_shapes(name):
    roles = ATTENTION.get(name).meta.roles
    if ROLE_SELF in roles:
        return ROLE_SELF, 6
    if ROLE_CROSS in roles:
        return ROLE_CROSS, 4
    return ROLE_RNN_CROSS, 1


@pytest.mark.parametrize("name", [e.name for e in ATTENTION.entries() if e.meta.exposes_weights])
def test_padded_keys_get_zero_weight_and_rows_are_normalised_as_the_spec_says(name):
    """Padded keys get exactly zero weight; the rows obey the spec's ``normalisation``:
    softmax / sparse rows are non-negative and sum to 1 (sparse ones may hold exact zeros),
    sub-stochastic rows are non-negative and sum to at most 1, signed rows may be negative."""
    spec = ATTENTION.get(name).meta
    role, tq = _role_and_shapes(name)
    attn = build(name, role=role, heads=2 if role != ROLE_RNN_CROSS else 1)
    query, keys, key_mask = make_inputs(tq=tq, tk=6)
    if role == ROLE_SELF:
        keys = query
    out = attn(query, keys, keys, key_mask, need_weights=True)
    w = out.weights
    assert w is not None and w.shape[0] == 2 and w.shape[-2:] == (tq, 6)
    assert torch.all(w[1, ..., 4:] == 0), "padded keys must get exactly zero weight"
    assert torch.isfinite(out.context).all()
    sums = w.sum(-1)
    if spec.normalisation in (NORM_SOFTMAX, NORM_SPARSE):
        assert torch.all(w >= 0)
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=1e-5)
    elif spec.normalisation == NORM_SUB_STOCHASTIC:
        assert torch.all(w >= 0) and torch.all(sums <= 1 + 1e-5)
    elif spec.normalisation == NORM_UNNORMALISED:
        assert torch.all(w >= 0)
    else:
        assert spec.normalisation == NORM_SIGNED


@pytest.mark.parametrize("name", [n for n in variants_with(ROLE_SELF) + variants_with(ROLE_CROSS)])
def test_a_row_with_every_key_masked_gives_zeros_not_nan(name):
    role = ROLE_SELF if ROLE_SELF in ATTENTION.get(name).meta.roles else ROLE_CROSS
    attn = build(name, role=role, heads=2)
    query, keys, key_mask = make_inputs()
    key_mask[0] = False
    if role == ROLE_SELF:
        keys = query
    for need_weights in (False, True):
        out = attn(query, keys, keys, key_mask, need_weights=need_weights)
        assert torch.isfinite(out.context).all()
        if out.weights is not None:
            assert torch.all(out.weights[0] == 0)


def _multi_head_roles():
    from attnlab.nn.attention.multihead import MultiHeadBase

    for entry in ATTENTION.entries():
        if issubclass(entry.factory, MultiHeadBase):
            for role in (ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS):
                if role in entry.meta.roles:
                    yield entry.name, role
    for role in (ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS):
        yield "cosine-subclass", role  # a scores override must not take the plain kernel


@pytest.mark.parametrize("name,role", list(_multi_head_roles()))
@pytest.mark.parametrize("empty_row", [False, True])
def test_packed_forward_equals_padded_forward(name, role, empty_row):
    """forward_layout on packed rows (real rows only, fused QKV / KV projections) = forward at
    the real rows."""
    from attnlab.nn.packing import Packing

    if name == "cosine-subclass":
        torch.manual_seed(0)
        attn = CosineAttention(D, D, heads=2).eval()
    else:
        attn = build(name, role=role, heads=2)
    query, keys, key_mask = make_inputs(b=3, tq=5 if role == ROLE_CROSS else 6, tk=6, seed=3)
    q_mask = torch.ones(query.shape[:2], dtype=torch.bool)
    q_mask[1, 3:] = False  # the second query sentence is shorter
    if role == ROLE_CROSS:
        if empty_row:
            key_mask[2] = False
    else:
        keys = query
        key_mask = q_mask if role == ROLE_SELF else torch.ones_like(q_mask)
        if empty_row and role == ROLE_SELF:
            q_mask[2] = key_mask[2] = False
    causal = role == ROLE_CAUSAL_SELF
    q_pack = Packing(q_mask)
    k_pack = q_pack if keys is query else Packing(key_mask)
    padded_query = q_pack.unpack(q_pack.pack(query))  # zeros at padding, as the packed path sees it
    padded_keys = padded_query if keys is query else k_pack.unpack(k_pack.pack(keys))
    expected = attn(padded_query, padded_keys, padded_keys, key_mask, causal=causal).context
    packed_query = q_pack.pack(query)
    packed_keys = packed_query if keys is query else k_pack.pack(keys)
    out = attn.forward_layout(
        packed_query, q_pack, packed_keys, packed_keys, k_pack, key_mask, causal
    ).context
    torch.testing.assert_close(out, q_pack.pack(expected), atol=1e-5, rtol=1e-5)
    assert torch.isfinite(out).all()


def test_linformer_is_refused_in_causal_self_attention():
    assert ROLE_CAUSAL_SELF not in ATTENTION.get("linformer").meta.roles
    with pytest.raises(
        AttnlabError, match="cannot be used for causal-self attention; it supports: cross, self"
    ):
        build_attention("linformer", D, D, role=ROLE_CAUSAL_SELF)


def test_heads_must_divide_the_width():
    with pytest.raises(AttnlabError, match="divisible by model.heads=3"):
        build_attention("scaled-dot", D, D, role=ROLE_SELF, heads=3)
