"""Decoding: greedy, batched beam (length / coverage penalties, diverse groups), sampling.

``decode_batch(model, src, src_mask, DecodeConfig)`` picks the search from the config;
every search returns ``Hypothesis`` objects carrying tokens, per-token log-probs, the
penalties, the final score and (on request) the cross-attention.
"""

from attnlab.decode.beam import beam_search
from attnlab.decode.greedy import greedy_decode, max_lengths
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.sampling import sample_decode
from attnlab.decode.search import check_decode_config, decode_batch

__all__ = [
    "Hypothesis",
    "beam_search",
    "check_decode_config",
    "decode_batch",
    "greedy_decode",
    "max_lengths",
    "sample_decode",
]
