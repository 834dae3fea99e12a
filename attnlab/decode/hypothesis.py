"""What every search returns: one hypothesis with its scores and attention."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class Hypothesis:
    tokens: list[int]  # target ids, without <s> and </s>
    score: float  # the final score the n-best list is ranked by
    log_prob: float  # sum of token log-probs (</s> included when finished)
    token_log_probs: list[float] = field(default_factory=list)
    length_penalty: float = 1.0  # lp(Y) (1.0 when alpha = 0)
    coverage_penalty: float = 0.0  # cp(X; Y) (0.0 when beta = 0)
    finished: bool = True  # ended with </s> (False: hit max_len)
    # Cross-attention, rows = tokens (+ a row for </s> when finished), columns = source:
    attention: Tensor | None = None  # [T, S], averaged over heads of the last layer
    attention_layers: Tensor | None = None  # [L, H, T, S]
