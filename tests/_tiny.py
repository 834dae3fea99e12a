"""The one tiny configuration and the one padded batch the tests share.

``tiny_config()`` is reverse + GRU + Bahdanau at toy sizes that train in well under a second
(conftest's ``tiny_config`` fixture and ``tiny_sets``, the lab tests' ``lab_config``, all start
from it); ``batch()`` pads token lists into the model's inputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from attnlab.config import ExperimentConfig
from attnlab.experiment import apply_overrides
from attnlab.nn.seq2seq import BOS_ID, PAD_ID

# --set overrides for a model and data small enough for fast CLI and trainer tests.
TINY_OVERRIDES = (
    "data.train_size=64",
    "data.dev_size=16",
    "data.test_size=16",
    "data.max_len=8",
    "model.hidden=16",
    "model.emb=8",
    "train.max_steps=6",
    "train.batch_size=16",
    "train.eval_every=3",
    "train.log_every=1",
    "train.samples=2",
)

# The tiny model as a 1+1-layer Transformer (d_model 16, 2 heads): add to TINY_OVERRIDES.
TINY_TRANSFORMER = (
    "model.arch=transformer",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
)


def tiny_config(name: str = "tiny", *overrides: str) -> ExperimentConfig:
    """A fresh tiny config; ``overrides`` (``key=value``) apply after ``TINY_OVERRIDES``."""
    return apply_overrides(ExperimentConfig(name=name), [*TINY_OVERRIDES, *overrides])


def batch(sources: list[list[int]], targets: list[list[int]]) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, src_mask, tgt_in)``: sources right-padded, each target behind BOS, padded."""
    width_src = max(len(s) for s in sources)
    width_tgt = 1 + max(len(t) for t in targets)
    src = torch.full((len(sources), width_src), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((len(targets), width_tgt), PAD_ID, dtype=torch.long)
    for row, (s, t) in enumerate(zip(sources, targets, strict=True)):
        src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        tgt_in[row, : 1 + len(t)] = torch.tensor([BOS_ID, *t], dtype=torch.long)
    return src, src != PAD_ID, tgt_in


def finished_study_run(run: Path, score: dict) -> None:
    """A finished study run on disk with ``score`` as its study-score.json (no training)."""
    run.mkdir(parents=True)
    (run / "config.toml").write_text('name = "fake"\n[data]\ntask = "reverse"\n', encoding="utf-8")
    events = [
        {"type": "eval", "time": 1.0, "step": 5, "split": "dev", "bleu": score["bleu"]},
        {
            "type": "done",
            "time": 2.0,
            "step": 10,
            "reason": "finished",
            "best": {},
            "elapsed_s": 1.0,
            "tokens_per_s": 1.0,
        },
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "study-score.json").write_text(json.dumps(score), encoding="utf-8")


def briefly_trained(config: ExperimentConfig, steps: int, lr: float = 3e-3):
    """(model in eval mode, dataset) of ``config`` after ``steps`` Adam steps of 16 training
    pairs each (seed 0): hypotheses of varied lengths for parity tests, 0 steps untrained."""
    import torch.nn.functional as F

    from attnlab.data.batching import make_batch
    from attnlab.data.dataset import load_dataset
    from attnlab.nn.model import build_model

    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train = dataset.splits.train
    for step in range(steps):
        examples = [train[(step * 16 + i) % len(train)] for i in range(16)]
        b = make_batch(examples, dataset.src_vocab, dataset.tgt_vocab)
        logits = model(b.src, b.src_mask, b.tgt_in).logits
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), dataset
