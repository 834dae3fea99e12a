"""Continuing a decoder-only language model: KV-cached and vectorised over a batch of prompts.

``generate_steps(model, prompts, max_new, Sampling(...))`` prefills every layer's cache in one
pass and then runs one ``model.step`` per new token for the whole batch. The prefill reads a
prompt as a causal model's source: ``prompt[:-1]`` through ``model.encode`` (an LM's source and
target share one embedding table, and a causal prefix is one causal pass over prefix ⊕ target),
then ``prompt[-1]`` as the first ``step`` input, whose logits predict the first new token.
tests/test_generate.py checks every step's logits against a full forward over prompt ⊕ the
tokens so far.

Context: a model trained on windows of ``data.block_size`` tokens has never seen a later
position. nanoGPT crops the context to the last block_size tokens and re-runs all of it for
every token. Here, with ``context`` set, when the cache would grow past ``context`` positions
it is rebuilt from each row's last ``keep`` tokens (one prefill), so every step sees between
``keep`` and ``context`` tokens at positions below ``context``: one prefill per
``context - keep`` tokens instead of a full pass per token.

Tokens: temperature 0 is greedy (arg-max); otherwise ``attnlab.decode.sampling.draw`` (the
decoders' sampler: temperature, top-k, top-p) from a ``torch.Generator`` seeded with ``seed``,
so the same seed gives the same tokens on one device. <pad>, <unk>, <s> and </s> are never
generated: an LM's text has none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.decode.sampling import draw
from attnlab.decode.topk import row_argmax
from attnlab.errors import AttnlabError
from attnlab.nn.output_layer import folded_output_layers
from attnlab.nn.seq2seq import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MAX_TEMPERATURE = 100.0  # decode.temperature's upper bound (attnlab.config.RANGES)
MAX_NEW = 1_000_000  # tokens per prompt: a typo (1e12) is refused, not run for days
SEED_MAX = 2**63 - 1


@dataclass(frozen=True)
class Sampling:
    """How each new token is chosen. temperature 0: greedy; top_k 0 and top_p 1: off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def check(self) -> None:
        """One AttnlabError line per bad value (NaN fails every range)."""
        if not 0.0 <= self.temperature <= MAX_TEMPERATURE:
            raise AttnlabError(
                f"temperature {self.temperature:g}: valid: 0 to {MAX_TEMPERATURE:g} "
                "(0 = greedy, 1 = the model's own distribution)"
            )
        if self.top_k < 0:
            raise AttnlabError(f"top-k {self.top_k}: valid: an integer ≥ 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise AttnlabError(f"top-p {self.top_p:g}: valid: above 0, at most 1 (1 = off)")
        if not 0 <= self.seed <= SEED_MAX:
            raise AttnlabError(f"seed {self.seed}: valid: 0 to 2^63 - 1")


@dataclass(frozen=True)
class GenerationStep:
    """One new token per row: tokens [B] and the raw logits [B, V] they were chosen from."""

    tokens: Tensor
    logits: Tensor


def check_generation(max_new: int, context: int | None = None, keep: int | None = None) -> None:
    if not 1 <= max_new <= MAX_NEW:
        raise AttnlabError(f"max-new {max_new}: valid: 1 to {MAX_NEW} new tokens")
    if context is not None and context < 2:
        raise AttnlabError(f"context {context}: valid: at least 2 tokens")
    if keep is not None and (context is None or not 1 <= keep < context):
        raise AttnlabError(f"keep {keep}: valid: 1 to context - 1 tokens (needs a context)")


def check_model(model: torch.nn.Module) -> None:
    from attnlab.nn.decoder_only import DecoderOnlyTransformer

    if not isinstance(model, DecoderOnlyTransformer):
        raise AttnlabError(
            f"generation continues a decoder-only language model; this is a "
            f"{type(model).__name__} (translate decodes a sequence-to-sequence model)"
        )


@contextmanager
def causal_prompt(model: torch.nn.Module) -> Iterator[None]:
    """The prompt read causally, as an LM trained on an empty source read its windows (a
    bidirectional prefix would let a prompt position see later ones)."""
    before = model.bidirectional
    model.bidirectional = False
    try:
        yield
    finally:
        model.bidirectional = before


def _windows(history: Tensor, lengths: Tensor, cap: int | None) -> tuple[Tensor, Tensor]:
    """Each row's last min(length, cap) tokens of history [B, W], right-padded -> (ids [B, w],
    mask [B, w]); w is the longest such window."""
    take = lengths if cap is None else lengths.clamp(max=cap)
    width = int(take.max())  # the prefill's one host sync
    offsets = torch.arange(width, device=history.device)
    mask = offsets[None, :] < take[:, None]
    index = ((lengths - take)[:, None] + offsets[None, :]).clamp(max=history.shape[1] - 1)
    return history.gather(1, index).masked_fill(~mask, PAD_ID), mask


def _prefill(
    model: torch.nn.Module, history: Tensor, lengths: Tensor, cap: int | None
) -> tuple[object, dict[str, Tensor], Tensor]:
    """(encoder output, decoder state, next step input [B]): every row's window but its last
    token read into the cache in one pass; the last token is the first step's input."""
    window, mask = _windows(history, lengths, cap)
    take = mask.sum(dim=1)
    last = window.gather(1, (take - 1)[:, None]).squeeze(1)
    src_mask = mask[:, 1:]  # one token fewer per row: the window without its last token
    src = window[:, :-1].masked_fill(~src_mask, PAD_ID)
    enc = model.encode(src, src_mask)
    return enc, model.start_state(enc), last


def _blocked(vocab: int, device: torch.device) -> Tensor:
    """[V]: -inf at the special ids, 0 elsewhere."""
    blocked = torch.zeros(vocab, device=device)
    blocked[[PAD_ID, UNK_ID, BOS_ID, EOS_ID]] = float("-inf")
    return blocked


def generate_steps(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    sampling: Sampling,
    *,
    context: int | None = None,
    keep: int | None = None,
) -> Iterator[GenerationStep]:
    """``max_new`` steps, each the next token of every prompt (ids, none empty). ``context``:
    the most positions a step sees (None: no limit but the model's); ``keep``: the tokens a
    full context is cut to (default context // 2). A prompt longer than ``context`` is cut
    to its last ``context`` tokens, as nanoGPT crops."""
    check_model(model)
    sampling.check()
    check_generation(max_new, context, keep)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise AttnlabError("an empty prompt has nothing to continue: give at least one token")
    if context is not None and keep is None:
        keep = max(1, context // 2)
    device = next(model.parameters()).device
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    history = torch.full((len(prompts), int(lengths.max()) + max_new), PAD_ID, device=device)
    for row, prompt in enumerate(prompts):  # once per call, not per step
        history[row, : len(prompt)] = torch.as_tensor(list(prompt), device=device)
    generator = torch.Generator(device=device)
    generator.manual_seed(sampling.seed)
    blocked = _blocked(model.tgt_vocab_size, device)
    with torch.no_grad(), folded_output_layers(model), causal_prompt(model):
        enc, state, prev = _prefill(model, history, lengths, context)
        for _ in range(max_new):
            if context is not None and state["self_cache0"].shape[-2] >= context:
                enc, state, prev = _prefill(model, history, lengths, keep)  # slide the window
            logits, state, _ = model.step(prev, state, enc)
            log_probs = torch.log_softmax(logits.float() + blocked, dim=-1)
            if sampling.greedy:
                chosen = row_argmax(log_probs)
            else:
                chosen = draw(
                    log_probs, generator, sampling.temperature, sampling.top_k, sampling.top_p
                )
            history.scatter_(1, lengths[:, None], chosen[:, None])
            lengths = lengths + 1
            prev = chosen
            yield GenerationStep(tokens=chosen, logits=logits)


def generate(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    sampling: Sampling,
    *,
    context: int | None = None,
    keep: int | None = None,
) -> Tensor:
    """The new tokens [B, max_new] of every prompt (see ``generate_steps``)."""
    steps = generate_steps(model, prompts, max_new, sampling, context=context, keep=keep)
    return torch.stack([step.tokens for step in steps], dim=1)


def causal_map(model: torch.nn.Module, tokens: Sequence[int]) -> Tensor:
    """The self-attention [L, H, N, N] of one full causal pass over ``tokens`` (an LM's window:
    an empty source, the tokens as the target)."""
    check_model(model)
    device = next(model.parameters()).device
    ids = torch.as_tensor(list(tokens), device=device)[None, :]
    empty = ids[:, :0]
    with torch.no_grad(), causal_prompt(model):
        out = model(empty, empty.bool(), ids, need_weights=True)
    maps = out.attentions.get("dec_self")
    if maps is None:
        name = type(model.layers[0].self_attn.attn).__name__
        raise AttnlabError(f"the model's self-attention ({name}) returns no weights to draw")
    return maps[0]
