"""What the Inspect view computes (torch side, no textual): runs in a thread worker.

Load a checkpoint (cached), take a dev/test example or a typed sentence, decode it with the
engine's search (n-best with the beam), then re-run each hypothesis teacher-forced with
``need_weights=True`` to get every attention map: ``cross`` [L, H, T, S] and, for
Transformers, ``enc_self`` [L, H, S, S] and ``dec_self`` [L, H, T, T]. For tasks with gold
alignments, the reference is forced through the model too and alignment accuracy is the
share of reference tokens whose arg-max cross-attention (last layer, head average) is the
gold source token. A block-sparse variant (nsa) also gives, per self-attention role, which
cells its queries read in selected blocks (``HypothesisMaps.selected``, same shapes, bool).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.attention_map import (
    BOS_LABEL,
    EOS_LABEL,
    last_layer_head_mean,
    target_rows,
    union_over_heads,
)
from attnlab.tui.diagnostics import alignment_accuracy

EOS, BOS = EOS_LABEL, BOS_LABEL
# Attribution maps shown beside the raw ones (Inspect's "m" key cycles cross and these).
METHOD_KINDS = ("rollout", "relevancy", "gradient", "norm")


@dataclass(frozen=True)
class InspectRequest:
    run_dir: Path
    checkpoint: str = "best"  # best | last
    split: str = "dev"
    index: int = 0
    text: str = ""  # a typed sentence replaces the split/index example
    beam: int = 1  # hypotheses wanted: the beam size, samples or MBR's n-best
    decoder: str = ""  # a registered decoding strategy; "" = beam (greedy for 1)


@dataclass
class HypothesisMaps:
    tokens: list[str]  # target tokens, without </s>
    score: float
    finished: bool
    maps: dict[str, np.ndarray]  # kind -> [L, H, rows, cols]
    labels: dict[str, tuple[list[str], list[str]]]  # kind -> (row labels, column labels)
    # kind -> [L, H, rows, cols] bool: cells of selected blocks (nsa); absent: no marks
    selected: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class InspectResult:
    request: InspectRequest
    checkpoint_path: str
    step: int
    src: list[str]
    ref: list[str] | None
    gold: list[int] | None
    hypotheses: list[HypothesisMaps]
    alignment_accuracy: float | None = None
    notes: list[str] = field(default_factory=list)
    # model key (cross / enc_self / dec_self) -> how its rows are normalised (softmax if absent)
    normalisations: dict[str, str] = field(default_factory=dict)
    # source tokens the model has no id for (read as <unk>; attnlab.data.oov)
    unknown: list[str] = field(default_factory=list)


_lock = threading.Lock()
# One decode at a time on the cached model: two threads in one model's forward (a new request
# while the first still runs) mix their tensors (issue 44). Re-entrant for callers that nest.
ENGINE_LOCK = threading.RLock()
_models: dict[tuple[str, float], Any] = {}
_datasets: dict[str, Any] = {}


def checkpoint_path(run_dir: Path, which: str) -> Path:
    """``RUN/checkpoints/<which>`` (falls back to the other tag), or an exported file."""
    from attnlab.runs import checkpoint_dir, resolve_checkpoint

    run_dir = Path(run_dir)
    if run_dir.is_file():
        return run_dir
    for tag in (which, "last" if which == "best" else "best"):
        candidate = checkpoint_dir(run_dir, tag)
        if (candidate / "meta.json").is_file():
            return candidate
    return resolve_checkpoint(run_dir)  # raises AttnlabError naming what is missing


def _load(path: Path) -> Any:
    from attnlab.runs import load_checkpoint

    meta = path / "meta.json" if path.is_dir() else path
    key = (str(path), meta.stat().st_mtime if meta.exists() else 0.0)
    with _lock:
        if key not in _models:
            _models.clear()  # keep one model in memory
            _models[key] = load_checkpoint(path)
        return _models[key]


def _data(loaded: Any) -> Any:
    """The run's dataset (its splits, an LM's token streams), read once per configuration."""
    from attnlab.config import dumps_toml
    from attnlab.runs import load_checkpoint_data

    key = dumps_toml(loaded.config)
    with _lock:
        if key not in _datasets:
            _datasets.clear()
            _datasets[key] = load_checkpoint_data(loaded)
        return _datasets[key]


def _examples(loaded: Any, split: str) -> list[Any]:
    return _data(loaded).splits.split(split)


def decoder_choices() -> list[tuple[str, str]]:
    """(label, value) per registered decoding strategy, for Inspect's menu."""
    from attnlab.decode.search import DECODERS

    return [(name, name) for name in DECODERS.names()]


