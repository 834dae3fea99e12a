"""mqar, selective-copy, induction and listops checked against the rules of the papers that
defined them (Zoology's MQAR generator, Mamba's selective copying and induction heads, Long
Range Arena's ListOps), with references written here independently of the generators."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from attnlab.config import DataConfig
from attnlab.data.listops import draw_tree, evaluate
from attnlab.data.synthetic import power_law_weights, top_k_without_replacement
from attnlab.data.tasks import TASKS
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, load_preset
from attnlab.train.trainer import Trainer


def splits(task: str, **fields):
    cfg = DataConfig(task=task, train_size=400, dev_size=50, test_size=50, **fields)
    return TASKS.get(task).factory(cfg)


def ints(tokens) -> list[int]:
    return [int(t) for t in tokens]


# --- mqar ----------------------------------------------------------------------------------


def test_mqar_follows_zoologys_rules():
    vocab, n, length = 64, 6, 48
    for ex in splits("mqar", vocab_size=vocab, kv_pairs=n, max_len=length).train:
        src, tgt = ints(ex.src_tokens), ints(ex.tgt_tokens)
        assert len(src) == length and len(tgt) == n
        keys, values = src[0 : 2 * n : 2], src[1 : 2 * n : 2]
        assert all(1 <= k < vocab // 2 for k in keys) and len(set(keys)) == n  # never token 0
        assert all(vocab // 2 <= v < vocab for v in values)
        bound = dict(zip(keys, values, strict=True))
        region = src[2 * n :]
        queried = [(i, tok) for i, tok in enumerate(region) if tok != 0]
        assert sorted(tok for _, tok in queried) == sorted(keys)  # each key queried once
        assert all(i % 2 == 0 for i, _ in queried)  # at even offsets; the rest is filler 0
        assert tgt == [bound[tok] for _, tok in queried]  # values in query order
        assert [src[a] for a in ex.alignment] == tgt  # gold: each answer's value token


def test_mqar_query_placement_has_zoologys_power_law_mean():
    # One pair: the query's gap g has p(g) ∝ a (g+1)^(a-1) over g = 0 .. space-1, so its mean
    # offset in the query region is 2 Σ g p(g). Compared within 4 standard errors.
    a, length = 0.5, 40
    space = (length - 2) // 2
    p = [a * (g + 1) ** (a - 1) for g in range(space)]
    p = [w / sum(p) for w in p]
    mean = 2 * sum(g * w for g, w in enumerate(p))
    sd = 2 * math.sqrt(sum((g - mean / 2) ** 2 * w for g, w in enumerate(p)))
    cfg = dict(vocab_size=16, kv_pairs=1, max_len=length, power_a=a)
    train = (
        TASKS.get("mqar")
        .factory(DataConfig(task="mqar", train_size=4000, dev_size=1, test_size=1, **cfg))
        .train
    )
    offsets = [next(i for i, t in enumerate(ints(e.src_tokens)[2:]) if t) for e in train]
    assert abs(np.mean(offsets) - mean) < 4 * sd / math.sqrt(len(offsets))


def test_gumbel_top_k_matches_sequential_draws_without_replacement():
    # The first two draws' law, by hand: P(i then j) = p_i · p_j / (1 - p_i).
    weights = np.array([0.5, 0.3, 0.15, 0.05])
    draws = top_k_without_replacement(np.random.default_rng(0), weights, 40000, 2)
    for i, j in [(0, 1), (1, 0), (2, 3), (3, 0)]:
        expected = weights[i] * weights[j] / (1 - weights[i])
        seen = np.mean((draws[:, 0] == i) & (draws[:, 1] == j))
        assert abs(seen - expected) < 4 * math.sqrt(expected * (1 - expected) / len(draws))
    assert all(len(set(row)) == 2 for row in draws.tolist())


def test_power_law_of_one_is_uniform():
    assert np.allclose(power_law_weights(5, 1.0), 0.2)


def test_mqar_refuses_a_vocabulary_or_length_too_small():
    with pytest.raises(AttnlabError, match="data.kv_pairs=8"):
        splits("mqar", vocab_size=16, kv_pairs=8, max_len=64)
    with pytest.raises(AttnlabError, match="at least 32 tokens"):
        splits("mqar", vocab_size=64, kv_pairs=8, max_len=20)


# --- selective copying and induction -----------------------------------------------------


def test_selective_copy_targets_the_data_tokens_in_order():
    for ex in splits("selective-copy", vocab_size=10, copy_tokens=5, max_len=30).train:
        src, tgt = ints(ex.src_tokens), ints(ex.tgt_tokens)
        assert len(src) == 30
        assert tgt == [t for t in src if t != 0] and len(tgt) == 5  # noise is token 0
        assert list(ex.alignment) == [i for i, t in enumerate(src) if t != 0]


def test_induction_target_follows_the_special_token():
    for ex in splits("induction", vocab_size=12, max_len=20).train:
        src, tgt = ints(ex.src_tokens), ints(ex.tgt_tokens)
        specials = [i for i, t in enumerate(src) if t == 1]
        assert len(specials) == 2 and specials[1] == len(src) - 1  # once inside, once last
        assert tgt == [src[specials[0] + 1]] and tgt[0] != 1


# --- listops -------------------------------------------------------------------------------


def reference_value(tokens: list[str]) -> int:
    """A recursive-descent evaluator, independent of the generator's stack machine."""

    def parse(i: int) -> tuple[int, int]:
        if tokens[i].isdigit():
            return int(tokens[i]), i + 1
        op, i, args = tokens[i], i + 1, []
        while tokens[i] != "]":
            value, i = parse(i)
            args.append(value)
        if op == "[MIN":
            return min(args), i + 1
        if op == "[MAX":
            return max(args), i + 1
        if op == "[SM":
            return sum(args) % 10, i + 1
        ordered = sorted(args)  # [MED: numpy's median (mean of the middle two), truncated
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return int(median), i + 1

    value, end = parse(0)
    assert end == len(tokens)
    return value


