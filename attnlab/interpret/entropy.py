"""Attention entropy per role × layer × head (Zhai et al. 2023 track its collapse).

H(row) = −Σ_k p_k ln p_k (nats) over one query's weights; averaged over the real query rows
of every sentence (target rows at padding and source rows at padding are left out).

The functions live in attnlab.evaluate (the eval event carries the entropy, and evaluate sits
below attnlab.interpret in the import layers); this name stays for readers of interpret.
"""

from __future__ import annotations

from attnlab.evaluate import entropy_sums, row_entropy

__all__ = ["entropy_sums", "row_entropy"]
