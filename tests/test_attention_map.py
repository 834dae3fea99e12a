"""AttentionMap: reductions against hand-computed float64 loops, the </s> row rule, titles,
and the ``sample`` events it feeds (byte-compatible with the hand-written format)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from attnlab.attention_map import (
    LAST_LAYER_MEAN,
    AttentionMap,
    last_layer_head_mean,
    target_rows,
)
from attnlab.decode.hypothesis import build_hypotheses
from attnlab.events import EventLog, Sample


def _nested(n_layers: int, n_heads: int, n_rows: int, n_cols: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [
        [[[rng.random() for _ in range(n_cols)] for _ in range(n_rows)] for _ in range(n_heads)]
        for _ in range(n_layers)
    ]


def _head_mean_loop(layer: list) -> list[list[float]]:
    """Mean over heads of one layer [H][T][S], summed by hand in float64."""
    n_heads, n_rows, n_cols = len(layer), len(layer[0]), len(layer[0][0])
    out = [[0.0] * n_cols for _ in range(n_rows)]
    for t in range(n_rows):
        for s in range(n_cols):
            total = 0.0
            for h in range(n_heads):
                total += layer[h][t][s]
            out[t][s] = total / n_heads
    return out


def test_last_layer_mean_matches_a_hand_loop_and_a_closed_form():
    nested = _nested(3, 4, 2, 5)
    amap = AttentionMap(nested, ["a", "b"], list("vwxyz"))
    assert amap.weights.dtype == torch.float64 and amap.weights.shape == (3, 4, 2, 5)
    reduced = amap.last_layer_mean()
    assert reduced.weights.shape == (1, 1, 2, 5) and reduced.reduction == LAST_LAYER_MEAN
    assert np.allclose(reduced.matrix.numpy(), _head_mean_loop(nested[-1]), rtol=0, atol=1e-15)
    # closed form: heads 0.5/0.25/0.25 and 0.25/0.5/0.25 average to 0.375/0.375/0.25
    exact = AttentionMap([[[[0.5, 0.25, 0.25]], [[0.25, 0.5, 0.25]]]], ["a"], ["x", "y", "z"])
    assert exact.last_layer_mean().matrix.tolist() == [[0.375, 0.375, 0.25]]


def test_layer_head_and_mean_heads_pick_what_they_name():
    nested = _nested(2, 3, 2, 2, seed=1)
    amap = AttentionMap(nested, ["a", "b"], ["x", "y"], role="enc_self")
    assert amap.role == "enc-self"
    assert amap.layer(0).weights[0].tolist() == nested[0]
    assert amap.layer(-1).weights[0].tolist() == nested[1]
    assert amap.head(2).weights[:, 0].tolist() == [nested[0][2], nested[1][2]]
    means = amap.mean_heads().weights[:, 0].numpy()
    assert np.allclose(means, [_head_mean_loop(nested[0]), _head_mean_loop(nested[1])], atol=1e-15)
    assert amap.select(None, None).matrix.tolist() == amap.last_layer_mean().matrix.tolist()
    assert amap.select(0, 1).matrix.tolist() == nested[0][1]
    with pytest.raises(ValueError, match="reduce it to one first"):
        _ = amap.matrix


def test_titles_name_role_axes_and_reduction():
    amap = AttentionMap(torch.rand(2, 4, 3, 3), list("abc"), list("abc"), role="dec-self")
    assert amap.select(1, None).title() == (
        "decoder self-attention (target × target), layer 1/2, head average"
    )
    assert amap.select(None, 3).title() == (
        "decoder self-attention (target × target), layer 1/2, head 3/4"
    )
    cross = AttentionMap(torch.rand(1, 1, 2, 2), ["a", "b"], ["x", "y"])
    assert cross.title() == "cross-attention (target × source)"
    assert (
        AttentionMap(torch.rand(1, 1, 2, 2), ["x", "y"], ["x", "y"], "enc-self")
        .select(0, 0)
        .title()
        == "encoder self-attention (source × source), layer 0/1, head 0/1"
    )


def test_the_eos_row_rule():
    assert target_rows(["a", "b"], finished=True) == ["a", "b", "</s>"]
    assert target_rows(["a", "b"], finished=False) == ["a", "b"]
    assert target_rows(["a"], finished=False, unfinished="…") == ["a", "…"]
    amap = AttentionMap.for_target(torch.rand(1, 2, 3, 2), ["a", "b"], True, ["x", "y"])
    assert amap.rows == ["a", "b", "</s>"] and amap.cols == ["x", "y"]
    assert AttentionMap(torch.rand(1, 1, 3, 2), ["a", "b"], ["x", "y"]).with_eos_row().rows == [
        "a",
        "b",
        "</s>",
    ]
    # a label the weights lack (an unfinished search) is cut with fitted()
    short = AttentionMap.for_target(torch.rand(1, 1, 2, 2), ["a", "b"], True, ["x", "y", "z"])
    assert short.fitted().rows == ["a", "b"] and short.fitted().cols == ["x", "y"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_batched_rule_is_the_old_expressions_bit_for_bit(dtype):
    torch.manual_seed(0)
    cross = torch.rand(3, 5, 2, 4, 7).to(dtype)  # decoding's [N, T, L, H, S]
    assert torch.equal(
        last_layer_head_mean(cross.float(), layer_dim=2), cross.float()[:, :, -1].mean(dim=2)
    )
    step = torch.rand(6, 2, 4, 7).to(dtype)  # one beam step [R, L, H, S]
    assert torch.equal(last_layer_head_mean(step, layer_dim=1), step[:, -1].float().mean(dim=1))
    batch = torch.rand(3, 2, 4, 5, 7).to(dtype)  # a forward pass [B, L, H, T, S]
    assert torch.equal(last_layer_head_mean(batch, layer_dim=1), batch[:, -1].float().mean(dim=1))
    maps = torch.rand(2, 4, 5, 7)
    assert torch.equal(
        AttentionMap(maps, list("abcde"), list("abcdefg")).select(0, None).matrix,
        maps[0].mean(dim=0),
    )
    # numpy (the lab's maps): the same rule with numpy's own mean
    array = maps.numpy()
    assert np.array_equal(last_layer_head_mean(array), array[-1].mean(axis=0))


def test_json_round_trip_is_the_sample_event_matrix():
    matrix = [[0.1234, 0.8766], [1.0, 0.0]]
    amap = AttentionMap.from_json(matrix, ["a", "b"], ["x", "y"])
    assert amap.weights.shape == (1, 1, 2, 2) and amap.reduction == LAST_LAYER_MEAN
    assert amap.to_json() == matrix
    empty = AttentionMap.from_json([], ["a"], ["x"])
    assert empty.weights.shape == (1, 1, 0, 0) and empty.fitted().rows == []


def test_sample_events_on_disk_are_unchanged(tmp_path, monkeypatch):
    """sample_translations -> Sample event -> events.jsonl, against a hand-written line."""
    import attnlab.evaluate as evaluate

    # One finished hypothesis: 2 tokens + </s> (3 steps); source of 2 real tokens + 1 pad.
    # cross [N=1, T=3, L=2, H=2, S=3]; layer 0 is noise, layer 1's heads are chosen so the
    # head mean is hand-computable: (1/3 + 0)/2 etc.
    cross = torch.zeros(1, 3, 2, 2, 3)
    cross[0, :, 0] = 0.9
    cross[0, 0, 1, 0] = torch.tensor([1 / 3, 2 / 3, 0.0])
    cross[0, 0, 1, 1] = torch.tensor([0.0, 1.0, 0.0])
    cross[0, 1, 1, 0] = torch.tensor([0.5, 0.5, 0.0])
    cross[0, 1, 1, 1] = torch.tensor([0.25, 0.75, 0.0])
    cross[0, 2, 1] = torch.tensor([0.1, 0.9, 0.0])
    hyps = build_hypotheses(
        tokens=torch.tensor([[5, 6, 2]]),
        token_log_probs=torch.zeros(1, 3),
        lengths=torch.tensor([3]),
        finished=torch.tensor([True]),
        src_mask=torch.tensor([[True, True, False]]),
        cross=cross,
        keep_attention=True,
    )
    assert hyps[0].attention.shape == (3, 2)  # + the </s> row; real source columns only

    class Vocab:
        def decode(self, ids):
            return [{5: "c", 6: "d"}[i] for i in ids]

    class Dataset:
        src_vocab = tgt_vocab = Vocab()

    class Example:
        src_tokens, tgt_tokens = ("a", "b"), ("c", "d")

    monkeypatch.setattr(evaluate, "make_batch", lambda *a: _Batch())
    monkeypatch.setattr(evaluate, "decode_best", lambda *a, **k: hyps)
    monkeypatch.setattr(evaluate, "target_text", lambda ds: None)
    samples = evaluate.sample_translations(None, Dataset(), [Example()], None, "cpu")
    # hand-computed: row 0 = (1/3 + 0)/2, (2/3 + 1)/2; row 1 = 0.375, 0.625; no </s> row
    expected = [
        {
            "index": 0,
            "src": ["a", "b"],
            "ref": ["c", "d"],
            "hyp": ["c", "d"],
            "attention": [[0.1667, 0.8333], [0.375, 0.625]],
        }
    ]
    assert samples == expected
    log = EventLog(tmp_path)
    log.emit(Sample.build(7, **samples[0]))
    log.close()
    line = (tmp_path / "events.jsonl").read_text(encoding="utf-8")
    written = json.loads(line)
    assert isinstance(written.pop("time"), float)
    assert json.dumps(written, ensure_ascii=False) == (
        '{"type": "sample", "step": 7, "index": 0, "src": ["a", "b"], "ref": ["c", "d"], '
        '"hyp": ["c", "d"], "attention": [[0.1667, 0.8333], [0.375, 0.625]]}'
    )
    # ... and it reads back as the same map
    read = AttentionMap.from_json(written["attention"], written["hyp"], written["src"])
    assert read.to_json() == expected[0]["attention"] and read.rows == ["c", "d"]


class _Batch:
    def to(self, device):
        return self

    src = src_mask = None
