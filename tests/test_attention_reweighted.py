"""differential, sigmoid, sinks and qk-norm against float64 loop references from their papers'
formulas (explicit loops over b, h, i, j), plus the properties each must have."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.errors import AttnlabError
from attnlab.experiment import from_dict, load_preset, validate
from attnlab.nn.attention import ATTENTION, build_attention
from attnlab.nn.attention.base import (
    NORM_SIGNED,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    ROLE_CAUSAL_SELF,
    ROLE_CROSS,
    ROLE_RNN_CROSS,
    ROLE_SELF,
)

D = 16
NAMES = ("differential", "sigmoid", "sinks", "qk-norm")


def make_inputs(b=2, tq=6, tk=6, dq=D, dk=D, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(b, tq, dq, generator=gen)
    keys = torch.randn(b, tk, dk, generator=gen)
    key_mask = torch.ones(b, tk, dtype=torch.bool)
    key_mask[1, tk - 2 :] = False  # second sentence: last two keys are padding
    return query, keys, key_mask


def build(name, role=ROLE_SELF, heads=2, dq=D, dk=D, **hparams):
    torch.manual_seed(0)
    attn = build_attention(name, dq, dk, role=role, heads=heads, hparams=hparams).eval()
    with torch.no_grad():  # move the learned extras off their initial values
        if name == "sinks" and hparams.get("sink", "learned") == "learned":
            attn.sink_logit.copy_(torch.linspace(0.7, -1.3, heads))
        if name == "qk-norm":
            attn.scale.copy_(torch.linspace(3.0, 7.5, heads))
        if name == "differential":
            attn.norm_weight.copy_(torch.linspace(0.5, 1.5, attn.head_dim))
    return attn


def heads_proj(x64, linear, heads):
    y = x64 @ linear.weight.double().t() + linear.bias.double()
    b, t, d = y.shape
    return y.view(b, t, heads, d // heads).transpose(1, 2)


def out_proj(ctx64, attn):
    b, h, t, dh = ctx64.shape
    merged = ctx64.transpose(1, 2).reshape(b, t, h * dh)
    return merged @ attn.out_proj.weight.double().t() + attn.out_proj.bias.double()


def by_hand_lambda(attn):
    """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, element by element."""

    def dot(a, b):
        return sum(float(x) * float(y) for x, y in zip(a, b, strict=True))

    return (
        math.exp(dot(attn.lambda_q1, attn.lambda_k1))
        - math.exp(dot(attn.lambda_q2, attn.lambda_k2))
        + attn.lambda_init
    )


def row_weights(name, attn, q, k, bi, hi, i, js):
    """The weights of query (bi, hi, i) over its visible keys ``js``, from the paper's formula;
    also the sink's share (sinks) as a second value."""
    dh = q.shape[-1]
    qi = q[bi, hi, i]
    if name == "differential":
        d = dh // 2
        lam = by_hand_lambda(attn)
        s1 = [float(qi[:d] @ k[bi, hi, j, :d]) / math.sqrt(d) for j in js]
        s2 = [float(qi[d:] @ k[bi, hi, j, d:]) / math.sqrt(d) for j in js]
        z1, z2 = sum(math.exp(s) for s in s1), sum(math.exp(s) for s in s2)
        return [math.exp(a) / z1 - lam * math.exp(b) / z2 for a, b in zip(s1, s2, strict=True)], 0
    if name == "sigmoid":
        bias = attn.score_bias
        b = -math.log(len(js)) if bias == "auto" else bias
        return [
            1.0 / (1.0 + math.exp(-(float(qi @ k[bi, hi, j]) / math.sqrt(dh) + b))) for j in js
        ], 0
    if name == "sinks":
        sink = math.exp(float(attn.sink_logit[hi]))
        e = [math.exp(float(qi @ k[bi, hi, j]) / math.sqrt(dh)) for j in js]
        total = sink + sum(e)
        return [x / total for x in e], sink / total
    assert name == "qk-norm"
    g = float(attn.scale[hi])
    s = [g * float(qi @ k[bi, hi, j]) / float(qi.norm() * k[bi, hi, j].norm()) for j in js]
    z = sum(math.exp(x) for x in s)
    return [math.exp(x) / z for x in s], 0


