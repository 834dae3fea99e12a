"""Native sparse attention (nsa) against a float64 loop reference written from the paper."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.nn.attention import ATTENTION, build_attention
from attnlab.nn.attention.base import NORM_SUB_STOCHASTIC, ROLE_CAUSAL_SELF, ROLE_SELF

D = 16


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


def build(causal=False, heads=2, perturb=True, **hparams):
    torch.manual_seed(0)
    role = ROLE_CAUSAL_SELF if causal else ROLE_SELF
    attn = build_attention("nsa", D, D, role=role, heads=heads, hparams=hparams).eval()
    if perturb:  # move the compression map and the gates off their initial values
        with torch.no_grad():
            attn.cmp_weight.add_(0.3 * torch.randn_like(attn.cmp_weight))
            attn.cmp_bias.normal_(0, 0.3)
            attn.gate_proj.bias.normal_(0, 1.0)
    return attn


def make_inputs(b=2, t=11, seed=0, pad=2):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, t, D, generator=gen)
    key_mask = torch.ones(b, t, dtype=torch.bool)
    if pad:
        key_mask[1, t - pad :] = False  # second sentence: last keys are padding
    return x, key_mask


def softmax_over(scores, keys):
    """{j: weight} of a softmax over ``keys`` (a list) of scores[j]; {} when no key."""
    if not keys:
        return {}
    s = torch.stack([scores[j] for j in keys])
    a = torch.exp(s - s.max())
    a = a / a.sum()
    return {j: a[n] for n, j in enumerate(keys)}


@torch.no_grad()
def nsa_reference(attn, x, key_mask, causal, tq=None):
    """Paper's NSA by loops over b, h, i in float64: the queries are the last ``tq`` rows of x.
    Returns (context after W_o [B,Tq,D], weights [B,H,Tq,Tk], selected [B,H,Tq,nb] bool)."""
    x64 = x.double()
    tk = x.shape[1]
    tq = tq or tk
    xq = x64[:, tk - tq :]
    heads, size, top, window = attn.heads, attn.block, attn.top_blocks, attn.window
    q = heads_proj(xq, attn.q_proj, heads)
    k = heads_proj(x64, attn.k_proj, heads)
    v = heads_proj(x64, attn.v_proj, heads)
    dh = q.shape[-1]
    cmp_w, cmp_b = attn.cmp_weight.double(), attn.cmp_bias.double()
    gate_logits = xq @ attn.gate_proj.weight.double().t() + attn.gate_proj.bias.double()
    bsz = x.shape[0]
    nb = math.ceil(tk / size)
    weights = torch.zeros(bsz, heads, tq, tk, dtype=torch.float64)
    selected = torch.zeros(bsz, heads, tq, nb, dtype=torch.bool)
    context = torch.zeros(bsz, heads, tq, dh, dtype=torch.float64)
    for b in range(bsz):
        # the real keys of each block n: positions n·l .. (n+1)·l − 1
        real = [[j for j in range(n * size, (n + 1) * size) if j < tk and key_mask[b, j]]
                for n in range(nb)]  # fmt: skip
        for h in range(heads):
            k_cmp = {
                n: cmp_w[h] @ torch.stack([k[b, h, j] for j in real[n]]).mean(0) + cmp_b[h]
                for n in range(nb)
                if real[n]
            }
            for i in range(tq):
                p = tk - tq + i
                # compressed: complete blocks only when causal
                seen = [n for n in k_cmp if not causal or (n + 1) * size - 1 <= p]
                s_cmp = {n: q[b, h, i] @ k_cmp[n] / math.sqrt(dh) for n in seen}
                a = softmax_over(s_cmp, seen)
                w_cmp = {j: a[n] / len(real[n]) for n in seen for j in real[n]}
                # selected: the own block, then the best others (ties: lower index)
                own = p // size
                others = [
                    n for n in range(nb) if n != own and real[n] and (not causal or n * size <= p)
                ]
                others.sort(key=lambda n: (-float(a.get(n, 0.0)), n))
                chosen = {own, *others[: top - 1]}
                for n in chosen:
                    selected[b, h, i, n] = True
                ok = [j for j in range(tk) if key_mask[b, j] and (not causal or j <= p)]
                scores = {j: q[b, h, i] @ k[b, h, j] / math.sqrt(dh) for j in ok}
                w_sel = softmax_over(scores, [j for j in ok if j // size in chosen])
                w_win = softmax_over(scores, [j for j in ok if abs(p - j) < window])
                g = [torch.sigmoid(gate_logits[b, i, 3 * h + c]) for c in range(3)]
                for j in range(tk):
                    mixed = g[0] * w_cmp.get(j, 0.0) + g[1] * w_sel.get(j, 0.0)
                    weights[b, h, i, j] = (mixed + g[2] * w_win.get(j, 0.0)) / 3
                context[b, h, i] = sum(weights[b, h, i, j] * v[b, h, j] for j in range(tk))
    return out_proj(context, attn), weights, selected


CASES = [  # causal, t, block, top_blocks, window, pad
    (False, 11, 3, 2, 3, 2),
    (True, 11, 3, 2, 3, 2),
    (True, 13, 4, 3, 5, 0),
    (False, 13, 4, 1, 2, 5),
    (True, 9, 2, 3, 1, 3),
    (False, 10, 3, 4, 2, 5),  # a half-padded block, fewer real blocks than top_blocks
    (True, 10, 3, 4, 2, 5),
]


@pytest.mark.parametrize("causal,t,block,top,window,pad", CASES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_nsa_matches_the_loop_reference(causal, t, block, top, window, pad, need_weights):
    attn = build(causal, block=block, top_blocks=top, window=window)
    x, key_mask = make_inputs(t=t, pad=pad)
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=causal, need_weights=need_weights)
    expected, weights, selected = nsa_reference(attn, x, key_mask, causal)
    torch.testing.assert_close(out.context.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(out.extras["selected_blocks"], selected)
    if need_weights:
        torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
        assert torch.all(out.weights[1, ..., t - pad :] == 0)  # padded keys: exactly zero
    else:
        assert out.weights is None


def test_the_weights_are_the_implied_map_of_the_values():
    """context before W_o == weights @ V per head (the compressed branch included)."""
    attn = build(True, block=3, top_blocks=2, window=2)
    x, key_mask = make_inputs(t=10)
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=True, need_weights=True)
    v = heads_proj(x.double(), attn.v_proj, attn.heads)
    expected = out_proj(out.weights.double() @ v, attn)
    torch.testing.assert_close(out.context.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_rows_sum_to_the_mean_gate_of_the_branches_that_have_keys(causal):
    """Sub-stochastic: a row sums to (g_cmp·[a complete block seen] + g_sel + g_win) / 3."""
    assert ATTENTION.get("nsa").meta.normalisation == NORM_SUB_STOCHASTIC
    attn = build(causal, block=3, top_blocks=2, window=2)
    x, key_mask = make_inputs(t=10, pad=0)
    with torch.no_grad():
        out = attn(x, x, x, key_mask, causal=causal, need_weights=True)
        g = torch.sigmoid(attn.gate_proj(x)).view(2, 10, attn.heads, 3).transpose(1, 2)
    has_block = torch.tensor([not causal or i >= 2 for i in range(10)])  # i >= l − 1
    expected = (g[..., 0] * has_block + g[..., 1] + g[..., 2]) / 3
    torch.testing.assert_close(out.weights.sum(-1), expected, atol=1e-6, rtol=1e-5)
    assert torch.all(out.weights >= 0) and torch.all(out.weights.sum(-1) <= 1)


@pytest.mark.parametrize("t", [7, 10])
def test_one_cached_query_at_every_position_equals_the_full_pass(t):
    """Blocks sit at absolute positions: the query at p over keys 0..p (Tq = 1, alone or from a
    precomputed k/v cache) = row p of the full causal pass, and the loop reference."""
    attn = build(True, block=3, top_blocks=2, window=2)
    x, _ = make_inputs(t=t, pad=0)
    mask = torch.ones(2, t, dtype=torch.bool)
    with torch.no_grad():
        full = attn(x, x, x, mask, causal=True, need_weights=True)
        for p in range(t):
            keys = x[:, : p + 1]
            step = attn(
                x[:, p : p + 1], keys, keys, mask[:, : p + 1], causal=True, need_weights=True
            )
            cache = attn.cache_entries(keys)
            cached = attn(
                x[:, p : p + 1], keys, keys, mask[:, : p + 1], causal=True, precomputed=cache
            )
            torch.testing.assert_close(
                step.context, full.context[:, p : p + 1], atol=1e-5, rtol=1e-5
            )
            torch.testing.assert_close(cached.context, step.context, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(
                step.weights, full.weights[:, :, p : p + 1, : p + 1], atol=1e-6, rtol=1e-5
            )
            nb = step.extras["selected_blocks"].shape[-1]
            assert torch.equal(
                step.extras["selected_blocks"], full.extras["selected_blocks"][:, :, p : p + 1, :nb]
            )
    ref, _, _ = nsa_reference(attn, x, mask, causal=True, tq=1)
    torch.testing.assert_close(step.context.double(), ref, atol=1e-5, rtol=1e-5)


def test_all_masked_rows_are_zero_and_finite_also_in_backward():
    attn = build(False, block=3, top_blocks=2, window=2).train()
    x, key_mask = make_inputs(t=8)
    key_mask[0] = False
    x.requires_grad_(True)
    for need_weights in (True, False):
        out = attn(x, x, x, key_mask, need_weights=need_weights)
        # no key: zero context before W_o, so the output is W_o's bias
        torch.testing.assert_close(out.context[0], attn.out_proj.bias.expand(8, D))
        if need_weights:
            assert torch.all(out.weights[0] == 0)
        out.context.sum().backward()
        assert torch.isfinite(x.grad).all()
        assert all(torch.isfinite(p.grad).all() for p in attn.parameters() if p.grad is not None)
    assert attn.cmp_weight.grad.abs().sum() > 0 and attn.gate_proj.weight.grad.abs().sum() > 0


def _force_gates(attn, cmp, sel, win):
    """Constant gates: σ(±200) is exactly 1 or 0 in float32."""
    with torch.no_grad():
        attn.gate_proj.weight.zero_()
        attn.gate_proj.bias.copy_(torch.tensor([cmp, sel, win] * attn.heads) * 200.0)


def _scaled_dot_like(attn, name, causal, **hparams):
    role = ROLE_CAUSAL_SELF if causal else ROLE_SELF
    other = build_attention(name, D, D, role=role, heads=attn.heads, hparams=hparams).eval()
    for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
        getattr(other, proj).load_state_dict(getattr(attn, proj).state_dict())
    return other


@pytest.mark.parametrize("causal", [False, True])
def test_all_blocks_selected_and_a_window_over_everything_is_full_attention(causal):
    """top_blocks ≥ number of blocks: the selected branch is full softmax attention over the
    visible real keys; window ≥ T: so is the window branch. With the compressed gate shut and
    the others open, the weights are ⅔ of scaled-dot's."""
    t = 10
    attn = build(causal, block=3, top_blocks=4, window=t)
    _force_gates(attn, -1, 1, 1)
    full = _scaled_dot_like(attn, "scaled-dot", causal)
    x, key_mask = make_inputs(t=t)
    with torch.no_grad():
        ours = attn(x, x, x, key_mask, causal=causal, need_weights=True)
        ref = full(x, x, x, key_mask, causal=causal, need_weights=True)
    assert ours.extras["selected_blocks"][1].any(-1).all()
    torch.testing.assert_close(ours.weights, ref.weights * 2 / 3, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_blocks_of_one_with_the_initial_compression_are_gated_full_attention(causal):
    """block = 1 and the initial (identity) compression map: the block summaries are the keys
    themselves, so all three branches are full softmax attention and the weights are the mean
    gate times scaled-dot's."""
    t = 9
    attn = build(causal, perturb=False, block=1, top_blocks=t, window=t)
    with torch.no_grad():
        attn.gate_proj.bias.normal_(0, 1.0)
    full = _scaled_dot_like(attn, "scaled-dot", causal)
    x, key_mask = make_inputs(t=t)
    with torch.no_grad():
        ours = attn(x, x, x, key_mask, causal=causal, need_weights=True)
        ref = full(x, x, x, key_mask, causal=causal, need_weights=True)
        mean_gate = torch.sigmoid(attn.gate_proj(x)).view(2, t, 2, 3).mean(-1).transpose(1, 2)
    torch.testing.assert_close(
        ours.weights, ref.weights * mean_gate[..., None], atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
def test_the_window_branch_alone_is_a_third_of_sliding_window(causal):
    """nsa's window w (keys less than w away) is sliding-window's half-width w − 1."""
    attn = build(causal, block=3, top_blocks=2, window=3)
    _force_gates(attn, -1, -1, 1)
    band = _scaled_dot_like(attn, "sliding-window", causal, window=2)
    x, key_mask = make_inputs(t=11)
    with torch.no_grad():
        ours = attn(x, x, x, key_mask, causal=causal, need_weights=True)
        ref = band(x, x, x, key_mask, causal=causal, need_weights=True)
    torch.testing.assert_close(ours.weights, ref.weights / 3, atol=1e-6, rtol=1e-5)


def test_equal_block_scores_select_the_lower_block_indices():
    """q = 0 makes every compressed score equal: the own block plus the lowest-index others."""
    attn = build(True, block=2, top_blocks=3, window=1)
    with torch.no_grad():
        attn.q_proj.weight.zero_()
        attn.q_proj.bias.zero_()
    x, mask = make_inputs(t=12, pad=0)
    with torch.no_grad():
        selected = attn(x, x, x, mask, causal=True).extras["selected_blocks"]
    for p in range(12):
        own = p // 2
        expected = {own, *[n for n in range(own)][:2]}
        assert {int(n) for n in selected[0, 0, p].nonzero()} == expected, p


def test_hyper_parameters_are_validated():
    with pytest.raises(AttnlabError, match="model.block=0 is out of range"):
        build_attention("nsa", D, D, role=ROLE_SELF, heads=2, hparams={"block": 0})
    with pytest.raises(AttnlabError, match="cannot be used for cross attention"):
        build_attention("nsa", D, D, role="cross", heads=2)


def test_the_long_copy_preset_loads_and_validates():
    from attnlab.experiment import load_preset

    config = load_preset("long-copy-nsa")
    assert config.model.self_attention == "nsa"
    assert config.model.attn_params == {"nsa.block": 8, "nsa.top_blocks": 4, "nsa.window": 8}
