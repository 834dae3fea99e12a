"""Batched greedy decoding: one ``model.step`` per time step for the whole batch.

Sentences that have produced </s> (or reached their own max length) leave the batch:
their rows are dropped from the decoder state and the encoder output, so a long sentence
does not make the finished ones pay for its extra steps.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from attnlab.decode.hypothesis import Hypothesis, build_hypotheses
from attnlab.decode.order import in_input_order, longest_first
from attnlab.decode.penalties import step_log_probs
from attnlab.decode.topk import row_argmax
from attnlab.nn.output_layer import search_with_folded_output
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, Seq2Seq, keep_state


def max_lengths(src_mask: Tensor, ratio: float, const: int) -> Tensor:
    """Per-sentence step budget ceil(ratio * |X|) + const (at least 1); src_mask[B, S] -> [B]."""
    src_len = src_mask.sum(dim=1).to(torch.float64)
    # Rounded first: the float product can land just above an integer (1.1 * 50 =
    # 55.000000000000007), and ceil would then add a step the decimal ratio does not give.
    product = torch.round(ratio * src_len, decimals=9)
    return (torch.ceil(product) + const).clamp(min=1).long()


def as_lengths(max_len: int | Tensor, batch: int, device: torch.device) -> Tensor:
    """An int or a [B] tensor of step budgets -> [B] long tensor on ``device``."""
    if isinstance(max_len, Tensor):
        lengths = max_len.to(device=device, dtype=torch.long).reshape(-1)
        if lengths.numel() != batch:
            raise ValueError(f"max_len has {lengths.numel()} entries for a batch of {batch}")
        return lengths.clamp(min=1)
    return torch.full((batch,), max(1, int(max_len)), dtype=torch.long, device=device)


# pick(log_probs[R, V], rows[R]) -> tokens[R]: how one step chooses (arg-max, sampling).
TokenPicker = Callable[[Tensor, Tensor], Tensor]


def pick_argmax(log_probs: Tensor, rows: Tensor) -> Tensor:
    return row_argmax(log_probs)  # = log_probs.argmax(-1), faster on CPU


@torch.no_grad()
def greedy_decode(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_len: int | Tensor,
    need_attention: bool = False,
    min_len: int = 0,
    alpha: float = 0.0,
    beta: float = 0.0,
    length_norm: str = "gnmt",
) -> list[Hypothesis]:
    """Arg-max decoding of src[B, S]; one Hypothesis per sentence, in input order.

    ``max_len`` is the number of decoding steps allowed (</s> included), an int or one per
    sentence ([B]). ``alpha``/``beta`` only fill in the reported penalties and score.
    """
    order = longest_first(src_mask)
    if order is not None:
        src, src_mask = src.index_select(0, order), src_mask.index_select(0, order)
        if isinstance(max_len, Tensor):
            max_len = max_len.to(src.device).index_select(0, order)
    hypotheses = decode_one_path(
        model,
        src,
        src_mask,
        max_len,
        pick_argmax,
        need_attention,
        min_len,
        alpha,
        beta,
        length_norm,
    )
    return in_input_order(hypotheses, order)


@search_with_folded_output
@torch.no_grad()
def decode_one_path(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    max_len: int | Tensor,
    pick: TokenPicker,
    need_attention: bool = False,
    min_len: int = 0,
    alpha: float = 0.0,
    beta: float = 0.0,
    length_norm: str = "gnmt",
    copies: int = 1,
) -> list[Hypothesis]:
    """One path per row, one ``model.step`` per time step for all rows (greedy, sampling).

    With ``copies`` > 1 each sentence is decoded ``copies`` times (rows b*copies ... ,
    the encoder runs once per sentence). Reported log-probs are the model's own
    (constrained) distribution, whatever ``pick`` does.
    """
    device = src.device
    enc = model.encode(src, src_mask)
    if copies > 1:
        expand = torch.arange(src.size(0), device=device).repeat_interleave(copies)
        enc = enc.index_select(expand)
        src_mask = src_mask.index_select(0, expand)
        if isinstance(max_len, Tensor):
            max_len = max_len.to(device).index_select(0, expand)
    batch = src_mask.size(0)
    budget = as_lengths(max_len, batch, device)  # [N]
    width = int(budget.max())
    with_weights = need_attention or beta != 0.0

    state = model.start_state(enc)
    # Per step only what the next step needs is computed; tokens, log-probs and attention
    # of all steps are written into the [N, T] results once, after the loop.
    step_rows: list[Tensor] = []  # original row of each row decoded at step t
    step_tokens: list[Tensor] = []
    step_lp: list[Tensor] = []
    step_cross: list[Tensor] = []
    rows = torch.arange(batch, device=device)  # original index of each row still decoding
    row_budget = budget  # the step budget of each row still decoding
    prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    for t in range(width):
        logits, state, cross = model.step(prev, state, enc, need_weights=with_weights)
        log_probs = step_log_probs(logits, t, min_len, in_place=True)  # [R, V]
        chosen = pick(log_probs, rows)  # [R]
        step_rows.append(rows)
        step_tokens.append(chosen)
        step_lp.append(log_probs.gather(1, chosen.unsqueeze(1)).squeeze(1))
        if with_weights and cross is not None:
            step_cross.append(cross.float())
        keep = (chosen != EOS_ID) & (row_budget > t + 1)  # [R]
        n_keep = int(keep.sum())  # the one host sync of a step
        if n_keep == 0:
            break
        if n_keep < keep.numel():
            # Drop finished rows from the batch (state, encoder output, inputs).
            kept = keep.nonzero().squeeze(1)
            rows, prev, row_budget = rows[kept], chosen[kept], row_budget[kept]
            state = keep_state(state, kept)
            enc = enc.keep(kept)
        else:
            prev = chosen

    # Row r took steps 0 .. lengths[r]-1, so its entries are (r, 0), (r, 1), ...
    counts = torch.tensor([r.numel() for r in step_rows], device=device)
    all_rows = torch.cat(step_rows)
    all_steps = torch.repeat_interleave(torch.arange(len(step_rows), device=device), counts)
    tokens = torch.full((batch, width), EOS_ID, dtype=torch.long, device=device)
    tokens[all_rows, all_steps] = torch.cat(step_tokens)
    token_lp = torch.zeros(batch, width, device=device)
    token_lp[all_rows, all_steps] = torch.cat(step_lp).float()
    lengths = torch.bincount(all_rows, minlength=batch)
    finished = tokens.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1) == EOS_ID  # ended with </s>
    cross_all: Tensor | None = None  # [N, T, L, H, S]
    if step_cross:
        first = step_cross[0]
        cross_all = first.new_zeros(batch, width, *first.shape[1:])
        cross_all[all_rows, all_steps] = torch.cat(step_cross)

    return build_hypotheses(
        tokens,
        token_lp,
        lengths,
        finished,
        src_mask,
        cross_all,
        alpha=alpha,
        beta=beta,
        length_norm=length_norm,
        keep_attention=need_attention,
    )
