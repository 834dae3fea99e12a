"""The classic RNN attention family against float64 references written from the papers' formulas."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.nn.attention import ATTENTION, ROLE_CROSS, ROLE_RNN_CROSS, build_attention
from attnlab.nn.attention.classic import ClassicAttention

# The classic family as registered, whoever wrote it: a new ClassicAttention needs a reference.
CLASSIC = [e.name for e in ATTENTION.entries() if issubclass(e.factory, ClassicAttention)]
PAPERS = {
    "none",
    "bahdanau",
    "luong-dot",
    "luong-general",
    "luong-concat",
    "luong-location",
    "local-m",
    "local-p",
}  # Bahdanau et al. 2015 and Luong et al. 2015
SCORED = [n for n in CLASSIC if n != "none"]  # variants whose weights mean something
B, TQ, TK, DQ, DK = 3, 4, 6, 4, 5
LENGTHS = [6, 4, 2]  # real keys per row; the rest is padding


def dims(name: str) -> tuple[int, int]:
    return (DK, DK) if name == "luong-dot" else (DQ, DK)


def make(name: str, **hparams):
    query_dim, key_dim = dims(name)
    torch.manual_seed(7)
    module = build_attention(name, query_dim, key_dim, role=ROLE_RNN_CROSS, hparams=hparams)
    # Non-default random parameters so nothing is accidentally symmetric.
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.7)
    return module.double().eval()


def inputs(name: str, lengths=LENGTHS, dtype=torch.float64):
    query_dim, key_dim = dims(name)
    g = torch.Generator().manual_seed(11)
    query = torch.randn(B, TQ, query_dim, generator=g, dtype=dtype)
    keys = torch.randn(B, TK, key_dim, generator=g, dtype=dtype)
    mask = torch.arange(TK).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # [B,TK]
    return query, keys, mask


# -- the references: explicit loops over batch, query and key positions, float64 -------------


def softmax_over(scores: dict[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    top = max(scores.values())
    exps = {j: math.exp(s - top) for j, s in scores.items()}
    total = sum(exps.values())
    return {j: e / total for j, e in exps.items()}


def reference(name: str, module, query, keys, mask, query_pos=None):
    """-> weights [B,TQ,TK], context [B,TQ,DK] from the formula, one (b, i, j) at a time."""
    weights = torch.zeros(query.shape[0], query.shape[1], keys.shape[1], dtype=torch.float64)
    params = {k: v.detach().double() for k, v in module.named_parameters()}
    for b in range(query.shape[0]):
        length = int(mask[b].sum())
        for i in range(query.shape[1]):
            s = query[b, i]
            scores: dict[int, float] = {}
            if name == "local-p":
                gate = 1 / (
                    1
                    + math.exp(
                        -float(
                            params["position_score.weight"][0]
                            @ torch.tanh(params["position_proj.weight"] @ s)
                        )
                    )
                )
                centre = length * gate  # p_t = S sigmoid(v_p tanh(W_p s_t))
                sigma = module.window / 2
            if name == "local-m":
                pos = i if query_pos is None else int(query_pos[b, i])
                centre = min(pos, length - 1)  # p_t = t, clamped to the last real position
            for j in range(length):
                h = keys[b, j]
                if name == "bahdanau":  # vᵀ tanh(W s + U h)
                    score = float(
                        params["energy.weight"][0]
                        @ torch.tanh(
                            params["query_proj.weight"] @ s + params["key_proj.weight"] @ h
                        )
                    )
                elif name == "luong-dot":  # sᵀ h
                    score = float(s @ h)
                elif name in ("luong-general", "local-m", "local-p"):  # sᵀ W_a h
                    score = float(s @ (params["key_proj.weight"] @ h))
                elif name == "luong-concat":  # v_aᵀ tanh(W_a [s; h])
                    score = float(
                        params["energy.weight"][0]
                        @ torch.tanh(params["concat_proj.weight"] @ torch.cat([s, h]))
                    )
                elif name == "luong-location":  # (W_a s)_j
                    if j >= module.max_src_len:
                        continue
                    score = float(params["location.weight"][j] @ s)
                else:
                    raise AssertionError(name)
                if name in ("local-m", "local-p") and abs(j - centre) > module.window:
                    continue
                scores[j] = score
            if name == "local-p":
                # Luong et al.: window softmax times exp(-(j-p)^2 / 2σ^2), renormalised here.
                raw = {
                    j: math.exp(sc) * math.exp(-((j - centre) ** 2) / (2 * sigma**2))
                    for j, sc in scores.items()
                }
                total = sum(raw.values())
                probs = {j: r / total for j, r in raw.items()}
            else:
                probs = softmax_over(scores)
            for j, p in probs.items():
                weights[b, i, j] = p
    context = torch.einsum("bqk,bkd->bqd", weights, keys)
    return weights, context


@pytest.mark.parametrize("name", SCORED)
def test_variant_matches_float64_reference(name, device):
    module = make(name)
    query, keys, mask = inputs(name)
    want_weights, want_context = reference(name, module, query, keys, mask)
    module, query, keys, mask = (x.to(device) for x in (module, query, keys, mask))
    out = module(query, keys, keys, mask, need_weights=True)
    assert out.context.device.type == device.type
    out.weights, out.context = out.weights.cpu(), out.context.cpu()
    assert out.weights.shape == (B, 1, TQ, TK)
    assert out.context.shape == (B, TQ, module.out_dim)
    torch.testing.assert_close(out.weights[:, 0], want_weights, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out.context, want_context, rtol=1e-9, atol=1e-12)


def test_local_m_takes_the_step_from_query_pos_and_clamps_it():
    module = make("local-m", window=1)
    query, keys, mask = inputs("local-m")
    query_pos = torch.tensor([[0, 2, 4, 5], [1, 3, 5, 9], [0, 1, 2, 3]])
    out = module(query, keys, keys, mask, query_pos=query_pos)
    want, _ = reference("local-m", module, query, keys, mask, query_pos)
    torch.testing.assert_close(out.weights[:, 0], want, rtol=1e-9, atol=1e-12)
    # One decoder step: query_pos [B] with Tq = 1.
    step = module(query[:, 1:2], keys, keys, mask, query_pos=query_pos[:, 1])
    torch.testing.assert_close(step.weights[:, 0], want[:, 1:2], rtol=1e-9, atol=1e-12)


def test_luong_location_ignores_positions_past_max_src_len():
    module = make("luong-location", max_src_len=3)
    query, keys, mask = inputs("luong-location")
    out = module(query, keys, keys, mask)
    want, _ = reference("luong-location", module, query, keys, mask)
    torch.testing.assert_close(out.weights[:, 0], want, rtol=1e-9, atol=1e-12)
    assert torch.all(out.weights[..., 3:] == 0)


@pytest.mark.parametrize("name", SCORED)
def test_weights_sum_to_one_over_real_keys(name):
    module = make(name).float()
    query, keys, mask = inputs(name, dtype=torch.float32)
    weights = module(query, keys, keys, mask).weights
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, 1, TQ), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", CLASSIC)
def test_padded_keys_get_zero_weight(name):
    module = make(name).float()
    query, keys, mask = inputs(name, dtype=torch.float32)
    weights = module(query, keys, keys, mask).weights
    padded = ~mask[:, None, None, :].expand_as(weights)
    assert torch.all(weights[padded] == 0.0)


@pytest.mark.parametrize("name", CLASSIC)
def test_row_with_every_key_masked_gives_zeros_not_nan(name):
    module = make(name)
    query, keys, mask = inputs(name, lengths=[3, 0, 5])
    out = module(query, keys, keys, mask, precomputed=module.precompute(keys))
    assert torch.isfinite(out.weights).all() and torch.isfinite(out.context).all()
    assert torch.all(out.weights[1] == 0)
    # "none" included: without a precomputed summary its fallback gives zero context too.
    assert torch.all(out.context[1] == 0)


@pytest.mark.parametrize("name", ["local-m", "local-p"])
@pytest.mark.parametrize("window", [1, 2])
def test_local_window_is_honoured(name, window):
    module = make(name, window=window)
    query, keys, mask = inputs(name)
    out = module(query, keys, keys, mask)
    centre = out.extras["position"]  # p_t [B,TQ]
    distance = (torch.arange(TK).view(1, 1, TK) - centre.unsqueeze(-1)).abs()
    weights = out.weights[:, 0]
    assert torch.all(weights[distance > window] == 0.0)
    inside = (distance <= window) & mask[:, None, :]
    assert torch.all(weights[inside] > 0.0)


def test_local_p_position_lies_in_the_source_and_learns():
    module = make("local-p").float().train()
    query, keys, mask = inputs("local-p", dtype=torch.float32)
    out = module(query, keys, keys, mask)
    lengths = mask.sum(-1, keepdim=True).float()
    assert torch.all(out.extras["position"] >= 0) and torch.all(out.extras["position"] <= lengths)
    out.context.sum().backward()
    assert module.position_proj.weight.grad.abs().sum() > 0  # p_t is differentiable
    assert module.position_score.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", SCORED)
def test_precomputed_keys_give_the_same_result(name):
    module = make(name)
    query, keys, mask = inputs(name)
    plain = module(query, keys, keys, mask)
    cached = module(query, keys, keys, mask, precomputed=module.precompute(keys))
    torch.testing.assert_close(cached.weights, plain.weights, rtol=0, atol=0)


@pytest.mark.parametrize("name", SCORED)
def test_many_queries_at_once_equal_one_query_at_a_time(name):
    module = make(name)
    query, keys, mask = inputs(name)
    together = module(query, keys, keys, mask)
    for i in range(TQ):
        alone = module(query[:, i : i + 1], keys, keys, mask, query_pos=torch.full((B,), i))
        torch.testing.assert_close(alone.weights[:, :, 0], together.weights[:, :, i])
        torch.testing.assert_close(alone.context[:, 0], together.context[:, i])


@pytest.mark.parametrize("name", [n for n in SCORED if ROLE_CROSS in ATTENTION.get(n).meta.roles])
def test_cross_attention_role_with_causal_pattern(name):
    # As Transformer cross-attention: query_dim = key_dim = d_model, Tq > 1.
    torch.manual_seed(0)
    module = build_attention(name, 6, 6, role=ROLE_CROSS).double()
    query, keys = (
        torch.randn(2, 5, 6, dtype=torch.float64),
        torch.randn(2, 5, 6, dtype=torch.float64),
    )
    mask = torch.ones(2, 5, dtype=torch.bool)
    weights = module(query, keys, keys, mask, causal=True).weights[:, 0]
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 5, dtype=torch.float64))


def test_none_feeds_the_precomputed_summary_at_every_step():
    module = make("none")
    query, keys, mask = inputs("none")
    summary = torch.randn(B, DK, dtype=torch.float64)
    out = module(query, keys, keys, mask, precomputed=summary)
    torch.testing.assert_close(out.context, summary.unsqueeze(1).expand(B, TQ, DK))
    assert torch.all(out.weights == 0) and not module.spec.exposes_weights
    # Without a summary the last real key stands in.
    fallback = module(query, keys, keys, mask).context
    for b, length in enumerate(LENGTHS):
        torch.testing.assert_close(fallback[b], keys[b, length - 1].expand(TQ, DK))


def test_query_timing_metadata():
    timing = {n: ATTENTION.get(n).meta.query_timing for n in CLASSIC}
    assert timing["bahdanau"] == "previous" and timing["none"] == "previous"
    assert all(timing[n] == "current" for n in CLASSIC if n not in ("bahdanau", "none"))


def test_luong_dot_needs_equal_widths():
    with pytest.raises(AttnlabError, match="luong-general"):
        build_attention("luong-dot", 128, 256, role=ROLE_RNN_CROSS)


def test_window_out_of_range_is_a_user_error():
    with pytest.raises(AttnlabError, match="window"):
        build_attention("local-p", 4, 4, role=ROLE_RNN_CROSS, hparams={"window": 0})


def test_classic_variants_are_registered_with_one_line_formulas():
    assert set(CLASSIC) >= PAPERS  # the enumeration finds every variant of the two papers
    for name in CLASSIC:
        spec = ATTENTION.get(name).meta
        assert ROLE_RNN_CROSS in spec.roles
        assert spec.formula and "\n" not in spec.formula and spec.paper


def test_masked_softmax_by_hand_in_training_and_in_decoding() -> None:
    """exp(s_j) / Σ_k exp(s_k) over the allowed keys; an all-masked row is zeros, in both paths."""
    from attnlab.nn.attention.base import masked_softmax

    scores = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    e = math.exp(1.0) + math.exp(2.0)
    expected = torch.tensor(
        [[math.exp(1.0) / e, math.exp(2.0) / e, 0.0], [0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]],
        dtype=torch.float64,
    )
    leaf = scores.clone().requires_grad_(True)
    trained = masked_softmax(leaf, mask)
    trained.sum().backward()
    assert torch.isfinite(leaf.grad).all()  # no NaN from the all-masked row
    with torch.no_grad():
        decoded = masked_softmax(scores, mask)
    torch.testing.assert_close(trained.detach(), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(decoded, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["bahdanau", "luong-concat"])
def test_additive_scores_gradients_match_finite_differences(name):
    """The in-place tanh_ of the additive energies keeps autograd exact (gradcheck, float64)."""
    module = make(name)
    query, keys, mask = inputs(name)
    query.requires_grad_(True)
    keys = keys.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, k: module(q, k, k, mask).context, (query, keys))


def test_a_new_classic_variant_is_its_score():
    """The family's template forward: a subclass that only defines ``score`` gets masking,
    softmax and the weighted sum (float64 loops as the reference)."""
    from attnlab.nn.attention.classic import ClassicAttention

    class HalfDot(ClassicAttention):
        def score(self, query, keys, precomputed):
            return 0.5 * query @ keys.transpose(1, 2)

    query, keys, mask = inputs("luong-dot")
    out = HalfDot(DK, DK)(query, keys, keys, mask, need_weights=True)
    for b in range(B):
        for i in range(TQ):
            scores = {j: 0.5 * float(query[b, i] @ keys[b, j]) for j in range(TK) if mask[b, j]}
            probs = softmax_over(scores)
            expected = sum(p * keys[b, j] for j, p in probs.items())
            torch.testing.assert_close(out.context[b, i], expected, rtol=1e-12, atol=1e-12)
            for j in range(TK):
                assert float(out.weights[b, 0, i, j]) == pytest.approx(probs.get(j, 0.0), abs=1e-12)
