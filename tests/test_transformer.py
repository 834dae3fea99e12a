"""The encoder-decoder Transformer: caching, batching, attention shapes, config checks."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from _tiny import batch

from attnlab.config import ExperimentConfig, ModelConfig
from attnlab.errors import AttnlabError
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS
from attnlab.nn.attention.multihead import MultiHeadBase
from attnlab.nn.model import ARCHITECTURES, build_model
from attnlab.nn.reference import set_reference_mode
from attnlab.nn.seq2seq import PAD_ID, select_state
from attnlab.nn.transformer import TransformerSeq2Seq, check_transformer

SRC_V, TGT_V = 15, 17


def config(**model) -> ExperimentConfig:
    base = dict(
        arch="transformer", d_model=32, heads=4, ff=48, enc_layers=2, dec_layers=2, dropout=0.0
    )
    base.update(model)
    return ExperimentConfig(model=ModelConfig(**base))


def make_model(**model) -> TransformerSeq2Seq:
    torch.manual_seed(0)
    return build_model(config(**model), SRC_V, TGT_V).eval()


def random_batch(b=3, s=7, t=6, seed=0):
    """``b`` random sentences of ``s`` source tokens (row 1 three fewer) and ``t`` - 1 target
    tokens, through the shared ``batch``."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, SRC_V, (b, s), generator=gen)
    tgt = torch.randint(4, TGT_V, (b, t), generator=gen)  # column 0 becomes BOS
    lengths = [s - 3 if row == 1 else s for row in range(b)]
    return batch([src[row, :n].tolist() for row, n in enumerate(lengths)], tgt[:, 1:].tolist())


def decode_with_cache(model, src, src_mask, tgt_in, need_weights=False):
    enc = model.encode(src, src_mask)
    state = model.start_state(enc)
    logits, cross = [], []
    for t in range(tgt_in.shape[1]):
        step_logits, state, weights = model.step(tgt_in[:, t], state, enc, need_weights)
        logits.append(step_logits)
        cross.append(weights)
    return torch.stack(logits, 1), cross


CACHE_CASES = [
    {},
    {"norm": "post", "activation": "gelu"},
    {"positions": "learned", "tie_embeddings": True},
    {"positions": "rotary"},
    {"positions": "none", "self_attention": "relative"},
    {"self_attention": "alibi", "positions": "none"},
    {"self_attention": "sliding-window", "window": 2},
    {"self_attention": "dilated", "window": 1, "dilation": 2},
    {"self_attention": "performer", "cross_attention": "performer"},
    {"self_attention": "linear", "cross_attention": "linear"},
    {
        "self_attention": "linformer",
        "cross_attention": "linformer",
    },  # decoder self falls back to scaled-dot
    {"self_attention": "gated", "cross_attention": "additive"},
    {"cross_attention": "bahdanau"},  # an RNN-era variant as cross-attention
    {"cross_attention": "luong-general"},
]


def _model_kwargs(case):
    case = dict(case)
    params = {k: case.pop(k) for k in ("window", "dilation") if k in case}
    return {**case, "attn_params": params}


@pytest.mark.parametrize(
    "case", CACHE_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default"
)
def test_cached_step_decoding_equals_full_forward(case, device):
    kwargs = _model_kwargs(case)
    model = make_model(**kwargs).to(device)
    src, src_mask, tgt_in = (t.to(device) for t in random_batch())
    with torch.no_grad():
        full = model(src, src_mask, tgt_in).logits
        cached, _ = decode_with_cache(model, src, src_mask, tgt_in)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)


def _decoder_variant_cases():
    """Every registered variant in each decoder role it declares (causal self / cross)."""
    for entry in ATTENTION.entries():
        for role, key in (
            (ROLE_CAUSAL_SELF, "decoder_self_attention"),
            (ROLE_CROSS, "cross_attention"),
        ):
            if role in entry.meta.roles:
                yield pytest.param({key: entry.name}, id=f"{key}={entry.name}")


