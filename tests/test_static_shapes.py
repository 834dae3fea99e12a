"""Bucket padding (attnlab.train.static_shapes): a padded batch trains exactly as its unpadded
self. In float64 the summed loss and every parameter's gradient of the padded batch equal the
unpadded batch's to ~1e-12, for the RNN and the Transformer, every variant in each role, on the
CPU's fast paths and on the padded reference path that accelerators take."""

from __future__ import annotations

import random

import pytest
import torch

from attnlab.config import ExperimentConfig, ModelConfig, TrainConfig
from attnlab.data.batching import bucket_width, make_batch, pad_batch, plan_batches
from attnlab.data.example import Example
from attnlab.data.vocab import BOS_ID, PAD_ID, UNK_ID, Vocab
from attnlab.evaluate import token_loss_sum
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS
from attnlab.nn.model import build_model
from attnlab.nn.reference import set_reference_mode
from attnlab.train.static_shapes import BucketPadding, bucket_padding

WORDS = [f"w{i}" for i in range(12)]
VOCAB = Vocab(WORDS)


def ragged_examples(n: int = 5, seed: int = 0) -> list[Example]:
    """Sentences of 1-9 source and 1-7 target words (every row a different length)."""
    rng = random.Random(seed)
    return [
        Example(
            tuple(rng.choice(WORDS) for _ in range(rng.randint(1, 9))),
            tuple(rng.choice(WORDS) for _ in range(rng.randint(1, 7))),
        )
        for _ in range(n)
    ]


def test_pad_batch_grows_each_tensor_with_padding_and_filler_rows():
    batch = make_batch(ragged_examples(3), VOCAB, VOCAB)
    b, s = batch.src.shape
    t = batch.tgt_in.shape[1]
    padded = pad_batch(batch, 5, 16, 8)
    assert padded.src.shape == (5, 16) and padded.tgt_in.shape == (5, 8)
    for name in ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"):
        before, after = getattr(batch, name), getattr(padded, name)
        assert torch.equal(after[:b, : before.shape[1]], before), name
        assert after.dtype == before.dtype, name
    assert torch.all(padded.src[:b, s:] == PAD_ID) and not padded.src_mask[:b, s:].any()
    assert torch.all(padded.tgt_out[:b, t:] == PAD_ID) and not padded.tgt_mask[:b, t:].any()
    # Filler rows: one <unk> source token, <s>, and not one target position in the loss.
    assert padded.src[b:, 0].tolist() == [UNK_ID, UNK_ID]
    assert padded.src_mask[b:].sum(1).tolist() == [1, 1]
    assert padded.tgt_in[b:, 0].tolist() == [BOS_ID, BOS_ID]
    assert not padded.tgt_mask[b:].any() and torch.all(padded.tgt_out[b:] == PAD_ID)
    assert padded.n_tokens == batch.n_tokens
    with pytest.raises(ValueError):
        pad_batch(batch, b - 1, 16, 8)


@pytest.mark.parametrize(
    "width, multiple, expected", [(1, 8, 8), (8, 8, 8), (9, 8, 16), (0, 8, 8), (5, 1, 5)]
)
def test_bucket_width_rounds_up_to_a_multiple(width, multiple, expected):
    assert bucket_width(width, multiple) == expected


def test_token_budget_plans_fit_their_bucket_rows_and_use_few_shapes():
    """With the rounded widths counted, every batch of a token-budget plan fits the rows of
    its bucket (so one shape per width pair), and the shapes are few."""
    examples = ragged_examples(400, seed=3)
    padding = BucketPadding(multiple=8, batch_size=64, batch_tokens=160)
    plan = plan_batches(examples, batch_tokens=160, seed=1, width_multiple=8)
    assert sorted(i for idx in plan for i in idx) == list(range(len(examples)))
    shapes = set()
    for idx in plan:
        batch = make_batch([examples[i] for i in idx], VOCAB, VOCAB)
        rows, src, tgt = padding.shape(len(idx), batch.src.shape[1], batch.tgt_in.shape[1])
        assert rows == 160 // (src + tgt) or (len(idx) == 1 and rows == 1)
        assert rows * (src + tgt) <= 160 or len(idx) == 1
        shapes.add((rows, src, tgt))
    assert len(shapes) <= 4  # widths 1-9 / 2-8: src 8 or 16, tgt 8 (or 16)


def test_sentence_count_batches_pad_their_rows_to_the_batch_size():
    padding = BucketPadding(multiple=8, batch_size=32, batch_tokens=0)
    assert padding.shape(7, 9, 3) == (32, 16, 8)
    assert padding.shape(32, 16, 8) == (32, 16, 8)


