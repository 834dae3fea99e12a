"""Batched beam search: exactness on a tiny model, penalties, diverse groups, batching."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from _decode_fakes import (
    HashModel,
    assert_batch_decodes_as_alone,
    exhaustive_best,
    pad_batch,
    sequence_log_prob,
)

from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig
from attnlab.decode.beam import beam_search
from attnlab.decode.greedy import greedy_decode
from attnlab.decode.penalties import step_log_probs
from attnlab.decode.search import decode_batch
from attnlab.nn.model import ARCHITECTURES, build_model
from attnlab.nn.seq2seq import BOS_ID, EOS_ID

SOURCES = [[5, 6, 7], [8, 4], [9, 10, 11, 12, 13], [4]]
WORDS = [1, 4, 5]  # what the vocab-6 model may produce besides </s> (<pad>, <s> are blocked)


def beam(model, sources, steps, **options):
    src, mask = pad_batch(sources)
    cfg = DecodeConfig(**options)
    return beam_search(
        model, src, mask, cfg, torch.full((len(sources),), steps), need_attention=True
    )


def enumerate_finished(model, src, steps):
    """Every finished sequence of at most ``steps`` steps, its float64 log-prob and attention."""
    out = []
    for length in range(steps):
        for body in itertools.product(WORDS, repeat=length):
            seq = [*body, EOS_ID]
            out.append(
                (list(body), sequence_log_prob(model, src, seq), attention_of(model, src, seq))
            )
    return out


def attention_of(model, src, seq):
    """[T, S] last-layer head-mean cross-attention of ``seq`` (one sentence, step by step)."""
    s = torch.tensor([src])
    enc = model.encode(s, torch.ones_like(s, dtype=torch.bool))
    state = model.start_state(enc)
    rows, prev = [], BOS_ID
    for token in seq:
        _, state, cross = model.step(torch.tensor([prev]), state, enc, need_weights=True)
        rows.append(cross[0, -1].double().mean(dim=0))
        prev = token
    return torch.stack(rows)


def gnmt_by_hand(log_prob, attention, steps, alpha, beta):
    lp = ((5.0 + steps) / 6.0) ** alpha
    cp = 0.0
    for i in range(attention.shape[1]):
        total = 0.0
        for t in range(attention.shape[0]):
            total += float(attention[t, i])
        cp += math.log(min(total, 1.0))
    return log_prob / lp + beta * cp, lp, beta * cp


def test_beam_of_one_equals_greedy():
    model = HashModel(eos_bias=0.4)
    src, mask = pad_batch(SOURCES)
    greedy = greedy_decode(model, src, mask, max_len=7, need_attention=True)
    beamed = beam(model, SOURCES, 7, beam=1)
    for g, (b,) in zip(greedy, beamed, strict=True):
        assert b.tokens == g.tokens
        assert b.finished == g.finished
        assert b.log_prob == pytest.approx(g.log_prob, abs=1e-5)
        torch.testing.assert_close(b.attention_layers, g.attention_layers)


@pytest.mark.parametrize("salt", [0.0, 1.0, 2.0, 3.0])
def test_wide_beam_returns_the_exhaustive_arg_max(salt):
    model = HashModel(vocab=6, salt=salt, eos_bias=0.5)
    src = [5, 6, 7]
    best_tokens, best_score = exhaustive_best(model, src, 4, WORDS)
    ((top, *_),) = beam(model, [src], 4, beam=60)  # 2K candidates cover every expansion
    assert top.finished
    assert top.tokens == best_tokens
    assert top.log_prob == pytest.approx(best_score, abs=1e-5)


def test_beam_beats_greedy_where_greedy_is_not_optimal():
    found = 0
    for salt in range(12):
        model = HashModel(vocab=6, salt=float(salt), eos_bias=0.5)
        best_tokens, best_score = exhaustive_best(model, [5, 6, 7], 4, WORDS)
        src, mask = pad_batch([[5, 6, 7]])
        (greedy,) = greedy_decode(model, src, mask, max_len=4)
        if greedy.finished and greedy.tokens == best_tokens:
            continue
        found += 1
        ((top, *_),) = beam(model, [[5, 6, 7]], 4, beam=60)
        assert top.tokens == best_tokens
        assert top.log_prob > greedy.log_prob
    assert found >= 2  # the model really makes greedy search fail


def test_nbest_list_is_the_exhaustive_top_n():
    model = HashModel(vocab=6, salt=0.5, eos_bias=0.5)
    ranked = sorted(enumerate_finished(model, [9, 4], 4), key=lambda e: e[1], reverse=True)
    (nbest,) = beam(model, [[9, 4]], 4, beam=60, nbest=5)
    assert [h.tokens for h in nbest] == [e[0] for e in ranked[:5]]
    assert [h.log_prob for h in nbest] == pytest.approx([e[1] for e in ranked[:5]], abs=1e-5)


@pytest.mark.parametrize("alpha,beta", [(0.6, 0.0), (0.0, 0.4), (1.0, 0.3)])
def test_penalised_search_ranks_by_the_gnmt_score(alpha, beta):
    model = HashModel(vocab=6, salt=1.5, eos_bias=-0.5)
    src = [5, 6, 7]
    by_hand = []
    for tokens, log_prob, attention in enumerate_finished(model, src, 4):
        score, lp, cp = gnmt_by_hand(log_prob, attention, len(tokens) + 1, alpha, beta)
        by_hand.append((tokens, score, lp, cp))
    by_hand.sort(key=lambda e: e[1], reverse=True)
    (nbest,) = beam(model, [src], 4, beam=60, nbest=3, alpha=alpha, beta=beta)
    assert [h.tokens for h in nbest] == [e[0] for e in by_hand[:3]]
    for hyp, (_, score, lp, cp) in zip(nbest, by_hand, strict=False):
        assert hyp.length_penalty == pytest.approx(lp)
        assert hyp.coverage_penalty == pytest.approx(cp, abs=1e-5)
        assert hyp.score == pytest.approx(score, abs=1e-5)


def test_fairseq_length_normalisation():
    model = HashModel(vocab=6, salt=1.5, eos_bias=-0.5)
    (nbest,) = beam(model, [[5, 6, 7]], 4, beam=60, nbest=4, alpha=1.0, length_norm="fairseq")
    for hyp in nbest:
        steps = len(hyp.tokens) + 1
        assert hyp.length_penalty == pytest.approx(steps)
        assert hyp.score == pytest.approx(hyp.log_prob / steps)
    assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)


def test_penalties_off_means_score_is_log_prob():
    model = HashModel(eos_bias=0.3)
    for nbest in beam(model, SOURCES, 6, beam=4, nbest=4):
        for hyp in nbest:
            assert (hyp.length_penalty, hyp.coverage_penalty) == (1.0, 0.0)
            assert hyp.score == pytest.approx(hyp.log_prob)
            assert hyp.log_prob == pytest.approx(sum(hyp.token_log_probs), abs=1e-5)


def test_every_hypothesis_carries_its_own_attention():
    model = HashModel(eos_bias=0.3)
    for sentence, nbest in zip(SOURCES, beam(model, SOURCES, 6, beam=4, nbest=4), strict=True):
        for hyp in nbest:
            seq = hyp.tokens + ([EOS_ID] if hyp.finished else [])
            assert hyp.attention_layers.shape == (2, 2, len(seq), len(sentence))
            torch.testing.assert_close(hyp.attention.double(), attention_of(model, sentence, seq))
            assert hyp.log_prob == pytest.approx(sequence_log_prob(model, sentence, seq), abs=1e-5)


def test_beam_alone_equals_inside_a_padded_batch():
    model = HashModel(eos_bias=0.2)
    batched = beam(model, SOURCES, 8, beam=5, nbest=3, alpha=0.6, beta=0.2)
    for sentence, together in zip(SOURCES, batched, strict=True):
        (alone,) = beam(model, [sentence], 8, beam=5, nbest=3, alpha=0.6, beta=0.2)
        assert [h.tokens for h in alone] == [h.tokens for h in together]
        assert [h.score for h in alone] == pytest.approx([h.score for h in together], abs=1e-5)


def test_budget_cut_hypotheses_are_unfinished_and_ranked_last():
    model = HashModel(eos_bias=-100.0)  # never ends by itself
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(beam=3, nbest=3)
    out = beam_search(model, src, mask, cfg, torch.tensor([2, 3, 1, 4]))
    for nbest, steps in zip(out, [2, 3, 1, 4], strict=True):
        assert len(nbest) == 3 and not any(h.finished for h in nbest)
        assert all(len(h.tokens) == steps for h in nbest)
    model = HashModel(vocab=6, eos_bias=0.0)
    (mixed,) = beam(model, [[5, 6]], 3, beam=6, nbest=6)
    flags = [h.finished for h in mixed]
    assert flags == sorted(flags, reverse=True)


def test_min_len_blocks_end_of_sentence_in_beam():
    model = HashModel(eos_bias=100.0)
    for nbest in beam(model, SOURCES, 8, beam=3, nbest=3, min_len=2):
        assert all(len(h.tokens) == 2 and h.finished for h in nbest)


def test_diverse_beam_with_one_group_is_plain_beam():
    model = HashModel(eos_bias=0.2)
    plain = beam(model, SOURCES, 7, beam=4, nbest=4)
    one_group = beam(model, SOURCES, 7, beam=4, nbest=4, groups=1, diversity=5.0)
    assert [[h.tokens for h in n] for n in plain] == [[h.tokens for h in n] for n in one_group]


def test_diverse_groups_differ_when_diversity_is_positive():
    model = HashModel(eos_bias=-100.0)
    same = beam(model, SOURCES, 4, beam=3, nbest=3, groups=3, diversity=0.0)
    diverse = beam(model, SOURCES, 4, beam=3, nbest=3, groups=3, diversity=50.0)
    for nbest in same:  # without the penalty every group runs the same search
        assert len({tuple(h.tokens) for h in nbest}) == 1
    for nbest in diverse:  # with it the groups pick different tokens at every step
        assert len({h.tokens[0] for h in nbest}) == 3
        for t in range(4):
            assert len({h.tokens[t] for h in nbest}) == 3


def test_decode_batch_dispatches_to_beam():
    model = HashModel(eos_bias=0.2)
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(beam=4, nbest=2, max_len_ratio=1.0, max_len_const=3)
    out = decode_batch(model, src, mask, cfg)
    budget = torch.tensor([math.ceil(len(s)) + 3 for s in SOURCES])
    expected = beam_search(model, src, mask, cfg, budget)
    assert [[h.tokens for h in n] for n in out] == [[h.tokens for h in n] for n in expected]
    assert all(len(n) == 2 for n in out)


@pytest.mark.parametrize("arch", ARCHITECTURES.names())  # every registered architecture
def test_real_model_beam_alone_equals_batched(arch):
    torch.manual_seed(0)
    model = build_model(ExperimentConfig(model=ModelConfig(arch=arch)), 20, 15).eval()
    src, mask = pad_batch(SOURCES)
    assert_batch_decodes_as_alone(
        model, SOURCES, DecodeConfig(beam=4, nbest=2, alpha=0.6, beta=0.2)
    )
    # beam 1 through decode_batch's beam path equals greedy on the real model too
    greedy = greedy_decode(model, src, mask, max_len=12)
    one = beam_search(model, src, mask, DecodeConfig(beam=1), torch.full((4,), 12))
    assert [g.tokens for g in greedy] == [n[0].tokens for n in one]


def reference_beam(
    model, src: list[int], beams: int, steps: int, alpha: float = 0.0, k_finished: bool = False
):
    """One sentence, Python lists, every one of the K·V candidates ranked each step.

    The same rules as beam_search (top 2K candidates; a </s> in the top K finishes, the best
    K that do not end refill the beam; stop at the budget, and with alpha != 0 when K have
    finished; with alpha = 0 when the best finished one scores at least the best live beam,
    CTranslate2's rule; ``k_finished`` forces the K-finished rule), written without batching
    and without the two-stage top-k.
    Returns (tokens, score, finished) of the best hypothesis, in float64: the best finished
    one, or when none finished the best one cut by the budget.
    """
    s = torch.tensor([src])
    enc = model.encode(s, torch.ones_like(s, dtype=torch.bool))
    live: list = [([], 0.0, model.start_state(enc))]
    finished = []
    for t in range(steps):
        cands = []
        for tokens, score, state in live:
            prev = torch.tensor([tokens[-1] if tokens else BOS_ID])
            logits, new_state, _ = model.step(prev, state, enc)
            for v, lp in enumerate(step_log_probs(logits.double(), t)[0].tolist()):
                if math.isfinite(lp):
                    cands.append((score + lp, tokens + [v], new_state))
        cands.sort(key=lambda c: -c[0])
        cands = cands[: 2 * beams]
        for score, tokens, _ in cands[:beams]:
            if tokens[-1] == EOS_ID:
                finished.append((tokens[:-1], score / ((5.0 + len(tokens)) / 6.0) ** alpha))
        live = [(tokens, score, state) for score, tokens, state in cands if tokens[-1] != EOS_ID][
            :beams
        ]
        if alpha != 0.0 or k_finished:
            if len(finished) >= beams:
                break
        elif finished and (not live or max(f[1] for f in finished) >= live[0][1]):
            break
    if finished:
        return (*max(finished, key=lambda f: f[1]), True)
    tokens, score, _ = live[0]
    return tokens, score / ((5.0 + len(tokens)) / 6.0) ** alpha, False


@pytest.mark.parametrize(
    "chunk", [64, 6]
)  # 64: plain topk at V = 40; 6: chunk maxima + a tail of 4
@pytest.mark.parametrize(("beams", "alpha"), [(5, 0.0), (4, 1.0), (2, 0.6)])
def test_beam_equals_a_reference_that_ranks_every_candidate(beams, alpha, chunk, monkeypatch):
    """Beam search, with either top-k path, equals a search that ranks all K·V candidates."""
    monkeypatch.setattr("attnlab.decode.topk.CHUNK", chunk)
    model = HashModel(vocab=40, scale=3.0)  # greedy runs to the budget, beam finds shorter ends
    sources = [[5, 6, 7, 8], [9, 4], [10, 11, 12, 13, 14, 15], [4]]
    src, mask = pad_batch(sources)
    out = beam_search(
        model, src, mask, DecodeConfig(beam=beams, alpha=alpha), torch.full((len(sources),), 12)
    )
    for sentence, (best, *_) in zip(sources, out, strict=True):
        tokens, score, finished = reference_beam(model, sentence, beams, 12, alpha)
        assert (best.tokens, best.finished) == (tokens, finished)
        assert best.score == pytest.approx(score, abs=1e-4)


class PrefixTableModel(HashModel):
    """P(next token | prefix) from a table; tokens a row does not list get e^-40 (vocab 6)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        super().__init__(vocab=6)
        self.table = table

    def start_state(self, enc):
        return {"prefix": torch.zeros(enc.states.size(0), 0, dtype=torch.long)}

    def step(self, prev_tokens, state, enc, need_weights=False):
        prefix = state["prefix"]
        if prefix.size(1) or bool((prev_tokens != BOS_ID).any()):
            prefix = torch.cat([prefix, prev_tokens[:, None]], dim=1)
        logits = torch.full((prefix.size(0), 6), -40.0)
        for row, key in enumerate(map(tuple, prefix.tolist())):
            for token, p in self.table.get(key, {}).items():
                logits[row, token] = math.log(p)
        return logits, {"prefix": prefix}, None


def test_without_penalties_beam_does_not_stop_at_k_finished_while_a_live_beam_leads():
    """K = 2. Step 0 finishes </s> (0.3) and keeps "4" (0.5) and "5" (0.2); step 1 finishes
    "5 </s>" (0.2·0.99): two finished, fairseq's rule would stop and return the empty
    hypothesis (log 0.3), while "4 4" (0.5·0.99) is still live and ends at step 2 with
    log(0.5·0.99·0.99) > log 0.3. Without penalties the search goes on until no live beam can
    win (CTranslate2's rule) and returns "4 4"; with a length penalty it keeps the K rule."""
    table = {
        (): {4: 0.5, EOS_ID: 0.3, 5: 0.2},
        (4,): {4: 0.99, EOS_ID: 0.005, 5: 0.005},
        (5,): {EOS_ID: 0.99, 4: 0.005, 5: 0.005},
        (4, 4): {EOS_ID: 0.99, 4: 0.005, 5: 0.005},
    }
    model = PrefixTableModel(table)
    src, mask = pad_batch([[5, 6]])
    ((best, *_),) = beam_search(model, src, mask, DecodeConfig(beam=2), torch.full((1,), 6))
    assert (best.tokens, best.finished) == ([4, 4], True)
    assert best.log_prob == pytest.approx(math.log(0.5 * 0.99 * 0.99), abs=1e-5)
    assert reference_beam(model, [5, 6], 2, 6)[0] == [4, 4]
    assert reference_beam(model, [5, 6], 2, 6, k_finished=True)[0] == []  # the rule it replaces
    alpha = 1e-3  # a penalty too small to change the ranking, large enough to keep the K rule
    ((penalised, *_),) = beam_search(
        model, src, mask, DecodeConfig(beam=2, alpha=alpha), torch.full((1,), 6)
    )
    assert penalised.tokens == []


def reference_diverse_beam(model, src, beams, groups, diversity, steps, alpha=0.0, beta=0.0):
    """Diverse beam search (Vijayakumar et al. 2016) for one sentence, in float64 lists.

    Groups of K/G beams expand in turn; group g ranks its candidates by log P − λ·(how many
    beams of groups before g chose the token at this step), keeps true log P as the score,
    and follows the plain beam rules (a </s> in the top K/G finishes; the best K/G that do
    not end refill). Stops when every group has K/G finished ones or at the budget, where the
    live beams are cut. Returns every (tokens, GNMT score, finished), best first.
    """
    per_group = beams // groups
    s = torch.tensor([src])
    enc = model.encode(s, torch.ones_like(s, dtype=torch.bool))
    start = ([], 0.0, model.start_state(enc), [0.0] * len(src))
    live = [[start] for _ in range(groups)]
    done, n_done = [], [0] * groups

    def score(log_prob, length, coverage):
        cp = sum(math.log(max(min(c, 1.0), 1e-10)) for c in coverage)
        return log_prob / ((5.0 + length) / 6.0) ** alpha + beta * cp

    for t in range(steps):
        chosen: dict[int, int] = {}
        for g in range(groups):
            cands = []
            for tokens, log_prob, state, coverage in live[g]:
                prev = torch.tensor([tokens[-1] if tokens else BOS_ID])
                logits, new_state, cross = model.step(prev, state, enc, need_weights=True)
                row = cross[0, -1].double().mean(dim=0).tolist()
                new_cov = [c + a for c, a in zip(coverage, row, strict=True)]
                for v, lp in enumerate(step_log_probs(logits.double(), t)[0].tolist()):
                    if math.isfinite(lp):
                        ranked_by = log_prob + lp - diversity * chosen.get(v, 0)
                        cands.append((ranked_by, log_prob + lp, tokens + [v], new_state, new_cov))
            cands.sort(key=lambda c: -c[0])
            cands = cands[: 2 * per_group]
            for _, log_prob, tokens, _, coverage in cands[:per_group]:
                if tokens[-1] == EOS_ID:
                    done.append((tokens[:-1], score(log_prob, len(tokens), coverage), True))
                    n_done[g] += 1
            live[g] = [(c[2], c[1], c[3], c[4]) for c in cands if c[2][-1] != EOS_ID][:per_group]
            for tokens, *_ in live[g]:
                chosen[tokens[-1]] = chosen.get(tokens[-1], 0) + 1
        if all(n >= per_group for n in n_done):
            break
        if t == steps - 1:
            for group in live:
                done += [(tok, score(lp, len(tok), cov), False) for tok, lp, _, cov in group]
    return sorted(done, key=lambda d: (not d[2], -d[1]))


@pytest.mark.parametrize(
    ("beams", "groups", "diversity", "alpha", "beta"),
    [(4, 2, 0.7, 0.0, 0.0), (6, 3, 1.5, 0.6, 0.0), (6, 2, 0.4, 0.0, 0.3), (4, 4, 2.0, 1.0, 0.2)],
)
def test_diverse_beam_equals_a_per_sentence_reference(beams, groups, diversity, alpha, beta):
    """The batched groups (penalty counts, finished hypotheses, n-best, penalties) equal the
    paper's algorithm written out per sentence over all candidates."""
    model = HashModel(vocab=12, scale=3.0, eos_bias=0.8)
    sources = [[5, 6, 7, 8], [9, 4], [10, 11, 12, 13, 14, 15], [4]]
    src, mask = pad_batch(sources)
    cfg = DecodeConfig(
        beam=beams, groups=groups, diversity=diversity, nbest=beams, alpha=alpha, beta=beta
    )
    out = beam_search(model, src, mask, cfg, torch.full((len(sources),), 7))
    for sentence, nbest in zip(sources, out, strict=True):
        full = reference_diverse_beam(model, sentence, beams, groups, diversity, 7, alpha, beta)
        assert len(nbest) == min(beams, len(full))
        expected = full[: len(nbest)]
        assert [(h.tokens, h.finished) for h in nbest] == [(e[0], e[2]) for e in expected]
        assert [h.score for h in nbest] == pytest.approx([e[1] for e in expected], abs=1e-4)