@pytest.mark.parametrize("case", list(_decoder_variant_cases()))
def test_every_decoder_variant_decodes_with_its_cache_as_the_full_pass(case):
    """The KV cache (or whatever a variant keeps between steps) gives the full pass's logits,
    with need_weights off and on, and the stepped cross weights equal the full pass's."""
    model = make_model(**case)
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt_in, need_weights=True)
        cached, _ = decode_with_cache(model, src, src_mask, tgt_in)
        cached_w, cross = decode_with_cache(model, src, src_mask, tgt_in, need_weights=True)
    torch.testing.assert_close(cached, full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached_w, full.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        torch.stack(cross, dim=3), full.attentions["cross"], atol=1e-5, rtol=1e-5
    )


def _rotary_decoder_variants():
    """Every variant that can be the decoder's self-attention with model.positions = rotary."""
    for entry in ATTENTION.entries():
        cls = entry.factory
        causal = ROLE_CAUSAL_SELF in entry.meta.roles
        if causal and issubclass(cls, MultiHeadBase) and cls.supports_rotary:
            yield entry.name


@pytest.mark.parametrize("name", list(_rotary_decoder_variants()))
def test_rotary_decoder_self_attention_decodes_with_its_cache_as_the_full_pass(name):
    """positions = rotary: each cached step rotates its new key at its absolute position and its
    query at the end of the cache, so the stepped logits equal the full pass's (a wrong offset,
    e.g. rotating the step at 0, would not)."""
    model = make_model(decoder_self_attention=name, positions="rotary")
    for layer in model.decoder_layers:
        attn = layer.self_attn.attn
        assert attn.rotary is not None or getattr(attn, "rope", None) is not None  # mla: its own
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt_in).logits
        cached, _ = decode_with_cache(model, src, src_mask, tgt_in)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)


def ragged_batch(empty_source: bool = False):
    """Padding on both sides: sources of 7/4/2/7 tokens, targets of 6/4/2/5 positions."""
    src, src_mask, tgt_in = random_batch(b=4, s=7, t=6, seed=1)
    for row, (n_src, n_tgt) in enumerate([(7, 6), (4, 4), (0 if empty_source else 2, 2), (7, 5)]):
        src_mask[row, n_src:] = False
        tgt_in[row, n_tgt:] = PAD_ID
    src[~src_mask] = PAD_ID
    return src, src_mask, tgt_in


def forward_and_grads(model, src, src_mask, tgt_in, packed: bool):
    """Logits and every parameter's gradient of a loss over the real target positions."""
    set_reference_mode(model, not packed)
    model.zero_grad(set_to_none=True)
    logits = model(src, src_mask, tgt_in).logits
    weights = torch.linspace(-1.0, 1.0, logits.shape[-1], device=logits.device)  # touches all
    (logits[tgt_in != PAD_ID] * weights).sin().sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize(
    "case",
    [*CACHE_CASES, {"norm": "post"}, {"decoder_self_attention": "linear"}],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default",
)
def test_padding_free_forward_equals_padded_forward(case):
    """The packed training pass (real rows only, fused QKV / KV projections) gives the padded
    reference pass's logits at every real target position, and the same gradients."""
    kwargs = _model_kwargs(case)
    model = make_model(**kwargs)
    src, src_mask, tgt_in = ragged_batch()
    real = tgt_in != PAD_ID
    padded, padded_grads = forward_and_grads(model, src, src_mask, tgt_in, packed=False)
    packed, packed_grads = forward_and_grads(model, src, src_mask, tgt_in, packed=True)
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-5)
    assert torch.all(packed[~real] == 0)  # padded positions are not computed
    assert not torch.all(padded[~real] == 0)  # ... and reference mode did take the padded pass
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("cross_attention", ["scaled-dot", "gated", "bahdanau", "performer"])
def test_padding_free_forward_with_an_empty_source_sentence(cross_attention):
    """A sentence with no source token: cross-attention has no key (zero context) in both paths."""
    model = make_model(cross_attention=cross_attention)
    src, src_mask, tgt_in = ragged_batch(empty_source=True)
    real = tgt_in != PAD_ID
    padded, _ = forward_and_grads(model, src, src_mask, tgt_in, packed=False)
    packed, grads = forward_and_grads(model, src, src_mask, tgt_in, packed=True)
    assert torch.isfinite(packed).all() and all(torch.isfinite(g).all() for g in grads.values())
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-5)


def test_forward_with_weights_takes_the_padded_path_with_the_same_logits():
    model = make_model()
    src, src_mask, tgt_in = ragged_batch()
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
        plain = model(src, src_mask, tgt_in)
    real = tgt_in != PAD_ID
    assert set(out.attentions) == {"enc_self", "dec_self", "cross"}
    torch.testing.assert_close(plain.logits[real], out.logits[real], atol=1e-5, rtol=1e-5)


