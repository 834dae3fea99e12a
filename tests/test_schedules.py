"""Teacher-forcing and learning-rate schedules against their closed forms, computed by hand."""

from __future__ import annotations

import math

import pytest

from attnlab.config import TrainConfig
from attnlab.errors import AttnlabError
from attnlab.train.schedules import (
    LRSchedule,
    default_inverse_sigmoid_k,
    lr_factor,
    teacher_forcing_ratio,
)


def tf(step: int, **kw) -> float:
    return teacher_forcing_ratio(TrainConfig(**kw), step)


def test_constant_teacher_forcing():
    assert [tf(i, teacher_forcing=0.7) for i in (0, 10, 10_000)] == [0.7, 0.7, 0.7]


def test_linear_default_slope_reaches_the_floor_at_the_last_step():
    for i in (0, 1, 25, 50, 99, 100, 150):
        expected = max(0.0, 1.0 - i / 100)
        assert tf(i, tf_schedule="linear", max_steps=100) == pytest.approx(expected)


def test_linear_with_explicit_slope_and_floor():
    for i in (0, 10, 30, 35, 100):
        expected = max(0.3, 0.9 - 0.02 * i)
        got = tf(
            i, tf_schedule="linear", teacher_forcing=0.9, tf_k=0.02, tf_min=0.3, max_steps=1000
        )
        assert got == pytest.approx(expected)


def test_exponential_is_k_to_the_i():
    for i in (0, 1, 7, 100, 500):
        assert tf(i, tf_schedule="exponential", tf_k=0.99) == pytest.approx(0.99**i)


def test_exponential_default_ends_at_five_percent():
    assert tf(0, tf_schedule="exponential", max_steps=400) == pytest.approx(1.0)
    assert tf(400, tf_schedule="exponential", max_steps=400) == pytest.approx(0.05)


def test_inverse_sigmoid_is_k_over_k_plus_exp_i_over_k():
    k = 10.0
    for i in (0, 5, 23, 60, 200):
        assert tf(i, tf_schedule="inverse-sigmoid", tf_k=k) == pytest.approx(
            k / (k + math.exp(i / k))
        )


def test_inverse_sigmoid_default_crosses_one_half_midway():
    max_steps = 3000
    k = default_inverse_sigmoid_k(max_steps)
    assert k * math.log(k) == pytest.approx(max_steps / 2, rel=1e-9)
    midpoint = k * math.log(k)  # exp(i/k) = k there, so the ratio is k / 2k
    assert teacher_forcing_ratio(
        TrainConfig(tf_schedule="inverse-sigmoid", max_steps=max_steps), round(midpoint)
    ) == pytest.approx(0.5, abs=1e-3)
    assert tf(10**9, tf_schedule="inverse-sigmoid", tf_k=5.0) == 0.0  # no overflow


def test_schedules_are_monotone_non_increasing():
    for kind in ("linear", "exponential", "inverse-sigmoid"):
        values = [tf(i, tf_schedule=kind, max_steps=200) for i in range(0, 300, 7)]
        assert all(a >= b for a, b in zip(values, values[1:], strict=False)), kind


@pytest.mark.parametrize(("kind", "k"), [("exponential", 1.5), ("inverse-sigmoid", 0.5)])
def test_invalid_decay_constant_is_refused(kind, k):
    with pytest.raises(AttnlabError, match="train.tf_k"):
        tf(3, tf_schedule=kind, tf_k=k)


def test_warmup_inverse_sqrt_by_hand():
    cfg = TrainConfig(schedule="warmup-inverse-sqrt", warmup=4)
    # s = step + 1: linear warm-up s/4 up to s = 4, then sqrt(4/s).
    expected = {0: 0.25, 1: 0.5, 3: 1.0, 8: math.sqrt(4 / 9), 15: 0.5, 99: 0.2}
    for step, value in expected.items():
        assert lr_factor(cfg, step) == pytest.approx(value)


