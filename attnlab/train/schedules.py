"""Learning-rate and teacher-forcing schedules as closed forms of the step.

Steps ``i`` count from 0 (the first optimiser update is step 0).

Teacher forcing (scheduled sampling, Bengio et al. 2015, §2.4), the probability that a
target position reads the gold previous token, with ε₀ = ``train.teacher_forcing``:

- ``constant``:        ε_i = ε₀
- ``linear``:          ε_i = max(tf_min, ε₀ − c·i), c = ``tf_k`` or, when 0, (ε₀ − tf_min)/max_steps
  (reaches ``tf_min`` at the last step)
- ``exponential``:     ε_i = max(tf_min, ε₀·k^i), k < 1 = ``tf_k`` or, when 0, 0.05^(1/max_steps)
  (ends at 5 % of ε₀)
- ``inverse-sigmoid``: ε_i = max(tf_min, ε₀·k/(k + exp(i/k))), k ≥ 1 = ``tf_k`` or, when 0, the
  k with k·ln k = max_steps/2 (the curve crosses ε₀/2 half-way through training)

Learning rate, a factor on ``train.lr`` with s = i + 1 and w = max(warmup, 1):

- ``constant``:            1
- ``warmup-inverse-sqrt``: min(s/w, sqrt(w/s)) (linear warm-up, then 1/sqrt decay; Vaswani et al.)
- ``cosine``:              s/w during warm-up, then min_lr/lr + (1 − min_lr/lr)·½(1 + cos(π·p)),
                           p = (s − w)/(max_steps − w) clipped to [0, 1]
- ``plateau``:             multiplied by ``plateau_factor`` when more than ``plateau_patience``
                           evals in a row bring no improvement of the dev metric (``train.metric``);
                           never below min_lr (as torch's ReduceLROnPlateau)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnlab.config import TrainConfig
from attnlab.errors import AttnlabError


def default_linear_slope(start: float, floor: float, max_steps: int) -> float:
    return max(start - floor, 0.0) / max(max_steps, 1)


def default_exponential_k(max_steps: int) -> float:
    return 0.05 ** (1.0 / max(max_steps, 1))


def default_inverse_sigmoid_k(max_steps: int) -> float:
    """The k >= 1 solving k·ln(k) = max_steps / 2 (Newton's method; k·ln k is convex)."""
    target = max(max_steps, 1) / 2.0
    k = max(2.0, target / max(math.log(target + 1.0), 1.0))
    for _ in range(50):
        f = k * math.log(k) - target
        k_next = max(1.0, k - f / (math.log(k) + 1.0))
        if abs(k_next - k) < 1e-12:
            break
        k = k_next
    return k


def tf_decay_constant(cfg: TrainConfig) -> float:
    """The schedule's constant: ``tf_k`` when set, otherwise the default picked from max_steps."""
    if cfg.tf_schedule == "linear":
        return cfg.tf_k or default_linear_slope(cfg.teacher_forcing, cfg.tf_min, cfg.max_steps)
    if cfg.tf_schedule == "exponential":
        k = cfg.tf_k or default_exponential_k(cfg.max_steps)
        if k >= 1.0:
            raise AttnlabError(f"train.tf_k={k} must be below 1 for the exponential schedule")
        return k
    if cfg.tf_schedule == "inverse-sigmoid":
        k = cfg.tf_k or default_inverse_sigmoid_k(cfg.max_steps)
        if k < 1.0:
            raise AttnlabError(
                f"train.tf_k={k} must be at least 1 for the inverse-sigmoid schedule"
            )
        return k
    return 0.0


def teacher_forcing_ratio(cfg: TrainConfig, step: int) -> float:
    """ε_i for step ``i`` (see the module docstring)."""
    start, floor = cfg.teacher_forcing, min(cfg.tf_min, cfg.teacher_forcing)
    kind = cfg.tf_schedule
    if kind == "constant":
        return start
    k = tf_decay_constant(cfg)
    if kind == "linear":
        value = start - k * step
    elif kind == "exponential":
        value = start * k**step
    elif kind == "inverse-sigmoid":
        # exp(i/k) overflows for huge i/k; the ratio is 0 there anyway.
        exponent = step / k
        value = 0.0 if exponent > 700 else start * k / (k + math.exp(exponent))
    else:  # pragma: no cover - config validation rejects other names
        raise AttnlabError(f"unknown train.tf_schedule {kind!r}")
    return max(floor, value)


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """The closed-form factor on ``train.lr`` (``plateau`` is stateful: see LRSchedule)."""
    s = step + 1
    w = max(cfg.warmup, 1)
    if cfg.schedule in ("constant", "plateau"):
        return 1.0
    if cfg.schedule == "warmup-inverse-sqrt":
        return min(s / w, math.sqrt(w / s))
    if cfg.schedule == "cosine":
        if cfg.warmup > 0 and s < w:
            return s / w
        floor = min(cfg.min_lr / cfg.lr, 1.0) if cfg.lr > 0 else 0.0
        progress = min(max((s - w) / max(cfg.max_steps - w, 1), 0.0), 1.0)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise AttnlabError(f"unknown train.schedule {cfg.schedule!r}")  # pragma: no cover


# The dev metrics where lower is better (the rest: higher); attnlab.study.metrics agrees.
LOWER_IS_BETTER = frozenset({"loss", "perplexity", "bits_per_token", "aer"})


def metric_improved(metric: str, value: float, best: float | None) -> bool:
    """Higher is better except for the loss, an LM's perplexity and bits, and AER."""
    if best is None:
        return True
    return value < best if metric in LOWER_IS_BETTER else value > best


# What breaks a tie in the chosen metric (exact match often stays at 0 for many evals):
# the dev loss, then BLEU; for ``loss`` itself, BLEU then chrF.
TIE_BREAKERS = {
    "loss": ("bleu", "chrf"),
    "perplexity": ("loss",),
    "bits_per_token": ("loss",),
}
DEFAULT_TIE_BREAKERS = ("loss", "bleu")


def best_eval_decision(metric: str, result: dict[str, Any], best: dict[str, Any]) -> str | None:
    """Whether the eval ``result`` beats ``best`` (the metrics of the best eval so far).

    Returns the metric that decided (``metric``, or the tie-breaker that did) or None when
    ``result`` is not better. The first eval is always best.
    """
    if not best or best.get(metric) is None:
        return metric
    for key in (metric, *TIE_BREAKERS.get(metric, DEFAULT_TIE_BREAKERS)):
        new, old = result.get(key), best.get(key)
        if new is None or old is None or new == old:
            continue
        return key if metric_improved(key, float(new), float(old)) else None
    return None


@dataclass
class LRSchedule:
    """The learning rate per step, with reduce-on-plateau state (JSON-serialisable)."""

    cfg: TrainConfig
    plateau_scale: float = 1.0
    plateau_best: float | None = None
    plateau_bad_evals: int = 0

    def lr(self, step: int) -> float:
        lr = self.cfg.lr * lr_factor(self.cfg, step)
        if self.cfg.schedule == "plateau":
            lr = max(self.cfg.lr * self.plateau_scale, min(self.cfg.min_lr, self.cfg.lr))
        return lr

    def on_eval(self, value: float) -> None:
        """Report the dev metric (``train.metric``) after an eval; only ``plateau`` reacts."""
        if self.cfg.schedule != "plateau":
            return
        if metric_improved(self.cfg.metric, value, self.plateau_best):
            self.plateau_best = value
            self.plateau_bad_evals = 0
            return
        self.plateau_bad_evals += 1
        if self.plateau_bad_evals > self.cfg.plateau_patience:
            self.plateau_scale *= self.cfg.plateau_factor
            self.plateau_bad_evals = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "plateau_scale": self.plateau_scale,
            "plateau_best": self.plateau_best,
            "plateau_bad_evals": self.plateau_bad_evals,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.plateau_scale = float(state.get("plateau_scale", 1.0))
        best = state.get("plateau_best")
        self.plateau_best = None if best is None else float(best)
        self.plateau_bad_evals = int(state.get("plateau_bad_evals", 0))
