"""Numerical properties of the attention library: unbiased FAVOR+ features, padded keys that
cannot poison a sentence, the `none` fallback's zero context, ALiBi's reference slopes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.nn.attention import ATTENTION, ROLE_CROSS, ROLE_RNN_CROSS, ROLE_SELF, build_attention
from attnlab.nn.attention.kernel import (
    favor_features,
    kernel_attention,
    kernel_weights,
    orthogonal_features,
)
from attnlab.nn.attention.positional import alibi_slopes


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


def favor_weights(q, k, omega, mask):
    """FAVOR+'s implied weight matrix for q [B,H,Tq,d], k [B,H,Tk,d]."""
    phi_q, phi_k = favor_features(q, omega, None, True), favor_features(k, omega, mask, False)
    return kernel_weights(phi_q, phi_k, mask, causal=False)


# -- 13: FAVOR+ features are unbiased ------------------------------------------------------------


def test_orthogonal_features_have_haar_directions_and_chi_norms():
    dim, blocks = 8, 4000
    omega = orthogonal_features(dim * blocks, dim, torch.Generator().manual_seed(0)).double()
    per_block = omega.view(blocks, dim, dim)
    # Rows of a block are orthogonal (the "orthogonal" in ORF), to float32 precision.
    unit = per_block / per_block.norm(dim=-1, keepdim=True)
    cosines = unit @ unit.transpose(-1, -2)
    torch.testing.assert_close(
        cosines, torch.eye(dim, dtype=torch.float64).expand_as(cosines), atol=1e-5, rtol=0
    )
    # Haar directions: row r's coordinate r is a coordinate of a uniform unit vector, mean 0 and
    # variance 1/dim. QR without the sign fix gives a clearly negative mean here.
    diagonal = torch.diagonal(unit, dim1=-2, dim2=-1)  # [blocks, dim]
    standard_error = math.sqrt(1.0 / dim / diagonal.numel())
    assert abs(float(diagonal.mean())) < 4 * standard_error
    # χ(dim) norms: ‖ω‖² ~ χ²(dim), mean dim and variance 2·dim.
    squared = omega.pow(2).sum(-1)
    assert abs(float(squared.mean()) - dim) < 4 * math.sqrt(2 * dim / squared.numel())
    assert 1.8 * dim < float(squared.var()) < 2.2 * dim
    # Every row is marginally N(0, I): its second moment is the identity.
    second_moment = omega.t() @ omega / omega.shape[0]
    identity = torch.eye(dim, dtype=torch.float64)
    torch.testing.assert_close(second_moment, identity, atol=0.05, rtol=0)


@pytest.mark.parametrize("direction", ["ones", "axis", "random"])
@pytest.mark.parametrize("norm", [0.5, 1.0])
def test_positive_feature_estimator_has_mean_one(direction, norm):
    dim = 16
    x = {
        "ones": torch.ones(dim),
        "axis": torch.eye(dim)[0],
        "random": torch.randn(dim, generator=torch.Generator().manual_seed(3)),
    }[direction].double()
    x = norm * x / x.norm()
    omega = orthogonal_features(dim * 4096, dim, torch.Generator().manual_seed(1)).double()
    estimates = torch.exp(omega @ x - x @ x / 2)  # E[·] = 1 for ω ~ N(0, I)
    # Blocks are independent draws (rows within one are not): the standard error comes from the
    # block means.
    block_means = estimates.view(-1, dim).mean(1)
    standard_error = float(block_means.std()) / math.sqrt(block_means.numel())
    assert abs(float(block_means.mean()) - 1.0) < 4 * standard_error, (
        float(block_means.mean()),
        standard_error,
    )


def _moderate_case(scale: float, length: int = 8, dim: int = 16):
    gen = torch.Generator().manual_seed(0)
    shape = (1, 1, length, dim)
    q, k = (scale * torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(2))
    mask = torch.ones(1, length, dtype=torch.bool)
    exact = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dim), dim=-1)
    return q, k, mask, exact


def test_favor_weights_approximate_softmax_with_many_features():
    q, k, mask, exact = _moderate_case(0.35)  # ‖q‖, ‖k‖ ≈ 1.4
    omega = orthogonal_features(4096, 16, torch.Generator().manual_seed(0)).double()
    error = (favor_weights(q, k, omega, mask) - exact).abs().max()
    assert error < 0.01, float(error)