def test_cosine_by_hand():
    cfg = TrainConfig(schedule="cosine", warmup=0, max_steps=10, lr=1.0, min_lr=0.0)
    for step in range(10):
        s = step + 1
        expected = 0.5 * (1 + math.cos(math.pi * (s - 1) / 9))
        assert lr_factor(cfg, step) == pytest.approx(expected, abs=1e-12)
    assert lr_factor(cfg, 9) == pytest.approx(0.0, abs=1e-12)
    floored = TrainConfig(schedule="cosine", warmup=5, max_steps=25, lr=0.1, min_lr=0.01)
    assert lr_factor(floored, 1) == pytest.approx(2 / 5)  # warm-up
    assert lr_factor(floored, 24) == pytest.approx(0.1)  # min_lr / lr at the end
    middle = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 10 / 20))
    assert lr_factor(floored, 14) == pytest.approx(middle)


def test_constant_lr():
    cfg = TrainConfig(lr=0.003)
    assert LRSchedule(cfg).lr(0) == LRSchedule(cfg).lr(12345) == 0.003


def test_plateau_halves_after_patience_bad_evals_and_respects_min_lr():
    cfg = TrainConfig(
        schedule="plateau",
        lr=1.0,
        plateau_factor=0.5,
        plateau_patience=1,
        min_lr=0.2,
        metric="bleu",
    )
    schedule = LRSchedule(cfg)
    schedule.on_eval(10.0)  # best
    schedule.on_eval(9.0)  # 1 bad eval: within patience
    assert schedule.lr(5) == 1.0
    schedule.on_eval(9.5)  # 2 bad evals > patience: reduce
    assert schedule.lr(5) == 0.5
    schedule.on_eval(11.0)  # improvement resets the count
    schedule.on_eval(1.0)
    schedule.on_eval(1.0)
    assert schedule.lr(5) == 0.25
    schedule.on_eval(1.0)
    schedule.on_eval(1.0)
    assert schedule.lr(5) == 0.2  # floored at min_lr

    restored = LRSchedule(cfg)
    restored.load_state_dict(schedule.state_dict())
    assert restored.state_dict() == schedule.state_dict()


def test_plateau_on_loss_treats_lower_as_better():
    cfg = TrainConfig(schedule="plateau", lr=1.0, plateau_patience=0, metric="loss")
    schedule = LRSchedule(cfg)
    schedule.on_eval(2.0)
    schedule.on_eval(1.5)
    assert schedule.lr(0) == 1.0
    schedule.on_eval(1.6)
    assert schedule.lr(0) == 0.5


def test_a_tie_in_the_best_metric_goes_to_the_lower_dev_loss_then_higher_bleu():
    from attnlab.train.schedules import best_eval_decision

    best = {"exact_match": 0.0, "loss": 3.35, "bleu": 0.03}
    assert (
        best_eval_decision("exact_match", {"exact_match": 0.0, "loss": 2.72, "bleu": 2.51}, best)
        == "loss"
    )
    assert (
        best_eval_decision("exact_match", {"exact_match": 0.0, "loss": 3.5, "bleu": 9.0}, best)
        is None
    )
    assert (
        best_eval_decision("exact_match", {"exact_match": 0.0, "loss": 3.35, "bleu": 0.5}, best)
        == "bleu"
    )
    assert (
        best_eval_decision("exact_match", dict(best), best) is None
    )  # an equal eval is not better
    assert (
        best_eval_decision("exact_match", {"exact_match": 0.1, "loss": 9.0, "bleu": 0.0}, best)
        == "exact_match"
    )
    assert best_eval_decision("bleu", {"bleu": 0.03, "loss": 1.0}, best) == "loss"
    # loss is the metric: lower wins; a tie goes to BLEU, then chrF
    assert best_eval_decision("loss", {"loss": 3.0}, best) == "loss"
    assert best_eval_decision("loss", {"loss": 3.35, "bleu": 1.0}, best) == "bleu"
    assert (
        best_eval_decision("loss", {"loss": 3.35, "bleu": 0.03, "chrf": 1.0}, {**best, "chrf": 0.5})
        == "chrf"
    )
    assert best_eval_decision("bleu", {"bleu": 1.0}, {}) == "bleu"  # the first eval is best