def loop_reference(name, attn, query, keys, key_mask, causal):
    """float64 loops: context after W_o [B,Tq,D], weights [B,H,Tq,Tk], sink share [B,H,Tq]."""
    q = heads_proj(query.double(), attn.q_proj, attn.heads)
    k = heads_proj(keys.double(), attn.k_proj, attn.heads)
    v = heads_proj(keys.double(), attn.v_proj, attn.heads)
    b, h, tq, dh = q.shape
    tk = k.shape[2]
    weights = torch.zeros(b, h, tq, tk, dtype=torch.float64)
    sink_share = torch.ones(b, h, tq, dtype=torch.float64)  # a row with no key: all to the sink
    ctx = torch.zeros(b, h, tq, dh, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(tq):
                js = [j for j in range(tk) if key_mask[bi, j] and (not causal or j <= tk - tq + i)]
                if not js:
                    continue  # zero weights, zero context
                row, sink_share[bi, hi, i] = row_weights(name, attn, q, k, bi, hi, i, js)
                for w, j in zip(row, js, strict=True):
                    weights[bi, hi, i, j] = w
                    ctx[bi, hi, i] += w * v[bi, hi, j]
                if name == "differential":  # (1 − λ_init)·RMSNorm per head, by hand
                    c = ctx[bi, hi, i]
                    rms = math.sqrt(float((c * c).mean()) + attn.norm_eps)
                    gain = attn.norm_weight.double()
                    ctx[bi, hi, i] = (1 - attn.lambda_init) * c / rms * gain
    return out_proj(ctx, attn), weights, sink_share


ROLE_CASES = {
    "self": (ROLE_SELF, 6, D),
    "causal": (ROLE_CAUSAL_SELF, 6, D),
    "cross": (ROLE_CROSS, 4, D),
    "rnn-cross": (ROLE_RNN_CROSS, 1, 12),  # one decoder state over wider encoder states
}


def case_inputs(case, seed=0):
    role, tq, dk = ROLE_CASES[case]
    query, keys, key_mask = make_inputs(tq=tq, tk=6, dk=dk, seed=seed)
    if role in (ROLE_SELF, ROLE_CAUSAL_SELF):
        keys = query
    return role, query, keys, key_mask, role == ROLE_CAUSAL_SELF


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", list(ROLE_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_matches_the_loop_reference(name, case, need_weights):
    role, query, keys, key_mask, causal = case_inputs(case)
    attn = build(name, role=role, dk=keys.shape[-1])
    expected, weights, _ = loop_reference(name, attn, query, keys, key_mask, causal)
    out = attn(query, keys, keys, key_mask, causal=causal, need_weights=need_weights)
    torch.testing.assert_close(out.context.double(), expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
        assert torch.all(out.weights[1, ..., 4:] == 0)  # padded keys: exactly zero
    else:
        assert out.weights is None


@pytest.mark.parametrize("name", NAMES)
def test_weights_times_values_is_the_context_before_the_output(name):
    """The returned weights are the true ones: weights @ V (then the per-head processing and
    W_o) rebuilds the context."""
    role, query, keys, key_mask, causal = case_inputs("causal")
    attn = build(name, role=role)
    out = attn(query, keys, keys, key_mask, causal=causal, need_weights=True)
    _, v = attn.project_kv(keys, keys)
    heads_ctx = out.weights @ v
    heads_ctx = attn.gate(query, heads_ctx)  # differential's normalisation; identity otherwise
    merged = heads_ctx.transpose(1, 2).reshape(query.shape)
    torch.testing.assert_close(attn.out_proj(merged), out.context, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_one_cached_query_equals_the_full_passs_last_row(name, need_weights):
    """The last query alone over the cached keys (precomputed projections) = the last row of
    the full causal pass, and both equal the reference."""
    attn = build(name, role=ROLE_CAUSAL_SELF)
    x, _, key_mask = make_inputs(tq=7, tk=7, seed=2)
    key_mask[1, 3] = False  # a padded key inside the prefix, too
    full = attn(x, x, x, key_mask, causal=True, need_weights=True)
    cache = attn.precompute(x)
    last = attn(
        x[:, -1:], x, x, key_mask, causal=True, need_weights=need_weights, precomputed=cache
    )
    torch.testing.assert_close(last.context, full.context[:, -1:], atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(last.weights, full.weights[:, :, -1:], atol=1e-6, rtol=1e-5)
    expected, _, _ = loop_reference(name, attn, x[:, -1:], x, key_mask, True)
    torch.testing.assert_close(last.context.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_all_masked_rows_are_zero_and_finite_in_training(name):
    """A sentence with no real key: zero weights, finite context (the output bias only), and no
    NaN in any gradient."""
    with torch.enable_grad():
        attn = build(name, role=ROLE_CROSS).train()
        query, keys, key_mask = make_inputs(tq=4, tk=6)
        key_mask[0] = False
        for need_weights in (False, True):
            attn.zero_grad()
            out = attn(query, keys, keys, key_mask, need_weights=need_weights)
            assert torch.isfinite(out.context).all()
            torch.testing.assert_close(out.context[0], attn.out_proj.bias.expand(4, -1))
            if need_weights:
                assert torch.all(out.weights[0] == 0)
            out.context.pow(2).sum().backward()
            for pname, p in attn.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all(), pname


# -- differential -------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_differential_rows_sum_to_one_minus_lambda(causal):
    attn = build("differential", role=ROLE_CAUSAL_SELF, heads=4)
    with torch.no_grad():  # a λ away from λ_init
        attn.lambda_q1.fill_(0.5)
        attn.lambda_k1.fill_(0.3)
    lam = by_hand_lambda(attn)
    assert abs(lam - attn.lambda_init) > 0.1
    x, _, key_mask = make_inputs(tq=8, tk=8)
    w = attn(x, x, x, key_mask, causal=causal, need_weights=True).weights
    sums = w.sum(-1)
    torch.testing.assert_close(sums, torch.full_like(sums, 1 - lam), atol=1e-5, rtol=1e-5)
    assert (w < 0).any(), "a differential map is signed"
    assert ATTENTION.get("differential").meta.normalisation == NORM_SIGNED


def test_differential_refuses_an_odd_head_width_and_rotary_halves_with_split_pairs():
    with pytest.raises(AttnlabError, match="must be even") as raised:
        build_attention("differential", 6, 6, role=ROLE_SELF, heads=2)
    assert "\n" not in str(raised.value)
    attn = build("differential", heads=8, dq=48, dk=48)  # head width 6: halves of 3 channels
    with pytest.raises(AttnlabError, match="divisible by 4") as raised:
        attn.set_positions(ROLE_SELF, rotary=True)  # what the Transformer does for rotary
    assert "\n" not in str(raised.value)


def paper_lambda_init(layer):
    """Ye et al. 2024, §2.1: λ_init = 0.8 − 0.6·exp(−0.3·(l − 1)), l ∈ [1, L] the layer index."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


def test_differential_lambda_init_follows_the_papers_depth_rule_in_every_layer():
    """Default ("auto"): layer l of each Transformer stack computes exactly what a differential
    module with the number λ_init = 0.8 − 0.6·e^(−0.3(l−1)) computes (0.2 in layer 1, not 0.8);
    a number pins every layer. The numbers are written here, not read from the module."""
    from attnlab.config import ExperimentConfig, ModelConfig
    from attnlab.nn.model import build_model

    def model(**params):
        torch.manual_seed(0)
        m = ModelConfig(arch="transformer", d_model=D, heads=2, ff=24, enc_layers=3,
                        dec_layers=2, dropout=0.0, self_attention="differential",
                        decoder_self_attention="differential", cross_attention="differential",
                        attn_params=params)  # fmt: skip
        return build_model(ExperimentConfig(model=m), 11, 11).eval()

    def same_as_number(block, value, query, keys):
        twin = build_attention(
            "differential", D, D, role=block.role, heads=2, hparams={"lambda_init": value}
        ).eval()
        twin.load_state_dict(block.attn.state_dict())
        for need_weights in (False, True):
            got = block.attn(query, keys, keys, key_mask, need_weights=need_weights).context
            want = twin(query, keys, keys, key_mask, need_weights=need_weights).context
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)

    query, keys, key_mask = make_inputs(tq=6, tk=6)
    assert paper_lambda_init(1) == pytest.approx(0.2) and paper_lambda_init(2) < 0.36
    auto, pinned = model(), model(lambda_init=0.5)
    for net, rule in ((auto, paper_lambda_init), (pinned, lambda layer: 0.5)):
        for layer, enc in enumerate(net.encoder_layers, start=1):
            same_as_number(enc.self_attn, rule(layer), query, query)
        for layer, dec in enumerate(net.decoder_layers, start=1):
            same_as_number(dec.self_attn, rule(layer), query, query)
            same_as_number(dec.cross_attn, rule(layer), query, keys)


def rotate_by_hand(x, start, base=10000.0):
    """Rotary on each half of the last dim separately, pair (2i, 2i+1) of a half of width w by
    angle p·base^(−2i/w), p = start + row; float64 loops."""
    out = x.clone()
    width = x.shape[-1] // 2
    for p in range(x.shape[-2]):
        for offset in (0, width):
            for i in range(width // 2):
                angle = (start + p) * base ** (-2 * i / width)
                c, s = math.cos(angle), math.sin(angle)
                even, odd = x[..., p, offset + 2 * i], x[..., p, offset + 2 * i + 1]
                out[..., p, offset + 2 * i] = even * c - odd * s
                out[..., p, offset + 2 * i + 1] = even * s + odd * c
    return out


def test_differential_with_rotary_rotates_each_half_as_its_own_head():
    """As in the paper's code, each half-head (one map) gets rotary of width d_h/2 over the full
    frequency range; the weights equal the loop reference on the rotated halves, and shifting
    every position by the same offset (a later cached step) changes nothing."""
    attn = build("differential", role=ROLE_CAUSAL_SELF, heads=2)  # head width 8: halves of 4
    attn.set_positions(ROLE_CAUSAL_SELF, rotary=True)
    x, _, key_mask = make_inputs(tq=5, tk=5)
    full = attn(x, x, x, key_mask, causal=True, need_weights=True)
    q = rotate_by_hand(heads_proj(x.double(), attn.q_proj, 2), 0)
    k = rotate_by_hand(heads_proj(x.double(), attn.k_proj, 2), 0)
    for bi in range(2):
        for hi in range(2):
            for i in range(5):
                js = [j for j in range(i + 1) if key_mask[bi, j]]
                row, _ = row_weights("differential", attn, q, k, bi, hi, i, js)
                got = full.weights[bi, hi, i, js].double()
                torch.testing.assert_close(got, torch.tensor(row, dtype=torch.float64))
    k, v = attn.project_kv(x, x, start=3)  # the same keys three positions later
    q = attn.rotary(attn.q_proj(x).view(2, 5, 2, 8).transpose(1, 2), 3)
    _, shifted = attn.attend(q, k, v, key_mask, True, True)
    torch.testing.assert_close(shifted, full.weights, atol=1e-5, rtol=1e-5)


# -- sigmoid ------------------------------------------------------------------------------------


def test_sigmoid_rows_are_non_negative_but_can_exceed_one():
    """Why sigmoid is not declared sub-stochastic: with b = −log n a row sums to Σ σ(s_j − log n),
    which approaches n when every score is large."""
    attn = build("sigmoid", role=ROLE_CROSS)
    with torch.no_grad():  # every query and key the same large vector: s = 4²·8/√8 ≈ 45
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.zero_()
            proj.bias.fill_(4.0)
    query, keys, key_mask = make_inputs(tq=3, tk=6)
    w = attn(query, keys, keys, key_mask, need_weights=True).weights
    assert torch.all(w >= 0)
    sums = w.sum(-1)
    torch.testing.assert_close(sums[0], torch.full_like(sums[0], 6.0), atol=1e-4, rtol=0)
    torch.testing.assert_close(sums[1], torch.full_like(sums[1], 4.0), atol=1e-4, rtol=0)
    spec = ATTENTION.get("sigmoid").meta
    assert spec.normalisation == NORM_UNNORMALISED


@pytest.mark.parametrize("bias", [0.0, -2.5])
def test_sigmoid_with_a_fixed_bias_matches_the_reference(bias):
    role, query, keys, key_mask, causal = case_inputs("causal")
    attn = build("sigmoid", role=role, bias=bias)
    assert attn.score_bias == bias
    expected, weights, _ = loop_reference("sigmoid", attn, query, keys, key_mask, causal)
    out = attn(query, keys, keys, key_mask, causal=causal, need_weights=True)
    torch.testing.assert_close(out.weights.double(), weights, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.context.double(), expected, atol=1e-5, rtol=1e-5)


def test_sigmoid_bias_is_auto_or_a_number_in_config():
    ok = from_dict({"model": {"attention": "sigmoid", "sigmoid": {"bias": -1.5}}})
    assert ok.model.attn_params["sigmoid.bias"] == -1.5
    auto = from_dict({"model": {"sigmoid": {"bias": "auto"}}})
    assert auto.model.attn_params["sigmoid.bias"] == "auto"
    for bad, match in (("nope", 'must be "auto" or a number'), (1e6, "out of range")):
        with pytest.raises(AttnlabError, match=match) as raised:
            from_dict({"model": {"sigmoid": {"bias": bad}}}, source="--set")
        assert "model.sigmoid.bias" in str(raised.value) and "\n" not in str(raised.value)


# -- sinks --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sink", ["learned", "zero"])
@pytest.mark.parametrize("causal", [False, True])
def test_sink_rows_sum_below_one_and_the_rest_is_the_sinks_weight(sink, causal):
    attn = build("sinks", role=ROLE_CAUSAL_SELF, sink=sink)
    if sink == "zero":
        assert all(p is not attn.sink_logit for p in attn.parameters())
        assert torch.all(attn.sink_logit == 0)  # softmax-off-by-one: exp(0) = 1 in the sum
    x, _, key_mask = make_inputs(tq=7, tk=7)
    w = attn(x, x, x, key_mask, causal=causal, need_weights=True).weights
    _, weights, sink_share = loop_reference("sinks", attn, x, x, key_mask, causal)
    torch.testing.assert_close(w.double(), weights, atol=1e-6, rtol=1e-5)
    sums = w.double().sum(-1)
    assert torch.all(w >= 0) and torch.all(sums < 1)
    torch.testing.assert_close(1 - sums, sink_share, atol=1e-6, rtol=1e-5)
    assert ATTENTION.get("sinks").meta.normalisation == NORM_SUB_STOCHASTIC


@pytest.mark.parametrize("need_weights", [True, False])
def test_sinks_are_stable_with_huge_scores(need_weights):
    """Scores of order 10⁴ (and a sink logit far below them): no overflow, the max subtraction
    includes the sink."""
    attn = build("sinks", role=ROLE_CROSS)
    with torch.no_grad():
        attn.q_proj.weight.mul_(300.0)
        attn.sink_logit.fill_(-50.0)
    query, keys, key_mask = make_inputs(tq=4, tk=6)
    out = attn(query, keys, keys, key_mask, need_weights=True)
    assert torch.isfinite(out.context).all() and torch.isfinite(out.weights).all()
    # The huge scores leave the sink nothing: each row is (numerically) a one-hot softmax.
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 2, 4), atol=1e-5, rtol=0)
    fast = attn(query, keys, keys, key_mask, need_weights=need_weights)
    torch.testing.assert_close(fast.context, out.context, atol=1e-4, rtol=1e-5)


# -- qk-norm ------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", ["causal", "rnn-cross"])
def test_qk_norm_is_invariant_to_scaling_the_query_and_key_projections(case, need_weights):
    role, query, keys, key_mask, causal = case_inputs(case)
    attn = build("qk-norm", role=role, dk=keys.shape[-1])
    before = attn(query, keys, keys, key_mask, causal=causal, need_weights=need_weights)
    with torch.no_grad():
        attn.q_proj.weight.mul_(37.0)
        attn.q_proj.bias.mul_(37.0)
        attn.k_proj.weight.mul_(0.02)
        attn.k_proj.bias.mul_(0.02)
    after = attn(query, keys, keys, key_mask, causal=causal, need_weights=need_weights)
    torch.testing.assert_close(after.context, before.context, atol=1e-5, rtol=1e-5)
    # ...which plain scaled-dot attention is not (the property is not vacuous).
    plain = build("scaled-dot", role=role, dk=keys.shape[-1])
    plain.load_state_dict(attn.state_dict(), strict=False)
    scaled = plain(query, keys, keys, key_mask, causal=causal).context
    with torch.no_grad():
        plain.q_proj.weight.div_(37.0)
        plain.q_proj.bias.div_(37.0)
    assert not torch.allclose(plain(query, keys, keys, key_mask, causal=causal).context, scaled)


def test_qk_norm_scale_starts_at_scale_init_per_head():
    attn = build_attention("qk-norm", D, D, role=ROLE_SELF, heads=4, hparams={"scale_init": 7.0})
    assert attn.scale.shape == (4,) and torch.all(attn.scale == 7.0)
    assert attn.scale.requires_grad


def test_an_rnn_with_qk_norm_attention_learns_to_reverse():
    """The RNN decoder's attention (rnn-cross) as qk-norm: a tiny reversal set is overfit."""
    from attnlab.nn.rnn import RNNSeq2Seq
    from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID

    vocab = 11
    torch.manual_seed(0)
    model = RNNSeq2Seq(vocab, vocab, attention="qk-norm", emb=16, hidden=32, dropout=0.0, heads=2)
    g = torch.Generator().manual_seed(0)
    lengths = [3, 4, 5, 6, 3, 4, 5, 6]
    src = torch.zeros(8, 6, dtype=torch.long)
    tgt_in = torch.zeros(8, 7, dtype=torch.long)
    tgt_out = torch.zeros(8, 7, dtype=torch.long)
    for i, n in enumerate(lengths):
        seq = torch.randint(4, vocab, (n,), generator=g)
        src[i, :n] = seq
        tgt_in[i, : n + 1] = torch.cat([torch.tensor([BOS_ID]), seq.flip(0)])
        tgt_out[i, : n + 1] = torch.cat([seq.flip(0), torch.tensor([EOS_ID])])
    src_mask = src != PAD_ID
    with torch.enable_grad():
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        first = None
        for _ in range(150):
            logits = model(src, src_mask, tgt_in).logits
            loss = F.cross_entropy(
                logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=PAD_ID
            )
            first = first if first is not None else loss.item()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert loss.item() < 0.05 < first
    assert model.attention.scale.grad is not None  # the learned scale is trained


# -- preset -------------------------------------------------------------------------------------


def test_the_differential_preset_loads_and_validates():
    config = validate(load_preset("reverse-transformer-differential"))
    assert config.model.arch == "transformer" and config.data.task == "reverse"
    assert config.model.self_attention == "differential"
    assert config.model.decoder_self_attention == "differential"
    assert (config.model.d_model // config.model.heads) % 4 == 0  # rotary-ready halves