def test_favor_error_keeps_falling_as_features_grow():
    # An unbiased estimator's error falls like 1/√m; biased features level off (at ≈ 0.004 here
    # before the sign fix), so the largest m must still be far better than the smallest.
    q, k, mask, exact = _moderate_case(0.5)
    errors = []
    for m in (256, 1024, 4096, 16384, 65536):
        trials = []
        for seed in range(4):
            omega = orthogonal_features(m, 16, torch.Generator().manual_seed(seed)).double()
            trials.append((favor_weights(q, k, omega, mask) - exact).abs().mean())
        errors.append(float(torch.stack(trials).mean()))
    assert errors == sorted(errors, reverse=True), errors
    assert errors[-1] < errors[0] / 8, errors
    assert errors[-1] < 0.002, errors


def test_performer_registry_text_promises_unbiased_features():
    spec = ATTENTION.get("performer").meta
    assert "Unbiased" in spec.known_for and "error falls as m grows" in spec.known_for
    assert "orthogonal" in spec.formula


# -- 14: padded keys never change a finite result -------------------------------------------------


PADDING = {
    "zeros": lambda shape, gen: torch.zeros(shape),
    "small": lambda shape, gen: 0.1 * torch.randn(shape, generator=gen),
    "moderate": lambda shape, gen: torch.randn(shape, generator=gen),
    "huge": lambda shape, gen: 1e3 * F.normalize(torch.randn(shape, generator=gen), dim=-1),
}


@pytest.mark.parametrize("padding", sorted(PADDING))
@pytest.mark.parametrize("causal", [False, True])
def test_favor_padded_key_contents_never_change_the_result(padding, causal):
    # Real keys of large norm (≈ 54, as seen in training) put the key stabiliser far below what a
    # small padded key reaches: without masking before exp, φ(padded) = inf and inf·0 = NaN.
    gen = torch.Generator().manual_seed(5)
    dim, real, pad = 16, 5, 3
    q = torch.randn(1, 2, real, dim, generator=gen)
    k = 54.0 * F.normalize(torch.randn(1, 2, real, dim, generator=gen), dim=-1)
    v = torch.randn(1, 2, real, dim, generator=gen)
    omega = orthogonal_features(64, dim, torch.Generator().manual_seed(0))
    mask = torch.ones(1, real, dtype=torch.bool)
    phi_q = favor_features(q, omega, None, True)
    expected = kernel_attention(phi_q, favor_features(k, omega, mask, False), v, mask, causal)
    expected_weights = kernel_weights(phi_q, favor_features(k, omega, mask, False), mask, causal)
    assert torch.isfinite(expected).all() and expected.abs().sum() > 0

    junk_k, junk_v = (PADDING[padding]((1, 2, pad, dim), gen) for _ in range(2))
    k_pad, v_pad = torch.cat([k, junk_k], 2), torch.cat([v, junk_v], 2)
    mask_pad = torch.cat([mask, torch.zeros(1, pad, dtype=torch.bool)], 1)
    # Bottom-right causal alignment: pad the queries too, so the real ones keep their positions.
    q_pad = torch.cat([q, PADDING[padding]((1, 2, pad, dim), gen)], 2) if causal else q
    phi_q_pad = favor_features(q_pad, omega, None, True)
    phi_k_pad = favor_features(k_pad, omega, mask_pad, False)
    got = kernel_attention(phi_q_pad, phi_k_pad, v_pad, mask_pad, causal)[:, :, :real]
    got_weights = kernel_weights(phi_q_pad, phi_k_pad, mask_pad, causal)[:, :, :real]
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_weights[..., :real], expected_weights, atol=1e-6, rtol=1e-5)
    assert torch.all(got_weights[..., real:] == 0)


@pytest.mark.parametrize("name", ["performer", "linear", "linformer"])
@pytest.mark.parametrize("padding", sorted(PADDING))
def test_kernel_variants_ignore_padded_key_contents(name, padding):
    """Through the whole module (projections included): a cross-attention sentence with padded
    keys of any content gives the same context and weights as the sentence without padding."""
    dim, real, pad = 16, 5, 3
    torch.manual_seed(0)
    attn = build_attention(name, dim, dim, role=ROLE_CROSS, heads=2).eval()
    gen = torch.Generator().manual_seed(9)
    query = torch.randn(1, 4, dim, generator=gen)
    # Large real keys (per-head key norms ≈ 54, as in the bug report).
    keys = 35.0 * torch.randn(1, real, dim, generator=gen)
    mask = torch.ones(1, real, dtype=torch.bool)
    expected = attn(query, keys, keys, mask, need_weights=True)
    assert torch.isfinite(expected.context).all() and expected.context.abs().sum() > 0

    junk = PADDING[padding]((1, pad, dim), gen)
    keys_pad = torch.cat([keys, junk], 1)
    mask_pad = torch.cat([mask, torch.zeros(1, pad, dtype=torch.bool)], 1)
    got = attn(query, keys_pad, keys_pad, mask_pad, need_weights=True)
    torch.testing.assert_close(got.context, expected.context, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.weights[..., :real], expected.weights, atol=1e-6, rtol=1e-4)
    assert torch.all(got.weights[..., real:] == 0)


