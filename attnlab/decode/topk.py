"""Arg-max and beam top-k over a large vocabulary through chunk maxima.

On CPU ``Tensor.argmax`` / ``Tensor.topk`` along rows of a few thousand entries are several
times slower than the output projection that produced them (they are not vectorised like
``amax``). Both searches only need a handful of entries per row, so they first take the
maximum of each chunk of ``CHUNK`` columns (one vectorised pass), pick the best chunks, and
look inside those only:

- arg-max: the first chunk that holds the row maximum holds its first occurrence;
- top-n: if an entry is among the n largest, its chunk maximum is at least that entry, so
  its chunk is among the n chunks with the largest maxima (up to ties of equal values).

Both return what the plain ``argmax`` / ``topk`` return (``search_topk`` may order exactly
equal values differently). CUDA, and rows shorter than ``4 * CHUNK``, use the plain ops
(so does an arg-max over a few rows, where the call count, not the data, sets the cost).
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 64  # columns per chunk: a cache line multiple, small enough to keep stage 2 cheap
SMALL_ROWS = 8  # up to this many rows the plain op's one call beats the chunk passes' ten


def _plain(x: Tensor) -> bool:
    return x.is_cuda or x.size(-1) < 4 * CHUNK


def row_argmax(x: Tensor) -> Tensor:
    """``x.argmax(dim=1)`` for x[R, V] (the first index of each row's maximum)."""
    if _plain(x) or x.size(0) <= SMALL_ROWS:
        return x.argmax(dim=1)
    return _chunked_argmax(x)


def _chunked_argmax(x: Tensor) -> Tensor:
    rows, vocab = x.shape
    width = vocab // CHUNK * CHUNK
    body = x[:, :width].reshape(rows, width // CHUNK, CHUNK)
    chunk_max = body.amax(dim=2)  # [R, n]
    best = chunk_max.argmax(dim=1)  # [R] the first chunk holding the body's maximum
    inside = body[torch.arange(rows, device=x.device), best].argmax(dim=1)  # [R]
    index = best * CHUNK + inside
    if width < vocab:  # the last columns, fewer than CHUNK: plain, and ties go to the body
        tail_max, tail_index = x[:, width:].max(dim=1)
        body_max = chunk_max.gather(1, best.unsqueeze(1)).squeeze(1)
        index = torch.where(tail_max > body_max, tail_index + width, index)
    return index


def search_topk(scores: Tensor, log_probs: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The n best continuations per sentence over all beams and tokens.

    scores[A, K] (each beam's log-prob so far), log_probs[A, K, V] -> (values[A, n],
    beam[A, n], token[A, n]), best first, with values = scores[beam] + log_probs[beam, token]:
    what ``(scores[:, :, None] + log_probs).view(A, K * V).topk(n)`` gives.
    """
    sentences, beams, vocab = log_probs.shape
    if _plain(log_probs):
        values, index = (
            (scores.unsqueeze(2) + log_probs).reshape(sentences, beams * vocab).topk(n, dim=1)
        )
        return values, index // vocab, index % vocab
    device = log_probs.device
    width = vocab // CHUNK * CHUNK
    chunks = width // CHUNK
    body = log_probs[:, :, :width].reshape(sentences, beams, chunks, CHUNK)
    # Adding a beam's score is monotone, so max(score + lp) over a chunk = score + max(lp).
    chunk_max = body.amax(dim=3) + scores.unsqueeze(2)  # [A, K, n_chunks]
    _, top = chunk_max.reshape(sentences, beams * chunks).topk(min(n, beams * chunks), dim=1)
    beam = (top // chunks).unsqueeze(2).expand(-1, -1, CHUNK)  # [A, n, C]
    column = ((top % chunks) * CHUNK).unsqueeze(2) + torch.arange(CHUNK, device=device)  # [A, n, C]
    beam, column = beam.reshape(sentences, -1), column.reshape(sentences, -1)
    if width < vocab:  # the last columns of every beam, fewer than CHUNK each
        rest = vocab - width
        beam = torch.cat(
            [
                beam,
                torch.arange(beams, device=device).repeat_interleave(rest).expand(sentences, -1),
            ],
            1,
        )
        column = torch.cat(
            [column, torch.arange(width, vocab, device=device).repeat(beams).expand(sentences, -1)],
            1,
        )
    flat = log_probs.reshape(sentences, beams * vocab)
    candidates = scores.gather(1, beam) + flat.gather(1, beam * vocab + column)  # [A, M]
    values, pick = candidates.topk(n, dim=1)
    return values, beam.gather(1, pick), column.gather(1, pick)
