"""The decoder-only Transformer (attnlab.nn.decoder_only) against what a GPT must be.

In float64, for every variant that can play the causal role: no output depends on a later
position; the KV-cached ``encode``/``step`` equals the full pass; a row's outputs do not depend
on the padding its batch adds; a few Adam steps on one batch lower its loss. Scaled-dot, causal
and bidirectional prefix, against a one-layer model written out with explicit loops. A prompt
read as the source equals the same tokens read as the target (one sequence either way).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from attnlab.config import ExperimentConfig
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, validate
from attnlab.nn.attention import ATTENTION
from attnlab.nn.decoder_only import BIDIRECTIONAL_PREFIX, caller_index, left_align
from attnlab.nn.model import build_model
from attnlab.nn.seq2seq import BOS_ID, PAD_ID

VOCAB = 20
CAUSAL = [n for n in ATTENTION.names() if "causal-self" in ATTENTION.get(n).meta.roles]
# Rotary wherever the variant takes it: it exercises the per-row positions of padded rows.
NO_ROTARY = {"decayed-linear"}
# NSA's compression blocks are counted from the batch's index 0, so left padding moves their
# boundaries: its rows are padding-invariant only among rows of one length (docs say so).
BLOCKS_BY_INDEX = {"nsa"}


def make(name: str, prefix: str = "causal", positions: str | None = None, layers: int = 2, **data):
    positions = positions or ("sinusoidal" if name in NO_ROTARY else "rotary")
    cfg = ExperimentConfig()
    model = replace(
        cfg.model,
        arch="decoder-only",
        d_model=32,
        heads=4,
        ff=64,
        dec_layers=layers,
        dropout=0.0,
        positions=positions,
        self_attention=name,
        prefix=prefix,
    )
    cfg = validate(replace(cfg, model=model, data=replace(cfg.data, **data)))
    torch.manual_seed(0)
    return build_model(cfg, VOCAB, VOCAB).double().eval()


def padded_inputs(lengths=(6, 3, 1), target: int = 5, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    src = torch.randint(4, VOCAB, (len(lengths), width), generator=g)
    mask = torch.arange(width)[None] < torch.tensor(lengths)[:, None]
    tgt = torch.randint(4, VOCAB, (len(lengths), target), generator=g)
    tgt[:, 0] = BOS_ID
    return src.masked_fill(~mask, PAD_ID), mask, tgt


def cases():
    for prefix in ("causal", "bidirectional"):
        for name in CAUSAL:
            if prefix == "bidirectional" and name not in BIDIRECTIONAL_PREFIX:
                continue
            yield pytest.param(name, prefix, id=f"{prefix}-{name}")


@pytest.mark.parametrize(("name", "prefix"), list(cases()))
def test_causal_cached_padding_free_and_trainable(name, prefix):
    lengths = (6, 6, 6) if name in BLOCKS_BY_INDEX else (6, 3, 1)
    m = make(name, prefix)
    src, mask, tgt = padded_inputs(lengths)
    with torch.no_grad():
        full = m(src, mask, tgt).logits

        # Causality: a changed target token changes nothing before it.
        changed = tgt.clone()
        changed[:, 3] = (changed[:, 3] + 1 - 4) % (VOCAB - 4) + 4
        assert torch.allclose(m(src, mask, changed).logits[:, :3], full[:, :3], atol=1e-10)
        if prefix == "causal":  # ... nor does a later source token change an earlier one
            later = src.clone()
            later[0, 5] = (later[0, 5] + 1 - 4) % (VOCAB - 4) + 4
            enc_a, enc_b = m.encode(src, mask), m.encode(later, mask)
            for i in range(len(m.layers)):
                a, b = enc_a.extras[f"self_cache{i}"], enc_b.extras[f"self_cache{i}"]
                assert torch.allclose(a[0, ..., :5, :], b[0, ..., :5, :], atol=1e-10)

        # The KV-cached steps equal the full pass.
        enc = m.encode(src, mask)
        state = m.start_state(enc)
        for t in range(tgt.shape[1]):
            logits, state, _ = m.step(tgt[:, t], state, enc)
            assert torch.allclose(logits, full[:, t], atol=1e-9), f"step {t}"

        # Each row alone (no padding) gives what it gave inside the padded batch.
        for b, n in enumerate(lengths):
            alone = m(src[b : b + 1, :n], mask[b : b + 1, :n], tgt[b : b + 1]).logits
            assert torch.allclose(alone, full[b : b + 1], atol=1e-9), f"row {b}"

        # Asking for the maps changes no logit.
        assert torch.allclose(m(src, mask, tgt, need_weights=True).logits, full, atol=1e-12)

    # A few Adam steps on this one batch lower its loss.
    m.train()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    targets = torch.roll(tgt, -1, dims=1)
    losses = []
    for _ in range(6):
        loss = torch.nn.functional.cross_entropy(
            m(src, mask, tgt).logits.reshape(-1, VOCAB), targets.reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert math.isfinite(losses[-1]) and losses[-1] < losses[0]


def test_nsa_in_a_padded_batch_stays_causal_and_cached():
    """What NSA does keep with rows of different lengths (padding-invariance aside)."""
    m = make("nsa")
    src, mask, tgt = padded_inputs((6, 3, 1))
    with torch.no_grad():
        full = m(src, mask, tgt).logits
        enc = m.encode(src, mask)
        state = m.start_state(enc)
        for t in range(tgt.shape[1]):
            logits, state, _ = m.step(tgt[:, t], state, enc)
            assert torch.allclose(logits, full[:, t], atol=1e-9)


# -- a one-layer model written out -----------------------------------------------------------


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def reference(m, src_row, tgt_row, bidirectional):
    """One unpadded row through a one-layer pre-norm block, attention by explicit loops ->
    (logits at the target positions [T,V], weights [H,N,N])."""
    s = len(src_row)
    d = m.d_model
    layer = m.layers[0]
    attn = layer.self_attn.attn
    emb = torch.cat([m.src_embed.weight[src_row], m.tgt_embed.weight[tgt_row]])
    n = emb.shape[0]
    x = emb * math.sqrt(d) + m.positions.table[:n]
    h = _layer_norm(x, layer.sub_self.norm)
    q = h @ attn.q_proj.weight.T + attn.q_proj.bias
    k = h @ attn.k_proj.weight.T + attn.k_proj.bias
    v = h @ attn.v_proj.weight.T + attn.v_proj.bias
    heads = attn.heads
    dh = d // heads
    out = torch.zeros(n, d, dtype=x.dtype)
    weights = torch.zeros(heads, n, n, dtype=x.dtype)
    for head in range(heads):
        cols = slice(head * dh, (head + 1) * dh)
        for i in range(n):
            # A bidirectional prefix's source row sees the whole source (and no target);
            # every other row sees itself and what precedes it.
            allowed = list(range(s)) if bidirectional and i < s else list(range(i + 1))
            scores = torch.stack([q[i, cols] @ k[j, cols] / math.sqrt(dh) for j in allowed])
            w = torch.softmax(scores, dim=0)
            for w_j, j in zip(w, allowed, strict=True):
                out[i, cols] += w_j * v[j, cols]
                weights[head, i, j] = w_j
    x = x + out @ attn.out_proj.weight.T + attn.out_proj.bias
    f = _layer_norm(x, layer.sub_ff.norm)
    f = torch.relu(f @ layer.ff.inner.weight.T + layer.ff.inner.bias)
    x = x + f @ layer.ff.outer.weight.T + layer.ff.outer.bias
    x = _layer_norm(x, m.norm)
    logits = x @ m.output.weight.T + m.output.bias
    return logits[s:], weights


@pytest.mark.parametrize("prefix", ["causal", "bidirectional"])
def test_scaled_dot_equals_a_model_written_out_by_hand(prefix):
    m = make("scaled-dot", prefix, positions="sinusoidal", layers=1)
    assert m.layers[0].sub_self.pre_norm  # the reference is the pre-norm block
    lengths = (5, 2, 0)
    src, mask, tgt = padded_inputs(lengths, target=4, seed=3)
    with torch.no_grad():
        out = m(src, mask, tgt, need_weights=True)
    width = src.shape[1]
    for b, s in enumerate(lengths):
        logits, weights = reference(m, src[b, :s], tgt[b], prefix == "bidirectional")
        assert torch.allclose(out.logits[b], logits, atol=1e-10)
        # The caller's layout: source i at i, target t at width + t (padding in between).
        at = list(range(s)) + [width + t for t in range(tgt.shape[1])]
        got = out.attentions["dec_self"][b, 0][:, at][:, :, at]
        assert torch.allclose(got, weights, atol=1e-10)
        cross = out.attentions["cross"][b, 0][:, :, :s]
        assert torch.allclose(cross, weights[:, s:, :s], atol=1e-10)


def test_a_prompt_read_as_source_equals_the_same_tokens_read_as_target():
    m = make("scaled-dot", shared_vocab=True)
    assert m.src_embed is m.tgt_embed
    g = torch.Generator().manual_seed(5)
    seq = torch.randint(4, VOCAB, (2, 9), generator=g)
    k = 4
    with torch.no_grad():
        as_source = m(seq[:, :k], torch.ones(2, k, dtype=torch.bool), seq[:, k:]).logits
        as_lm = m(seq[:, :0], torch.ones(2, 0, dtype=torch.bool), seq).logits
    assert torch.allclose(as_source, as_lm[:, k:], atol=1e-10)


def test_left_align_and_caller_index_invert_each_other():
    src, mask, _ = padded_inputs((4, 2, 0), seed=7)
    ids, left_mask, shift = left_align(src, mask)
    assert shift.tolist() == [0, 2, 4]
    for b in range(3):
        n = int(mask[b].sum())
        assert ids[b, 4 - n :].tolist() == src[b, :n].tolist()
        assert left_mask[b].tolist() == [False] * (4 - n) + [True] * n
    index = caller_index(shift, 4, 6)
    for b in range(3):  # a permutation of 0..5 that leaves the target slots where they are
        assert sorted(index[b].tolist()) == list(range(6)) and index[b, 4:].tolist() == [4, 5]
        n = int(mask[b].sum())
        assert all(ids[b, index[b, i]] == src[b, i] for i in range(n))


def test_prefix_loss_adds_the_source_next_token_loss_of_the_same_sequence():
    """extras["prefix_logits"] at source position i scores src[i+1], as the plain LM over the
    same tokens does (one sequence, one table)."""
    cfg = apply_overrides(
        ExperimentConfig(),
        [
            "model.arch=decoder-only",
            "model.d_model=16",
            "model.heads=2",
            "model.ff=32",
            "model.dec_layers=1",
            "model.dropout=0",
            "data.shared_vocab=true",
            "train.prefix_loss=true",
        ],
    )
    torch.manual_seed(0)
    m = build_model(cfg, VOCAB, VOCAB).double().eval()
    src, mask, tgt = padded_inputs((5, 3), target=3, seed=9)
    with torch.no_grad():
        prefix = m(src, mask, tgt).extras["prefix_logits"]
        assert prefix.shape == (2, 4, VOCAB)
        for b, n in enumerate((5, 3)):
            lm = m(src[b : b + 1, :0], mask[b : b + 1, :0], src[b : b + 1, :n]).logits[0]
            assert torch.allclose(prefix[b, : n - 1], lm[: n - 1], atol=1e-10)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.self_attention=linformer"], "linformer cannot be causal"),
        (["model.self_attention=bahdanau"], "bahdanau cannot be causal"),
        (["model.prefix=bidirectional", "model.self_attention=performer"], "performer cannot"),
        (["model.prefix=sideways"], "model.prefix"),
        (["model.d_model=30", "model.heads=4"], "divisible"),
        (["model.dec_layers=0"], "model.dec_layers=0"),
        (["train.prefix_loss=true"], "data.shared_vocab=true"),
    ],
)
def test_what_cannot_be_built_is_one_line(overrides, message):
    with pytest.raises(AttnlabError, match=message) as err:
        apply_overrides(ExperimentConfig(), ["model.arch=decoder-only", *overrides])
    assert "\n" not in str(err.value)


def test_prefix_loss_is_refused_for_an_encoder_decoder():
    with pytest.raises(AttnlabError, match="needs model.arch=decoder-only"):
        apply_overrides(ExperimentConfig(), ["model.arch=transformer", "train.prefix_loss=true"])