def test_performer_gradients_ignore_padded_keys():
    """Training: the padded sentence's gradients are finite and equal the unpadded ones."""
    dim, real, pad = 16, 5, 3
    torch.manual_seed(0)
    attn = build_attention("performer", dim, dim, role=ROLE_CROSS, heads=2).eval()
    gen = torch.Generator().manual_seed(9)
    query = torch.randn(1, 4, dim, generator=gen)
    keys = 35.0 * torch.randn(1, real, dim, generator=gen)
    keys_pad = torch.cat([keys, torch.zeros(1, pad, dim)], 1)
    mask = torch.ones(1, real, dtype=torch.bool)
    mask_pad = torch.cat([mask, torch.zeros(1, pad, dtype=torch.bool)], 1)
    grads = []
    with torch.enable_grad():
        for k, m in ((keys, mask), (keys_pad, mask_pad)):
            k = k.clone().requires_grad_(True)
            attn.zero_grad()
            attn(query, k, k, m).context.sum().backward()
            grads.append((k.grad[:, :real].clone(), attn.k_proj.weight.grad.clone()))
    for plain, padded in zip(grads[0], grads[1], strict=True):
        assert torch.isfinite(padded).all()
        torch.testing.assert_close(padded, plain, atol=1e-5, rtol=1e-4)


# -- 15: `none` without a summary ----------------------------------------------------------------


def test_none_without_summary_gives_zero_context_for_a_fully_padded_sentence():
    torch.manual_seed(0)
    attn = build_attention("none", 4, 5, role=ROLE_RNN_CROSS).double()
    gen = torch.Generator().manual_seed(2)
    keys = torch.randn(3, 6, 5, generator=gen, dtype=torch.float64)
    query = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]]).bool()
    context = attn(query, keys, keys, mask).context
    torch.testing.assert_close(context[0], keys[0, 2].expand(2, 5))
    assert torch.all(context[1] == 0)  # no real key: zero context, not the padded keys[1, 0]
    torch.testing.assert_close(context[2], keys[2, 5].expand(2, 5))


# -- 16: ALiBi slopes by the authors' reference rule ---------------------------------------------


def _expected_slopes(heads: int) -> list[float]:
    # Written out by hand from get_slopes in ofirpress/attention_with_linear_biases.
    return {
        1: [2.0**-8],
        2: [2.0**-4, 2.0**-8],
        4: [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8],
        # 6: the 4 slopes of 4 heads, then every other slope of 8 heads (2^-1, 2^-3).
        6: [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
        8: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
        # 12: the 8 slopes of 8 heads, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...).
        12: [
            0.5,
            0.25,
            0.125,
            0.0625,
            0.03125,
            0.015625,
            0.0078125,
            0.00390625,
            1.0 / math.sqrt(2.0),
            0.5 / math.sqrt(2.0),
            0.25 / math.sqrt(2.0),
            0.125 / math.sqrt(2.0),
        ],
        16: [2.0 ** (-(h + 1) / 2.0) for h in range(16)],
    }[heads]


@pytest.mark.parametrize("heads", [1, 2, 4, 6, 8, 12, 16])
def test_alibi_slopes_follow_the_reference_rule(heads):
    expected = torch.tensor(_expected_slopes(heads), dtype=torch.float32)
    torch.testing.assert_close(alibi_slopes(heads), expected, atol=0, rtol=1e-6)


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_alibi_slopes_for_powers_of_two_are_the_paper_sequence(heads):
    paper = torch.tensor([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])
    torch.testing.assert_close(alibi_slopes(heads), paper, atol=0, rtol=1e-6)


def test_alibi_module_uses_the_reference_slopes_and_says_so():
    attn = build_attention("alibi", 24, 24, role=ROLE_SELF, heads=6)
    torch.testing.assert_close(attn.slopes, torch.tensor(_expected_slopes(6)), atol=0, rtol=1e-6)
    assert "reference rule" in attn.spec.formula and "\n" not in attn.spec.formula
