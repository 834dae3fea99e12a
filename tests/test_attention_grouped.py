"""gqa (grouped-query / multi-query) and mla (multi-head latent attention) against float64 loop
references written from the papers' formulas; their decoder caches and what they cost."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny import batch

from attnlab.config import ExperimentConfig, ModelConfig
from attnlab.errors import AttnlabError
from attnlab.experiment import load_preset
from attnlab.nn.attention import build_attention
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_RNN_CROSS, ROLE_SELF
from attnlab.nn.model import build_model
from attnlab.nn.seq2seq import select_state

D, H = 16, 4
DH = D // H
F64 = torch.float64


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def build(name, role, heads=H, **hparams):
    torch.manual_seed(0)
    return build_attention(name, D, D, role=role, heads=heads, hparams=hparams).eval().double()


def inputs(b=2, tq=6, tk=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(b, tq, D, generator=gen, dtype=F64)
    keys = torch.randn(b, tk, D, generator=gen, dtype=F64)
    mask = torch.ones(b, tk, dtype=torch.bool)
    mask[1, tk - 2 :] = False  # second sentence: the last two keys are padding
    return query, keys, mask


def linear(x, module, j):
    """Row x [D_in] through nn.Linear ``module``: its output vector."""
    out = module.weight @ x
    return out if module.bias is None else out + module.bias


def loop_attention(score, value, visible, b, heads, tq, tk):
    """For every (b, h, i): softmax of score(b,h,i,j) over the visible keys j, by loops.
    -> context [B,H,Tq,dv], weights [B,H,Tq,Tk] (a row with no visible key: zeros)."""
    dv = value(0, 0, 0).shape[0]
    weights = torch.zeros(b, heads, tq, tk, dtype=F64)
    context = torch.zeros(b, heads, tq, dv, dtype=F64)
    for bi in range(b):
        for h in range(heads):
            for i in range(tq):
                keys = [j for j in range(tk) if visible(bi, i, j)]
                if not keys:
                    continue
                s = torch.stack([score(bi, h, i, j) for j in keys])
                a = torch.exp(s - s.max())
                a = a / a.sum()
                for n, j in enumerate(keys):
                    weights[bi, h, i, j] = a[n]
                    context[bi, h, i] += a[n] * value(bi, h, j)
    return context, weights


def output(context, attn):
    """context [B,H,Tq,dv] -> concat heads -> W_o."""
    b, h, t, dv = context.shape
    merged = context.transpose(1, 2).reshape(b, t, h * dv)
    return merged @ attn.out_proj.weight.t() + attn.out_proj.bias


def visibility(mask, causal, tq, tk):
    return lambda bi, i, j: bool(mask[bi, j]) and (not causal or j <= tk - tq + i)


# -- gqa -----------------------------------------------------------------------------------------


def gqa_reference(attn, query, keys, mask, causal):
    """Query head h meets key/value head g(h) = h // (H / G): written per (b, h, i, j)."""
    b, tq, _ = query.shape
    tk = keys.shape[1]
    heads, groups = attn.heads, attn.kv_heads
    per_group = heads // groups

    def head(vec, h):  # head h's slice of a projected vector
        return vec[h * DH : (h + 1) * DH]

    def q(bi, h, i):
        return head(linear(query[bi, i], attn.q_proj, 0), h)

    def k(bi, g, j):
        return head(linear(keys[bi, j], attn.k_proj, 0), g)

    def v(bi, g, j):
        return head(linear(keys[bi, j], attn.v_proj, 0), g)

    context, weights = loop_attention(
        lambda bi, h, i, j: q(bi, h, i) @ k(bi, h // per_group, j) / math.sqrt(DH),
        lambda bi, h, j: v(bi, h // per_group, j),
        visibility(mask, causal, tq, tk),
        b,
        heads,
        tq,
        tk,
    )
    return output(context, attn), weights


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
@pytest.mark.parametrize("role", [ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_RNN_CROSS])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_matches_the_grouped_loop_reference(kv_heads, role, need_weights):
    attn = build("gqa", role, kv_heads=kv_heads)
    assert attn.k_proj.weight.shape == (kv_heads * DH, D)
    tq = {ROLE_CROSS: 4, ROLE_RNN_CROSS: 1}.get(role, 6)
    query, keys, mask = inputs(tq=tq)
    causal = role == ROLE_CAUSAL_SELF
    if role in (ROLE_SELF, ROLE_CAUSAL_SELF):
        keys = query
        mask = mask if role == ROLE_SELF else torch.ones_like(mask)
    out = attn(query, keys, keys, mask, causal=causal, need_weights=need_weights)
    expected, weights = gqa_reference(attn, query, keys, mask, causal)
    torch.testing.assert_close(out.context, expected, atol=1e-10, rtol=1e-10)
    if need_weights:
        torch.testing.assert_close(out.weights, weights, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_gqa_one_cached_query_matches_the_reference_last_row(kv_heads):
    """The decoder's cache form: [B,2,G,T,dh], built in two pieces, read by one query."""
    attn = build("gqa", ROLE_CAUSAL_SELF, kv_heads=kv_heads)
    x, _, _ = inputs(tq=7, tk=7)
    cache = torch.cat([attn.cache_entries(x[:, :4], 0), attn.cache_entries(x[:, 4:], 4)], dim=-2)
    assert cache.shape == (2, 2, kv_heads, 7, DH)
    full_mask = torch.ones(2, 7, dtype=torch.bool)
    out = attn(x[:, -1:], x, x, full_mask, causal=True, need_weights=True, precomputed=cache)
    expected, weights = gqa_reference(attn, x, x, full_mask, True)
    torch.testing.assert_close(out.context, expected[:, -1:], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(out.weights, weights[:, :, -1:], atol=1e-12, rtol=1e-10)


def _role_inputs(role):
    query, keys, mask = inputs(tq=4 if role == ROLE_CROSS else 6)
    if role != ROLE_CROSS:
        keys = query
    return query, keys, mask


@pytest.mark.parametrize("role", [ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gqa_with_kv_heads_equal_to_heads_is_multi_head_attention_exactly(role, need_weights):
    mha = build("scaled-dot", role).float()
    gqa = build("gqa", role, kv_heads=H).float()
    gqa.load_state_dict(mha.state_dict())  # same names, same shapes
    query, keys, mask = (t.float() if t.is_floating_point() else t for t in _role_inputs(role))
    causal = role == ROLE_CAUSAL_SELF
    a = mha(query, keys, keys, mask, causal=causal, need_weights=need_weights)
    b = gqa(query, keys, keys, mask, causal=causal, need_weights=need_weights)
    assert torch.equal(a.context, b.context)
    if need_weights:
        assert torch.equal(a.weights, b.weights)


def test_a_transformer_with_gqa_kv_heads_equal_to_heads_is_the_mha_transformer_exactly():
    mha = make_model()
    gqa = make_model(self_attention="gqa", cross_attention="gqa", attn_params={"gqa.kv_heads": 4})
    gqa.load_state_dict(mha.state_dict())
    src, src_mask, tgt_in = random_batch()
    assert torch.equal(mha(src, src_mask, tgt_in).logits, gqa(src, src_mask, tgt_in).logits)
    assert torch.equal(decode(mha, src, src_mask, tgt_in)[0], decode(gqa, src, src_mask, tgt_in)[0])


def test_kv_heads_must_divide_heads():
    with pytest.raises(
        AttnlabError, match=r"model.kv_heads \(model.gqa.kv_heads\)=3 must divide model.heads=4"
    ):
        build_attention("gqa", D, D, role=ROLE_SELF, heads=4, hparams={"kv_heads": 3})
    with pytest.raises(AttnlabError, match="model.kv_heads .*=2 must divide model.heads=1"):
        build_attention("gqa", D, D, role=ROLE_RNN_CROSS, heads=1)  # the default 2 needs 2 | H
    config = ExperimentConfig(
        model=ModelConfig(arch="transformer", heads=4, cross_attention="gqa",
                          attn_params={"gqa.kv_heads": 8})
    )  # fmt: skip
    with pytest.raises(AttnlabError, match="valid: 1, 2, 4"):
        build_model(config, 10, 10)


# -- mla -----------------------------------------------------------------------------------------


def rotate(x, position):
    """Rotary by hand: channel pair (2p, 2p+1) turned by position · 10000^(-2p/d)."""
    d = x.shape[0]
    out = torch.empty_like(x)
    for p in range(d // 2):
        angle = position * 10000.0 ** (-2 * p / d)
        a, b = x[2 * p], x[2 * p + 1]
        out[2 * p] = a * math.cos(angle) - b * math.sin(angle)
        out[2 * p + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


# attnlab.nn.positions.Rotary computes its angles in float32 (then casts cos / sin), so a
# float64 module agrees with the float64 rotation to ~1e-7 relative, not to 1e-15.
ROTARY_TOL = {"atol": 1e-7, "rtol": 1e-5}


def mla_reference(attn, query, keys, mask, causal, rotary):
    """DeepSeek-V2 eqs. 9-19 per (b, h, i, j): latent c_j = W_dkv x_j, k_C = W_uk^h c_j,
    v = W_uv^h c_j, one shared k_R = RoPE(W_kr x_j), q = [W_q^h x_i ; RoPE(W_qr^h x_i)]."""
    b, tq, _ = query.shape
    tk = keys.shape[1]
    dr = attn.rope_dim

    def c(bi, j):
        return attn.kv_down.weight @ keys[bi, j]

    def k_c(bi, h, j):
        return (attn.k_up.weight @ c(bi, j))[h * DH : (h + 1) * DH]

    def k_r(bi, j):
        part = attn.k_rope.weight @ keys[bi, j]
        return rotate(part, j) if rotary else part

    def q_c(bi, h, i):
        return linear(query[bi, i], attn.q_proj, 0)[h * DH : (h + 1) * DH]

    def q_r(bi, h, i):
        part = (attn.q_rope.weight @ query[bi, i])[h * dr : (h + 1) * dr]
        return rotate(part, tk - tq + i) if rotary else part  # query i sits at tk - tq + i

    def score(bi, h, i, j):
        content = q_c(bi, h, i) @ k_c(bi, h, j)
        return (content + q_r(bi, h, i) @ k_r(bi, j)) / math.sqrt(DH + dr)

    def value(bi, h, j):
        return (attn.v_up.weight @ c(bi, j))[h * DH : (h + 1) * DH]

    context, weights = loop_attention(
        score, value, visibility(mask, causal, tq, tk), b, attn.heads, tq, tk
    )
    return output(context, attn), weights


@pytest.mark.parametrize("role", [ROLE_SELF, ROLE_CAUSAL_SELF, ROLE_CROSS])
@pytest.mark.parametrize("need_weights", [False, True])
def test_mla_matches_the_latent_loop_reference(role, need_weights):
    attn = build("mla", role, kv_rank=6, rope_dim=4)
    rotary = role != ROLE_CROSS
    attn.set_positions(role, False)  # what the Transformer does: no rotation in cross roles
    assert (attn.rope is not None) == rotary
    query, keys, mask = _role_inputs(role)
    causal = role == ROLE_CAUSAL_SELF
    if causal:
        mask = torch.ones_like(mask)
    out = attn(query, keys, keys, mask, causal=causal, need_weights=need_weights)
    expected, weights = mla_reference(attn, query, keys, mask, causal, rotary)
    torch.testing.assert_close(out.context, expected, **ROTARY_TOL)
    if need_weights:
        torch.testing.assert_close(out.weights, weights, **ROTARY_TOL)


def test_mla_one_cached_query_reads_the_latent_cache():
    attn = build("mla", ROLE_CAUSAL_SELF, kv_rank=6, rope_dim=4)
    x, _, _ = inputs(tq=7, tk=7)
    cache = torch.cat([attn.cache_entries(x[:, :3], 0), attn.cache_entries(x[:, 3:], 3)], dim=-2)
    assert cache.shape == (2, 7, 6 + 4)  # the latent and the shared rotary key, nothing else
    torch.testing.assert_close(cache, attn.cache_entries(x, 0), atol=1e-12, rtol=0)
    full_mask = torch.ones(2, 7, dtype=torch.bool)
    out = attn(x[:, -1:], x, x, full_mask, causal=True, need_weights=True, precomputed=cache)
    expected, weights = mla_reference(attn, x, x, full_mask, True, True)
    torch.testing.assert_close(out.context, expected[:, -1:], **ROTARY_TOL)
    torch.testing.assert_close(out.weights, weights[:, :, -1:], **ROTARY_TOL)


def test_mla_refuses_an_odd_rope_dim():
    with pytest.raises(AttnlabError, match=r"model.rope_dim \(model.mla.rope_dim\)=5 must be even"):
        build_attention("mla", D, D, role=ROLE_SELF, heads=H, hparams={"rope_dim": 5})


def test_the_transformer_rotates_mla_only_in_self_attention():
    model = make_model(self_attention="mla", cross_attention="mla")
    assert all(layer.self_attn.attn.rope is not None for layer in model.encoder_layers)
    assert all(layer.self_attn.attn.rope is not None for layer in model.decoder_layers)
    assert all(layer.cross_attn.attn.rope is None for layer in model.decoder_layers)
    assert all(layer.self_attn.attn.rotary is None for layer in model.decoder_layers)


# -- the decoder cache ---------------------------------------------------------------------------

SRC_V, TGT_V = 15, 17


def make_model(**model):
    base = dict(
        arch="transformer", d_model=32, heads=4, ff=48, enc_layers=2, dec_layers=2, dropout=0.0
    )
    base.update(model)
    torch.manual_seed(0)
    return build_model(ExperimentConfig(model=ModelConfig(**base)), SRC_V, TGT_V).eval()


def random_batch(b=3, s=7, t=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, SRC_V, (b, s), generator=gen)
    tgt = torch.randint(4, TGT_V, (b, t), generator=gen)
    lengths = [s - 3 if row == 1 else s for row in range(b)]
    return batch([src[row, :n].tolist() for row, n in enumerate(lengths)], tgt[:, 1:].tolist())


def decode(model, src, src_mask, tgt_in):
    """Cached decoding of tgt_in -> logits [B,T,V] and the state's bytes after each step."""
    enc = model.encode(src, src_mask)
    state = model.start_state(enc)
    sizes = [sum(t.nbytes for t in state.values())]
    logits = []
    for t in range(tgt_in.shape[1]):
        step, state, _ = model.step(tgt_in[:, t], state, enc)
        logits.append(step)
        sizes.append(sum(t.nbytes for t in state.values()))
    return torch.stack(logits, 1), sizes


CACHES = {  # name -> (model kwargs, bytes per generated token per sentence, by hand)
    # 2 decoder layers x (k and v) x H heads x d_h x 4 bytes (float32), d_model 32, 4 heads
    "mha": ({}, 2 * 2 * 4 * 8 * 4),
    "gqa-2": ({"attn_params": {"gqa.kv_heads": 2}}, 2 * 2 * 2 * 8 * 4),
    "mqa": ({"attn_params": {"gqa.kv_heads": 1}}, 2 * 2 * 1 * 8 * 4),
    # 2 layers x (kv_rank 12 + rope_dim 4) x 4 bytes: the latent and the shared rotary key
    "mla": ({"attn_params": {"mla.kv_rank": 12, "mla.rope_dim": 4}}, 2 * (12 + 4) * 4),
}


def _cache_model(name):
    kwargs, _ = CACHES[name]
    variant = {"mha": "scaled-dot", "mla": "mla"}.get(name, "gqa")
    return make_model(self_attention=variant, cross_attention=variant, **kwargs)


def test_bytes_per_generated_token_fall_from_mha_to_gqa_to_mqa_and_mla():
    src, src_mask, tgt_in = random_batch()
    per_token = {}
    for name, (_, expected) in CACHES.items():
        model = _cache_model(name)
        logits, sizes = decode(model, src, src_mask, tgt_in)
        growth = {b - a for a, b in zip(sizes, sizes[1:], strict=False)}
        assert len(growth) == 1, "every step adds the same bytes"
        per_token[name] = growth.pop() / src.shape[0]
        assert per_token[name] == expected, name
        full = model(src, src_mask, tgt_in).logits
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)
    assert per_token["mha"] > per_token["gqa-2"] > per_token["mqa"]
    assert per_token["mla"] < per_token["mha"]


def test_cache_shapes_in_the_decoder_state():
    src, src_mask, _ = random_batch()
    gqa = _cache_model("gqa-2")
    state = gqa.start_state(gqa.encode(src, src_mask))
    assert state["self_cache0"].shape == (3, 2, 2, 0, 8)
    assert state["cross_cache1"].shape == (3, 2, 2, 7, 8)  # [B,2,G,S,dh]
    mla = _cache_model("mla")
    state = mla.start_state(mla.encode(src, src_mask))
    assert state["self_cache0"].shape == (3, 0, 16)
    assert state["cross_cache1"].shape == (3, 7, 16)  # [B,S,kv_rank + rope_dim]


@pytest.mark.parametrize("name", ["gqa-2", "mqa", "mla"])
def test_reordered_grouped_and_latent_caches_equal_decoding_the_reordered_batch(name):
    model = _cache_model(name)
    src, src_mask, tgt_in = random_batch()
    order = torch.tensor([2, 0, 0])
    enc = model.encode(src, src_mask)
    state = model.start_state(enc)
    for t in range(3):
        _, state, _ = model.step(tgt_in[:, t], state, enc)
    state, enc = select_state(state, order), enc.index_select(order)
    logits, _, _ = model.step(tgt_in[order, 3], state, enc)
    full = model(src[order], src_mask[order], tgt_in[order, :4]).logits[:, 3]
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)


def test_gqa_preset_loads_and_builds():
    config = load_preset("reverse-transformer-gqa")
    m = config.model
    assert (m.arch, m.self_attention, m.decoder_self_attention) == ("transformer", "gqa", "gqa")
    assert m.params_for("gqa")["kv_heads"] == 2
    model = build_model(config, 30, 30)
    assert model.encoder_layers[0].self_attn.attn.kv_heads == 2
    assert model.decoder_layers[0].self_attn.attn.kv_heads == 2
