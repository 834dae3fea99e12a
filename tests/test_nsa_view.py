"""Issue 14: native sparse attention's selected blocks, from the engine to every view.

The engine's ``ModelOutput.selected`` is checked against nsa's own ``selected_blocks`` extra,
mapped to token columns by explicit loops (block b = keys [b·l, min((b+1)·l, Tk)), real keys
only, causal rows up to the query); reductions of ``AttentionMap`` against hand-built masks;
the renderers and the lab's heatmap by where the ``▪`` marks land.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import TINY_TRANSFORMER
from _tui_support import lab_config, ready, workers_idle
from click.testing import CliRunner
from test_transformer import decode_with_cache, make_model, random_batch
from test_tui_inspect_engine import saved_run
from textual.widgets import Static

from attnlab.attention_map import SELECTED_MARK, SELECTED_NOTE, AttentionMap
from attnlab.cli import cli
from attnlab.nn.attention import build_attention
from attnlab.nn.attention.base import ROLE_SELF, SELECTED_CELLS
from attnlab.nn.attention.nsa import NativeSparseAttention
from attnlab.tui.app import make_app
from attnlab.tui.inspect_engine import InspectRequest, analyse, select_map, select_selected
from attnlab.tui.views.inspect import InspectReady, InspectView
from attnlab.tui.widgets.heatmap import AttentionHeatmap
from attnlab.viz.export import export_heatmap
from attnlab.viz.heatmap import render_heatmap, render_plain_heatmap

NSA = {"block": 2, "top_blocks": 2, "window": 1}  # 2 of 4 blocks per query at 7 keys


# -- engine --------------------------------------------------------------------------------------


def cells_by_hand(blocks: torch.Tensor, size: int, key_mask: torch.Tensor, causal: bool):
    """[B,H,Tq,nb] selected blocks -> [B,H,Tq,Tk] cells, one loop per cell."""
    bsz, heads, tq, _ = blocks.shape
    tk = key_mask.shape[1]
    cells = torch.zeros(bsz, heads, tq, tk, dtype=torch.bool)
    for b in range(bsz):
        for h in range(heads):
            for i in range(tq):
                p = tk - tq + i  # the query's absolute position
                for j in range(tk):
                    visible = bool(key_mask[b, j]) and (not causal or j <= p)
                    cells[b, h, i, j] = bool(blocks[b, h, i, j // size]) and visible
    return cells


def spy_on_nsa(model, monkeypatch) -> dict[int, list]:
    """id(attention module) -> [(selected_blocks, key_mask, causal)] of each call."""
    calls: dict[int, list] = {}
    for module in model.modules():
        if isinstance(module, NativeSparseAttention):
            original = module.forward_layout

            def spy(*args, _original=original, _key=id(module)):
                out = _original(*args)
                calls.setdefault(_key, []).append((out.extras["selected_blocks"], *args[5:7]))
                return out

            monkeypatch.setattr(module, "forward_layout", spy)
    return calls


def nsa_model():
    return make_model(
        self_attention="nsa", heads=2, d_model=16, ff=32, enc_layers=2, dec_layers=2,
        attn_params=dict(NSA),
    )  # fmt: skip


def test_selected_cells_are_nsa_blocks_mapped_to_token_columns(monkeypatch) -> None:
    model = nsa_model()
    calls = spy_on_nsa(model, monkeypatch)
    src, src_mask, tgt_in = random_batch(b=3, s=7, t=6)  # row 1 has 3 padded keys
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
    assert set(out.selected) == {"enc_self", "dec_self"}  # cross-attention is scaled-dot
    layers = [("enc_self", layer.self_attn.attn) for layer in model.encoder_layers]
    layers += [("dec_self", layer.self_attn.attn) for layer in model.decoder_layers]
    seen_other_block = False
    for n, (key, attn) in enumerate(layers):
        index = n if key == "enc_self" else n - len(model.encoder_layers)
        ((blocks, key_mask, causal),) = calls[id(attn)]
        expected = cells_by_hand(blocks, NSA["block"], key_mask, causal)
        got = out.selected[key][:, index]
        assert got.dtype == torch.bool and got.shape == out.attentions[key][:, index].shape
        assert torch.equal(got, expected)
        assert causal == (key == "dec_self")
        # a real choice: some query reads a block other than its own
        tq = got.shape[2]
        own = torch.arange(got.shape[-1])[None, :] // 2 == torch.arange(tq)[:, None] // 2
        seen_other_block |= bool((got & ~own).any())
        # no weight leaves the selection's support: what is not selected, the branch skipped
        assert not got[~key_mask[:, None, None, :].expand_as(got)].any()
    assert seen_other_block


def test_no_mask_without_weights_or_for_other_variants(monkeypatch) -> None:
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        nsa = nsa_model()
        assert nsa(src, src_mask, tgt_in, need_weights=False).selected == {}
        dense = make_model()  # scaled-dot everywhere
        out = dense(src, src_mask, tgt_in, need_weights=True)
        assert set(out.attentions) == {"enc_self", "dec_self", "cross"} and out.selected == {}
    attn = build_attention("nsa", 16, 16, role=ROLE_SELF, heads=2, hparams=dict(NSA))
    x, mask = torch.randn(1, 5, 16), torch.ones(1, 5, dtype=torch.bool)
    with torch.no_grad():
        assert SELECTED_CELLS not in attn(x, x, x, mask, need_weights=False).extras
        assert SELECTED_CELLS in attn(x, x, x, mask, need_weights=True).extras


@pytest.mark.parametrize("need_weights", [False, True])
def test_cached_decoding_of_nsa_still_equals_the_full_pass(need_weights: bool) -> None:
    model = nsa_model()
    src, src_mask, tgt_in = random_batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt_in).logits
        cached, cross = decode_with_cache(model, src, src_mask, tgt_in, need_weights)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)
    assert all((w is not None) == need_weights for w in cross)


# -- AttentionMap ---------------------------------------------------------------------------------


def _hand_map() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    weights = torch.rand(2, 3, 4, 5, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 3, 4, 5, generator=gen) < 0.3
    return weights, mask


def test_reductions_keep_the_mask_by_the_union_over_heads() -> None:
    weights, mask = _hand_map()
    m = AttentionMap(weights, list("abcd"), list("vwxyz"), "enc-self", selected=mask)
    assert torch.equal(m.layer(0).head(2).selected_matrix, mask[0, 2])
    assert torch.equal(m.head(1).selected[:, 0], mask[:, 1])
    union = torch.zeros(4, 5, dtype=torch.bool)
    for h in range(3):  # a cell is marked when any averaged head marked it
        union |= mask[1, h]
    assert torch.equal(m.select(None, None).selected_matrix, union)
    assert torch.equal(m.last_layer_mean().selected_matrix, union)
    assert torch.equal(m.mean_heads().selected[0, 0], mask[0].any(0))
    cropped = m.crop(3, 2)
    assert cropped.selected.shape == cropped.weights.shape == (2, 3, 3, 2)
    assert torch.equal(cropped.selected, mask[:, :, :3, :2])
    plain = AttentionMap(weights, list("abcd"), list("vwxyz"), "enc-self")
    assert plain.select(0, None).selected_matrix is None and plain.crop(2, 2).selected is None
    with pytest.raises(ValueError, match="selected mask"):
        AttentionMap(weights, list("abcd"), list("vwxyz"), selected=mask[:, :, :3])


# -- renderers -------------------------------------------------------------------------------------

M = [[0.5, 0.25, 0.25], [0.0, 0.75, 0.25]]
MASK = [[True, False, True], [False, True, False]]


def _marks_plain(text: str, n_rows: int) -> list[list[bool]]:
    lines = text.splitlines()[1 : 1 + n_rows]  # after the header
    return [[cell.endswith(SELECTED_MARK) for cell in re.findall(r"\d+.", ln[1:])] for ln in lines]


def test_plain_renderer_marks_exactly_the_selected_cells() -> None:
    text = render_plain_heatmap(M, ["a", "b"], ["x", "y", "z"], selected=MASK)
    assert _marks_plain(text, 2) == MASK
    assert SELECTED_NOTE in text.splitlines()[-1]
    sub = render_plain_heatmap(M, ["a", "b"], ["x", "y", "z"], None, "sub-stochastic", MASK)
    assert [row[:3] for row in _marks_plain(sub, 2)] == MASK  # ∅ is never marked
    assert SELECTED_MARK not in "".join(sub.splitlines()[1:3]).split()[-1]
    unmarked = render_plain_heatmap(M, ["a", "b"], ["x", "y", "z"])
    assert SELECTED_MARK not in unmarked and "selected" not in unmarked


def _rich_cells(heatmap, width: int = 60) -> list[list[str]]:
    """Each matrix cell's text in the rich renderer's lines."""
    cell, shown = heatmap.layout(width)
    label = heatmap._label_width() + 1
    body = heatmap.lines(width)[1 + len(heatmap._header_plain(cell, shown, width)[0]) :]
    return [
        [line.plain[label + j * cell : label + (j + 1) * cell] for j in range(shown)]
        for line in body[: heatmap.n_rows]
    ]


def test_rich_renderer_marks_exactly_the_selected_cells(tmp_path: Path) -> None:
    drawn = render_heatmap(M, ["a", "b"], ["x", "y", "z"], title="t", selected=MASK)
    marks = [[SELECTED_MARK in c for c in row] for row in _rich_cells(drawn)]
    assert marks == MASK
    assert [line.plain for line in drawn.lines(60)][-1] == SELECTED_NOTE  # under the scale
    sub = render_heatmap(M, ["a", "b"], ["x", "y", "z"], "t", None, False, True, None,
                         "sub-stochastic", torch.tensor(MASK))  # fmt: skip
    marks = [[SELECTED_MARK in c for c in row] for row in _rich_cells(sub)]
    assert marks == [[*row, False] for row in MASK]  # values shown, then the mark; ∅ never
    plain = render_heatmap(M, ["a", "b"], ["x", "y", "z"], title="t")
    assert all(c.strip() == "" for row in _rich_cells(plain) for c in row)
    svg, html = export_heatmap(M, ["a", "b"], ["x", "y", "z"], "t", tmp_path / "m", 80,
                               selected=MASK)  # fmt: skip
    assert html.read_text().count(SELECTED_MARK) == 3 + 1  # three cells and the legend


# -- the CLI and the lab ---------------------------------------------------------------------------

OVERRIDES = [
    *TINY_TRANSFORMER,
    "data.max_len=6",
    "model.self_attention=nsa",
    *(f"model.nsa.{k}={v}" for k, v in NSA.items()),
]


def test_translate_prints_the_marks_of_an_nsa_encoder_map(tmp_path: Path) -> None:
    run = saved_run(tmp_path, OVERRIDES)
    args = ["translate", str(run), "3 1 4 1 5", "--show-attention", "--role", "enc-self"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert SELECTED_MARK in result.output and SELECTED_NOTE in result.output
    cross = CliRunner().invoke(cli, args[:-2], catch_exceptions=False)
    assert SELECTED_MARK not in cross.output  # cross-attention is scaled-dot: no marks


def _text(app, wid: str) -> str:
    return str(app.query_one(wid, Static).render())


async def test_inspect_marks_the_selected_blocks_of_an_nsa_encoder_map(tmp_path: Path) -> None:
    result = analyse(InspectRequest(saved_run(tmp_path, OVERRIDES), "best", "dev", 1))
    hyp = result.hypotheses[0]
    assert set(hyp.selected) == {"enc_self", "dec_self"}
    assert hyp.selected["enc_self"].shape == hyp.maps["enc_self"].shape
    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(110, 34)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        view = app.query_one(InspectView)
        await workers_idle(pilot)  # Inspect's own opening attempt
        view.post_message(InspectReady(result))
        await pilot.pause()
        view.query_one("#insp-kind").value = "enc_self"
        await pilot.pause()
        heatmap = app.query_one(AttentionHeatmap)
        expected = select_selected(hyp.selected["enc_self"], 0, None)  # layer 0, head average
        rows, cols = select_map(hyp.maps["enc_self"], 0, None).shape
        assert heatmap.shape == (rows, cols + 1)  # sub-stochastic: the ∅ column, never marked
        assert np.array_equal(heatmap.selected[:, :cols], expected)
        assert not heatmap.selected[:, cols].any() and 0 < expected.sum() < expected.size
        heatmap.cursor = (rows - 1, cols)
        await pilot.pause()
        for row in range(rows - 1):  # the cursor's row aside: a mark exactly where selected
            texts = [s.text.strip() for s in heatmap._row_strip(row, heatmap.rich_style)]
            assert [t == SELECTED_MARK for t in texts] == [*expected[row].tolist(), False]
        assert _text(app, "#insp-scale").endswith(f"1  {SELECTED_MARK} selected")
        assert f"{SELECTED_NOTE}: {int(expected.sum())} of {expected.size} cells" in _text(
            app, "#insp-diag"
        )
        marked = np.argwhere(expected)[0]
        heatmap.cursor = (int(marked[0]), int(marked[1]))
        await pilot.pause()
        assert _text(app, "#insp-cell").endswith(f"col {marked[1]})  {SELECTED_MARK} selected")
        heatmap.cursor = tuple(int(i) for i in np.argwhere(~expected)[0])
        await pilot.pause()
        assert SELECTED_MARK not in _text(app, "#insp-cell")
        view.query_one("#insp-kind").value = "cross"  # scaled-dot: no marks, no legend
        await pilot.pause()
        assert heatmap.selected is None
        assert SELECTED_MARK not in _text(app, "#insp-scale")