def test_cpu_dropout_is_inverted_bernoulli_dropout():
    from attnlab.nn.dropout import Dropout, drop_probability

    torch.manual_seed(0)
    drop = Dropout(0.25).train()
    x = torch.rand(400, 500) + 0.5  # no zeros of its own
    x.requires_grad_(True)
    y = drop(x)
    kept = y != 0
    assert abs(1.0 - kept.float().mean().item() - 0.25) < 0.005  # 200k draws: sd ~0.001
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    assert torch.equal(drop.eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    # The fused residual draws the same mask as the layer: x + drop(y), and its gradients.
    base = torch.randn(400, 500, requires_grad=True)
    torch.manual_seed(4)
    fused = drop.train().residual(base, x)
    torch.manual_seed(4)
    plain = base + drop(x)
    torch.testing.assert_close(fused, plain)
    x.grad = None
    fused.sum().backward()
    torch.testing.assert_close(x.grad, ((plain - base) != 0).float() / 0.75)
    torch.testing.assert_close(base.grad, torch.ones_like(base))
    assert torch.equal(drop.eval().residual(base, x), base + x)
    drop.train()
    assert drop_probability(0.25) == 0.25 and drop_probability(0.1) == 6554 / 65536
    # A p that rounds to 1 at 2⁻¹⁶ is torch's own dropout (no division by a zero keep rate).
    assert torch.isfinite(Dropout(1 - 1e-6).train()(x)).all()


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_cpu_keep_mask_is_unbiased_and_its_elements_independent(p):
    """Each 64-bit draw decides four elements: the keep rate must be 1 - p' in every one of
    the four lanes (a lane wired to the draw's sign bit would not be), neighbours must not
    agree more than chance, and the scaled mask must average exactly 1 in expectation."""
    from attnlab.nn.dropout import drop_probability, keep_mask

    torch.manual_seed(1)
    n = 400_000
    mask = keep_mask((n,), p, torch.float64)
    q = drop_probability(p)
    scale = 1.0 / (1.0 - q)
    assert set(mask.unique().tolist()) <= {0.0, scale}
    kept = (mask != 0).double()
    sd = (q * (1 - q) / (n / 4)) ** 0.5  # per lane
    for lane in range(4):
        assert abs(kept[lane::4].mean().item() - (1 - q)) < 5 * sd, lane
    both = (kept[:-1] * kept[1:]).mean().item()  # P(keep, keep) of neighbours = (1 - q)^2
    assert abs(both - (1 - q) ** 2) < 5 * (((1 - q) ** 2 * (1 - (1 - q) ** 2)) / n) ** 0.5
    assert abs(mask.mean().item() - 1.0) < 5 * sd * scale * 2


def test_cpu_keep_mask_is_decided_by_torchs_generator():
    """The mask's bits come from numpy, but its seed from torch's global generator: a seed or
    a restored RNG state (a resumed checkpoint) gives the same masks, and each call draws anew,
    in this thread and in another."""
    import threading

    from attnlab.nn.dropout import keep_mask

    torch.manual_seed(7)
    first, second = keep_mask((64, 33), 0.3, torch.float32), keep_mask((64, 33), 0.3, torch.float32)
    assert not torch.equal(first, second)
    torch.manual_seed(7)
    assert torch.equal(keep_mask((64, 33), 0.3, torch.float32), first)
    state = torch.get_rng_state()
    again = keep_mask((5, 7), 0.5, torch.float64)
    torch.set_rng_state(state)
    assert torch.equal(keep_mask((5, 7), 0.5, torch.float64), again)
    elsewhere: list[torch.Tensor] = []
    torch.manual_seed(7)
    worker = threading.Thread(
        target=lambda: elsewhere.append(keep_mask((64, 33), 0.3, torch.float32))
    )
    worker.start()
    worker.join()
    assert torch.equal(elsewhere[0], first)


def test_cpu_attention_dropout_is_sdpa_math_with_the_mask_it_drew(monkeypatch):
    """attention_with_dropout on the CPU = softmax(q·kᵀ/√d + mask) ∘ M @ v for the mask M it
    drew, written here with loops in float64; causal, bool and additive masks, GQA, a scale."""
    import math

    from attnlab.nn import dropout as module

    drawn: list[torch.Tensor] = []
    real = module.keep_mask

    def recording(shape, p, dtype):
        drawn.append(real(shape, p, dtype))
        return drawn[-1]

    monkeypatch.setattr(module, "keep_mask", recording)
    torch.manual_seed(2)
    b, h, hk, tq, tk, d = 2, 4, 2, 3, 5, 8
    q = torch.randn(b, h, tq, d, dtype=torch.float64)
    k = torch.randn(b, hk, tk, d, dtype=torch.float64)
    v = torch.randn(b, hk, tk, d, dtype=torch.float64)
    bool_mask = torch.rand(b, 1, tq, tk) > 0.3
    bool_mask[..., 0] = True  # every row sees a key
    bias = torch.randn(b, 1, 1, tk, dtype=torch.float64)
    cases = [
        dict(attn_mask=None, is_causal=True),
        dict(attn_mask=bool_mask, is_causal=False),
        dict(attn_mask=bias, is_causal=False),
        dict(attn_mask=None, is_causal=False, scale=0.3),  # an explicit score scale
    ]
    for case in cases:
        drawn.clear()
        out = module.attention_with_dropout(q, k, v, dropout_p=0.3, enable_gqa=True, **case)
        (m,) = drawn
        expected = torch.zeros(b, h, tq, d, dtype=torch.float64)
        for bi, hi, i in itertools.product(range(b), range(h), range(tq)):
            g = hi // (h // hk)
            logits = []
            for j in range(tk):
                s = float(q[bi, hi, i] @ k[bi, g, j]) * case.get("scale", 1 / math.sqrt(d))
                if case["is_causal"] and j > i:
                    s = -math.inf
                mask = case["attn_mask"]
                if mask is not None and mask.dtype == torch.bool and not mask[bi, 0, i, j]:
                    s = -math.inf
                if mask is not None and mask.dtype != torch.bool:
                    s += float(mask[bi, 0, 0, j])
                logits.append(s)
            top = max(logits)
            e = [math.exp(s - top) for s in logits]
            for j in range(tk):
                expected[bi, hi, i] += e[j] / sum(e) * float(m[bi, hi, i, j]) * v[bi, g, j]
        torch.testing.assert_close(out, expected)


def test_cpu_attention_dropout_gradients_pass_gradcheck(monkeypatch):
    """The in-place masking of the scores keeps autograd exact: gradcheck in float64 with the
    mask held fixed, for causal, bool and additive masks on strided (head-split) inputs."""
    from attnlab.nn import dropout as module

    torch.manual_seed(3)
    fixed = module.keep_mask((2, 2, 4, 4), 0.4, torch.float64)
    monkeypatch.setattr(module, "keep_mask", lambda shape, p, dtype: fixed)
    bool_mask = torch.rand(2, 1, 4, 4) > 0.4
    bool_mask[..., 0] = True
    bias = torch.randn(2, 1, 1, 4, dtype=torch.float64)
    packed = torch.randn(2, 4, 3, 2, 3, dtype=torch.float64, requires_grad=True)
    for case in (
        dict(is_causal=True),
        dict(attn_mask=bool_mask),
        dict(attn_mask=bias, scale=0.7),
    ):

        def attend(x, case=case):
            q, k, v = x.transpose(1, 3).unbind(2)  # [B,H,T,dh] views with gaps, as in training
            return module.attention_with_dropout(q, k, v, dropout_p=0.4, **case)

        assert torch.autograd.gradcheck(attend, (packed,))


def test_step_cross_weights_equal_forward_cross_weights():
    model = make_model()
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
        _, cross = decode_with_cache(model, src, src_mask, tgt_in, need_weights=True)
    torch.testing.assert_close(
        torch.stack(cross, dim=3), out.attentions["cross"], atol=1e-6, rtol=1e-5
    )


def test_reordered_cache_equals_decoding_the_reordered_batch():
    """Beam search reorders the state with index_select; the cache must follow."""
    model = make_model()
    src, src_mask, tgt_in = random_batch()
    order = torch.tensor([2, 0, 0])
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        for t in range(3):
            _, state, _ = model.step(tgt_in[:, t], state, enc)
        state, enc = select_state(state, order), enc.index_select(order)
        logits, _, _ = model.step(tgt_in[order, 3], state, enc)
        full = model(src[order], src_mask[order], tgt_in[order, :4]).logits[:, 3]
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "self_attention", ["scaled-dot", "sliding-window", "performer", "linformer", "relative"]
)
def test_sentence_alone_equals_sentence_in_padded_batch(self_attention):
    model = make_model(self_attention=self_attention)
    src, src_mask, tgt_in = random_batch()
    n = int(src_mask[1].sum())
    with torch.no_grad():
        batched = model(src, src_mask, tgt_in).logits[1]
        alone = model(src[1:2, :n], src_mask[1:2, :n], tgt_in[1:2]).logits[0]
        # Target padding: the sentence's first 4 target positions alone vs padded to 6
        short = model(src[1:2, :n], src_mask[1:2, :n], tgt_in[1:2, :4]).logits[0]
    torch.testing.assert_close(alone, batched, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(short, batched[:4], atol=1e-5, rtol=1e-5)


def test_attention_shapes_and_rows():
    model = make_model(enc_layers=3, dec_layers=2)
    src, src_mask, tgt_in = random_batch(b=3, s=7, t=5)
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
        plain = model(src, src_mask, tgt_in)
    assert out.logits.shape == (3, 5, TGT_V)
    assert out.attentions["enc_self"].shape == (3, 3, 4, 7, 7)
    assert out.attentions["dec_self"].shape == (3, 2, 4, 5, 5)
    assert out.attentions["cross"].shape == (3, 2, 4, 5, 7)
    assert torch.all(out.attentions["cross"][1, ..., 4:] == 0)  # padded source positions
    assert torch.all(out.attentions["dec_self"].triu(1) == 0)  # no peeking ahead
    assert plain.attentions == {}
    torch.testing.assert_close(plain.logits, out.logits, atol=1e-5, rtol=1e-5)


def test_single_head_cross_variant_gives_one_head():
    model = make_model(cross_attention="bahdanau")
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
    assert out.attentions["cross"].shape[:3] == (3, 2, 1)


def test_full_teacher_forcing_equals_plain_forward_and_zero_feeds_own_predictions():
    model = make_model()
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        plain = model(src, src_mask, tgt_in).logits
        forced = model(src, src_mask, tgt_in, teacher_forcing=1.0).logits
        own = model(src, src_mask, tgt_in, teacher_forcing=0.0).logits
        predicted = torch.cat([tgt_in[:, :1], plain.argmax(-1)[:, :-1]], dim=1)
        expected = model(src, src_mask, predicted).logits
    torch.testing.assert_close(forced, plain)
    torch.testing.assert_close(own, expected)


def test_scheduled_sampling_keeps_gradients_of_the_second_pass():
    model = make_model()
    model.train()
    src, src_mask, tgt_in = random_batch()
    out = model(src, src_mask, tgt_in, teacher_forcing=0.5)
    out.logits.sum().backward()
    assert model.output.weight.grad is not None


def test_tied_and_shared_embeddings():
    model = make_model(tie_embeddings=True)
    assert model.output.weight is model.tgt_embed.weight
    torch.manual_seed(0)
    shared = TransformerSeq2Seq(config(share_embeddings=True).model, TGT_V, TGT_V, max_len=8)
    assert shared.src_embed is shared.tgt_embed
    with pytest.raises(AttnlabError, match="share_embeddings"):
        TransformerSeq2Seq(config(share_embeddings=True).model, SRC_V, TGT_V, max_len=8)


def test_linformer_in_decoder_self_attention_is_refused_at_config_time():
    with pytest.raises(AttnlabError) as err:
        check_transformer(config(decoder_self_attention="linformer"))
    assert str(err.value) == (
        "model.decoder_self_attention=linformer: "
        "linformer cannot be used for causal-self attention; "
        "it supports: cross, self"
    )
    assert "\n" not in str(err.value)
    # The architecture registry runs the same check.
    with pytest.raises(AttnlabError, match="causal-self"):
        ARCHITECTURES.get("transformer").meta.check(config(decoder_self_attention="linformer"))


@pytest.mark.parametrize(
    "model,message",
    [
        (
            {"cross_attention": "sliding-window"},
            "sliding-window cannot be used for cross attention",
        ),
        ({"self_attention": "luong-dot"}, "luong-dot cannot be used for self attention"),
        ({"d_model": 30, "heads": 4}, "divisible by model.heads=4"),
        ({"self_attention": "nope"}, 'unknown attention "nope"'),
        ({"self_attention": "linformer", "attn_params": {"max_len": 10}}, "model.max_len=10"),
        (
            {"self_attention": "differential", "positions": "rotary", "d_model": 72, "heads": 4},
            "must be divisible by 4, got 18",
        ),
        ({"cross_attention": "differential", "d_model": 36, "heads": 4}, "must be even, got 9"),
    ],
)
def test_bad_combinations_are_refused_with_one_line(model, message):
    with pytest.raises(AttnlabError, match=message) as err:
        check_transformer(config(**model))
    assert "\n" not in str(err.value)


def test_every_variant_with_a_transformer_role_plugs_in():
    """A newly registered variant is usable by being registered: build and run one batch."""
    src, src_mask, tgt_in = random_batch(b=2, s=5, t=4)
    for entry in ATTENTION.entries():
        roles = entry.meta.roles
        kwargs = {}
        if "self" in roles:
            kwargs["self_attention"] = entry.name
        if ROLE_CAUSAL_SELF in roles:
            kwargs["decoder_self_attention"] = entry.name
        if ROLE_CROSS in roles:
            kwargs["cross_attention"] = entry.name
        if not kwargs:
            continue
        cfg = config(enc_layers=1, dec_layers=1, **kwargs)
        check_transformer(cfg)
        model = build_model(cfg, SRC_V, TGT_V).eval()
        with torch.no_grad():
            out = model(src[:, :5], src_mask[:, :5], tgt_in, need_weights=True)
        assert torch.isfinite(out.logits).all(), entry.name
        assert out.attentions["cross"].shape[-2:] == (4, 5), entry.name


def test_config_dataclass_has_the_transformer_keys():
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    assert {
        "d_model",
        "heads",
        "ff",
        "enc_layers",
        "dec_layers",
        "norm",
        "positions",
        "self_attention",
        "decoder_self_attention",
        "cross_attention",
    } <= names


@pytest.mark.slow
def test_reverse_transformer_learns_short_reversals(tmp_path):
    """The reverse-transformer preset, on lengths 3-10 and a 60-second budget, reaches dev exact
    match >= 0.9 through the real trainer (the full preset's figures are in the README)."""
    from attnlab.experiment import apply_overrides, load_preset
    from attnlab.train.trainer import Trainer

    config = apply_overrides(
        load_preset("reverse-transformer"),
        [
            "data.max_len=10",
            "train.max_steps=600",
            "train.eval_every=200",
            "train.eval_sentences=200",
        ],
    )
    summary = Trainer(config, tmp_path / "run", device="cpu", install_signals=False).run()
    assert summary["reason"] == "finished"
    assert summary["best"]["exact_match"] >= 0.9, summary["best"]


@pytest.mark.parametrize("kind", ["sinusoidal", "learned", "none"])
def test_absolute_positions_scale_and_add_by_position_and_refuse_past_the_table(kind):
    """scale · x + P[p] row by row (padded rows broadcast over the batch, packed rows each at
    its own position); a position past the table is a one-line error that names both."""
    from attnlab.errors import AttnlabError
    from attnlab.nn.positions import AbsolutePositions

    positions_module = AbsolutePositions(kind, 4, 16)
    table = {
        "sinusoidal": getattr(positions_module, "table", None),
        "learned": getattr(getattr(positions_module, "embedding", None), "weight", None),
        "none": torch.zeros(16, 4),
    }[kind]
    x = torch.randn(3, 5, 4)
    padded = positions_module(x, 2.0, torch.arange(7, 12), 12)
    rows = positions_module(x[0], 2.0, torch.tensor([0, 3, 1, 15, 2]), 16)
    for b in range(3):
        for t in range(5):
            torch.testing.assert_close(padded[b, t], 2.0 * x[b, t] + table[7 + t])
    for i, p in enumerate([0, 3, 1, 15, 2]):
        torch.testing.assert_close(rows[i], 2.0 * x[0, i] + table[p])
    if kind != "none":
        with pytest.raises(AttnlabError, match="length 17 exceeds the model's 16"):
            positions_module(x, 1.0, torch.arange(12, 17), 17)