def test_listops_targets_equal_an_independent_evaluator():
    data = splits("listops", min_len=5, max_len=80, max_depth=6, max_args=5)
    for ex in [*data.train, *data.test]:
        assert 5 <= len(ex.src_tokens) <= 80
        assert ex.tgt_tokens == (str(reference_value(list(ex.src_tokens))),)


def test_listops_hand_cases():
    assert evaluate(["[MED", "1", "2", "]"]) == 1  # median 1.5, truncated as LRA does
    assert evaluate(["[SM", "9", "8", "[MAX", "1", "7", "]", "]"]) == 4
    assert evaluate(["[MIN", "5", "[MED", "3", "9", "4", "]", "6", "]"]) == 4


def test_listops_trees_follow_lras_depth_and_argument_rules():
    rng = random.Random(0)
    for _ in range(300):
        tokens = draw_tree(rng, 1, 4, 3)
        depth = widest = 0
        stack: list[int] = []
        for t in tokens:
            if t.startswith("["):
                if stack:
                    stack[-1] += 1
                stack.append(0)
                depth = max(depth, len(stack))
            elif t == "]":
                args = stack.pop()
                assert 2 <= args <= 3
                widest = max(widest, args)
            elif stack:
                stack[-1] += 1
        assert depth <= 3  # operators only above max_depth 4: at depth 4 a digit is forced


# --- every task ----------------------------------------------------------------------------

TASK_FIELDS = {
    "mqar": dict(vocab_size=32, kv_pairs=4, max_len=32),
    "selective-copy": dict(vocab_size=8, copy_tokens=4, max_len=24),
    "induction": dict(vocab_size=8, max_len=16),
    "listops": dict(min_len=5, max_len=40, max_depth=5, max_args=4),
}


@pytest.mark.parametrize("task", sorted(TASK_FIELDS))
def test_splits_are_deterministic_and_dev_test_unseen_in_train(task):
    first, again = splits(task, **TASK_FIELDS[task]), splits(task, **TASK_FIELDS[task])
    assert first.train == again.train and first.test == again.test
    other = splits(task, **TASK_FIELDS[task], seed=99)
    assert other.train != first.train
    train = {e.src_tokens for e in first.train}
    assert not any(e.src_tokens in train for e in first.dev + first.test)


@pytest.mark.parametrize(
    "preset",
    [
        "mqar-transformer",
        "selective-copy-transformer",
        "induction-transformer",
        "listops-transformer",
    ],
)
def test_the_task_presets_train(tmp_path, preset):
    config = load_preset(preset)
    config = apply_overrides(
        config,
        [
            "data.train_size=64",
            "data.dev_size=8",
            "data.test_size=8",
            "model.d_model=16",
            "model.heads=2",
            "model.ff=32",
            "model.enc_layers=1",
            "model.dec_layers=1",
            "train.max_steps=2",
            "train.batch_size=8",
            "train.eval_every=2",
        ],
    )
    if config.data.task == "listops":
        config = replace(config, data=replace(config.data, max_len=60))
    summary = Trainer(config, tmp_path / "run", device="cpu").run()
    assert summary["reason"] == "finished" and summary["step"] == 2


@pytest.mark.parametrize("task", ["mqar", "listops"])
def test_data_export_round_trips_through_the_tsv_corpus_reader(tmp_path, task):
    from click.testing import CliRunner

    from attnlab.cli import cli
    from attnlab.data.dataset import load_dataset

    out = tmp_path / "dev.tsv"
    fields = {**TASK_FIELDS[task], "train_size": 400, "dev_size": 50, "test_size": 50}
    sets = [f"data.{k}={v}" for k, v in fields.items()]
    args = ["data", "export", task, "--split", "dev", "--out", str(out)]
    result = CliRunner().invoke(cli, [*args, *(a for s in sets for a in ("--set", s))])
    assert result.exit_code == 0, result.output
    assert not out.read_text().startswith("source")  # no header
    expected = TASKS.get(task).factory(DataConfig(task=task, **fields)).dev
    back = load_dataset(DataConfig(task="corpus", path=str(out))).splits
    pairs = sorted((e.src_tokens, e.tgt_tokens) for e in back.train + back.dev + back.test)
    assert pairs == sorted((e.src_tokens, e.tgt_tokens) for e in expected)
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "exists; add --force" in again.output


def test_top_k_drawn_in_chunks_equals_one_draw_of_every_key(monkeypatch):
    """The chunked, in-place Gumbel-top-k gives what one [rows, n] draw of the keys gives."""
    import numpy as np

    import attnlab.data.synthetic as synthetic

    weights = synthetic.power_law_weights(50, 0.3)

    def one_draw(rng):
        keys = np.log(weights)[None, :] + rng.gumbel(size=(37, weights.size))
        top = np.argpartition(-keys, 4, axis=1)[:, :5]
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    monkeypatch.setattr(synthetic, "TOP_K_CHUNK_CELLS", 3 * 50)  # 3 rows a chunk
    chunked = synthetic.top_k_without_replacement(np.random.default_rng(4), weights, 37, 5)
    assert np.array_equal(chunked, one_draw(np.random.default_rng(4)))
