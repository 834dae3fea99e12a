"""The fused GRU encoder and GRU + Bahdanau decoder (attnlab.nn.rnn_fused) against the
reference path: nn.GRU over packed sequences and the step loop with autograd (float64)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from _tiny import batch

from attnlab.nn.reference import reference_mode, set_reference_mode
from attnlab.nn.rnn import RNNSeq2Seq
from attnlab.nn.rnn_fused import fused_gru_encoder
from attnlab.nn.seq2seq import BOS_ID, PAD_ID

SRC_V, TGT_V = 11, 13


def model(feed: bool = True, bidirectional: bool = True, dropout: float = 0.0, **kw) -> RNNSeq2Seq:
    torch.manual_seed(0)
    return RNNSeq2Seq(
        SRC_V,
        TGT_V,
        emb=6,
        hidden=8,
        bidirectional=bidirectional,
        input_feeding=feed,
        dropout=dropout,
        **kw,
    ).double()


# Sources of lengths 5, 2, 3 and 1 and targets of different lengths.
SOURCES = [[4, 5, 6, 7, 8], [9, 4], [5, 10, 6], [7]]
TARGETS = [[4, 5, 6, 7, 8], [9], [5, 10, 12], [7, 7]]


def loss_and_grads(m: RNNSeq2Seq, fused: bool, seed: int = 0):
    set_reference_mode(m, not fused)
    m.zero_grad()
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    torch.manual_seed(seed)
    out = m(src, src_mask, tgt_in, need_weights=True)
    targets = tgt_in.roll(-1, 1).masked_fill(tgt_in.roll(-1, 1) == BOS_ID, PAD_ID)
    loss = F.cross_entropy(out.logits.reshape(-1, TGT_V), targets.reshape(-1), ignore_index=PAD_ID)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    return out, grads


@pytest.mark.parametrize(
    "feed,bidirectional", list(itertools.product([True, False], [True, False]))
)
def test_fused_training_step_equals_reference_loop(feed, bidirectional):
    m = model(feed, bidirectional).train()
    fast, fast_grads = loss_and_grads(m, fused=True)
    ref, ref_grads = loss_and_grads(m, fused=False)
    torch.testing.assert_close(fast.logits, ref.logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        fast.attentions["cross"], ref.attentions["cross"], rtol=0, atol=1e-12
    )
    assert fast_grads.keys() == ref_grads.keys() == {n for n, _ in m.named_parameters()}
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("feed", [True, False])
def test_fused_dropout_draws_the_reference_masks_on_cpu(feed):
    """Same seed, same numbers: the fused decoder draws h̃'s masks in the reference's order."""
    m = model(feed, dropout=0.3).train()
    fast, fast_grads = loss_and_grads(m, fused=True, seed=7)
    ref, ref_grads = loss_and_grads(m, fused=False, seed=7)
    torch.testing.assert_close(fast.logits, ref.logits, rtol=0, atol=1e-12)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=0, atol=1e-12, msg=name)
    # and dropout does act: another seed gives other logits
    other, _ = loss_and_grads(m, fused=True, seed=8)
    assert not torch.allclose(other.logits, fast.logits)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_fused_encoder_equals_packed_gru(bidirectional):
    torch.manual_seed(1)
    gru = torch.nn.GRU(5, 4, batch_first=True, bidirectional=bidirectional).double()
    emb = torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 2, 4, 1])
    states, final = fused_gru_encoder(emb, lengths, gru)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        emb, lengths, batch_first=True, enforce_sorted=False
    )
    out, ref_final = gru(packed)
    ref_states, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=6)
    torch.testing.assert_close(states, ref_states, rtol=0, atol=1e-12)
    torch.testing.assert_close(final, ref_final, rtol=0, atol=1e-12)
    assert states[1, 2:].abs().sum() == 0  # padding stays zero
    # gradients of an arbitrary function of both outputs
    w_states, w_final = torch.randn_like(states), torch.randn_like(final)
    grads = torch.autograd.grad(
        (states * w_states).sum() + (final * w_final).sum(), [emb, *gru.parameters()]
    )
    ref_grads = torch.autograd.grad(
        (ref_states * w_states).sum() + (ref_final * w_final).sum(), [emb, *gru.parameters()]
    )
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_fused_decoder_zero_weights_for_a_source_without_tokens():
    """A row whose keys are all masked: zero context and weights (masked_softmax's rule)."""
    m = model().eval()
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    src_mask = src_mask.clone()
    src_mask[3] = False
    outs = []
    for fused in (True, False):
        set_reference_mode(m, not fused)
        with torch.no_grad():
            outs.append(m(src, src_mask, tgt_in, need_weights=True))
    torch.testing.assert_close(outs[0].logits, outs[1].logits, rtol=0, atol=1e-12)
    assert outs[0].attentions["cross"][3].abs().sum() == 0
    assert torch.isfinite(outs[0].logits).all()


def test_fused_path_runs_only_where_it_applies(monkeypatch):
    """LSTM, stacked layers, other attentions, scheduled sampling and reference mode keep the
    reference loop; the fused encoder serves any attention of a 1-layer GRU when training."""
    calls, encoder_calls = [], []
    import attnlab.nn.rnn as rnn

    real, real_encoder = rnn.fused_bahdanau_gru, rnn.fused_gru_encoder
    monkeypatch.setattr(rnn, "fused_bahdanau_gru", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(
        rnn, "fused_gru_encoder", lambda *a, **k: encoder_calls.append(1) or real_encoder(*a, **k)
    )
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    cases = [
        (dict(), 1.0, False, 1, 1),
        (dict(cell="lstm"), 1.0, False, 0, 0),
        (dict(layers=2), 1.0, False, 0, 0),
        (dict(attention="luong-general"), 1.0, False, 0, 1),
        (dict(), 0.5, False, 0, 1),
        (dict(), 1.0, True, 0, 0),
    ]
    for kwargs, tf, reference, expected, expected_encoder in cases:
        calls.clear()
        encoder_calls.clear()
        m = model(**kwargs).train()
        with reference_mode(m, reference):
            m(src, src_mask, tgt_in, teacher_forcing=tf)
        assert (len(calls), len(encoder_calls)) == (expected, expected_encoder), kwargs


@pytest.mark.parametrize("feed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lean_decoding_step_equals_the_general_step_bitwise(feed, dtype):
    """Eval-mode ``step`` (the lean path) gives the general step's logits, state and weights
    exactly, over several steps of a padded batch, and the searches built on it agree."""
    from attnlab.config import DecodeConfig
    from attnlab.decode.search import decode_batch

    m = model(feed).to(dtype).eval()
    src, src_mask, _ = batch(SOURCES, TARGETS)
    with torch.no_grad():
        enc = m.encode(src, src_mask)
        prev = torch.full((src.size(0),), BOS_ID)
        states = {}
        for fused in (True, False):
            set_reference_mode(m, not fused)
            state, outs = m.start_state(enc), []
            tokens = prev
            for _ in range(4):
                logits, state, cross = m.step(tokens, state, enc, need_weights=True)
                outs.append((logits, cross, {k: v.clone() for k, v in state.items()}))
                tokens = logits.argmax(dim=1)
            states[fused] = outs
    for (lean_logits, lean_cross, lean_state), (ref_logits, ref_cross, ref_state) in zip(
        states[True], states[False], strict=True
    ):
        assert torch.equal(lean_logits, ref_logits)
        assert torch.equal(lean_cross, ref_cross)
        assert lean_state.keys() == ref_state.keys()
        for key in ref_state:
            assert torch.equal(lean_state[key], ref_state[key]), key
    # Greedy runs the lean step itself: bitwise. Beam runs the grouped step (one encoder row
    # per sentence, RNNSeq2Seq.beam_encoder): the same sums in another order.
    tolerance = 1e-5 if dtype == torch.float32 else 1e-12
    for cfg in (DecodeConfig(), DecodeConfig(beam=3, nbest=2, alpha=0.6, beta=0.2)):
        results = {}
        for fused in (True, False):
            set_reference_mode(m, not fused)
            results[fused] = decode_batch(m, src, src_mask, cfg, need_attention=True)
        exact = cfg.beam == 1
        for lean, ref in zip(results[True], results[False], strict=True):
            assert [h.tokens for h in lean] == [h.tokens for h in ref]
            for a, b in zip(lean, ref, strict=True):
                if exact:
                    assert a.score == b.score and torch.equal(a.attention, b.attention)
                else:
                    assert a.score == pytest.approx(b.score, rel=tolerance, abs=tolerance)
                    assert torch.allclose(a.attention, b.attention, rtol=0, atol=tolerance)


@pytest.mark.parametrize("feed", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grouped_beam_step_equals_the_general_step_on_repeated_rows(feed, dtype):
    """The grouped lean step (K beams reading one encoder row and H W_ctxᵀ) against the
    general step over the encoder output repeated K times (the reference path), with the
    beams' states all different, over several steps: logits, state and weights."""
    m = model(feed).to(dtype).eval()
    src, src_mask, _ = batch(SOURCES, TARGETS)
    beams, sentences = 3, src.size(0)
    tolerance = 2e-6 if dtype == torch.float32 else 1e-12
    with torch.no_grad():
        enc = m.encode(src, src_mask)
        grouped = m.beam_encoder(enc, beams)
        assert grouped.group == beams and grouped.states.shape[0] == sentences
        expand = torch.arange(sentences).repeat_interleave(beams)
        repeated = enc.index_select(expand)
        torch.manual_seed(1)
        start = {k: v.index_select(0, expand) for k, v in m.start_state(enc).items()}
        start["hidden"] = start["hidden"] + 0.3 * torch.randn_like(start["hidden"])
        if feed:
            start["feed"] = torch.randn_like(start["feed"])
        tokens = torch.randint(4, TGT_V, (sentences * beams,))
        outs = {}
        for lean in (True, False):
            set_reference_mode(m, not lean)
            state, steps, prev = dict(start), [], tokens
            for _ in range(4):
                logits, state, cross = m.step(prev, state, grouped if lean else repeated, True)
                steps.append((logits, cross, state))
                prev = logits.argmax(dim=1)
            outs[lean] = steps
        set_reference_mode(m, False)
    for (g_logits, g_cross, g_state), (r_logits, r_cross, r_state) in zip(
        outs[True], outs[False], strict=True
    ):
        assert torch.allclose(g_logits, r_logits, rtol=0, atol=tolerance)
        assert torch.allclose(g_cross, r_cross, rtol=0, atol=tolerance)
        assert g_state.keys() == r_state.keys()
        for key in r_state:
            assert torch.allclose(g_state[key].to(dtype), r_state[key].to(dtype), atol=tolerance)


def test_lean_step_runs_only_in_eval_without_grad(monkeypatch):
    m = model().eval()
    src, src_mask, _ = batch(SOURCES, TARGETS)
    calls = []
    original = m._lean_step
    monkeypatch.setattr(m, "_lean_step", lambda *a: calls.append(1) or original(*a))
    enc = m.encode(src, src_mask)
    prev = torch.full((src.size(0),), BOS_ID)
    m.step(prev, m.start_state(enc), enc)  # grad enabled: the general step
    assert not calls
    with torch.no_grad():
        m.step(prev, m.start_state(enc), enc)
        assert calls == [1]
        with reference_mode(m):
            m.step(prev, m.start_state(enc), enc)  # reference mode: the general step
        assert calls == [1]
        m.train()
        m.step(prev, m.start_state(enc), enc)  # training mode (dropout): the general step
        assert calls == [1]
