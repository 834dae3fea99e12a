"""What a run costs (#41): KV-cache bytes per token against hand formulas per variant family,
parameters against sum(p.numel()), and the ``cost`` record in eval events and ``eval --json``."""

from __future__ import annotations

import json

import pytest
import torch
from _tiny import TINY_TRANSFORMER, tiny_config
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.evaluate import COST_KEYS, model_cost
from attnlab.events import read_typed_log
from attnlab.nn.kv_cache import kv_cache_bytes_per_token, measured_state_growth
from attnlab.nn.model import build_model

D, HEADS, LAYERS = 16, 4, 2
DH = D // HEADS
FLOAT = 4  # bytes of a float32


def transformer(variant: str, *extra: str):
    config = tiny_config(
        "kv",
        *TINY_TRANSFORMER,
        f"model.d_model={D}",
        f"model.heads={HEADS}",
        f"model.dec_layers={LAYERS}",
        f"model.decoder_self_attention={variant}",
        *extra,
    )
    torch.manual_seed(0)
    return build_model(config, 20, 20).eval()


# (variant, overrides, the hand formula: bytes per generated token of the whole decoder)
FAMILIES = [
    ("scaled-dot", (), 2 * LAYERS * HEADS * DH * FLOAT),  # keys and values of every head
    ("gqa", ("model.gqa.kv_heads=2",), 2 * LAYERS * 2 * DH * FLOAT),  # of the kv heads only
    ("gqa", ("model.gqa.kv_heads=1",), 2 * LAYERS * 1 * DH * FLOAT),  # MQA
    ("mla", ("model.mla.kv_rank=6", "model.mla.rope_dim=2"), LAYERS * (6 + 2) * FLOAT),  # latent
    ("linear", (), 0),  # running sums Σφ(k)vᵀ, Σφ(k): a constant-size state
    ("performer", (), 0),
    ("decayed-linear", (), 0),
    ("sliding-window", (), 0),  # the last w keys: bounded
]


@pytest.mark.parametrize(("variant", "extra", "expected"), FAMILIES)
def test_kv_cache_bytes_per_token_match_the_hand_formula(variant, extra, expected):
    assert kv_cache_bytes_per_token(transformer(variant, *extra)) == expected


@pytest.mark.parametrize("variant", ["scaled-dot", "mla", "gqa"])
def test_the_figure_is_what_the_decoder_state_grows_by(variant):
    """For the caching families the figure is what ``model.step``'s state really grows by."""
    model = transformer(variant)
    per_token, cross = measured_state_growth(model, [[5, 6, 7], [8, 9]])
    assert per_token == kv_cache_bytes_per_token(model)
    assert cross > 0  # the cross-attention caches, per source token, kept apart


def test_an_rnn_decoder_state_does_not_grow():
    model = build_model(tiny_config(), 20, 20)
    assert kv_cache_bytes_per_token(model) == 0
    assert measured_state_growth(model, [[5, 6, 7]])[0] == 0


def test_parameters_count_every_weight():
    model = transformer("scaled-dot")
    next(model.parameters()).requires_grad_(False)  # a frozen weight still costs memory
    cost = model_cost(model, None)
    assert cost["parameters"] == sum(p.numel() for p in model.parameters())
    assert set(cost) == set(COST_KEYS) and cost["train_tokens_per_s"] is None


def test_cost_in_eval_events_and_eval_json(tmp_path, tiny_sets):
    runner = CliRunner()
    result = runner.invoke(
        cli, ["train", "--out", str(tmp_path), "--run-name", "c", "--quiet", *tiny_sets]
    )
    assert result.exit_code == 0, result.output
    evals = [e for e in read_typed_log(tmp_path / "c")[0] if e.TYPE == "eval"]
    assert evals and all(set(e.cost) == set(COST_KEYS) for e in evals)
    last = evals[-1].cost
    assert last["train_tokens_per_s"] > 0 and last["decode_sentences_per_s"] > 0
    # RSS high-water mark: at least what the weights alone take, below a sane bound
    assert last["parameters"] * 4 / 2**20 < last["train_peak_memory_mb"] < 64 * 1024
    assert last["kv_cache_bytes_per_token"] == 0  # the tiny run is an RNN

    out = json.loads(runner.invoke(cli, ["eval", str(tmp_path / "c"), "--json"]).output)
    cost = out["cost"]
    assert set(cost) == set(COST_KEYS) and cost["decode_sentences_per_s"] > 0
    assert cost["parameters"] == last["parameters"]
    best = next(e for e in reversed(evals) if e.best).cost  # eval scores the best checkpoint
    assert cost["train_tokens_per_s"] == best["train_tokens_per_s"]
