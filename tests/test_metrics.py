"""Metrics against sacrebleu's published cases and hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.config import DataConfig, DecodeConfig
from attnlab.evaluate import (
    alignment_accuracy,
    alignment_hits,
    bleu_by_length,
    corpus_bleu,
    corpus_chrf,
    evaluate_split,
    exact_match,
    gold_alignment,
    length_bucket,
    text_scores,
)
from attnlab.nn.seq2seq import BOS_ID, EncoderOutput, ModelOutput, Seq2Seq

# sacrebleu's shared fixture (test/test_bleu.py:33-42): two reference streams.
REFS = [
    ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
    ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
]
HYPS = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]


def test_bleu_matches_sacrebleu_published_value():
    score, signature = corpus_bleu(HYPS, REFS)
    assert score.score == pytest.approx(48.530827, abs=1e-6)
    assert "tok:13a" in signature and "smooth:exp" in signature and "nrefs:2" in signature


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"tokenize": "none"}, 49.1919566),
        ({"tokenize": "intl"}, 43.91623493),
        ({"smooth_method": "none"}, 48.530827),
    ],
)
def test_bleu_options_match_published_values(options, expected):
    score, _ = corpus_bleu(HYPS, REFS, **options)
    assert score.score == pytest.approx(expected, abs=1e-6)


def test_empty_hypotheses_score_zero():
    score, _ = corpus_bleu(["", "", ""], REFS)
    assert score.score == 0.0


def test_chrf_matches_published_value():
    score, signature = corpus_chrf(HYPS, REFS)
    assert round(score.score, 2) == 59.73
    assert signature.startswith("nrefs:2")


def test_single_reference_bleu_by_hand():
    # p1..p4 = 5/5, 3/4, 2/3, 1/2; BP = exp(1 - 6/5).
    expected = (
        100 * math.exp(1 - 6 / 5) * math.exp(sum(math.log(p) for p in (1, 3 / 4, 2 / 3, 1 / 2)) / 4)
    )
    scores = text_scores(["the cat sat on mat"], ["the cat sat on the mat"])
    assert scores["bleu"] == pytest.approx(expected, abs=1e-6)
    assert round(scores["bleu"], 2) == 57.89
    assert scores["bleu_signature"].startswith("nrefs:1|")


def test_exact_match_by_hand():
    hyps = [["a", "b"], ["c"], [], ["x", "y"]]
    refs = [("a", "b"), ("d",), (), ("x",)]
    assert exact_match(hyps, refs) == 0.5
    assert exact_match([], []) == 0.0


def test_length_buckets():
    assert [length_bucket(n) for n in (1, 10, 11, 20, 21, 45)] == [
        (1, 10),
        (1, 10),
        (11, 20),
        (11, 20),
        (21, 30),
        (41, 50),
    ]


def test_bleu_by_length_scores_each_bucket_separately():
    short_ref = "a b c d e"
    long_ref = "k l m n o p q r s t u v"
    rows = bleu_by_length(
        [5, 5, 12, 14],
        [short_ref, short_ref, "z z z z z z z z z z z z", "z z z z z z z z z z z z"],
        [short_ref, short_ref, long_ref, long_ref],
    )
    assert rows == [
        {"bucket": "1-10", "n": 2, "bleu": 100.0},
        {"bucket": "11-20", "n": 2, "bleu": 0.0},
    ]


def test_alignment_accuracy_by_hand():
    attention = torch.tensor(
        [
            [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]],
            [[0.1, 0.1, 0.8], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]],
        ]
    )  # [B=2, T=3, S=3]; arg-max rows: [0, 1, 2] and [2, 0, 1]
    gold = torch.tensor([[0, 0, -1], [2, 0, 1]])  # -1: no gold (e.g. </s>)
    assert alignment_hits(attention, gold) == (4, 5)
    assert alignment_accuracy(attention, gold) == pytest.approx(0.8)
    assert alignment_accuracy(attention, torch.full((2, 3), -1)) is None


def test_gold_alignment_pads_with_minus_one():
    from attnlab.data.example import Example

    examples = [
        Example(("a", "b"), ("b", "a"), alignment=(1, 0)),
        Example(("c",), ("c",), alignment=(0,)),
    ]
    assert gold_alignment(examples, 3).tolist() == [[1, 0, -1], [0, -1, -1]]
    assert gold_alignment([Example(("a",), ("a",))], 2) is None


# -- evaluate_split with an oracle model ----------------------------------------------------------


class ReverseOracle(Seq2Seq):
    """Emits the reversed source, attending one-hot to the source token it copies."""

    def __init__(self, src_to_tgt: torch.Tensor, tgt_vocab_size: int, mistakes: bool = False):
        super().__init__()
        self.src_to_tgt = src_to_tgt  # [V_src] -> target id
        self.tgt_vocab_size = tgt_vocab_size
        self.mistakes = mistakes
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def encode(self, src, src_mask):
        return EncoderOutput(states=src.unsqueeze(-1).float(), mask=src_mask)

    def start_state(self, enc):
        return {"t": torch.zeros(enc.mask.size(0), dtype=torch.long)}

    def _target_at(self, enc, t):
        lengths = enc.mask.sum(1)  # [B]
        pos = lengths - 1 - t  # source position copied at step t
        src = enc.states.squeeze(-1).long()
        valid = pos >= 0
        token = self.src_to_tgt[src.gather(1, pos.clamp(min=0).unsqueeze(1)).squeeze(1)]
        token = torch.where(valid, token, torch.full_like(token, 3))  # </s> after the last
        if self.mistakes:
            token = torch.where(t == 0, torch.full_like(token, 4), token)
        weights = torch.nn.functional.one_hot(pos.clamp(min=0), src.size(1)).float()
        return token, weights

    def step(self, prev_tokens, state, enc, need_weights=False):
        token, weights = self._target_at(enc, state["t"])
        logits = torch.full((token.size(0), self.tgt_vocab_size), -10.0).scatter(
            1, token.unsqueeze(1), 10.0
        )
        cross = weights[:, None, None, :] if need_weights else None
        return logits, {"t": state["t"] + 1}, cross

    def forward(self, src, src_mask, tgt_in, teacher_forcing=1.0, need_weights=False):
        enc = self.encode(src, src_mask)
        steps = [self._target_at(enc, torch.full((src.size(0),), t)) for t in range(tgt_in.size(1))]
        tokens = torch.stack([s[0] for s in steps], 1)  # [B, T]
        logits = torch.full((*tokens.shape, self.tgt_vocab_size), -10.0).scatter(
            2, tokens.unsqueeze(2), 10.0
        )
        attentions = {}
        if need_weights:
            attentions["cross"] = torch.stack([s[1] for s in steps], 1)[
                :, None, None
            ]  # [B,1,1,T,S]
        return ModelOutput(logits=logits, attentions=attentions)


def _reverse_dataset():
    from attnlab.data.dataset import load_dataset

    return load_dataset(
        DataConfig(task="reverse", train_size=20, dev_size=30, test_size=10, max_len=12)
    )


def _oracle(dataset, mistakes=False):
    src, tgt = dataset.src_vocab, dataset.tgt_vocab
    mapping = torch.tensor([tgt.stoi.get(token, 1) for token in src.itos])
    mapping[:4] = torch.arange(4)
    assert BOS_ID == 2
    return ReverseOracle(mapping, len(tgt), mistakes)


def test_evaluate_split_with_a_perfect_model():
    dataset = _reverse_dataset()
    result = evaluate_split(
        _oracle(dataset), dataset, "dev", DecodeConfig(), samples=2, batch_size=7
    )
    assert result["n"] == 30
    assert result["bleu"] == pytest.approx(100.0)
    assert result["bleu_lc"] == pytest.approx(100.0)
    assert result["chrf"] == pytest.approx(100.0)
    assert result["exact_match"] == 1.0
    assert result["alignment_accuracy"] == 1.0
    assert result["loss"] < 1e-6 and result["ppl"] == pytest.approx(1.0, abs=1e-5)
    assert sum(b["n"] for b in result["bleu_by_length"]) == 30
    first = dataset.splits.dev[0]
    sample = result["samples"][0]
    assert sample["src"] == list(first.src_tokens) and sample["hyp"] == list(first.tgt_tokens)
    n = len(first.src_tokens)
    assert len(sample["attention"]) == n and all(len(row) == n for row in sample["attention"])
    assert [row.index(1.0) for row in sample["attention"]] == list(first.alignment)


def test_evaluate_split_counts_wrong_first_tokens():
    dataset = _reverse_dataset()
    result = evaluate_split(_oracle(dataset, mistakes=True), dataset, "test", DecodeConfig())
    # The first output token is always wrong (id 4) unless it happens to be right.
    wrong = sum(e.tgt_tokens[0] != dataset.tgt_vocab.itos[4] for e in dataset.splits.test)
    assert result["exact_match"] == pytest.approx(1 - wrong / 10)
    assert result["bleu"] < 100.0


def test_lowercased_bleu_matches_joeynmt_published_case() -> None:
    # joeynmt test/unit/test_metric.py: 13a, lowercase -> 42.729 (see shared notes §2a)
    score, signature = corpus_bleu(["This is a test."], ["this is a Tezt."], lowercase=True)
    assert score.score == pytest.approx(42.729, abs=1e-3)
    assert "case:lc" in signature


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_token_loss_is_label_smoothed_over_all_classes_without_pad_targets(epsilon):
    """Szegedy et al. 2016: q = (1 − ε)·onehot(y) + ε/V over all V classes; <pad> targets
    add nothing. By hand in float64: Σ over real targets of −Σ_v q_v log p_v."""
    from attnlab.evaluate import token_loss_sum

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=gen)
    targets = torch.tensor([[3, 5, 2, 0], [6, 2, 0, 0]])  # 0 = <pad>
    expected = 0.0
    for b in range(2):
        for t in range(4):
            y = int(targets[b, t])
            if y == 0:
                continue
            row = [float(x) for x in logits[b, t].double()]
            log_z = math.log(sum(math.exp(x) for x in row))
            for v, x in enumerate(row):
                q = (1.0 - epsilon) * (v == y) + epsilon / len(row)
                expected -= q * (x - log_z)
    got = float(token_loss_sum(logits, targets, label_smoothing=epsilon))
    assert got == pytest.approx(expected, rel=1e-5)
