"""The RNN encoder-decoder: batching, step-by-step decoding, scheduled sampling, and every
rnn-cross variant."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from _tiny import batch

from attnlab.config import ExperimentConfig, ModelConfig
from attnlab.errors import AttnlabError
from attnlab.nn.attention import (
    ATTENTION,
    NORM_SOFTMAX,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    ROLE_RNN_CROSS,
)
from attnlab.nn.model import ARCHITECTURES, build_model
from attnlab.nn.rnn import RNNSeq2Seq, check_rnn_config
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID, select_state

# Every variant registered for the RNN decoder, whoever wrote it: a new one is tested by existing.
RNN_VARIANTS = [e.name for e in ATTENTION.entries() if ROLE_RNN_CROSS in e.meta.roles]
SHAPES = list(itertools.product(["gru", "lstm"], [True, False], [True, False]))  # cell, bi, feed
SRC_V, TGT_V = 11, 13
# (attention, bidirectional) the RNN cannot build, and the fix its one-line error names:
# luong-dot scores h·s, so encoder states must be as wide as the decoder's (a bi-encoder doubles
# them). test_unbuildable_combinations_are_exactly_these checks the validation agrees.
UNBUILDABLE = {("luong-dot", True): "bidirectional=false"}


def widest(attention: str) -> bool:
    """A bidirectional encoder where ``attention`` can use one."""
    return (attention, True) not in UNBUILDABLE


# Every registered variant in every shape it can be built in.
CASES = [
    pytest.param(
        a, cell, bi, feed, id=f"{a}-{cell}-{'bi' if bi else 'uni'}-{'feed' if feed else 'nofeed'}"
    )
    for a in RNN_VARIANTS
    for cell, bi, feed in SHAPES
    if (a, bi) not in UNBUILDABLE
]


def tiny(
    attention: str,
    cell: str = "gru",
    bidirectional: bool = True,
    feed: bool = True,
    layers: int = 1,
    seed: int = 0,
) -> RNNSeq2Seq:
    torch.manual_seed(seed)
    model = RNNSeq2Seq(
        SRC_V,
        TGT_V,
        cell=cell,
        attention=attention,
        emb=6,
        hidden=8,
        layers=layers,
        bidirectional=bidirectional,
        input_feeding=feed,
        dropout=0.1,
        heads=2,
        attn_params={"window": 1},  # local-m/p: a narrow window makes p_t matter
    )
    return model.eval()


# Three sentences of different source and target lengths.
SOURCES = [[4, 5, 6, 7, 8], [9, 4], [5, 10, 6]]
TARGETS = [[4, 5, 6, 7, 8], [9], [5, 10, 12]]


def src_lengths(src_mask):
    return src_mask.sum(-1).tolist()


def tgt_lengths(tgt_in):
    return (tgt_in != PAD_ID).sum(-1).tolist()


@pytest.mark.parametrize("attention,cell,bidirectional,feed", CASES)
def test_sentence_alone_equals_sentence_in_padded_batch(attention, cell, bidirectional, feed):
    model = tiny(attention, cell, bidirectional, feed)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    with torch.no_grad():
        together = model(src, src_mask, tgt_in, need_weights=True)
        for b, (s, t) in enumerate(zip(src_lengths(src_mask), tgt_lengths(tgt_in), strict=True)):
            alone = model(
                src[b : b + 1, :s],
                src_mask[b : b + 1, :s],
                tgt_in[b : b + 1, :t],
                need_weights=True,
            )
            torch.testing.assert_close(alone.logits[0], together.logits[b, :t], rtol=0, atol=1e-5)
            torch.testing.assert_close(
                alone.attentions["cross"][0],
                together.attentions["cross"][b, ..., :t, :s],
                rtol=0,
                atol=1e-5,
            )


@pytest.mark.parametrize("attention,cell,bidirectional,feed", CASES)
def test_step_by_step_reproduces_forward(attention, cell, bidirectional, feed):
    model = tiny(attention, cell, bidirectional, feed)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    with torch.no_grad():
        full = model(src, src_mask, tgt_in, teacher_forcing=1.0, need_weights=True)
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        for t in range(tgt_in.shape[1]):
            logits, state, cross = model.step(tgt_in[:, t], state, enc, need_weights=True)
            torch.testing.assert_close(logits, full.logits[:, t], rtol=0, atol=1e-5)
            torch.testing.assert_close(
                cross, full.attentions["cross"][:, :, :, t], rtol=0, atol=1e-5
            )


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("attention", ["bahdanau", "luong-general"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_stacked_layers_step_equals_forward(attention, cell, layers):
    model = tiny(attention, cell, layers=layers, feed=False)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    with torch.no_grad():
        full = model(src, src_mask, tgt_in).logits
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        assert state["hidden"].shape == (3, layers, 8)
        for t in range(tgt_in.shape[1]):
            logits, state, _ = model.step(tgt_in[:, t], state, enc)
            torch.testing.assert_close(logits, full[:, t], rtol=0, atol=1e-5)


def greedy_feedback(model, src, src_mask, steps):
    """Reference for teacher_forcing=0: feed back the arg-max, one step at a time."""
    enc = model.encode(src, src_mask)
    state = model.start_state(enc)
    tokens = torch.full((src.shape[0],), BOS_ID)
    rows = []
    for _ in range(steps):
        logits, state, _ = model.step(tokens, state, enc)
        rows.append(logits)
        tokens = logits.argmax(-1)
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("feed", [True, False])
@pytest.mark.parametrize("attention", RNN_VARIANTS)
def test_teacher_forcing_zero_feeds_back_the_argmax(attention, feed):
    model = tiny(attention, "gru", bidirectional=widest(attention), feed=feed)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    with torch.no_grad():
        free_running = model(src, src_mask, tgt_in, teacher_forcing=0.0).logits
        want = greedy_feedback(model, src, src_mask, tgt_in.shape[1])
    torch.testing.assert_close(free_running, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attention", ["bahdanau", "luong-general", "local-p"])
def test_scheduled_sampling_decides_per_token_from_one_draw_per_step(attention):
    model = tiny(attention, "lstm", feed=False)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    ratio = 0.5
    with torch.no_grad():
        torch.manual_seed(123)
        mixed = model(src, src_mask, tgt_in, teacher_forcing=ratio).logits
        # Reference: the same draws, torch.rand(B) < ratio at every t > 0, one token at a time.
        torch.manual_seed(123)
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        tokens, rows, gold_used = tgt_in[:, 0], [], []
        for t in range(tgt_in.shape[1]):
            if t > 0:
                use_gold = torch.rand(src.shape[0]) < ratio
                gold_used.append(use_gold)
                tokens = torch.where(use_gold, tgt_in[:, t], rows[-1].argmax(-1))
            logits, state, _ = model.step(tokens, state, enc)
            rows.append(logits)
    torch.testing.assert_close(mixed, torch.stack(rows, 1), rtol=0, atol=1e-5)
    decisions = torch.stack(gold_used)
    assert decisions.any() and not decisions.all()  # the seed mixes gold and predicted tokens


@pytest.mark.parametrize("attention", RNN_VARIANTS)
def test_cross_attention_shape_and_rows(attention):
    model = tiny(attention, bidirectional=widest(attention))
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    with torch.no_grad():
        out = model(src, src_mask, tgt_in, need_weights=True)
    cross = out.attentions["cross"]
    heads = cross.shape[2]
    assert cross.shape == (3, 1, heads, tgt_in.shape[1], src.shape[1])
    assert out.logits.shape == (3, tgt_in.shape[1], TGT_V)
    assert torch.all(cross.masked_select(~src_mask[:, None, None, None, :]) == 0)
    spec = ATTENTION.get(attention).meta
    if spec.exposes_weights and spec.normalisation in (NORM_SOFTMAX, NORM_SPARSE):
        torch.testing.assert_close(cross.sum(-1), torch.ones_like(cross[..., 0]), rtol=0, atol=1e-5)
    elif spec.exposes_weights and spec.normalisation == NORM_SUB_STOCHASTIC:
        assert torch.all(cross >= 0) and torch.all(cross.sum(-1) <= 1 + 1e-5)
    elif spec.exposes_weights and spec.normalisation == NORM_UNNORMALISED:
        assert torch.all(cross >= 0)
    # Without need_weights nothing is collected.
    assert "cross" not in model(src, src_mask, tgt_in).attentions


@pytest.mark.parametrize("attention", RNN_VARIANTS)
def test_gradients_reach_every_parameter(attention):
    model = tiny(attention, "lstm", bidirectional=widest(attention), layers=2).train()
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    logits = model(src, src_mask, tgt_in).logits
    F.cross_entropy(
        logits.reshape(-1, TGT_V), tgt_in.roll(-1, 1).reshape(-1), ignore_index=PAD_ID
    ).backward()
    silent = [
        n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0
    ]
    assert not silent


def test_reordered_state_steps_like_reordered_rows():
    """Beam search reorders state and encoder output along dim 0: every tensor is batch-first."""
    model = tiny("luong-general", "lstm", bidirectional=True, feed=True)
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        state = model.start_state(enc)
        _, state, _ = model.step(tgt_in[:, 0], state, enc)
        logits, _, cross = model.step(tgt_in[:, 1], state, enc, need_weights=True)
        moved_logits, _, moved_cross = model.step(
            tgt_in[index, 1], select_state(state, index), enc.index_select(index), need_weights=True
        )
    torch.testing.assert_close(moved_logits, logits[index], rtol=0, atol=1e-6)
    torch.testing.assert_close(moved_cross, cross[index], rtol=0, atol=1e-6)


def test_bidirectional_final_state_joins_forward_end_and_backward_start():
    model = tiny("bahdanau", "gru", bidirectional=True)
    src, src_mask, _ = batch(SOURCES, TARGETS)
    with torch.no_grad():
        states, final_h, _ = model.encoder(src, src_mask)
    for b, length in enumerate(src_lengths(src_mask)):
        want = torch.cat([states[b, length - 1, :8], states[b, 0, 8:]])  # fwd at end, bwd at start
        torch.testing.assert_close(final_h[-1, b], want)
        assert torch.all(states[b, length:] == 0)


def test_tiny_overfit_learns_to_reverse():
    """A few hundred steps on 8 reversal examples: the loss collapses and greedy output is exact."""
    torch.manual_seed(0)
    model = RNNSeq2Seq(SRC_V, SRC_V, attention="bahdanau", emb=16, hidden=32, dropout=0.0)
    g = torch.Generator().manual_seed(0)
    lengths = [3, 4, 5, 6, 3, 4, 5, 6]
    src = torch.zeros(8, 6, dtype=torch.long)
    tgt_in = torch.zeros(8, 7, dtype=torch.long)
    tgt_out = torch.zeros(8, 7, dtype=torch.long)
    for i, n in enumerate(lengths):
        seq = torch.randint(4, SRC_V, (n,), generator=g)
        src[i, :n] = seq
        tgt_in[i, : n + 1] = torch.cat([torch.tensor([BOS_ID]), seq.flip(0)])
        tgt_out[i, : n + 1] = torch.cat([seq.flip(0), torch.tensor([EOS_ID])])
    src_mask = src != PAD_ID
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        logits = model(src, src_mask, tgt_in).logits
        loss = F.cross_entropy(logits.reshape(-1, SRC_V), tgt_out.reshape(-1), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    with torch.no_grad():
        predicted = greedy_feedback(model, src, src_mask, 7).argmax(-1)
    assert torch.equal(predicted[tgt_out != PAD_ID], tgt_out[tgt_out != PAD_ID])


# -- configuration ------------------------------------------------------------------------------


def config(**model) -> ExperimentConfig:
    return ExperimentConfig(model=ModelConfig(**model))


def test_build_model_from_the_default_config():
    model = build_model(config(), 34, 34)
    assert isinstance(model, RNNSeq2Seq)
    assert model.encoder.out_dim == 256 and model.attention.spec.name == "bahdanau"
    assert "rnn" in ARCHITECTURES


def test_check_accepts_every_rnn_variant_that_fits_the_sizes():
    for name in RNN_VARIANTS:
        check_rnn_config(config(attention=name, bidirectional=widest(name)))


def test_check_rejects_unknown_attention_with_a_suggestion():
    with pytest.raises(AttnlabError, match='model.attention "bahdanu".*did you mean "bahdanau"'):
        check_rnn_config(config(attention="bahdanu"))


def test_check_rejects_a_variant_without_the_rnn_cross_role():
    others = [e.name for e in ATTENTION.entries() if ROLE_RNN_CROSS not in e.meta.roles]
    assert others, "the registry ships Transformer-only variants (scaled-dot's siblings)"
    with pytest.raises(
        AttnlabError, match=f'model.attention="{others[0]}" cannot be used by the RNN decoder'
    ):
        check_rnn_config(config(attention=others[0]))


def test_check_rejects_luong_dot_with_mismatched_widths():
    with pytest.raises(AttnlabError, match="bidirectional=false"):
        check_rnn_config(config(attention="luong-dot", bidirectional=True))


def test_check_rejects_luong_location_shorter_than_the_sources():
    with pytest.raises(AttnlabError, match="max_src_len=10"):
        check_rnn_config(config(attention="luong-location", attn_params={"max_src_len": 10}))


def test_check_rejects_unknown_cell_in_constructor():
    with pytest.raises(AttnlabError, match="model.cell"):
        RNNSeq2Seq(5, 5, cell="rnn")


@pytest.mark.parametrize("attention", RNN_VARIANTS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_unbuildable_combinations_are_exactly_these(attention, bidirectional):
    """The validation rejects exactly UNBUILDABLE, with a one-line error naming the fix, both
    at config time and in the constructor; everything else builds (so nothing is skipped)."""
    cfg = config(attention=attention, bidirectional=bidirectional, hidden=8, emb=6)
    fix = UNBUILDABLE.get((attention, bidirectional))
    if fix is None:
        check_rnn_config(cfg)
        tiny(attention, bidirectional=bidirectional)
        return
    construct = lambda: tiny(attention, bidirectional=bidirectional)  # noqa: E731
    for build in (lambda: check_rnn_config(cfg), construct):
        with pytest.raises(AttnlabError, match=fix) as raised:
            build()
        assert "\n" not in str(raised.value)


# -- the decoder's wiring against the papers, by hand in float64 --------------------------------


def _hand_decoder_logits(model: RNNSeq2Seq, enc, tgt_in, attention: str, feed: bool):
    """Logits [B,T,V] of a 1-layer GRU decoder written out step by step from the papers:
    Bahdanau et al. 2015 (c_t from s_{t-1}, then s_t = GRU([E y_{t-1}; c_t; h̃_{t-1}], s_{t-1}))
    or Luong et al. 2015 (s_t = GRU([E y_{t-1}; h̃_{t-1}], s_{t-1}), then c_t from s_t; local-m:
    the window |j - t| <= D around p_t = t, clamped to the last source position), then
    h̃_t = tanh(W_c [c_t; s_t]) and logits W_o h̃_t. h̃_{t-1} is input feeding (h̃_0 = 0).
    Everything per sentence, per step, per source position; nothing of the model's own
    attention or decoder code is called (only its parameters and the encoder's states)."""
    p = {k: v.detach().double() for k, v in model.named_parameters()}
    states, mask = enc.states.double(), enc.mask
    final = enc.extras["final_h"][:, 0].double()  # [B,D], the one layer
    hidden = model.hidden
    w_ih, w_hh = p["rnn.weight_ih_l0"], p["rnn.weight_hh_l0"]
    b_ih, b_hh = p["rnn.bias_ih_l0"], p["rnn.bias_hh_l0"]

    def gru(x, h):  # torch's GRU cell: gates r, z, n in that order
        gi, gh = w_ih @ x + b_ih, w_hh @ h + b_hh
        r = torch.sigmoid(gi[:hidden] + gh[:hidden])
        z = torch.sigmoid(gi[hidden : 2 * hidden] + gh[hidden : 2 * hidden])
        n = torch.tanh(gi[2 * hidden :] + r * gh[2 * hidden :])
        return (1 - z) * n + z * h

    def attend(s, b, t):
        length = int(mask[b].sum())
        scores = {}
        for j in range(length):
            h_j = states[b, j]
            if attention == "bahdanau":  # vᵀ tanh(W s_{t-1} + U h_j)
                energy = p["attention.query_proj.weight"] @ s + p["attention.key_proj.weight"] @ h_j
                scores[j] = float(p["attention.energy.weight"][0] @ torch.tanh(energy))
            else:  # s_tᵀ W_a h_j
                if attention == "local-m" and abs(j - min(t, length - 1)) > model.attention.window:
                    continue
                scores[j] = float(s @ (p["attention.key_proj.weight"] @ h_j))
        top = max(scores.values())
        total = sum(math.exp(v - top) for v in scores.values())
        return sum(math.exp(v - top) / total * states[b, j] for j, v in scores.items())

    batch_size, steps = tgt_in.shape
    logits = torch.zeros(batch_size, steps, model.tgt_vocab_size, dtype=torch.float64)
    for b in range(batch_size):
        s = torch.tanh(p["bridge.weight"] @ final[b] + p["bridge.bias"])  # s_0
        tilde = torch.zeros(hidden, dtype=torch.float64)  # h̃_0
        for t in range(steps):
            parts = [p["embed.weight"][tgt_in[b, t]]]
            if attention == "bahdanau":
                c = attend(s, b, t)  # from s_{t-1}
                parts.append(c)
            if feed:
                parts.append(tilde)
            s = gru(torch.cat(parts), s)
            if attention != "bahdanau":
                c = attend(s, b, t)  # from s_t
            tilde = torch.tanh(p["combine.weight"] @ torch.cat([c, s]) + p["combine.bias"])
            logits[b, t] = p["output.weight"] @ tilde + p["output.bias"]
    return logits


@pytest.mark.parametrize("feed", [True, False])
@pytest.mark.parametrize("attention", ["bahdanau", "luong-general", "local-m"])
def test_decoder_wiring_equals_the_papers_written_out_by_hand(attention, feed):
    """Every training path (fused Bahdanau, Luong without a loop, the step loop) and step-by-step
    decoding give the logits of the hand-written decoder; the existing tests only compare the
    model's own paths with each other."""
    from attnlab.nn.reference import reference_mode

    model = tiny(attention, "gru", bidirectional=True, feed=feed).double()
    src, src_mask, tgt_in = batch(SOURCES, TARGETS)
    # targets longer than their sources, so local-m's clamped p_t matters
    tgt_in = torch.cat([tgt_in, tgt_in[:, :3]], dim=1)
    with torch.no_grad():
        enc = model.encode(src, src_mask)
        expected = _hand_decoder_logits(model, enc, tgt_in, attention, feed)
        got = model(src, src_mask, tgt_in).logits
        with reference_mode(model):
            reference = model(src, src_mask, tgt_in).logits
        state, stepped = model.start_state(enc), []
        for t in range(tgt_in.shape[1]):
            logits, state, _ = model.step(tgt_in[:, t], state, enc)
            stepped.append(logits)
    for logits in (got, reference, torch.stack(stepped, 1)):
        torch.testing.assert_close(logits, expected, rtol=1e-9, atol=1e-10)
