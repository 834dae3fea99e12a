"""The trainer's side of the attention history (``train.attention_history``): at each
evaluation, the cross-attention of N dev sentences (``train.attention_history_select``; fixed
for the run, so frames compare) with the dev scores of that evaluation, stored by
``attnlab.runs.history``.

The map is the one the rest of the product shows by default: greedy decoding, the last layer
averaged over heads (RNN attention: its one map). A cross-attention that exposes no weights
(``model.attention=none``) keeps no history: one note, not an error.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from attnlab.evaluate import attention_snapshot
from attnlab.nn.archs import arch_spec, cross_layer_count
from attnlab.runs.history import HEAD_MEAN, write_history_frame

# The scalar dev scores of an ``eval`` event a snapshot is labelled with (when finite).
SCORE_KEYS = ("bleu", "chrf", "bleu_lc", "exact_match", "loss", "ppl", "alignment_accuracy", "aer")


def history_off_reason(config: Any) -> str | None:
    """Why this config keeps no attention history although train.attention_history > 0
    (its cross-attention exposes no weights), or None."""
    from attnlab.nn.archs import variant_of
    from attnlab.nn.attention import ATTENTION

    variant = variant_of(config, "cross")
    if variant and variant in ATTENTION and not ATTENTION.get(variant).meta.exposes_weights:
        return (
            f"train.attention_history: the cross-attention {variant!r} has no attention "
            "weights to keep; no attention history is stored"
        )
    return None


def history_scores(result: dict[str, Any]) -> dict[str, float]:
    """The scalar scores of an evaluation result, as its ``eval`` event holds them."""
    scores = {}
    for key in SCORE_KEYS:
        value = result.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            scores[key] = float(value)
    return scores


def history_sentences(train: Any, lengths: list[int]) -> list[int]:
    """The dev indices train.attention_history_select names, at most train.attention_history
    of them (fixed for the run, so frames compare): ``first`` the first N; ``longest`` the N
    with the longest sources (ties by index); ``spread`` N spread evenly over the sources
    sorted by length (shortest and longest included), so short and long sentences both show;
    an explicit list as given (indices past the split left out)."""
    from attnlab.config import history_selection

    count, n = train.attention_history, len(lengths)
    rule, listed = history_selection(train.attention_history_select)
    if rule == "list":
        return [i for i in listed if i < n][:count]
    if rule == "first" or count >= n:
        return list(range(min(count, n)))
    by_length = sorted(range(n), key=lambda i: (lengths[i], i))
    if rule == "longest":
        return sorted(by_length[-count:], key=lambda i: (-lengths[i], i))
    if count == 1:
        return [by_length[-1]]
    return [by_length[round(k * (n - 1) / (count - 1))] for k in range(count)]


def record_attention_history(
    model: Any,
    dataset: Any,
    config: Any,
    device: Any,
    run_dir: Path,
    step: int,
    result: dict[str, Any],
) -> None:
    """Store the snapshot of ``step`` (train.attention_history > 0 and weights exposed)."""
    dev = list(dataset.splits.split("dev"))
    chosen = history_sentences(config.train, [len(e.src_tokens) for e in dev])
    examples = [dev[i] for i in chosen]
    if not examples:
        return
    # Batched greedy, as the eval event's scores (whatever decoder translate / eval use).
    decode_cfg = replace(config.decode, decoder="greedy", beam=1, sample=False, nbest=1)
    was_training = model.training
    model.eval()
    try:
        snapshot = attention_snapshot(model, dataset, examples, decode_cfg, device)
    finally:
        model.train(was_training)
    if any(weights is None for _, weights in snapshot):
        return
    spec = arch_spec(config.model.arch)
    layered = spec is not None and bool(spec.cross_layers)  # the RNN's one attention: no layer
    write_history_frame(
        run_dir,
        step=step,
        scores=history_scores(result),
        sources=[list(e.src_tokens) for e in examples],
        hyps=[tokens for tokens, _ in snapshot],
        maps=[weights.numpy() for _, weights in snapshot],
        layer=cross_layer_count(config) - 1 if layered else None,
        keep=config.train.attention_history_keep,
        head=HEAD_MEAN,
    )
