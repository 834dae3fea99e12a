"""What every search returns: one hypothesis with its scores and attention."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnlab.attention_map import last_layer_head_mean
from attnlab.decode.penalties import coverage_penalty, final_score, length_penalty


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


def build_hypotheses(
    tokens: Tensor,
    token_log_probs: Tensor,
    lengths: Tensor,
    finished: Tensor,
    src_mask: Tensor,
    cross: Tensor | None,
    alpha: float = 0.0,
    beta: float = 0.0,
    length_norm: str = "gnmt",
    keep_attention: bool = False,
) -> list[Hypothesis]:
    """Turn N decoded rows into Hypothesis objects with their penalties and final score.

    tokens[N, T] and token_log_probs[N, T]: what each step produced (</s> included);
    lengths[N]: steps taken (scored tokens, </s> included when finished); finished[N] bool;
    src_mask[N, S]; cross[N, T, L, H, S] or None. Attention is cut to the hypothesis's
    steps and to the real source positions.
    """
    n, width = tokens.shape
    steps = torch.arange(width, device=tokens.device)
    taken = steps.unsqueeze(0) < lengths.unsqueeze(1)  # [N, T]
    token_log_probs = token_log_probs.masked_fill(~taken, 0.0)
    log_prob = token_log_probs.to(torch.float64).sum(dim=1)  # [N]
    lp = length_penalty(lengths, alpha, length_norm)
    head_mean = None
    if cross is not None:
        cross = cross.float().masked_fill(~taken[:, :, None, None, None], 0.0)
        head_mean = last_layer_head_mean(cross, layer_dim=2)  # [N, T, S]
    if beta != 0.0 and head_mean is None:
        raise ValueError("the coverage penalty needs the cross-attention (need_weights=True)")
    cp = (
        coverage_penalty(head_mean, src_mask, beta)
        if head_mean is not None
        else torch.zeros(n, dtype=torch.float64, device=log_prob.device)
    )
    score = final_score(log_prob, lp, cp)

    # Whole tensors to Python lists at once: indexing a tensor per row costs microseconds
    # per element, more than the search step of a short sentence.
    rows_tokens = tokens.tolist()
    rows_lp = token_log_probs.tolist()
    rows_len = lengths.tolist()
    rows_fin = finished.tolist()
    rows_score, rows_log_prob = score.tolist(), log_prob.tolist()
    rows_length_penalty, rows_coverage = lp.tolist(), cp.tolist()
    out = []
    for i in range(n):
        length, done = int(rows_len[i]), bool(rows_fin[i])
        hyp = Hypothesis(
            tokens=rows_tokens[i][: length - 1 if done else length],
            score=float(rows_score[i]),
            log_prob=float(rows_log_prob[i]),
            token_log_probs=rows_lp[i][:length],
            length_penalty=float(rows_length_penalty[i]),
            coverage_penalty=float(rows_coverage[i]),
            finished=done,
        )
        if keep_attention and cross is not None:
            real = src_mask[i]
            layers = cross[i, :length][..., real].permute(1, 2, 0, 3).contiguous()  # [L, H, T, S]
            hyp.attention_layers = layers.cpu()
            hyp.attention = last_layer_head_mean(layers).cpu()  # [T, S]
        out.append(hyp)
    return out
