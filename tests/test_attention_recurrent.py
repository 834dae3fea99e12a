"""stick-breaking and decayed-linear against float64 loop references written from the papers'
formulas (explicit products and step-by-step state updates, not calls into the module)."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.experiment import load_preset
from attnlab.nn.attention import ATTENTION, build_attention
from attnlab.nn.attention.base import (
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_SELF,
)
from attnlab.nn.attention.multihead import MultiHeadBase

D = 8
HEADS = 2


def build(name, role=ROLE_CAUSAL_SELF, **hparams):
    torch.manual_seed(0)
    return build_attention(name, D, D, role=role, heads=HEADS, hparams=hparams).eval()


def make_inputs(b=2, t=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, D, generator=gen)
    key_mask = torch.ones(b, t, dtype=torch.bool)
    key_mask[b - 1, t - 2 :] = False  # last sentence: the last two positions are padding
    return x, key_mask


@torch.no_grad()
def heads_proj(x64, linear):
    """float64 projection split into heads: [B,T,D] -> [B,H,T,dh]."""
    y = x64 @ linear.weight.double().t() + linear.bias.double()
    b, t, d = y.shape
    return y.view(b, t, HEADS, d // HEADS).transpose(1, 2)


@torch.no_grad()
def out_proj(ctx64, attn):
    b, h, t, dh = ctx64.shape
    merged = ctx64.transpose(1, 2).reshape(b, t, h * dh)
    return merged @ attn.out_proj.weight.double().t() + attn.out_proj.bias.double()


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def elu1(x):
    return torch.where(x > 0, x + 1.0, torch.exp(x))  # elu(x) + 1


# -- stick-breaking reference ---------------------------------------------------------------------


@torch.no_grad()
def loop_stick_breaking(attn, query, keys, key_mask, causal, attend_current):
    """For each (b, h, i): the keys, ordered nearest-first from the query's position p (ties:
    the left key first), each take β = σ(q·k/√d) of what is left of the stick:
    A_ij = β_ij ∏_{k before j} (1 − β_ik), written as the explicit product.
    Returns context [B,Tq,D] (after the output projection) and weights [B,H,Tq,Tk]."""
    q = heads_proj(query.double(), attn.q_proj)
    k = heads_proj(keys.double(), attn.k_proj)
    v = heads_proj(keys.double(), attn.v_proj)
    b, h, tq, dh = q.shape
    tk = k.shape[2]
    weights = torch.zeros(b, h, tq, tk, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(tq):
                p = tk - tq + i
                candidates = [
                    j
                    for j in range(tk)
                    if key_mask[bi, j] and (j <= p or not causal) and (j != p or attend_current)
                ]
                order = sorted(candidates, key=lambda j, p=p: (abs(j - p), j > p))
                beta = {
                    j: sigmoid(float(q[bi, hi, i] @ k[bi, hi, j]) / math.sqrt(dh)) for j in order
                }
                for rank, j in enumerate(order):
                    stick = 1.0
                    for earlier in order[:rank]:
                        stick *= 1.0 - beta[earlier]
                    weights[bi, hi, i, j] = beta[j] * stick
    return out_proj(weights @ v, attn), weights


@pytest.mark.parametrize("attend_current", [0, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_stick_breaking_matches_the_papers_product(causal, attend_current):
    attn = build("stick-breaking", role=ROLE_SELF, attend_current=attend_current)
    x, key_mask = make_inputs()
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=causal, need_weights=True)
    context, weights = loop_stick_breaking(attn, x, x, key_mask, causal, attend_current)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.context.double(), context, atol=1e-5, rtol=1e-5)
    w = out.weights
    assert torch.all(w >= 0) and torch.all(w.sum(-1) <= 1 + 1e-6)
    assert torch.all(w[1, ..., 5:] == 0), "padded keys take no weight"
    if causal:
        assert torch.all(w.triu(0 if not attend_current else 1) == 0)
        assert torch.all(w[:, :, 0] == 0) != bool(attend_current)  # position 0 sees only itself


def test_stick_breaking_padding_does_not_break_the_stick():
    """Appending padded keys changes nothing for the real ones (β = 0 there)."""
    attn = build("stick-breaking", role=ROLE_SELF)
    x = make_inputs(b=1, t=5)[0]
    longer = torch.cat([x, torch.randn(1, 3, D) * 10], dim=1)
    mask = torch.tensor([[True] * 5 + [False] * 3])
    with torch.no_grad():
        short = attn(x, x, x, torch.ones(1, 5, dtype=torch.bool), need_weights=True)
        padded = attn(longer, longer, longer, mask, need_weights=True)
    torch.testing.assert_close(padded.weights[..., :5, :5], short.weights)
    torch.testing.assert_close(padded.context[:, :5], short.context)


@pytest.mark.parametrize("name", ["stick-breaking", "decayed-linear"])
def test_one_cached_query_equals_the_reference_last_row(name):
    """Incremental decoding: the last query alone over all keys (bottom-right aligned)."""
    attn = build(name)
    x, key_mask = make_inputs(t=9)
    with torch.no_grad():
        last = attn(x[:, -1:], x, x, key_mask, causal=True, need_weights=True)
        full = attn(x, x, x, key_mask, causal=True, need_weights=True)
    if name == "stick-breaking":
        context, weights = loop_stick_breaking(attn, x[:, -1:], x, key_mask, True, False)
    else:
        context, weights = loop_decayed_matrix(attn, x[:, -1:], x, key_mask, True)
    torch.testing.assert_close(last.weights.double(), weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(last.context.double(), context, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last.context, full.context[:, -1:], atol=1e-5, rtol=1e-5)


# -- decayed-linear references --------------------------------------------------------------------


@torch.no_grad()
def decay_gates(attn, k64):
    """a [B,H,T] = σ(w_h·k_t + b_h) in float64, per position, from the projected keys."""
    w, bias = attn.decay_weight.double(), attn.decay_bias.double()
    b, h, t, _ = k64.shape
    gates = torch.zeros(b, h, t, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for ti in range(t):
                gates[bi, hi, ti] = sigmoid(float(w[hi] @ k64[bi, hi, ti] + bias[hi]))
    return gates


@torch.no_grad()
def loop_decayed_recurrence(attn, x, key_mask):
    """Causal decayed linear attention written as the state update, step by step:
    S_t = a_t S_{t−1} + φ(k_t) v_tᵀ, z_t = a_t z_{t−1} + φ(k_t), y_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t;
    a padded step leaves the state alone. Returns context [B,T,D]."""
    q = heads_proj(x.double(), attn.q_proj)
    k = heads_proj(x.double(), attn.k_proj)
    v = heads_proj(x.double(), attn.v_proj)
    gates = decay_gates(attn, k)
    b, h, t, dh = q.shape
    ctx = torch.zeros(b, h, t, dh, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            state = torch.zeros(dh, dh, dtype=torch.float64)
            norm = torch.zeros(dh, dtype=torch.float64)
            for ti in range(t):
                if key_mask[bi, ti]:
                    a = float(gates[bi, hi, ti])
                    phi_k = elu1(k[bi, hi, ti])
                    state = a * state + torch.outer(phi_k, v[bi, hi, ti])
                    norm = a * norm + phi_k
                phi_q = elu1(q[bi, hi, ti])
                den = float(phi_q @ norm)
                ctx[bi, hi, ti] = phi_q @ state / den if den > 0 else 0.0
    return out_proj(ctx, attn)


@torch.no_grad()
def loop_decayed_matrix(attn, query, keys, key_mask, causal):
    """The implied matrix from its product formula: causal A_ij ∝ φ(q_i)·φ(k_j) ∏_{j<k≤p} a_k
    (p = the query's position); non-causal, the gates between them on either side,
    ∏_{min(p,j)<k≤max(p,j)} a_k. Padded keys: no weight, gate 1. Rows normalised to 1."""
    q = heads_proj(query.double(), attn.q_proj)
    k = heads_proj(keys.double(), attn.k_proj)
    v = heads_proj(keys.double(), attn.v_proj)
    gates = decay_gates(attn, k)
    b, h, tq, _ = q.shape
    tk = k.shape[2]
    weights = torch.zeros(b, h, tq, tk, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(tq):
                p = tk - tq + i
                for j in range(tk):
                    if not key_mask[bi, j] or (causal and j > p):
                        continue
                    decay = 1.0
                    for kk in range(min(p, j) + 1, max(p, j) + 1):
                        if key_mask[bi, kk]:
                            decay *= float(gates[bi, hi, kk])
                    sim = float(elu1(q[bi, hi, i]) @ elu1(k[bi, hi, j]))
                    weights[bi, hi, i, j] = sim * decay
                total = weights[bi, hi, i].sum()
                if total > 0:
                    weights[bi, hi, i] /= total
    return out_proj(weights @ v, attn), weights


def randomise_decay(attn):
    """Spread the gates over (0, 1) so that the decay matters in the comparison."""
    with torch.no_grad():
        attn.decay_weight.normal_(0.0, 1.0)
        attn.decay_bias.copy_(torch.tensor([0.5, -0.5]))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_decayed_linear_chunks_equal_the_step_by_step_recurrence(chunk):
    """Chunk sizes that divide T = 7 (1, 7), that do not (2, 3), and longer than T (64)."""
    attn = build("decayed-linear", chunk=chunk)
    randomise_decay(attn)
    x, key_mask = make_inputs(t=7)
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=True, need_weights=True)
    expected = loop_decayed_recurrence(attn, x, key_mask)
    torch.testing.assert_close(out.context.double(), expected, atol=1e-5, rtol=1e-5)
    context, weights = loop_decayed_matrix(attn, x, x, key_mask, causal=True)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(context, expected, atol=1e-9, rtol=1e-9)  # the two references


@pytest.mark.parametrize("chunk", [2, 3, 64])
def test_decayed_linear_context_is_its_own_weights_times_values(chunk):
    attn = build("decayed-linear", chunk=chunk)
    randomise_decay(attn)
    x, key_mask = make_inputs(t=11, seed=4)
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=True, need_weights=True)
        v = heads_proj(x.double(), attn.v_proj)
    implied = out_proj(out.weights.double() @ v, attn)
    torch.testing.assert_close(out.context.double(), implied, atol=1e-5, rtol=1e-5)
    sums = out.weights.sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert torch.all(out.weights.triu(1) == 0) and torch.all(out.weights[1, ..., 9:] == 0)


def test_decayed_linear_non_causal_rows_match_the_two_sided_product():
    attn = build("decayed-linear", role=ROLE_SELF)
    randomise_decay(attn)
    x, key_mask = make_inputs()
    with torch.no_grad():
        out = attn(x, x, x, key_mask, need_weights=True)
    context, weights = loop_decayed_matrix(attn, x, x, key_mask, causal=False)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.context.double(), context, atol=1e-5, rtol=1e-5)


def test_decayed_linear_gate_one_is_plain_causal_linear_attention():
    """With a = 1 everywhere the decay vanishes: the ``linear`` variant's causal prefix sums."""
    attn = build("decayed-linear", chunk=3)
    linear = build("linear")
    linear.load_state_dict(attn.state_dict(), strict=False)
    with torch.no_grad():
        attn.decay_weight.zero_()
        attn.decay_bias.fill_(60.0)  # σ(60) = 1 in float32
        x, key_mask = make_inputs(t=8)
        a = attn(x, x, x, key_mask, causal=True)
        b = linear(x, x, x, key_mask, causal=True)
    torch.testing.assert_close(a.context, b.context, atol=1e-5, rtol=1e-5)


# -- shared properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["stick-breaking", "decayed-linear"])
@pytest.mark.parametrize("role", [ROLE_SELF, ROLE_CAUSAL_SELF])
def test_need_weights_on_and_off_give_equal_contexts(name, role):
    attn = build(name, role=role)
    x, key_mask = make_inputs(t=10)
    causal = role == ROLE_CAUSAL_SELF
    with torch.no_grad():
        on = attn(x, x, x, key_mask, causal=causal, need_weights=True)
        off = attn(x, x, x, key_mask, causal=causal)
    assert off.weights is None
    torch.testing.assert_close(on.context, off.context)


@pytest.mark.parametrize("name", ["stick-breaking", "decayed-linear"])
@pytest.mark.parametrize("causal", [False, True])
def test_all_masked_rows_are_zero_and_finite_in_backward(name, causal):
    attn = build(name, role=ROLE_SELF).train()
    x, key_mask = make_inputs()
    key_mask[0] = False
    x = x.clone().requires_grad_(True)
    out = attn(x, x, x, key_mask, causal=causal, need_weights=True)
    assert torch.all(out.weights[0] == 0) and torch.isfinite(out.context).all()
    out.context.sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in attn.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


def test_specs_say_what_the_rows_are_and_which_roles():
    sb, dl = ATTENTION.get("stick-breaking").meta, ATTENTION.get("decayed-linear").meta
    assert sb.normalisation == NORM_SUB_STOCHASTIC and dl.normalisation == NORM_SOFTMAX
    for spec in (sb, dl):
        assert {ROLE_SELF, ROLE_CAUSAL_SELF} <= spec.roles and ROLE_CROSS not in spec.roles
        assert spec.formula and spec.paper and spec.known_for
    for name in ("stick-breaking", "decayed-linear"):
        assert issubclass(ATTENTION.get(name).factory, MultiHeadBase)  # the k/v cache


def test_long_copy_stick_breaking_preset_loads_and_validates():
    config = load_preset("long-copy-stick-breaking")
    assert config.model.self_attention == "stick-breaking"
    assert config.model.positions == "none"
    assert config.data.test_min_len > config.data.max_len
    assert config.data.test_max_len > config.data.max_len