@pytest.mark.parametrize(
    "setting, device, graphs, on",
    [
        ("auto", "cpu", False, False),
        ("auto", "cuda", False, True),
        ("auto", "cpu", True, True),
        ("on", "cpu", False, True),
        ("off", "cuda", False, False),
    ],
)
def test_pad_buckets_setting(setting, device, graphs, on):
    cfg = TrainConfig(pad_buckets=setting, pad_multiple=4)
    padding = bucket_padding(cfg, torch.device(device), graphs)
    assert (padding is not None) == on
    if on:
        assert padding.multiple == 4


def _variant_cases():
    """(model config, id): the RNN with every rnn-cross variant, the Transformer with every
    variant in each of its roles (the others left at scaled-dot)."""
    rnn = dict(arch="rnn", hidden=8, emb=6, dropout=0.0)
    transformer = dict(
        arch="transformer", d_model=8, heads=2, ff=12, enc_layers=1, dec_layers=1, dropout=0.0
    )
    for entry in ATTENTION.entries():
        roles = entry.meta.roles
        if "rnn-cross" in roles:
            bidirectional = entry.name != "luong-dot"  # it needs equal widths
            case = {**rnn, "attention": entry.name, "bidirectional": bidirectional}
            yield pytest.param(case, id=f"rnn-{entry.name}")
        for role, key in (
            ("self", "self_attention"),
            (ROLE_CAUSAL_SELF, "decoder_self_attention"),
            (ROLE_CROSS, "cross_attention"),
        ):
            if role in roles:
                yield pytest.param({**transformer, key: entry.name}, id=f"{key}={entry.name}")
    yield pytest.param({**rnn, "cell": "lstm", "layers": 2}, id="rnn-lstm-2-layers")
    yield pytest.param({**transformer, "positions": "rotary"}, id="transformer-rotary")
    yield pytest.param({**transformer, "positions": "learned"}, id="transformer-learned")


def loss_and_grads(model, batch, label_smoothing: float):
    model.zero_grad(set_to_none=True)
    logits = model(batch.src, batch.src_mask, batch.tgt_in).logits
    loss = token_loss_sum(logits, batch.tgt_out, label_smoothing)
    loss.backward()
    grads = {
        name: torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for name, p in model.named_parameters()
    }
    return loss.detach(), grads


@pytest.mark.parametrize("reference", [False, True], ids=["fast-paths", "padded-reference"])
@pytest.mark.parametrize("model_cfg", list(_variant_cases()))
def test_bucket_padding_changes_no_loss_and_no_gradient(model_cfg, reference):
    config = ExperimentConfig(model=ModelConfig(**model_cfg))
    torch.manual_seed(0)
    model = build_model(config, len(VOCAB), len(VOCAB)).double().train()
    set_reference_mode(model, reference)
    batch = make_batch(ragged_examples(5), VOCAB, VOCAB)
    padding = BucketPadding(multiple=8, batch_size=8, batch_tokens=0)
    padded = padding.apply(batch)
    assert padded.src.shape[0] == 8 and padded.src.shape[1] % 8 == 0
    assert padded.tgt_in.shape[1] % 8 == 0
    loss, grads = loss_and_grads(model, batch, 0.1)
    padded_loss, padded_grads = loss_and_grads(model, padded, 0.1)
    assert torch.isfinite(loss)
    torch.testing.assert_close(padded_loss, loss, rtol=1e-12, atol=1e-12)
    assert any(g.abs().sum() > 0 for g in grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(padded_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("key", ["train.pad_buckets", "train.cuda_graphs"])
def test_switch_settings_take_auto_on_off_and_booleans(key):
    from attnlab.errors import AttnlabError
    from attnlab.experiment import apply_overrides

    section, name = key.split(".")
    for raw, expected in (("on", "on"), ("off", "off"), ("auto", "auto"), ("true", "on")):
        config = apply_overrides(ExperimentConfig(), [f"{key}={raw}"])
        assert getattr(config.train, name) == expected
    assert getattr(apply_overrides(ExperimentConfig(), [f"{key}=false"]).train, name) == "off"
    with pytest.raises(AttnlabError) as err:
        apply_overrides(ExperimentConfig(), [f"{key}=sometimes"])
    message = str(err.value)
    assert key in message and "sometimes" in message and "auto" in message and "\n" not in message
    with pytest.raises(AttnlabError, match="pad_multiple"):
        apply_overrides(ExperimentConfig(), ["train.pad_multiple=0"])
