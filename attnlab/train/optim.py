"""Which parameters weight decay reaches (``train.weight_decay_scope``).

``all`` (the default): every parameter, one AdamW group. ``matrices``: nanoGPT's and GPT-2's
rule, decay on every parameter of two or more dimensions (matmul weights and embeddings) and
none on biases and normalisation gains, as two groups (decayed first, each in model order).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

SCOPES = ("all", "matrices")


def weight_decay_groups(params: Iterable[torch.nn.Parameter], cfg: Any) -> list[Any]:
    """AdamW's ``params`` argument: the parameters as they are (``all``), or the two groups of
    ``matrices`` (an empty group is left out)."""
    params = list(params)
    if getattr(cfg, "weight_decay_scope", "all") != "matrices":
        return params
    decayed = [p for p in params if p.dim() >= 2]
    plain = [p for p in params if p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": cfg.weight_decay}]
    if plain:
        groups.append({"params": plain, "weight_decay": 0.0})
    return groups