def decode_config(loaded_cfg: Any, decoder: str, width: int) -> Any:
    """The checkpoint's decode config set up for ``decoder`` with ``width`` hypotheses."""
    from attnlab.decode.search import DECODERS

    return DECODERS.get(decoder or "beam").factory().configure(loaded_cfg, max(int(width), 1))


def analyse(request: InspectRequest) -> InspectResult:
    """Decode and force one example (alone: under ``ENGINE_LOCK``)."""
    with ENGINE_LOCK:
        return _analyse(request)


def _analyse(request: InspectRequest) -> InspectResult:
    import torch

    from attnlab.decode.search import decode_batch
    from attnlab.errors import AttnlabError
    from attnlab.evaluate import target_text
    from attnlab.nn.archs import normalisations_of
    from attnlab.nn.seq2seq import BOS_ID, PAD_ID

    path = checkpoint_path(request.run_dir, request.checkpoint)
    loaded = _load(path)
    if loaded.config.data.task == "lm":
        return _analyse_lm(request, loaded, path)
    model, ds = loaded.model, loaded.dataset
    ref = gold = None
    if request.text.strip():
        src_tokens = list(ds.tokenize_source(request.text))
    else:
        examples = _examples(loaded, request.split)
        if not examples:
            raise AttnlabError(f"the {request.split} split is empty")
        if not 0 <= request.index < len(examples):
            raise AttnlabError(
                f"sample index {request.index} is out of range [0, {len(examples) - 1}]"
            )
        example = examples[request.index]
        src_tokens, ref = list(example.src_tokens), list(example.tgt_tokens)
        gold = list(example.alignment) if example.alignment is not None else None
    if not src_tokens:
        raise AttnlabError("the source sentence is empty")
    from attnlab.data.oov import source_labels, unknown_tokens

    unknown = unknown_tokens(ds.src_vocab, src_tokens)
    columns = source_labels(ds.src_vocab, src_tokens)  # what the model read: <unk> marked
    device = next(model.parameters()).device
    src = torch.tensor([ds.src_vocab.encode(src_tokens)], device=device)  # [1, S]
    src_mask = src != PAD_ID
    decode_cfg = decode_config(loaded.config.decode, request.decoder, request.beam)
    with torch.no_grad():
        hyps = decode_batch(
            model, src, src_mask, decode_cfg, need_attention=True, to_text=target_text(ds)
        )[0]

        def forced(ids: list[int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
            """(weights, selected cells) by model key of one teacher-forced pass."""
            tgt_in = torch.tensor([[BOS_ID, *ids]], device=device)  # [1, T]
            out = model(src, src_mask, tgt_in, need_weights=True)
            maps = {
                k: v[0].float().cpu().numpy() for k, v in out.attentions.items() if v is not None
            }
            return maps, {k: v[0].cpu().numpy() for k, v in out.selected.items()}

        result_hyps = []
        for hyp in hyps:
            tokens = ds.tgt_vocab.decode(hyp.tokens, strip=False)
            maps, selected = forced(list(hyp.tokens))
            inputs = [BOS, *tokens]
            labels = {  # the forced pass has a row after the last token: </s> or "…"
                "cross": (target_rows(tokens, hyp.finished, unfinished="…"), columns),
                "enc_self": (columns, columns),
                "dec_self": (inputs, inputs),
            }
            if maps.get("dec_self") is not None and maps["dec_self"].shape[-1] > len(inputs):
                whole = columns + inputs  # a decoder-only model: one map over prompt ⊕ target
                labels["dec_self"] = (whole, whole)
            explained = method_maps(model, src[0].tolist(), list(hyp.tokens), hyp.finished)
            for method, matrix in explained.items():
                maps[method] = matrix
                labels[method] = labels["cross"]
            result_hyps.append(
                HypothesisMaps(
                    tokens,
                    float(hyp.score),
                    bool(hyp.finished),
                    maps,
                    {k: labels[k] for k in maps if k in labels},
                    selected,
                )
            )
        accuracy = None
        if gold is not None and ref is not None:
            ref_maps, _ = forced(ds.tgt_vocab.encode(ref))
            if "cross" in ref_maps:
                accuracy = alignment_accuracy(last_layer_head_mean(ref_maps["cross"]), gold)
    return InspectResult(
        request,
        str(path),
        int(loaded.step),
        src_tokens,
        ref,
        gold,
        result_hyps,
        accuracy,
        normalisations=normalisations_of(loaded.config),
        unknown=unknown,
    )


def method_maps(
    model: Any, src_ids: list[int], tgt_ids: list[int], finished: bool
) -> dict[str, np.ndarray]:
    """Rollout / relevancy / gradient / norm maps of one hypothesis (attnlab.interpret), each
    [L=1, H=1, T+1, S] like the cross rows (an unfinished hypothesis gets a zero last row)."""
    from attnlab.errors import AttnlabError
    from attnlab.interpret.attribution import explain

    try:
        maps = explain(model, src_ids, tgt_ids, eos=finished)
    except AttnlabError:
        return {}
    out = {}
    for method in METHOD_KINDS:
        if method not in maps:
            continue
        matrix = maps[method].detach().float().cpu().numpy()
        if not finished:
            matrix = np.concatenate([matrix, np.zeros((1, matrix.shape[1]), dtype=matrix.dtype)])
        out[method] = matrix[None, None]
    return out


def select_map(maps: np.ndarray, layer: int, head: int | None) -> np.ndarray:
    """One [rows, cols] matrix from [L, H, rows, cols]: a head, or the head average (None)."""
    per_layer = maps[min(max(layer, 0), maps.shape[0] - 1)]
    if head is None:
        return per_layer.mean(axis=0)
    return per_layer[min(max(head, 0), per_layer.shape[0] - 1)]


def select_selected(mask: np.ndarray, layer: int, head: int | None) -> np.ndarray:
    """``select_map``'s choice of a selection mask [L, H, rows, cols]: a head's own, or for the
    head average the cells any head selected (attnlab.attention_map.union_over_heads)."""
    per_layer = mask[min(max(layer, 0), mask.shape[0] - 1)]
    if head is None:
        return union_over_heads(per_layer, 0)
    return per_layer[min(max(head, 0), per_layer.shape[0] - 1)]


# A language model in Inspect: at most this many new tokens, greedy, within one context window
# (the model never saw a later position), so the causal map covers the whole text it read.
LM_MAX_NEW = 48


def _analyse_lm(request: InspectRequest, loaded: Any, path: Path) -> InspectResult:
    """Continue a prompt (the typed text, else the first half of dev window ``index``, whose
    second half is the reference) greedily and return the causal self-attention of prompt ⊕
    continuation: ``dec_self`` [L, H, N, N], rows and columns the tokens read."""
    import torch

    from attnlab.data.oov import unknown_tokens
    from attnlab.decode.generate import Sampling, causal_map, generate
    from attnlab.errors import AttnlabError

    model, ds = loaded.model, loaded.dataset
    block = int(loaded.config.data.block_size)
    ref = None
    if request.text.strip():
        tokens = list(ds.tokenize_source(request.text))
        unknown = unknown_tokens(ds.src_vocab, tokens)
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:8])
            raise AttnlabError(f"the prompt has tokens the run never saw in training: {shown}")
        ids = ds.src_vocab.encode(tokens)
    else:
        streams = _data(loaded).streams
        starts = streams.eval_starts(request.split)
        if not len(starts):
            raise AttnlabError(f"the {request.split} split has no window of {block} tokens")
        if not 0 <= request.index < len(starts):
            raise AttnlabError(
                f"sample index {request.index} is out of range [0, {len(starts) - 1}]"
            )
        window = streams.split(request.split)[int(starts[request.index]) :][:block]
        ids = [int(i) for i in window[: block // 2]]
        ref = ds.tgt_vocab.decode([int(i) for i in window[block // 2 :]][:LM_MAX_NEW])
    ids = ids[-(block // 2) :] if len(ids) > block // 2 else ids  # room for the continuation
    if not ids:
        raise AttnlabError("the prompt is empty")
    new_count = max(1, min(LM_MAX_NEW, block - len(ids)))
    device = next(model.parameters()).device
    with torch.no_grad():
        new = generate(model, [ids], new_count, Sampling(temperature=0.0))[0].tolist()
        maps = causal_map(model, ids + new).float().cpu().numpy()  # [L, H, N, N]
        text = torch.tensor([ids + new[:-1]], device=device)
        empty = text[:, :0]
        logits = model(empty, empty.bool(), text).logits[0, len(ids) - 1 :].cpu()
        score = float(
            torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(new)[:, None]).sum()
        )
    from attnlab.viz.text import visible_token

    labels = [visible_token(t) for t in ds.tgt_vocab.decode(ids + new)]
    prompt = ds.tgt_vocab.decode(ids)
    hypothesis = HypothesisMaps(
        ds.tgt_vocab.decode(new), score, False, {"dec_self": maps}, {"dec_self": (labels, labels)}
    )
    from attnlab.nn.archs import normalisations_of

    note = (
        f"a language model: the first {len(ids)} tokens are the prompt, the last "
        f"{len(new)} the greedy continuation"
    )
    return InspectResult(
        request,
        str(path),
        int(loaded.step),
        prompt,
        ref,
        None,
        [hypothesis],
        notes=[note],
        normalisations=normalisations_of(loaded.config),
    )
