"""Metrics: sacrebleu BLEU / chrF, exact match, BLEU by source length, alignment accuracy.

BLEU and chrF are sacrebleu's (13a tokenisation, exponential smoothing, chrF β = 2) on
detokenised hypotheses against the raw reference text; the signatures travel with the scores.

- **exact match**: share of sentences whose hypothesis tokens equal the reference tokens.
- **BLEU by source length**: corpus BLEU inside fixed-width buckets of source length
  (in tokens): 1-10, 11-20, 21-30, ... (``LENGTH_BUCKET_WIDTH``), empty buckets omitted —
  the Bahdanau et al. (2015) Fig. 2 view.
- **alignment accuracy** (tasks with gold alignments): share of reference target tokens whose
  arg-max cross-attention (last layer, averaged over heads) falls on the gold source token,
  with the model teacher-forced on the reference (so every target token has a gold position;
  the ``</s>`` position has none and is not counted). **AER** (Och & Ney 2003) against the
  same gold links as sure links: with one predicted and one gold link per target token it
  equals 1 − alignment accuracy (reported beside it for comparison with gold-file AERs).
- **attention statistics** (every split, on its first ``ATTENTION_STATS_SENTENCES``
  sentences, fewer of long ones (``ATTENTION_STATS_TOKENS`` source tokens at most), one
  teacher-forced pass with the weights): ``attention_entropy`` =
  {role: [[mean row entropy in nats per head] per layer]} for enc_self / dec_self / cross,
  and with gold alignments ``alignment_accuracy_by_layer`` (head average of each layer; in
  ``evaluate_split`` recomputed over every scored sentence, as ``alignment_accuracy``).
  Entropy reads the role's normalisation (``normalisations``, from
  ``attnlab.nn.archs.normalisations_of``): a sub-stochastic row's unattended mass counts as
  one more outcome, a sparse row's exact zeros add nothing, and a signed role has no entropy
  (left out; ``attention_normalisation`` names every role that is not softmax).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from attnlab.attention_map import (
    LAST_LAYER_MEAN,
    NORM_SIGNED,
    NORM_SOFTMAX,
    NORM_SUB_STOCHASTIC,
    NORM_UNNORMALISED,
    AttentionMap,
    is_long_map,
    last_layer_head_mean,
    unattended_mass,
)
from attnlab.config import DecodeConfig
from attnlab.data.batching import Batch, make_batch
from attnlab.data.example import Example
from attnlab.data.vocab import PAD_ID
from attnlab.decode.hypothesis import Hypothesis

LENGTH_BUCKET_WIDTH = 10
# What a run costs beside what it scores (the eval event's and ``eval --json``'s "cost"):
# evaluate_split measures the model's and the decoding's; the trainer adds training's.
COST_KEYS = (
    "parameters",
    "train_tokens_per_s",
    "train_peak_memory_mb",
    "decode_sentences_per_s",
    "kv_cache_bytes_per_token",
)
EVAL_BATCH_TOKENS = 16384  # source tokens of an automatic evaluation batch (4 of 4096)
ATTENTION_STATS_SENTENCES = 32  # sentences of the teacher-forced pass behind the statistics
ATTENTION_STATS_TOKENS = 4096  # ... and at most this many source tokens of them


# -- text metrics -------------------------------------------------------------------------------


def _streams(refs: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """One reference per sentence (list of str) or sacrebleu's reference streams."""
    if refs and isinstance(refs[0], str):
        return [list(refs)]  # type: ignore[arg-type]
    return [list(stream) for stream in refs]


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], **options: Any):
    """sacrebleu corpus BLEU; ``options`` go to ``sacrebleu.metrics.BLEU`` (tokenize, ...)."""
    metric = BLEU(**options)
    score = metric.corpus_score(list(hyps), _streams(refs))
    return score, str(metric.get_signature())


def corpus_chrf(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], **options: Any):
    metric = CHRF(**options)
    score = metric.corpus_score(list(hyps), _streams(refs))
    return score, str(metric.get_signature())


def text_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """BLEU and chrF (0-100) with their sacrebleu signatures."""
    if not hyps:
        return {"bleu": 0.0, "chrf": 0.0, "bleu_signature": "", "chrf_signature": ""}
    bleu, bleu_sig = corpus_bleu(hyps, refs)
    chrf, chrf_sig = corpus_chrf(hyps, refs)
    return {
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "bleu_signature": bleu_sig,
        "chrf_signature": chrf_sig,
    }


