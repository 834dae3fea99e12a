"""Decoding: greedy, batched beam (length / coverage penalties, diverse groups), sampling, MBR;
and continuing a language model's prompt (``generate``: KV-cached, vectorised over prompts).

``decode_batch(model, src, src_mask, DecodeConfig)`` runs the strategy ``decode.decoder``
names in the ``DECODERS`` registry (or the one the older flags select); every search returns
``Hypothesis`` objects carrying tokens, per-token log-probs, the penalties, the final score
and (on request) the cross-attention.
"""

from attnlab.decode.beam import beam_search
from attnlab.decode.generate import Sampling, generate, generate_steps
from attnlab.decode.greedy import greedy_decode, max_lengths
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.sampling import sample_decode
from attnlab.decode.search import DECODERS, check_decode, decode_batch
from attnlab.decode.strategy import DecoderSpec, DecodingStrategy, register_decoder

__all__ = [
    "DECODERS",
    "DecoderSpec",
    "DecodingStrategy",
    "Hypothesis",
    "Sampling",
    "beam_search",
    "check_decode",
    "decode_batch",
    "generate",
    "generate_steps",
    "greedy_decode",
    "max_lengths",
    "register_decoder",
    "sample_decode",
]
