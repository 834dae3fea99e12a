"""Reports behind ``attnlab heads`` / ``attnlab compare`` and the lab's Heads and Compare
screens (engine: no click, no textual). Long loops report progress through a callback and stop
when ``cancelled()`` says so (the lab runs them in a thread worker it can cancel)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from attnlab.attention_map import target_rows
from attnlab.errors import AttnlabError

Progress = Callable[[str, int, int, dict[str, Any] | None], None]  # (phase, done, total, point)


class Cancelled(Exception):  # noqa: N818 - a control-flow signal, not an error
    """``cancelled()`` became true: the caller asked to stop."""


def _never() -> bool:
    return False


def _rounded(matrix: Any, digits: int = 4) -> list[list[float]]:
    return [[round(float(x), digits) for x in row] for row in matrix.tolist()]


def scoring_dataset(loaded: Any, config: Any) -> Any:
    """The config's data with the checkpoint's own vocabularies and tokenizers."""
    from attnlab.runs import load_checkpoint_data

    return load_checkpoint_data(loaded, config.data)


def _batches(dataset: Any, examples: list[Any], device: Any, size: int = 64) -> Any:
    from attnlab.data.batching import make_batch

    for start in range(0, len(examples), size):
        yield make_batch(examples[start : start + size], dataset.src_vocab, dataset.tgt_vocab).to(
            device
        )


def heads_report(
    loaded: Any,
    dataset: Any,
    split: str,
    max_sentences: int,
    device: Any,
    curve: bool = True,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] = _never,
) -> dict[str, Any]:
    """Importance per role × layer × head and the pruning curve (dev BLEU per masked count).

    ``progress(phase, done, total, point)``: phase "importance" (once, done = total = 1,
    ``point`` = the report so far) then "curve" after each point (``point`` = that point).
    ``cancelled()`` is checked before every point: True raises :class:`Cancelled` (the points
    so far went through progress)."""
    from attnlab.evaluate import evaluate_split, token_loss_sum
    from attnlab.interpret.heads import (
        as_grid,
        head_gates,
        head_importance,
        mask_gates,
        normalise_per_layer,
        pruning_order,
    )

    report = progress or (lambda phase, done, total, point: None)
    model = loaded.model
    examples = list(dataset.splits.split(split))
    if max_sentences > 0:
        examples = examples[:max_sentences]
    if not examples:
        raise AttnlabError(f"the {split} split is empty")
    raw = head_importance(model, _batches(dataset, examples, device), token_loss_sum)
    importance = normalise_per_layer(raw)
    order = pruning_order(importance)
    out: dict[str, Any] = {
        "checkpoint": str(loaded.path),
        "step": loaded.step,
        "split": split,
        "n": len(examples),
        "importance": as_grid(importance),
        "importance_raw": as_grid(raw),
        "order": [list(h) for h in order],
        "curve": [],
    }
    report("importance", 1, 1, out)  # the grid, before the (long) curve
    if not curve:
        return out
    decode_cfg = dataclasses.replace(
        loaded.config.decode, decoder="greedy", beam=1, sample=False, nbest=1
    )
    for k in range(len(order) + 1):
        if cancelled():
            raise Cancelled(f"stopped after {k} of {len(order) + 1} points")
        with head_gates(model, mask_gates(model, order[:k])):
            result = evaluate_split(
                model, dataset, split, decode_cfg, device=device, max_sentences=max_sentences
            )
        point = {
            "masked": k,
            "head": list(order[k - 1]) if k else None,
            "bleu": round(float(result["bleu"]), 4),
            "loss": round(float(result["loss"]), 5),
        }
        out["curve"].append(point)
        report("curve", k + 1, len(order) + 1, point)
    return out


def map_kind(config: Any, method: str, matrix: Any) -> str:
    """How the rows of a compared map are normalised: ``raw`` is the cross-attention variant's
    own kind; attribution scores (rollout, relevancy, gradient, norm) are >= 0 with any sum
    ("unnormalised"), or "signed" where one is negative (e.g. rollout of differential maps)."""
    from attnlab.attention_map import NORM_SIGNED, NORM_UNNORMALISED
    from attnlab.nn.archs import normalisation_of

    if method == "raw":
        return normalisation_of(config, "cross")
    return NORM_SIGNED if bool((matrix < 0).any()) else NORM_UNNORMALISED


def search_config(decode: Any, decoder: str = "", width: int = 1) -> Any:
    """``decode`` (a DecodeConfig) set up for the registered ``decoder`` with ``width``
    hypotheses ("" = beam; a beam of one is greedy), as the lab's Inspect decodes."""
    from attnlab.decode.search import DECODERS

    return DECODERS.get(decoder or "beam").factory().configure(decode, max(int(width), 1))