def exact_match(hyps: Sequence[Sequence[str]], refs: Sequence[Sequence[str]]) -> float:
    """Share of sentences whose hypothesis tokens equal the reference tokens exactly."""
    if not hyps:
        return 0.0
    return sum(list(h) == list(r) for h, r in zip(hyps, refs, strict=True)) / len(hyps)


def length_bucket(length: int, width: int = LENGTH_BUCKET_WIDTH) -> tuple[int, int]:
    """Source length -> its bucket (low, high), e.g. 13 -> (11, 20)."""
    low = (max(length, 1) - 1) // width * width + 1
    return low, low + width - 1


def bleu_by_length(
    src_lengths: Sequence[int],
    hyps: Sequence[str],
    refs: Sequence[str],
    width: int = LENGTH_BUCKET_WIDTH,
) -> list[dict[str, Any]]:
    """[{bucket: "11-20", n, bleu}] in increasing length order; empty buckets omitted."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, n in enumerate(src_lengths):
        groups.setdefault(length_bucket(n, width), []).append(i)
    out = []
    for (low, high), idx in sorted(groups.items()):
        score, _ = corpus_bleu([hyps[i] for i in idx], [refs[i] for i in idx])
        out.append({"bucket": f"{low}-{high}", "n": len(idx), "bleu": round(float(score.score), 4)})
    return out


def alignment_hits(attention: Tensor, gold: Tensor) -> tuple[int, int]:
    """(correct, counted) target positions: attention [B,T,S], gold [B,T] (-1 = no gold)."""
    counted = gold >= 0
    hits = (attention.argmax(dim=-1) == gold) & counted  # [B, T]
    return int(hits.sum()), int(counted.sum())


def alignment_accuracy(attention: Tensor, gold: Tensor) -> float | None:
    correct, counted = alignment_hits(attention, gold)
    return correct / counted if counted else None


def gold_alignment(examples: Sequence[Example], width: int) -> Tensor | None:
    """[B, width] long: gold source index per target position, -1 where none (eos, padding)."""
    if not examples or any(e.alignment is None for e in examples):
        return None
    gold = torch.full((len(examples), width), -1, dtype=torch.long)
    for i, e in enumerate(examples):
        if e.alignment:
            gold[i, : len(e.alignment)] = torch.tensor(e.alignment[:width], dtype=torch.long)
    return gold


# Attention entropy per role x layer x head (Zhai et al. 2023 track its collapse): here, below
# attnlab.interpret (which re-exports it as attnlab.interpret.entropy), because the eval event
# carries it and interpret.reports imports this module (one direction of imports).


def row_entropy(weights: Tensor, normalisation: str = NORM_SOFTMAX) -> Tensor:
    """[..., Tk] -> [...] entropy in nats (0 ln 0 = 0: a sparse row's exact zeros add nothing).

    Sub-stochastic rows: the unattended mass 1 − Σ w is one more outcome (the row plus it is a
    distribution); unnormalised rows are scaled to sum 1 first. Signed rows have no entropy:
    NaN (callers leave them out and say why)."""
    w = weights.to(torch.float64)
    if normalisation == NORM_SIGNED:
        return torch.full(w.shape[:-1], float("nan"), dtype=torch.float64, device=w.device)
    if normalisation == NORM_SUB_STOCHASTIC:
        w = torch.cat([w, unattended_mass(w).unsqueeze(-1)], dim=-1)
    elif normalisation == NORM_UNNORMALISED:  # the entropy of the row scaled to sum 1
        total = w.sum(-1, keepdim=True)
        w = torch.where(total > 0, w / total.clamp_min(1e-300), 0.0)
    return -torch.where(w > 0, w * torch.log(w.clamp_min(1e-300)), 0.0).sum(dim=-1)


def entropy_sums(
    maps: Tensor, query_mask: Tensor, normalisation: str = NORM_SOFTMAX
) -> tuple[Tensor, int]:
    """maps [B, L, H, Tq, Tk], query_mask [B, Tq] -> (Σ entropy [L, H], rows counted)."""
    entropy = row_entropy(maps, normalisation)  # [B, L, H, Tq]
    mask = query_mask[:, None, None, :].to(entropy.dtype)
    return (entropy * mask).sum(dim=(0, 3)), int(query_mask.sum())


# -- model passes ---------------------------------------------------------------------------------


def token_loss_sum(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Summed cross-entropy over non-pad targets: logits [B,T,V], targets [B,T]."""
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        targets.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


def last_layer_cross(attentions: dict[str, Tensor]) -> Tensor | None:
    """cross [B,L,H,T,S] -> [B,T,S] (last layer, head average)."""
    cross = attentions.get("cross")
    if cross is None:
        return None
    return last_layer_head_mean(cross, layer_dim=1)


def decode_best(
    model: Any,
    src: Tensor,
    src_mask: Tensor,
    cfg: DecodeConfig,
    need_attention: bool,
    to_text: Any = None,
) -> list[Hypothesis]:
    """The best hypothesis per sentence (tokens and attention; scores are not read)."""
    from attnlab.decode.search import decode_batch

    nbests = decode_batch(
        model, src, src_mask, cfg, need_attention, to_text=to_text, tokens_only=True
    )
    return [nbest[0] for nbest in nbests]


def target_text(dataset: Any) -> Any:
    """ids -> detokenised target text with ``dataset``'s vocabulary (MBR's utility reads it)."""
    return lambda ids: dataset.detokenize_target(dataset.tgt_vocab.decode(ids))


# -- one split ---------------------------------------------------------------------------------


def _detok(dataset: Any, tokens: Sequence[str]) -> str:
    return dataset.detokenize_target(tokens)


def _reference(dataset: Any, example: Example) -> str:
    return example.tgt_text if example.tgt_text else _detok(dataset, example.tgt_tokens)


@torch.no_grad()
def evaluate_split(
    model: Any,
    dataset: Any,
    split: str = "dev",
    decode_cfg: DecodeConfig | None = None,
    *,
    device: torch.device | str = "cpu",
    max_sentences: int = 0,
    samples: int = 0,
    batch_size: int = 0,
    normalisations: Mapping[str, str] | None = None,
    keep_sentences: bool = False,
) -> dict[str, Any]:
    """Score ``split`` of ``dataset`` (attnlab.data.dataset.Dataset) with ``model``.

    Returns ``split, n, loss, ppl, bleu, bleu_lc (lower-cased), bleu_lc_signature, chrf,
    exact_match, alignment_accuracy (None without gold alignments), bleu_by_length,
    bleu_signature, chrf_signature`` and ``samples``: the
    first ``samples`` sentences with src/ref/hyp tokens and the hypothesis's attention.
    ``keep_sentences`` adds ``sentences``: per sentence, in split order, the detokenised
    hypothesis and reference, whether it is an exact match and the source length (what paired
    significance tests and ``eval --hyps/--refs`` need).
    ``normalisations`` (model key -> kind, ``attnlab.nn.archs.normalisations_of``; default
    all softmax) shape the entropy statistics and tag the samples' maps.
    """
    if getattr(dataset, "streams", None) is not None:  # a language model: its fixed windows
        result = evaluate_lm(model, dataset, split, device=device, batch_size=batch_size)
        result["cost"] = model_cost(model, None)  # scoring windows decodes no sentences
        return result
    kinds = dict(normalisations or {})
    cfg = decode_cfg or DecodeConfig()
    examples = list(dataset.splits.split(split))
    if max_sentences > 0:
        examples = examples[:max_sentences]
    from attnlab.decode.search import decode_sorted, sentences_per_batch, sorted_batches

    # Each batch also runs a teacher-forced pass for the loss ([B, T, V] logits, and the
    # attention scores of every layer): the automatic size (decode.batch_size = 0) is capped
    # at 256 sentences and at EVAL_BATCH_TOKENS source tokens to bound that memory.
    longest = max((len(e.src_tokens) for e in examples), default=1)
    batch_size = (
        batch_size
        or cfg.batch_size
        or min(sentences_per_batch(cfg), 256, max(1, EVAL_BATCH_TOKENS // max(longest, 1)))
    )
    was_training = model.training
    model.eval()
    device = torch.device(device)
    with_alignment = bool(dataset.has_alignment) and all(e.alignment is not None for e in examples)

    # Hypotheses: the one length-sorted batching (decode_sorted), results in input order.
    sources = [dataset.src_vocab.encode(e.src_tokens) for e in examples]
    decode_start = time.perf_counter()
    nbests = decode_sorted(
        model,
        sources,
        cfg,
        False,
        device,
        batch_size=batch_size,
        to_text=target_text(dataset),
        tokens_only=True,
    )
    decode_seconds = time.perf_counter() - decode_start
    hyp_tokens = [dataset.tgt_vocab.decode(nbest[0].tokens) for nbest in nbests]
    # Loss and alignment: teacher-forced over the same sorted batches.
    loss_sum, n_tokens, correct, counted = 0.0, 0, 0, 0
    # per layer (head average) over the very sentences alignment_accuracy scores
    layer_correct: list[int] = []
    layer_counted: list[int] = []
    for idx in sorted_batches([len(s) for s in sources], batch_size):
        batch: Batch = make_batch(
            [examples[i] for i in idx], dataset.src_vocab, dataset.tgt_vocab
        ).to(device)
        out = model(
            batch.src,
            batch.src_mask,
            batch.tgt_in,
            teacher_forcing=1.0,
            need_weights=with_alignment,
        )
        loss_sum += float(token_loss_sum(out.logits, batch.tgt_out))
        n_tokens += batch.n_tokens
        if with_alignment:
            attention = last_layer_cross(out.attentions)
            gold = gold_alignment(batch.examples, batch.tgt_out.size(1))
            if attention is not None and gold is not None:
                c, n = alignment_hits(attention.cpu(), gold)
                correct, counted = correct + c, counted + n
                cross = out.attentions["cross"]  # [B, L, H, T, S]
                if not layer_correct:
                    layer_correct, layer_counted = [0] * cross.shape[1], [0] * cross.shape[1]
                for layer in range(cross.shape[1]):
                    c, n = alignment_hits(cross[:, layer].float().mean(dim=1).cpu(), gold)
                    layer_correct[layer] += c
                    layer_counted[layer] += n

    hyps_text = [_detok(dataset, h) for h in hyp_tokens]
    refs_text = [_reference(dataset, e) for e in examples]
    loss = loss_sum / max(n_tokens, 1)
    # Lower-cased 13a BLEU, the way tutorials (and JoeyNMT's "case:lc") score.
    bleu_lc, bleu_lc_signature = (
        corpus_bleu(hyps_text, refs_text, lowercase=True) if examples else (None, "")
    )
    result: dict[str, Any] = {
        "split": split,
        "n": len(examples),
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
        **text_scores(hyps_text, refs_text),
        "bleu_lc": float(bleu_lc.score) if bleu_lc is not None else 0.0,
        "bleu_lc_signature": bleu_lc_signature,
        "exact_match": exact_match(hyp_tokens, [e.tgt_tokens for e in examples]),
        "alignment_accuracy": (correct / counted if counted else None) if with_alignment else None,
        "aer": (1.0 - correct / counted if counted else None) if with_alignment else None,
        "bleu_by_length": bleu_by_length(
            [len(e.src_tokens) for e in examples], hyps_text, refs_text
        )
        if examples
        else [],
    }
    result["cost"] = model_cost(model, len(examples) / decode_seconds if examples else None)
    if keep_sentences:
        result["sentences"] = {
            "hyps": hyps_text,
            "refs": refs_text,
            "exact": [
                list(h) == list(e.tgt_tokens) for h, e in zip(hyp_tokens, examples, strict=True)
            ],
            "src_len": [len(e.src_tokens) for e in examples],
            # the sources as read (eval --srcs), or detokenised where none was kept
            "srcs": [
                e.src_text or dataset.src_tokenizer.decode(list(e.src_tokens)) for e in examples
            ],
        }
    # the maps of every layer at once ([B, L, H, T, S]): at most ATTENTION_STATS_TOKENS
    # source tokens of them (one sentence of 4096), however long the sentences
    stats = examples[: min(ATTENTION_STATS_SENTENCES, max(1, ATTENTION_STATS_TOKENS // longest))]
    result.update(attention_statistics(model, dataset, stats, device, with_alignment, kinds))
    if layer_correct:  # every scored sentence, as alignment_accuracy (not only ``stats``)
        result["alignment_accuracy_by_layer"] = [
            c / n if n else None for c, n in zip(layer_correct, layer_counted, strict=True)
        ]
    result["samples"] = (
        sample_translations(model, dataset, examples[:samples], cfg, device, kinds.get("cross"))
        if samples
        else []
    )
    model.train(was_training)
    return result


def model_cost(model: Any, decode_sentences_per_s: float | None) -> dict[str, Any]:
    """The ``cost`` record without training's figures (None: the trainer, or a run's record,
    fills them): parameters (every one, trainable or not), the decoding speed given, and the
    KV-cache bytes per generated token of the model's variants (attnlab.nn.kv_cache)."""
    from attnlab.nn.kv_cache import kv_cache_bytes_per_token

    cost: dict[str, Any] = dict.fromkeys(COST_KEYS)
    cost["parameters"] = sum(p.numel() for p in model.parameters())
    if decode_sentences_per_s is not None:
        cost["decode_sentences_per_s"] = round(decode_sentences_per_s, 2)
    cost["kv_cache_bytes_per_token"] = kv_cache_bytes_per_token(model)
    return cost


def with_training_cost(cost: dict[str, Any], recorded: Mapping[str, Any] | None) -> None:
    """Training's figures into a fresh ``cost``, as the checkpoint's evaluation recorded them
    (its metrics' "cost"; None for a checkpoint from before the record existed)."""
    previous = (recorded or {}).get("cost") or {}
    for key in ("train_tokens_per_s", "train_peak_memory_mb"):
        cost[key] = previous.get(key)


LM_BATCH_LOGITS = 1 << 22  # logits per evaluation batch of an LM (rows x block x vocabulary)


def lm_scores(loss_sum: float, tokens: int) -> dict[str, float]:
    """Mean cross-entropy (nats per token), its perplexity exp(loss) and bits per token
    loss / ln 2 (bits per character with the char tokenizer)."""
    loss = loss_sum / max(tokens, 1)
    perplexity = math.exp(loss) if loss < 700 else math.inf  # exp overflows past ~709
    return {
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),  # the capped figure every eval event carries
        "perplexity": perplexity,
        "bits_per_token": loss / math.log(2),
    }


@torch.no_grad()
def evaluate_lm(
    model: Any,
    dataset: Any,
    split: str = "dev",
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 0,
) -> dict[str, Any]:
    """An LM's scores on the fixed windows of ``split`` (``TokenStreams.eval_starts``): every
    position of every window is one predicted token, its context the window's tokens before
    it, as in nanoGPT's ``estimate_loss`` (which averages over random windows instead).
    Returns ``split``, ``n`` (windows), ``tokens`` and ``lm_scores``; ``samples`` is empty."""
    streams = dataset.streams
    block = streams.block_size
    rows = batch_size or max(1, min(256, LM_BATCH_LOGITS // (block * len(dataset.tgt_vocab))))
    was_training = model.training
    model.eval()
    device = torch.device(device)
    loss_sum, tokens, windows = 0.0, 0, 0
    for cpu_batch in streams.eval_batches(split, rows):
        batch = cpu_batch.to(device)
        out = model(batch.src, batch.src_mask, batch.tgt_in)
        loss_sum += float(token_loss_sum(out.logits, batch.tgt_out))  # summed in float64
        tokens += batch.n_tokens
        windows += batch.tgt_in.shape[0]
    model.train(was_training)
    return {
        "split": split,
        "n": windows,
        "tokens": tokens,
        **lm_scores(loss_sum, tokens),
        "samples": [],
    }


@torch.no_grad()
def nanogpt_estimate(
    model: Any,
    dataset: Any,
    split: str = "dev",
    *,
    iters: int = 20,
    batch_size: int = 12,
    seed: int = 1337,
    device: torch.device | str = "cpu",
) -> float:
    """nanoGPT's ``estimate_loss`` for ``split``: the mean of ``iters`` batch losses, each
    over ``batch_size`` windows at uniform random offsets (``attnlab.data.lm.random_starts``
    seeded by (``seed``, batch index)); a noisy estimate of ``evaluate_lm``'s loss."""
    from attnlab.data.lm import random_starts, window_batch

    streams = dataset.streams
    ids, block = streams.split(split), streams.block_size
    was_training = model.training
    model.eval()
    losses = []
    for i in range(iters):
        starts = random_starts(len(ids), block, batch_size, seed, i)
        batch = window_batch(ids, starts, block).to(torch.device(device))
        out = model(batch.src, batch.src_mask, batch.tgt_in)
        losses.append(float(token_loss_sum(out.logits, batch.tgt_out)) / batch.n_tokens)
    model.train(was_training)
    return sum(losses) / max(len(losses), 1)


def attention_statistics(
    model: Any,
    dataset: Any,
    examples: Sequence[Example],
    device: torch.device,
    with_alignment: bool,
    normalisations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Mean attention entropy per role × layer × head and, with gold alignments, alignment
    accuracy per layer, from one teacher-forced pass over ``examples`` with the weights.
    A signed role gets no entropy; ``attention_normalisation`` lists the roles that are not
    softmax (absent when all are)."""
    kinds = {k: v for k, v in (normalisations or {}).items() if v != NORM_SOFTMAX}
    out: dict[str, Any] = {"attention_entropy": {}}
    if kinds:
        out["attention_normalisation"] = kinds
    if with_alignment:
        out["alignment_accuracy_by_layer"] = None
    if not examples:
        return out
    batch = make_batch(list(examples), dataset.src_vocab, dataset.tgt_vocab).to(device)
    attentions = model(batch.src, batch.src_mask, batch.tgt_in, need_weights=True).attentions
    target_rows = batch.tgt_out != PAD_ID
    for role, maps in attentions.items():
        kind = kinds.get(role, NORM_SOFTMAX)
        if kind == NORM_SIGNED:
            continue  # entropy is undefined for signed weights
        rows = batch.src_mask if role == "enc_self" else target_rows
        if maps.shape[-2] == batch.src.shape[1] + target_rows.shape[1]:
            rows = torch.cat([batch.src_mask, target_rows], dim=1)  # a decoder-only's whole map
        total, count = entropy_sums(maps.float(), rows, kind)
        out["attention_entropy"][role] = [
            [round(float(x), 5) for x in layer] for layer in (total / max(count, 1)).tolist()
        ]
    cross = attentions.get("cross")
    gold = gold_alignment(batch.examples, batch.tgt_out.size(1)) if with_alignment else None
    if cross is not None and gold is not None:
        out["alignment_accuracy_by_layer"] = [
            alignment_accuracy(cross[:, layer].float().mean(dim=1).cpu(), gold)
            for layer in range(cross.shape[1])
        ]
    return out


def sample_translations(
    model: Any,
    dataset: Any,
    examples: Sequence[Example],
    cfg: DecodeConfig,
    device: torch.device,
    normalisation: str | None = None,
) -> list[dict[str, Any]]:
    """A few translations with their attention (rows = hypothesis tokens, columns = source);
    a cross-attention that is not softmax names its ``normalisation``."""
    kind = normalisation or NORM_SOFTMAX
    out = []
    for i, (example, (tokens, weights)) in enumerate(
        zip(examples, attention_snapshot(model, dataset, examples, cfg, device), strict=True)
    ):
        attention: list[list[float]] = []
        array = None
        if weights is not None:
            kept = AttentionMap(weights, tokens, example.src_tokens, "cross", LAST_LAYER_MEAN, kind)
            if is_long_map(tuple(kept.matrix.shape)):  # kept beside the event (runs.sample_maps)
                array = kept.matrix.float().cpu().numpy()
            else:
                attention = kept.to_json()
        sample = {
            "index": i,
            "src": list(example.src_tokens),
            "ref": list(example.tgt_tokens),
            "hyp": tokens,
            "attention": attention,
        }
        if array is not None:
            sample["attention_array"] = array
        if kind != NORM_SOFTMAX:  # absent: softmax (and every event written before)
            sample["normalisation"] = kind
        out.append(sample)
    return out


@torch.no_grad()
def attention_snapshot(
    model: Any,
    dataset: Any,
    examples: Sequence[Example],
    cfg: DecodeConfig,
    device: torch.device,
) -> list[tuple[list[str], Tensor | None]]:
    """Per example (one batched search of ``cfg``): the hypothesis tokens and its
    cross-attention, last layer averaged over heads, [len(tokens), len(source)] (no ``</s>``
    row) on the CPU — the map ``sample`` events and the attention history keep; None where
    the model keeps none."""
    if not examples:
        return []
    batch = make_batch(list(examples), dataset.src_vocab, dataset.tgt_vocab).to(device)
    hyps = decode_best(model, batch.src, batch.src_mask, cfg, True, to_text=target_text(dataset))
    out: list[tuple[list[str], Tensor | None]] = []
    for example, hyp in zip(examples, hyps, strict=True):
        tokens = dataset.tgt_vocab.decode(hyp.tokens)
        if hyp.attention is None:
            out.append((tokens, None))
            continue
        # rows = the decoded tokens (the </s> row goes), columns = the source tokens
        fitted = AttentionMap(hyp.attention, tokens, example.src_tokens, "cross").fitted()
        out.append((list(fitted.rows), fitted.matrix.float().cpu()))
    return out
