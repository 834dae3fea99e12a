"""AER of a model against a gold alignment file (attnlab eval --gold-alignments).

Line k of the file aligns sentence k of the scored split. The model is teacher-forced on the
reference; links come from the cross-attention averaged over heads: arg-max per target token
from the row that predicts it (every layer; the last layer is the headline), and for
Transformers also Shift-Att (the row that reads the token) with the layer of lowest AER.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnlab.data.batching import make_batch
from attnlab.errors import AttnlabError
from attnlab.interpret.alignment import GoldAlignment, Link, aer, links_per_layer


@torch.no_grad()
def per_layer_links(
    model: Any,
    dataset: Any,
    examples: Sequence[Any],
    device: Any,
    shift: bool,
    batch_size: int = 64,
) -> list[list[set[Link]]]:
    """Links per sentence per layer ([sentence][layer])."""
    was_training = model.training
    model.eval()
    out: list[list[set[Link]]] = []
    try:
        for start in range(0, len(examples), batch_size):
            chunk = list(examples[start : start + batch_size])
            batch = make_batch(chunk, dataset.src_vocab, dataset.tgt_vocab).to(device)
            cross = model(
                batch.src, batch.src_mask, batch.tgt_in, need_weights=True
            ).attentions.get("cross")
            if cross is None:
                raise AttnlabError("this model returns no cross-attention weights to align with")
            for i, example in enumerate(chunk):
                s, t = len(example.src_tokens), len(example.tgt_tokens)
                maps = cross[i, :, :, : t + 1, :s].float().cpu()  # [L, H, T+1, S]
                out.append(links_per_layer(maps, t, shift))
    finally:
        model.train(was_training)
    return out


def _aer_by_layer(
    links: list[list[set[Link]]], golds: Sequence[GoldAlignment]
) -> list[float | None]:
    if not links:
        return []
    pairs = list(zip(links, golds, strict=True))
    return [aer([(sent[layer], g) for sent, g in pairs]) for layer in range(len(links[0]))]


def check_links(
    examples: Sequence[Any], golds: Sequence[GoldAlignment], where: str, order: str
) -> None:
    """Every link must name a token of its own sentence pair: a link past the end (a file in
    the other order, word indices for a subword model, a line off by one) is refused, not
    scored as a miss."""
    for line, (example, gold) in enumerate(zip(examples, golds, strict=True), 1):
        n_src, n_tgt = len(example.src_tokens), len(example.tgt_tokens)
        for src, tgt in sorted(gold.possible | gold.sure):
            if src < n_src and tgt < n_tgt:
                continue
            a, b = (src, tgt) if order == "src-tgt" else (tgt, src)
            link = f"{a}{'-' if (src, tgt) in gold.sure else '?'}{b}"
            raise AttnlabError(
                f"{where}:{line}: link {link} ({order}) is outside sentence {line}, which has "
                f"{n_src} source and {n_tgt} target tokens; valid: source 0..{n_src - 1}, "
                f"target 0..{n_tgt - 1} (the model's tokens)"
            )


def gold_alignment_report(
    model: Any,
    dataset: Any,
    examples: Sequence[Any],
    golds: Sequence[GoldAlignment],
    device: Any,
    transformer: bool,
    where: str = "the gold alignment file",
    order: str = "src-tgt",
) -> dict[str, Any]:
    if len(golds) != len(examples):
        raise AttnlabError(
            f"the gold alignment file has {len(golds)} lines but the split has {len(examples)} "
            "sentences; one line per sentence pair is needed"
        )
    check_links(examples, golds, where, order)
    links = per_layer_links(model, dataset, examples, device, shift=False)
    by_layer = _aer_by_layer(links, golds)
    report: dict[str, Any] = {
        "n": len(examples),
        "aer": by_layer[-1] if by_layer else None,
        "aer_by_layer": by_layer,
    }
    if transformer:
        shifted = per_layer_links(model, dataset, examples, device, shift=True)
        shift_by_layer = _aer_by_layer(shifted, golds)
        finite = [(v, i) for i, v in enumerate(shift_by_layer) if v is not None]
        best = min(finite) if finite else (None, None)
        report["shift_att"] = {"layer": best[1], "aer": best[0], "aer_by_layer": shift_by_layer}
    return report
