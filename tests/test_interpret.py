"""attnlab.interpret: every method against a hand-computed case or an independent reference."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from attnlab.config import ExperimentConfig
from attnlab.experiment import apply_overrides
from attnlab.interpret import alignment as al
from attnlab.interpret.attribution import (
    explain,
    gradient_weighted,
    recording,
    value_norm_weighted,
    value_vectors,
)
from attnlab.interpret.average import average_state_dicts
from attnlab.interpret.compare import difference, js_divergence, shared_scale
from attnlab.interpret.entropy import entropy_sums, row_entropy
from attnlab.interpret.heads import (
    all_ones,
    gated_modules,
    head_gates,
    head_importance,
    mask_gates,
    normalise_per_layer,
    pruning_order,
)
from attnlab.interpret.rollout import (
    aggregate_heads,
    attention_rollout,
    encoder_decoder_relevancy,
)
from attnlab.nn.attention import build_attention
from attnlab.nn.model import build_model

F64 = torch.float64
TRANSFORMER = (
    "model.arch=transformer",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=2",
    "model.dec_layers=2",
    "model.dropout=0.0",
)


def tiny_transformer(seed: int = 0):
    torch.manual_seed(seed)
    cfg = apply_overrides(ExperimentConfig(name="t"), list(TRANSFORMER))
    return build_model(cfg, 12, 12).to(F64).eval()


# -- rollout ------------------------------------------------------------------------------------


def test_rollout_of_identity_plus_uniform_stack():
    s = 3
    eye, uniform = torch.eye(s, dtype=F64), torch.full((s, s), 1.0 / s, dtype=F64)
    # layer 1 = identity (Ã = I), layer 2 = uniform (Ã = ½U + ½I): R = ½U + ½I
    maps = torch.stack([eye, uniform])[:, None]  # [L=2, H=1, S, S]
    assert torch.allclose(attention_rollout(maps), 0.5 * uniform + 0.5 * eye)
    # two uniform layers: (½U + ½I)² = ¾U + ¼I (U² = U)
    twice = torch.stack([uniform, uniform])[:, None]
    assert torch.allclose(attention_rollout(twice), 0.75 * uniform + 0.25 * eye)
    # heads are averaged first: heads (I, U) in one layer -> ½(½I + ½U) + ½I
    heads = torch.stack([eye, uniform])[None]  # [L=1, H=2, S, S]
    assert torch.allclose(attention_rollout(heads), 0.75 * eye + 0.25 * uniform)


def test_rollout_multiplies_later_layers_on_the_left():
    torch.manual_seed(1)
    maps = torch.softmax(torch.randn(3, 2, 4, 4, dtype=F64), dim=-1)
    expected = torch.eye(4, dtype=F64)
    for layer in maps:
        mixed = 0.5 * layer.mean(0) + 0.5 * torch.eye(4, dtype=F64)
        mixed = mixed / mixed.sum(-1, keepdim=True)
        expected = mixed @ expected
    assert torch.allclose(attention_rollout(maps), expected)


def test_encoder_decoder_relevancy_hand_case():
    # Ā_enc = I -> R_ss = 2I, R̄_ss = 2I. Ā_dec = [[1,0],[½,½]] -> R_tt = [[2,0],[½,1.5]]
    # (R_tt − I has unit rows, so R̄_tt = R_tt). Ā_cross = [[¼,¾],[1,0]]:
    # R_ts = R̄_ttᵀ Ā R̄_ss = [[2,½],[0,1.5]] [[¼,¾],[1,0]] 2I = [[2,3],[3,0]]
    enc = torch.eye(2, dtype=F64)[None, None]
    dec = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=F64)[None, None]
    cross = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=F64)[None, None]
    expected = torch.tensor([[2.0, 3.0], [3.0, 0.0]], dtype=F64)
    assert torch.allclose(encoder_decoder_relevancy(enc, dec, cross), expected)
    # an RNN (cross only): R_ts = Ā_cross
    assert torch.allclose(encoder_decoder_relevancy(None, None, cross), cross[0, 0])


def test_aggregate_heads_keeps_the_positive_part_of_grad_times_attention():
    maps = torch.tensor([[[0.5, 0.5]], [[1.0, 0.0]]], dtype=F64)  # [H=2, 1, 2]
    grads = torch.tensor([[[2.0, -2.0]], [[-1.0, 3.0]]], dtype=F64)
    # head 0: (1, -1)⁺ = (1, 0); head 1: (-1, 0)⁺ = (0, 0); mean = (0.5, 0)
    assert aggregate_heads(maps, grads).tolist() == [[0.5, 0.0]]
    assert aggregate_heads(maps).tolist() == [[0.75, 0.25]]


# -- gradient-weighted and norm-weighted ------------------------------------------------------


def _module(seed: int = 0, heads: int = 2, dim: int = 8):
    torch.manual_seed(seed)
    return build_attention("scaled-dot", dim, dim, role="cross", heads=heads).to(F64).eval()


def test_recorded_attention_gradient_matches_the_closed_form():
    attn = _module()
    q, kv = torch.randn(1, 3, 8, dtype=F64), torch.randn(1, 4, 8, dtype=F64)
    c = torch.randn(8, dtype=F64)
    wrapper = torch.nn.ModuleDict({"attention": attn})
    with recording(wrapper, retain=True) as records:
        out = attn(q, kv, kv, torch.ones(1, 4, dtype=torch.bool), need_weights=True)
        (out.context @ c).sum().backward()
    weights = records[("cross", 0)].weights[0]
    # loss = Σ_i c·(W_o ctx_i + b): ∂/∂ctx_i = W_oᵀ c; ∂/∂A_hij = (W_oᵀ c)_h · v_hj
    g = (attn.out_proj.weight.T @ c).view(2, 4)  # [H, dh]
    v = (kv[0] @ attn.v_proj.weight.T + attn.v_proj.bias).view(4, 2, 4).transpose(0, 1)  # [H,Tk,dh]
    closed = torch.einsum("hd,hkd->hk", g, v)[:, None, :].expand(2, 3, 4).detach()
    assert torch.allclose(weights.grad[0], closed)
    expected = torch.zeros(3, 4, dtype=F64)
    for h in range(2):
        for i in range(3):
            for j in range(4):
                expected[i, j] += (
                    max(float(closed[h, i, j] * weights[0, h, i, j].detach()), 0.0) / 2
                )
    assert torch.allclose(gradient_weighted(weights[0].detach(), weights.grad[0]), expected)


def test_value_vectors_rebuild_the_module_output_and_norms_match_a_loop():
    attn = _module(seed=2)
    q, kv = torch.randn(1, 3, 8, dtype=F64), torch.randn(1, 5, 8, dtype=F64)
    with torch.no_grad():
        out = attn(q, kv, kv, torch.ones(1, 5, dtype=torch.bool), need_weights=True)
    with torch.no_grad():
        vectors = value_vectors(
            kv[0], attn.v_proj.weight, attn.v_proj.bias, attn.out_proj.weight, 2
        )
    weights = out.weights[0]  # [H, Tq, Tk]
    rebuilt = torch.einsum("hqk,hkd->qd", weights, vectors) + attn.out_proj.bias
    assert torch.allclose(rebuilt, out.context[0])
    combined, per_head = value_norm_weighted(weights, vectors)
    for i in range(3):
        for j in range(5):
            vec = sum(weights[h, i, j] * vectors[h, j] for h in range(2))
            assert math.isclose(float(combined[i, j]), float(vec.norm()), rel_tol=1e-12)
            assert math.isclose(
                float(per_head[1, i, j]),
                float(weights[1, i, j] * vectors[1, j].norm()),
                rel_tol=1e-12,
            )


def test_explain_rows_equal_one_backward_per_target_token():
    model = tiny_transformer()
    src, tgt = [4, 5, 6, 7], [8, 9, 10]
    maps = explain(model, src, tgt)
    assert set(maps) == {"raw", "rollout", "relevancy", "gradient", "norm"}
    assert all(m.shape == (4, 4) for m in maps.values())
    from attnlab.nn.seq2seq import BOS_ID, EOS_ID

    tgt_in = torch.tensor([[BOS_ID, *tgt]])
    out_ids = [*tgt, EOS_ID]
    for row in range(4):
        with recording(model, retain=True) as records:
            out = model(
                torch.tensor([src]), torch.ones(1, 4, dtype=torch.bool), tgt_in, need_weights=True
            )
            torch.log_softmax(out.logits[0, row], -1)[out_ids[row]].backward()
        weights = records[("cross", 1)].weights[0]
        expected = (weights.grad[0] * weights[0]).clamp_min(0).mean(0)[row]
        assert torch.allclose(maps["gradient"][row], expected.detach())


def test_explain_works_for_an_rnn():
    torch.manual_seed(0)
    cfg = apply_overrides(ExperimentConfig(name="t"), ["model.hidden=16", "model.emb=8"])
    model = build_model(cfg, 12, 12).to(F64).eval()
    maps = explain(model, [4, 5, 6], [7, 8])
    assert maps["raw"].shape == (3, 3)
    # one head, no self-attention: rollout = raw; relevancy = gradient = (∇A ⊙ A)⁺ (not raw)
    assert torch.allclose(maps["rollout"], maps["raw"])
    assert torch.allclose(maps["relevancy"], maps["gradient"])
    assert model.reference_mode is False  # the fast paths are switched back on


# -- heads -------------------------------------------------------------------------------------


def test_masking_a_head_removes_exactly_its_contribution_without_editing_weights():
    model = tiny_transformer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src, mask = torch.tensor([[4, 5, 6, 7]]), torch.ones(1, 4, dtype=torch.bool)
    tgt_in = torch.tensor([[2, 8, 9]])
    # Reference: a copy whose head-0 value rows of cross layer 1 are zeroed (its context is 0).
    edited = copy.deepcopy(model)
    v_proj = edited.decoder_layers[1].cross_attn.attn.v_proj
    with torch.no_grad():
        v_proj.weight[:8].zero_()
        v_proj.bias[:8].zero_()
    with head_gates(model, mask_gates(model, [("cross", 1, 0)])):
        gated = model(src, mask, tgt_in).logits
    assert torch.equal(gated, edited(src, mask, tgt_in).logits)
    # every head of a layer masked: the projection gives its bias and nothing else
    outputs = []
    proj = model.encoder_layers[0].self_attn.attn.out_proj
    handle = proj.register_forward_hook(lambda m, a, o: outputs.append(o))
    masked = [("enc_self", 0, 0), ("enc_self", 0, 1)]
    with head_gates(model, mask_gates(model, masked)):
        model(src, mask, tgt_in)
    handle.remove()
    assert torch.equal(outputs[0], proj.bias.expand_as(outputs[0]))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model(src, mask, tgt_in).logits.ne(gated).any()  # hooks removed


def test_head_importance_matches_finite_differences():
    model = tiny_transformer(seed=3)

    def token_loss_sum(logits, targets):  # float64 throughout (attnlab's casts to float32)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=0,
            reduction="sum",
        )

    class Batch:
        src = torch.tensor([[4, 5, 6], [7, 8, 0]])
        src_mask = src != 0
        tgt_in = torch.tensor([[2, 9, 10], [2, 11, 0]])
        tgt_out = torch.tensor([[9, 10, 3], [11, 3, 0]])
        n_tokens = 5

    raw = head_importance(model, [Batch], token_loss_sum)
    assert set(raw) == set(gated_modules(model)) and len(raw) == 6

    def loss_at(key, head, value):
        gates = all_ones(model)
        gates[key][head] = value
        with torch.no_grad(), head_gates(model, gates):
            logits = model(Batch.src, Batch.src_mask, Batch.tgt_in).logits
        return float(token_loss_sum(logits, Batch.tgt_out)) / 5

    eps = 1e-6
    for key in [("enc_self", 0), ("cross", 1)]:
        for head in range(2):
            fd = (loss_at(key, head, 1 + eps) - loss_at(key, head, 1 - eps)) / (2 * eps)
            assert math.isclose(float(raw[key][head]), abs(fd), rel_tol=1e-5, abs_tol=1e-9)
    normalised = normalise_per_layer(raw)
    for scores in normalised.values():
        assert math.isclose(float(scores.norm()), 1.0, rel_tol=1e-12)
    order = pruning_order(normalised)
    assert len(order) == 12
    values = [float(normalised[(r, layer)][h]) for r, layer, h in order]
    assert values == sorted(values)


# -- alignment and AER --------------------------------------------------------------------------


def test_aer_with_sure_and_possible_links():
    gold = al.parse_pharaoh_line("0-0 1?1")
    assert gold.sure == {(0, 0)} and gold.possible == {(0, 0), (1, 1)}
    predicted = {(0, 0), (1, 1), (2, 1)}
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 1: AER = 1 − 3/4
    assert al.aer([(predicted, gold)]) == pytest.approx(0.25)
    assert al.aer([({(0, 0)}, gold)]) == 0.0
    # tgt-src order: "1-0" = target 1, source 0
    assert al.parse_pharaoh_line("1-0", "tgt-src").sure == {(0, 1)}
    with pytest.raises(al.AttnlabError, match="not a Pharaoh link"):
        al.parse_pharaoh_line("0:1", where="f:1")


def test_argmax_and_shift_att_links():
    # rows: <s> -> y0, y0 -> y1, y1 -> </s>
    m = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    assert al.argmax_links(m[:2]) == {(0, 0), (1, 1)}
    assert al.shift_att_links(m, 2) == {(1, 0), (0, 1)}  # y0 from row 1, y1 from row 2
    table = al.alignment_table(m[:2], ["a", "b"], ["x", "y"])
    assert [(r.target, r.source, r.weight) for r in table] == [
        ("a", "x", pytest.approx(0.9)),
        ("b", "y", pytest.approx(0.8)),
    ]


def test_pharaoh_round_trip(tmp_path):
    golds = [al.parse_pharaoh_line("0-1 2?0 1-1"), al.parse_pharaoh_line("")]
    path = tmp_path / "g.align"
    path.write_text(al.write_pharaoh(golds))
    back = al.read_pharaoh(path)
    assert [(g.sure, g.possible) for g in back] == [(g.sure, g.possible) for g in golds]


# -- compare, entropy, average ----------------------------------------------------------------


def test_js_divergence_hand_values():
    a = torch.tensor([[0.2, 0.8], [0.5, 0.5], [1.0, 0.0]])
    assert torch.equal(js_divergence(a, a), torch.zeros(3, dtype=F64))
    b = torch.tensor([[0.8, 0.2], [1.0, 0.0], [0.0, 1.0]])
    # row 2: p = ½,½ q = 1,0, m = ¾,¼: ½(½log2(⅔) + ½log2 2) + ½ log2(4/3)
    row2 = 0.5 * (0.5 * math.log2(0.5 / 0.75) + 0.5 * math.log2(2.0)) + 0.5 * math.log2(4 / 3)
    out = js_divergence(a, b)
    assert out[1] == pytest.approx(row2) and out[2] == pytest.approx(1.0)
    assert shared_scale(a, b) == 1.0
    assert torch.allclose(difference(a, b)[0], torch.tensor([-0.6, 0.6], dtype=F64))


def test_entropy_hand_values():
    assert row_entropy(torch.tensor([0.5, 0.5])) == pytest.approx(math.log(2))
    assert row_entropy(torch.tensor([1.0, 0.0])) == 0.0
    maps = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]])[None, None, None]  # [1,1,1,3,2]
    total, count = entropy_sums(maps, torch.tensor([[True, True, False]]))
    assert count == 2 and total[0, 0] == pytest.approx(math.log(2))


def test_average_of_two_state_dicts_is_the_elementwise_mean():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor([1])}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor([2])}
    out = average_state_dicts([a, b])
    assert out["w"].tolist() == [2.0, 4.0] and out["n"].tolist() == [2]
    with pytest.raises(al.AttnlabError, match="different tensors"):
        average_state_dicts([a, {"w": a["w"]}])


@pytest.mark.parametrize("prefix", ["causal", "bidirectional"])
def test_decoder_only_methods_are_blocks_of_its_one_stack(prefix):
    """A decoder-only model's maps come from its one self-attention over prompt ⊕ target: raw is
    the chosen layer's target × prompt block, rollout Chefer's eq. 6 over the stack (explicit
    loops here, from the model's own forward maps), norm and gradient the same block."""
    from attnlab.interpret.attribution import explain
    from attnlab.nn.seq2seq import BOS_ID, EOS_ID

    cfg = apply_overrides(
        ExperimentConfig(),
        [
            "model.arch=decoder-only",
            "model.d_model=16",
            "model.heads=2",
            "model.ff=32",
            "model.dec_layers=2",
            "model.dropout=0",
            f"model.prefix={prefix}",
        ],
    )
    torch.manual_seed(0)
    model = build_model(cfg, 12, 12).double().eval()
    src, tgt = [5, 7, 9, 4], [6, 8, 10]
    maps = explain(model, src, tgt, eos=True)
    with torch.no_grad():
        out = model(
            torch.tensor([src]),
            torch.ones(1, 4, dtype=torch.bool),
            torch.tensor([[BOS_ID, *tgt]]),
            need_weights=True,
        )
    full = out.attentions["dec_self"][0]  # [L, H, N, N], N = 4 + 4
    s, n = len(src), full.shape[-1]
    assert torch.allclose(maps["raw"], full[-1].mean(0)[s:, :s], atol=1e-12)
    relevancy = [[float(i == j) for j in range(n)] for i in range(n)]
    for layer in range(full.shape[0]):
        a = full[layer].mean(0).tolist()
        product = [
            [sum(a[i][k] * relevancy[k][j] for k in range(n)) for j in range(n)] for i in range(n)
        ]
        relevancy = [[relevancy[i][j] + product[i][j] for j in range(n)] for i in range(n)]
    expected = torch.tensor(relevancy, dtype=torch.float64)[s:, :s]
    assert torch.allclose(maps["rollout"], expected, atol=1e-10)
    for method in ("relevancy", "gradient", "norm"):
        assert maps[method].shape == (len(tgt) + 1, s)
        assert bool((maps[method] >= 0).all())
    assert EOS_ID not in src
