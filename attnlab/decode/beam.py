"""Batched beam search, plain or diverse, with GNMT length and coverage penalties.

All sentences and all K beams of a batch advance in one ``model.step`` over A·K rows
(A sentences still searching). Per step and per sentence the top 2K candidates are taken
(per group of K/G beams for diverse search): a </s> candidate ranked in the top K
becomes a finished hypothesis, and the beam is refilled with the best K candidates that
do not end, so finished hypotheses never shrink the beam (as fairseq does).

Diverse beam search (Vijayakumar et al. 2016, "Diverse Beam Search"): the K beams form G
groups of K/G; groups are expanded one after another within a step, and group g picks by

    log P(y_t | y_<t, X) - lambda * (number of beams of groups before g that chose y_t at step t)

(Hamming diversity); scores keep the true log-probability. With G = 1 it is plain beam.

Finished hypotheses are ranked by s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
(see attnlab.decode.penalties). A sentence stops when its step budget is spent or when no
live beam can still beat its n-th best finished one (live log-probs only fall; lp(Y) is
largest at the budget; cp <= 0). With penalties (alpha or beta != 0) or diverse groups it
also stops once every group has found K/G finished hypotheses (K for plain beam), the rule
of fairseq and of CTranslate2 with penalties: there the bound is loose and the search would
otherwise run to the budget. Without penalties the score is log P and the bound is exact,
so plain beam search does not stop at K finished while a live beam still scores higher
(CTranslate2's rule without penalties: it stops when its best candidate is finished).
Hypotheses cut by the budget are returned unfinished, ranked after every finished one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from attnlab.attention_map import last_layer_head_mean
from attnlab.config import DecodeConfig
from attnlab.decode.hypothesis import Hypothesis, build_hypotheses
from attnlab.decode.order import in_input_order, longest_first
from attnlab.decode.penalties import coverage_from_totals, length_penalty, step_log_probs
from attnlab.decode.topk import search_topk
from attnlab.nn.output_layer import search_with_folded_output
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, Seq2Seq, select_state

NEG_INF = float("-inf")


@dataclass
class Pool:
    """The best P hypotheses found so far per sentence ([B, P] each), finished first.

    A hypothesis is named by its last step: ``step`` s, the decoder input ``row`` at s that
    produced it, its last ``token`` and that token's log-prob; the rest is found by
    following the beam's back-pointers.
    """

    finished: Tensor  # bool
    score: Tensor  # float64 final score (-inf: empty slot)
    step: Tensor  # long
    row: Tensor  # long
    token: Tensor  # long
    token_log_prob: Tensor  # float32

    @classmethod
    def empty(cls, batch: int, size: int, device: torch.device) -> Pool:
        long = {"dtype": torch.long, "device": device}
        return cls(
            finished=torch.zeros(batch, size, dtype=torch.bool, device=device),
            score=torch.full((batch, size), NEG_INF, dtype=torch.float64, device=device),
            step=torch.zeros(batch, size, **long),
            row=torch.zeros(batch, size, **long),
            token=torch.zeros(batch, size, **long),
            token_log_prob=torch.zeros(batch, size, device=device),
        )

    @classmethod
    def cat(cls, pools: list[Pool]) -> Pool:
        """Candidates side by side ([A, C1 + C2 + ...])."""
        if len(pools) == 1:
            return pools[0]
        return cls(
            **{f.name: torch.cat([getattr(p, f.name) for p in pools], dim=1) for f in fields(cls)}
        )

    def merge(self, sentences: Tensor, new: Pool) -> None:
        """Add candidates ``new`` ([A, C]) to the pools of ``sentences`` ([A]); keep the best P."""
        size = self.score.size(1)
        names = [f.name for f in fields(self)]
        joined = {
            n: torch.cat([getattr(self, n)[sentences], getattr(new, n)], dim=1) for n in names
        }
        # Rank by score, then (stable) put finished hypotheses first.
        by_score = joined["score"].argsort(dim=1, descending=True, stable=True)
        fin = joined["finished"].gather(1, by_score).to(torch.int8)
        order = by_score.gather(1, fin.argsort(dim=1, descending=True, stable=True))[:, :size]
        for n in names:
            getattr(self, n)[sentences] = joined[n].gather(1, order)


@search_with_folded_output
@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    budget: Tensor,
    need_attention: bool = False,
) -> list[list[Hypothesis]]:
    """Beam search over src[B, S] with ``cfg.beam`` beams; budget[B] = steps allowed per sentence.

    Returns per sentence the ``cfg.nbest`` best hypotheses, best first.
    """
    device = src.device
    batch = src.size(0)
    beams, groups = cfg.beam, cfg.groups
    group_size = beams // groups
    alpha, beta, diversity = cfg.alpha, cfg.beta, cfg.diversity
    nbest = min(cfg.nbest, beams)
    budget = budget.to(device=device, dtype=torch.long).clamp(min=1)
    with_weights = need_attention or beta != 0.0
    order = longest_first(src_mask)
    if order is not None:
        src, src_mask, budget = (t.index_select(0, order) for t in (src, src_mask, budget))

    enc = model.encode(src, src_mask)
    expand = torch.arange(batch, device=device).repeat_interleave(beams)  # [B*K]
    state = select_state(model.start_state(enc), expand)
    enc = model.beam_encoder(enc, beams)  # B*K rows, or B rows shared by each K (group)

    active = torch.arange(batch, device=device)  # sentences still searching, [A]
    # Every group starts from one beam (the others are empty), so step 0 is not K copies.
    scores = torch.full((batch, groups, group_size), NEG_INF, device=device)
    scores[:, :, 0] = 0.0
    scores = scores.view(batch, beams)  # [A, K] log P of each live beam
    prev = torch.full((batch * beams,), BOS_ID, dtype=torch.long, device=device)
    coverage = src_mask.new_zeros(batch * beams, src.size(1), dtype=torch.float32)  # [A*K, S]
    pool = Pool.empty(batch, beams, device)
    n_finished = torch.zeros(batch, groups, dtype=torch.long, device=device)  # per group
    lp_at_budget = length_penalty(budget, alpha, cfg.length_norm)  # [B] the largest lp reachable
    # Stopping at K finished is only needed where the bound below is loose (see the docstring).
    stop_at_k_finished = alpha != 0.0 or beta != 0.0 or groups > 1

    # Back-pointers per step, in the row numbering of the next step's input.
    hist_token: list[Tensor] = []
    hist_parent: list[Tensor] = []
    hist_log_prob: list[Tensor] = []
    hist_cross: list[
        Tensor | None
    ] = []  # per step [rows_in, L, H, S], numbering of that step's input

    width = int(budget.max())
    for t in range(width):
        n_active = active.size(0)
        rows_in = n_active * beams
        logits, state, cross = model.step(prev, state, enc, need_weights=with_weights)
        log_probs = step_log_probs(logits, t, cfg.min_len, in_place=True)  # [A*K, V]
        vocab = log_probs.size(1)
        if beta != 0.0:
            if cross is None:
                raise ValueError("the coverage penalty needs a model that returns cross-attention")
            # running coverage of each input row, this step's attention included
            coverage = coverage + last_layer_head_mean(cross, layer_dim=1)  # [A*K, S]
        hist_cross.append(cross.float() if (with_weights and cross is not None) else None)

        sel_scores, sel_tokens, sel_origins = [], [], []
        eos_rows, eos_logp, eos_valid = [], [], []
        counts = torch.zeros(n_active, vocab, device=device) if diversity and groups > 1 else None
        all_lp = log_probs.view(n_active, groups, group_size, vocab)
        beam_scores = scores.view(n_active, groups, group_size)
        n_cand = min(2 * group_size, group_size * vocab)
        for g in range(groups):  # groups are sequential by definition; all else is batched
            group_lp = all_lp[:, g]  # [A, Kg, V]
            if counts is not None and g > 0:
                # Hamming diversity ranks by log P - lambda * count(token); scores stay log P.
                _, beam_idx, token = search_topk(
                    beam_scores[:, g], group_lp - diversity * counts.unsqueeze(1), n_cand
                )
                true = beam_scores[:, g].gather(1, beam_idx) + group_lp.reshape(
                    n_active, -1
                ).gather(1, beam_idx * vocab + token)
            else:
                true, beam_idx, token = search_topk(beam_scores[:, g], group_lp, n_cand)  # [A, 2Kg]
            origin = beam_idx + g * group_size  # beam index within the sentence
            is_eos = token == EOS_ID
            # finished: </s> among the group's top Kg
            eos_valid.append(is_eos[:, :group_size] & torch.isfinite(true[:, :group_size]))
            eos_rows.append(origin[:, :group_size])
            eos_logp.append(true[:, :group_size])
            # refill: the best Kg candidates that do not end here
            position = torch.arange(n_cand, device=device).expand_as(token) + is_eos * n_cand
            keep = position.argsort(dim=1)[:, :group_size]  # [A, Kg]
            sel_scores.append(true.gather(1, keep))
            sel_tokens.append(token.gather(1, keep))
            sel_origins.append(origin.gather(1, keep))
            if counts is not None:
                alive = torch.isfinite(sel_scores[-1]).to(
                    counts.dtype
                )  # empty beams choose nothing
                counts.scatter_add_(1, sel_tokens[-1], alive)

        new_scores = torch.cat(sel_scores, dim=1)  # [A, K]
        new_tokens = torch.cat(sel_tokens, dim=1)  # [A, K]
        sentence_base = (torch.arange(n_active, device=device) * beams).unsqueeze(1)
        new_origin = (torch.cat(sel_origins, dim=1) + sentence_base).view(-1)  # [A*K] input rows
        new_tokens_flat = new_tokens.view(-1)
        new_token_lp = log_probs[new_origin, new_tokens_flat]  # [A*K]

        # --- finished candidates (</s>) and, at the budget, the cut live beams ------------
        eos_valid_t = torch.cat(eos_valid, dim=1)  # [A, K] a </s> in a group's top Kg
        at_budget = budget[active] <= t + 1  # [A]
        # Most steps finish nothing: then the pool stays as it is (one check each, no merge).
        any_eos, any_cut = bool(eos_valid_t.any()), bool(at_budget.any())
        if any_eos:
            n_finished[active] += eos_valid_t.view(n_active, groups, -1).sum(dim=2)
        if any_eos or any_cut:
            lp_now = float(length_penalty(torch.tensor([t + 1]), alpha, cfg.length_norm))
            parts: list[Pool] = []
            if any_eos:
                eos_row = torch.cat(eos_rows, dim=1) + sentence_base  # [A, K] input rows
                eos_score = torch.cat(eos_logp, dim=1).double() / lp_now
                if beta != 0.0:
                    n_eos = eos_row.size(1)
                    mask = src_mask[active].repeat_interleave(n_eos, 0)
                    eos_score = eos_score + coverage_from_totals(
                        coverage[eos_row.view(-1)], mask, beta
                    ).view(n_active, n_eos)
                parts.append(
                    Pool(
                        finished=eos_valid_t,
                        score=eos_score.masked_fill(~eos_valid_t, NEG_INF),
                        step=torch.full_like(eos_row, t),
                        row=eos_row,
                        token=torch.full_like(eos_row, EOS_ID),
                        token_log_prob=log_probs[eos_row.view(-1), EOS_ID].view_as(eos_row),
                    )
                )
            if any_cut:
                cut_score = new_scores.double() / lp_now
                if beta != 0.0:
                    mask = src_mask[active].repeat_interleave(beams, 0)
                    cut_score = cut_score + coverage_from_totals(
                        coverage[new_origin], mask, beta
                    ).view(n_active, beams)
                cut_valid = at_budget.unsqueeze(1) & torch.isfinite(new_scores)
                parts.append(
                    Pool(
                        finished=torch.zeros_like(cut_valid),
                        score=cut_score.masked_fill(~cut_valid, NEG_INF),
                        step=torch.full_like(new_tokens, t),
                        row=new_origin.view(n_active, beams),
                        token=new_tokens,
                        token_log_prob=new_token_lp.view_as(new_tokens),
                    )
                )
            pool.merge(active, Pool.cat(parts))

        # --- which sentences stop -------------------------------------------------------
        best_live = new_scores.max(dim=1).values.double()  # [A]
        bound = best_live / lp_at_budget[active]  # no continuation can score above this
        nth = pool.score[active, nbest - 1].masked_fill(~pool.finished[active, nbest - 1], NEG_INF)
        done = at_budget | ~torch.isfinite(best_live) | (bound <= nth)
        if stop_at_k_finished:
            done |= (n_finished[active] >= group_size).all(dim=1)  # every group found its Kg

        if bool(done.all()):
            hist_token.append(new_tokens_flat[:0])
            hist_parent.append(new_origin[:0])
            hist_log_prob.append(new_token_lp[:0])
            break
        kept_rows = torch.arange(rows_in, device=device)
        if bool(done.any()):
            still = (~done).nonzero().squeeze(1)  # [A']
            kept_rows = (still.unsqueeze(1) * beams + torch.arange(beams, device=device)).view(-1)
            active = active[still]
            new_scores = new_scores[still]
            # A sentence's rows are identical: no reorder, only its rows (or its one row) kept.
            enc = enc.keep(still if enc.group == beams else kept_rows)
        origin_kept = new_origin[kept_rows]
        state = select_state(state, origin_kept)
        if beta != 0.0:
            coverage = coverage[origin_kept]
        hist_token.append(new_tokens_flat[kept_rows])
        hist_parent.append(origin_kept)
        hist_log_prob.append(new_token_lp[kept_rows])
        scores = new_scores.float()
        prev = new_tokens_flat[kept_rows]

    nbests = _collect(
        pool,
        nbest,
        hist_token,
        hist_parent,
        hist_log_prob,
        hist_cross,
        src_mask,
        cfg,
        need_attention,
    )
    return in_input_order(nbests, order)


def _collect(
    pool: Pool,
    nbest: int,
    hist_token: list[Tensor],
    hist_parent: list[Tensor],
    hist_log_prob: list[Tensor],
    hist_cross: list[Tensor | None],
    src_mask: Tensor,
    cfg: DecodeConfig,
    need_attention: bool,
) -> list[list[Hypothesis]]:
    """Follow the back-pointers of every kept pool entry at once (vectorised over entries)."""
    batch = pool.score.size(0)
    device = pool.score.device
    valid = torch.isfinite(pool.score[:, :nbest])  # [B, n]
    sentence, slot = valid.nonzero(as_tuple=True)  # entries, sentence-major and best first
    last = pool.step[sentence, slot]  # [N]
    width = int(last.max()) + 1 if last.numel() else 1
    n = last.numel()
    tokens = torch.full((n, width), EOS_ID, dtype=torch.long, device=device)
    token_lp = torch.zeros(n, width, device=device)
    cross_all = None
    if hist_cross and hist_cross[0] is not None:
        cross_all = torch.zeros(n, width, *hist_cross[0].shape[1:], device=device)

    row = pool.row[sentence, slot]  # decoder input row at step `last`
    cursor = torch.zeros_like(row)  # new-beam row (numbering of step t+1's input)
    for t in range(width - 1, -1, -1):
        ending = last == t
        before = last > t
        if bool(before.any()):
            safe = cursor.masked_fill(~before, 0)
            step_token = hist_token[t][safe]
            step_lp = hist_log_prob[t][safe]
            step_row = hist_parent[t][safe]
        else:
            step_token = step_lp = step_row = torch.zeros_like(row)
        tokens[:, t] = torch.where(
            ending, pool.token[sentence, slot], torch.where(before, step_token, EOS_ID)
        )
        token_lp[:, t] = torch.where(
            ending, pool.token_log_prob[sentence, slot], torch.where(before, step_lp.float(), 0.0)
        )
        input_row = torch.where(ending, row, step_row)
        if cross_all is not None and (ending | before).any():
            taken = ending | before
            cross_all[taken, t] = hist_cross[t][input_row[taken]]
        cursor = input_row

    hyps = build_hypotheses(
        tokens,
        token_lp,
        last + 1,
        pool.finished[sentence, slot],
        src_mask[sentence],
        cross_all,
        alpha=cfg.alpha,
        beta=cfg.beta,
        length_norm=cfg.length_norm,
        keep_attention=need_attention,
    )
    out: list[list[Hypothesis]] = [[] for _ in range(batch)]
    for b, hyp in zip(sentence.tolist(), hyps, strict=True):
        out[b].append(hyp)
    return out
