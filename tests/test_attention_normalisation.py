"""Engine side of issue 14's "what the contract must learn": every reader of attention weights
respects how the producing variant normalises them (AttentionSpec.normalisation).

- ``attnlab.nn.archs.normalisation_of(config, role)`` is the one lookup, per role;
- AttentionMap values and ``sample`` events carry the kind;
- entropy (attnlab.evaluate) counts a sub-stochastic row's unattended mass as an outcome,
  gives a sparse row's exact zeros nothing and refuses (NaN / left out) signed rows;
- the coverage penalty (decode.beta) is refused for a signed cross-attention at config time;
- the CLI's renderers (attnlab.viz.heatmap) draw each kind as documented.

The variants are test-only (tests/_norm_variants.py), registered per test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from _norm_variants import SIGNED, SPARSE, SUB, SubStochasticTest, registered
from _tiny import TINY_TRANSFORMER, tiny_config
from rich.console import Console

from attnlab.attention_map import AttentionMap
from attnlab.config import DecodeConfig
from attnlab.decode.penalties import COVERAGE_FLOOR, coverage_from_totals
from attnlab.errors import AttnlabError
from attnlab.evaluate import entropy_sums, evaluate_split, row_entropy
from attnlab.events import Event, Sample
from attnlab.experiment import apply_overrides
from attnlab.nn.archs import normalisation_of, normalisations_of, variant_of
from attnlab.nn.attention import ATTENTION, AttentionSpec
from attnlab.viz.diverging import NEGATIVE, POSITIVE, ZERO
from attnlab.viz.export import export_heatmap
from attnlab.viz.heatmap import render_heatmap, render_plain_heatmap

TRANSFORMER = TINY_TRANSFORMER


def _transformer(*overrides: str):
    return tiny_config("norm", *TRANSFORMER, *overrides)


# -- the lookup, per role ------------------------------------------------------------------------


def test_normalisation_of_reads_the_variant_of_each_role() -> None:
    with registered():
        cfg = _transformer(f"model.self_attention={SPARSE}", f"model.cross_attention={SIGNED}")
        # decoder self-attention empty: the encoder's variant (it plays causal-self)
        assert variant_of(cfg, "dec-self") == SPARSE
        assert normalisation_of(cfg, "cross") == "signed"
        assert normalisation_of(cfg, "enc-self") == "sparse"
        assert normalisation_of(cfg, "dec_self") == "sparse"  # the model's key works too
        assert normalisation_of(cfg.model, "cross") == "signed"  # a ModelConfig too
        cfg = apply_overrides(cfg, [f"model.decoder_self_attention={SUB}"])
        assert normalisations_of(cfg) == {
            "enc_self": "sparse",
            "dec_self": "sub-stochastic",
            "cross": "signed",
        }
    # softmax variants, and a role the architecture lacks (an RNN has no self-attention)
    rnn = tiny_config()
    assert variant_of(rnn, "cross") == "bahdanau" and variant_of(rnn, "enc-self") is None
    assert normalisation_of(rnn, "cross") == normalisation_of(rnn, "enc-self") == "softmax"
    assert normalisations_of(rnn) == {"cross": "softmax"}


def test_the_rnn_cross_attention_is_model_attention() -> None:
    spec = AttentionSpec(
        name="test-rnn-sub",
        roles=frozenset({"rnn-cross"}),
        formula="½ softmax",
        complexity="O(S)",
        known_for="tests only",
        normalisation="sub-stochastic",
    )
    ATTENTION.add(spec.name, SubStochasticTest, spec)
    try:
        cfg = tiny_config("rnn", f"model.attention={spec.name}")
        assert variant_of(cfg, "cross") == spec.name
        assert normalisation_of(cfg, "cross") == "sub-stochastic"
    finally:
        ATTENTION.remove(spec.name)


# -- the value that carries it ---------------------------------------------------------------------


def test_attention_maps_keep_their_normalisation_through_reductions() -> None:
    weights = torch.tensor([[[[0.2, 0.3], [0.5, 0.5]], [[0.0, 0.4], [0.1, 0.1]]]])  # [1,2,2,2]
    m = AttentionMap(weights, ["a", "b"], ["x", "y"], "cross", normalisation="sub-stochastic")
    for reduced in (m.select(None, None), m.last_layer_mean(), m.head(1), m.crop(1, 1)):
        assert reduced.normalisation == "sub-stochastic"
    # head mean: [[0.1, 0.35], [0.3, 0.3]] -> unattended 1 − row sum
    unattended = m.last_layer_mean().unattended
    assert torch.allclose(unattended, torch.tensor([[[0.55, 0.4]]], dtype=unattended.dtype))
    assert m.exact_zeros() == 1
    assert AttentionMap(weights, ["a", "b"], ["x", "y"]).unattended is None  # softmax: none
    logged = AttentionMap.from_json([[0.0, 1.0]], ["a"], ["x", "y"], "sparse")
    assert logged.normalisation == "sparse" and logged.exact_zeros() == 1
    assert AttentionMap.from_json([[0.5, 0.5]], ["a"], ["x", "y"]).normalisation == "softmax"
    with pytest.raises(ValueError, match="normalisation 'doubly'"):
        AttentionMap(weights, ["a", "b"], ["x", "y"], normalisation="doubly")


def test_sample_events_carry_the_kind_and_older_lines_read_as_softmax() -> None:
    sample = {"index": 0, "src": ["a"], "ref": ["a"], "hyp": ["a"], "attention": [[0.5]]}
    line = Sample.build(3, **sample, normalisation="sub-stochastic").to_json()
    assert list(line)[-2:] == ["attention", "normalisation"]
    assert line["normalisation"] == "sub-stochastic"
    back = Event.from_json({"type": "sample", "step": 3, **sample, "normalisation": "signed"})
    assert back.normalisation == "signed"
    older = Sample.build(3, **sample)
    assert older.normalisation is None and "normalisation" not in older.to_json()
    mistyped = Event.from_json({"type": "sample", "step": 3, **sample, "normalisation": 5})
    assert mistyped.normalisation is None


def test_evaluate_tags_samples_and_leaves_signed_roles_out_of_the_entropy() -> None:
    from attnlab.data.dataset import load_dataset
    from attnlab.nn.model import build_model

    with registered():
        cfg = _transformer(
            f"model.self_attention={SPARSE}",
            f"model.decoder_self_attention={SUB}",
            f"model.cross_attention={SIGNED}",
        )
        torch.manual_seed(0)
        ds = load_dataset(cfg.data)
        model = build_model(cfg, len(ds.src_vocab), len(ds.tgt_vocab))
        kinds = normalisations_of(cfg)
        result = evaluate_split(
            model, ds, "dev", DecodeConfig(), max_sentences=4, samples=2, normalisations=kinds
        )
    assert result["attention_normalisation"] == {
        "enc_self": "sparse",
        "dec_self": "sub-stochastic",
        "cross": "signed",
    }
    entropy = result["attention_entropy"]
    assert "cross" not in entropy  # signed: no entropy
    assert entropy["enc_self"] == [[0.0, 0.0]]  # one-hot rows: exact zeros add nothing
    # ½·softmax rows with ∅ as an outcome: ½ H(p) + ln 2 >= ln 2 for every row
    assert all(h >= math.log(2) - 1e-4 for h in entropy["dec_self"][0])
    samples = result["samples"]
    assert [s["normalisation"] for s in samples] == ["signed", "signed"]
    assert Sample.build(5, **samples[0]).to_json()["normalisation"] == "signed"
    assert any(w < 0 for s in samples for row in s["attention"] for w in row)


def test_softmax_runs_write_what_they_wrote_before() -> None:
    from attnlab.evaluate import attention_statistics

    kinds = {"cross": "softmax", "enc_self": "softmax"}
    assert attention_statistics(None, None, [], "cpu", False, kinds) == {"attention_entropy": {}}


# -- entropy per kind (float64 references by hand) -------------------------------------------------


def _h(*p: float) -> float:
    return -sum(x * math.log(x) for x in p if x > 0)


def test_row_entropy_per_kind_against_hand_values() -> None:
    sub = torch.tensor([[0.2, 0.3, 0.0], [0.25, 0.25, 0.5]], dtype=torch.float64)
    got = row_entropy(sub, "sub-stochastic")
    assert got.tolist() == pytest.approx([_h(0.2, 0.3, 0.5), _h(0.25, 0.25, 0.5)], abs=1e-12)
    # a full row is a distribution: no unattended outcome, the softmax value
    assert float(got[1]) == pytest.approx(float(row_entropy(sub[1:], "softmax")[0]), abs=1e-12)
    sparse = torch.tensor([[0.0, 0.25, 0.75, 0.0]], dtype=torch.float64)
    got = row_entropy(sparse, "sparse")
    assert torch.isfinite(got).all() and float(got[0]) == pytest.approx(_h(0.25, 0.75), abs=1e-12)
    signed = torch.tensor([[0.7, -0.2, 0.5]], dtype=torch.float64)
    assert torch.isnan(row_entropy(signed, "signed")).all()
    # unnormalised (sigmoid): the row scaled to sum 1; a zero row has entropy 0, not NaN
    loose = torch.tensor([[0.9, 0.9, 0.6], [0.0, 0.0, 0.0]], dtype=torch.float64)
    got = row_entropy(loose, "unnormalised")
    assert got.tolist() == pytest.approx([_h(0.375, 0.375, 0.25), 0.0], abs=1e-12)
    from attnlab.tui.diagnostics import row_entropy as lab_row_entropy

    assert lab_row_entropy(loose.numpy(), "unnormalised").tolist() == pytest.approx(got.tolist())


def test_entropy_sums_count_the_unattended_mass_of_real_rows_only() -> None:
    maps = torch.tensor([[0.5, 0.0], [0.1, 0.1], [0.0, 0.0]], dtype=torch.float64)[None, None, None]
    query_mask = torch.tensor([[True, True, False]])
    total, count = entropy_sums(maps, query_mask, "sub-stochastic")
    assert count == 2
    assert float(total[0, 0]) == pytest.approx(_h(0.5, 0.5) + _h(0.1, 0.1, 0.8), abs=1e-12)


# -- the coverage penalty --------------------------------------------------------------------------


def test_coverage_penalty_is_refused_for_signed_cross_attention() -> None:
    with registered():
        cfg = _transformer(f"model.cross_attention={SIGNED}")
        with pytest.raises(AttnlabError) as err:
            apply_overrides(cfg, ["decode.beta=0.2"])
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith("decode.beta=0.2: the coverage penalty needs non-negative")
        assert f"{SIGNED}'s weights are signed" in message
        # sparse and sub-stochastic cross-attention: the floor takes their zeros
        for name in (SPARSE, SUB):
            ok = apply_overrides(_transformer(f"model.cross_attention={name}"), ["decode.beta=0.2"])
            assert ok.decode.beta == 0.2
        # a signed self-attention does not matter to the coverage of the cross-attention
        apply_overrides(_transformer(f"model.self_attention={SIGNED}"), ["decode.beta=0.2"])


def test_coverage_of_exact_zeros_and_sub_stochastic_totals_is_finite() -> None:
    totals = torch.tensor([[0.0, 0.5, 1.7]])
    got = coverage_from_totals(totals, torch.tensor([[True, True, True]]), 0.2)
    assert float(got[0]) == pytest.approx(0.2 * (math.log(COVERAGE_FLOOR) + math.log(0.5)))


# -- the CLI's renderers ---------------------------------------------------------------------------

M = [[0.5, -0.25, 0.0], [0.1, 0.2, 0.3]]


def test_plain_heatmaps_per_kind() -> None:
    rows, cols = ["a", "b"], ["x", "y", "z"]
    assert render_plain_heatmap(M, rows, cols, normalisation="sub-stochastic").splitlines() == [
        "    x   y   z   ∅",
        "a  50 -25   0  75",
        "b  10  20  30  40",
        "(weights x 100; rows: queries, columns: keys; rows sum to <= 100; "
        "∅ = unattended mass (1 − row sum))",
    ]
    sparse = render_plain_heatmap([[0.0, 0.001, 0.999]], ["a"], cols, normalisation="sparse")
    assert sparse.splitlines()[1] == "a   ·   0 100"  # exact 0 vs a weight that rounds to 0
    assert sparse.endswith("· = exactly 0 (1 of 3 weights))")
    signed = render_plain_heatmap(M, rows, cols, normalisation="signed")
    assert signed.splitlines()[-1] == (
        "(signed weights x 100; rows: queries, columns: keys; rows may be negative)"
    )
    assert render_plain_heatmap(M, rows, cols).splitlines()[-1] == (
        "(weights x 100; rows: queries, columns: keys; each row sums to ~100)"
    )


def _lines(renderable) -> list[str]:
    console = Console(width=80, record=True, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.export_text().splitlines()


def _backgrounds(heatmap, row: int) -> list[tuple[int, int, int] | None]:
    lines = heatmap.lines(80)
    first = next(i for i, line in enumerate(lines) if line.plain.startswith("a "))
    out = []
    for span in lines[first + row].spans[1:]:  # after the row label
        bg = getattr(span.style, "bgcolor", None)
        out.append(tuple(bg.triplet) if bg is not None else None)
    return out


def test_signed_heatmap_is_diverging_and_centred_on_zero() -> None:
    heatmap = render_heatmap(M, ["a", "b"], ["x", "y", "z"], normalisation="signed")
    assert heatmap.vmax == 0.5  # ±max |w|
    half_blue = tuple(round(z + (n - z) * 0.5) for z, n in zip(ZERO, NEGATIVE, strict=True))
    assert _backgrounds(heatmap, 0) == [POSITIVE, half_blue, ZERO]
    legend = _lines(heatmap)[-1]
    assert legend.startswith("−0.50 ") and "+0.50" in legend
    assert "signed weights: blue < 0 < red, centred on 0" in legend


def test_sub_stochastic_heatmap_has_the_unattended_column() -> None:
    heatmap = render_heatmap(M, ["a", "b"], ["x", "y", "z"], normalisation="sub-stochastic")
    assert heatmap.col_labels == ["x", "y", "z", "∅"]
    assert [row[-1] for row in heatmap.rows] == pytest.approx([0.75, 0.4])
    text = _lines(heatmap)
    assert "∅" in text[0] and "∅ = unattended mass (1 − row sum)" in text[-1]


def test_sparse_heatmap_marks_exact_zeros_without_colour() -> None:
    matrix = [[0.0, 0.4, 0.6], [1.0, 0.0, 0.0]]
    heatmap = render_heatmap(matrix, ["a", "b"], ["x", "y", "z"], normalisation="sparse")
    assert _backgrounds(heatmap, 1)[1:] == [None, None]  # the two zeros: no colour
    text = _lines(heatmap)
    assert text[2] == "b    · ·"  # 2-character cells: the colour of "1.0", then two dots
    assert "· = exactly 0 (3 of 6 weights)" in text[-1]
    # softmax: the same zeros get the lowest colour, as always
    assert None not in _backgrounds(render_heatmap(matrix, ["a", "b"], ["x", "y", "z"]), 1)


def test_export_draws_the_kind(tmp_path: Path) -> None:
    svg, _html = export_heatmap(M, ["a", "b"], ["x", "y", "z"], "t", tmp_path / "m", 80, "signed")
    assert "signed" in svg.read_text(encoding="utf-8")