def search_name(cfg: Any) -> str:
    """How a DecodeConfig searches, in a few words: "greedy", "beam 5", "sampling 4"."""
    width = max(int(getattr(cfg, "beam", 1) or 1), 1)
    return str(cfg.decoder) if width <= 1 else f"{cfg.decoder} {width}"


def _side(
    loaded: Any, text: str, example: Any, method: str, device: Any, decoder: str, width: int
) -> dict[str, Any]:
    import torch

    from attnlab.decode.search import decode_batch
    from attnlab.interpret.alignment import aer, argmax_links, gold_from_positions
    from attnlab.interpret.attribution import explain
    from attnlab.interpret.where import cross_layers, map_where

    model = loaded.model
    src_tokens = (
        list(example.src_tokens) if example is not None else loaded.dataset.tokenize_source(text)
    )
    if not src_tokens:
        raise AttnlabError("the source sentence is empty")
    src_ids = loaded.src_vocab.encode(src_tokens)
    src = torch.tensor([src_ids], device=device)
    cfg = search_config(loaded.config.decode, decoder, width)
    with torch.no_grad():  # the best hypothesis of the search
        hyp = decode_batch(model, src, src != 0, cfg, need_attention=False)[0][0]
    tokens = loaded.tgt_vocab.decode(hyp.tokens, strip=False)
    maps = explain(model, src_ids, list(hyp.tokens), eos=hyp.finished)
    if method not in maps:
        raise AttnlabError(
            f"--method {method} is not available for {loaded.path} (available: {', '.join(maps)})"
        )
    shown = maps[method][: len(tokens) + int(hyp.finished)].float().cpu()
    n_layers = cross_layers(loaded.config)
    side: dict[str, Any] = {
        "checkpoint": str(loaded.path),
        # explain's default: the last cross-attention layer, as translate and Inspect show
        "layer": n_layers - 1,
        "where": map_where(method, n_layers - 1, n_layers),
        "search": search_name(cfg),
        "source": src_tokens,
        "hyp": tokens,
        "rows": target_rows(tokens, hyp.finished),
        "map": shown,
        "normalisation": map_kind(loaded.config, method, shown),
        "alignment_accuracy": None,
        "aer": None,
    }
    if example is not None and example.alignment is not None:
        ref_maps = explain(
            model, src_ids, loaded.tgt_vocab.encode(list(example.tgt_tokens)), eos=False
        )
        ref_map = ref_maps[method][: len(example.alignment)]
        links = argmax_links(ref_map)
        gold = gold_from_positions(example.alignment)
        hits = len(links & gold.sure)
        side["alignment_accuracy"] = hits / len(gold.sure) if gold.sure else None
        side["aer"] = aer([(links, gold)])
    return side


def compare_report(
    a: Any,
    b: Any,
    text: str,
    example: Any,
    method: str,
    device: Any,
    decoder: str = "",
    width: int = 1,
) -> dict[str, Any]:
    """Both sides' maps, A − B and JS per row where the target tokens agree. ``normalisation``
    names each side's kind; ``js`` is None where the targets differ or a side is signed
    (``js_note`` says why, or how the rows were read: "∅ counted", "rows scaled to sum 1").
    Each side decodes with ``decoder`` and ``width`` (``search_config``; default greedy) and
    shows its best hypothesis; ``search`` names the search. Two runs of different tasks or
    vocabularies are refused (AttnlabError naming why: ``incomparable_reason``)."""
    from attnlab.interpret.compare import (
        as_drawn,
        difference,
        incomparable_reason,
        js_defined,
        js_divergence,
        js_note,
        shared_scale,
    )

    reason = incomparable_reason(a.dataset_meta, b.dataset_meta)
    if reason:
        raise AttnlabError(f"cannot compare {a.path} with {b.path}: {reason}")
    left, right = (_side(m, text, example, method, device, decoder, width) for m in (a, b))
    same = left["rows"] == right["rows"] and left["source"] == right["source"]
    kinds = (left["normalisation"], right["normalisation"])
    js = None
    if same and js_defined(*kinds):
        js = [round(float(x), 5) for x in js_divergence(left["map"], right["map"], *kinds)]
    report: dict[str, Any] = {
        "method": method,
        "search": left["search"],
        "source": left["source"],
        "same_target": same,
        "normalisation": {"a": kinds[0], "b": kinds[1]},
        "vmax": shared_scale(as_drawn(left["map"], kinds[0]), as_drawn(right["map"], kinds[1])),
        "difference": _rounded(difference(left["map"], right["map"])) if same else None,
        "js": js,
        "js_note": js_note(*kinds),
    }
    for key, side in (("a", left), ("b", right)):
        report[key] = {**side, "map": _rounded(side["map"])}
    return report
