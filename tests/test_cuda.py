"""CUDA against the CPU: every attention variant in every role it declares, both RNN cells,
bf16 autocast training steps, beam search, and a real ``torch.compile`` training run.

The reference is the CPU float32 pass (its own tests check it against float64 loops and
torch's modules). The whole module is skipped without a CUDA device: it never runs on the CPU
in CUDA's place. ``benchmarks/gpu_check.py`` runs it with ``-k cuda``.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _tiny import TINY_TRANSFORMER
from test_transformer import SRC_V, TGT_V, forward_and_grads, ragged_batch

from attnlab.config import DecodeConfig, ExperimentConfig, ModelConfig
from attnlab.decode.search import decode_sorted
from attnlab.evaluate import token_loss_sum
from attnlab.events import iter_events
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_RNN_CROSS, ROLE_SELF
from attnlab.nn.model import build_model
from attnlab.nn.seq2seq import PAD_ID

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
CUDA = torch.device("cuda")

TRANSFORMER = dict(
    arch="transformer", d_model=32, heads=4, ff=48, enc_layers=2, dec_layers=2, dropout=0.0
)
RNN = dict(arch="rnn", hidden=16, emb=8, dropout=0.0)


def _cases():
    """Every registered variant in each role it declares: Transformer encoder self, decoder
    self and cross-attention, and RNN cross-attention under a GRU and an LSTM."""
    for entry in ATTENTION.entries():
        roles = entry.meta.roles
        if ROLE_SELF in roles:  # the decoder keeps scaled-dot: this case is the encoder's
            case = {"self_attention": entry.name, "decoder_self_attention": "scaled-dot"}
            yield pytest.param({**TRANSFORMER, **case}, id=f"self={entry.name}")
        if ROLE_CAUSAL_SELF in roles:
            case = {"decoder_self_attention": entry.name}
            yield pytest.param({**TRANSFORMER, **case}, id=f"decoder_self={entry.name}")
        if ROLE_CROSS in roles:
            yield pytest.param(
                {**TRANSFORMER, "cross_attention": entry.name}, id=f"cross={entry.name}"
            )
        if ROLE_RNN_CROSS in roles:
            # luong-dot needs the decoder as wide as the encoder: one direction for it.
            for cell, bidirectional in (("gru", entry.name != "luong-dot"), ("lstm", False)):
                case = {**RNN, "cell": cell, "bidirectional": bidirectional}
                yield pytest.param({**case, "attention": entry.name}, id=f"{cell}+{entry.name}")


CASES = list(_cases())


def _model(model_kwargs: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ExperimentConfig(model=ModelConfig(**model_kwargs)), SRC_V, TGT_V).eval()


@pytest.fixture
def exact_cuda(monkeypatch):
    """float32 on CUDA without TF32, so the CPU's float32 is a fair reference."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


@pytest.mark.parametrize("model_kwargs", CASES)
def test_forward_and_gradients_on_cuda_equal_the_cpu(model_kwargs, exact_cuda):
    """In eval mode, as attribution maps and head importance take gradients (an RNN's
    backward there cannot use cuDNN: attnlab.nn.rnn.run_rnn)."""
    cpu_model = _model(model_kwargs)
    cuda_model = copy.deepcopy(cpu_model).to(CUDA)
    batch = ragged_batch()
    real = batch[2] != PAD_ID
    # packed=True: each device's own paths (the CPU's fast ones, CUDA's padded one).
    cpu_logits, cpu_grads = forward_and_grads(cpu_model, *batch, packed=True)
    on_cuda = [t.to(CUDA) for t in batch]
    cuda_logits, cuda_grads = forward_and_grads(cuda_model, *on_cuda, packed=True)
    torch.testing.assert_close(cuda_logits.cpu()[real], cpu_logits[real], atol=1e-4, rtol=1e-4)
    assert cuda_grads.keys() == cpu_grads.keys()
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(cuda_grads[name].cpu(), grad, atol=1e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("model_kwargs", CASES)
def test_a_bf16_autocast_step_on_cuda_is_finite_and_near_float32(model_kwargs):
    """What training runs on CUDA (``train.amp``, train mode: cuDNN's RNN kernels): bf16
    autocast forward, float32 loss, and a backward whose gradients are all finite; the loss
    within bf16's error of float32's."""
    model = _model(model_kwargs).train().to(CUDA)
    src, src_mask, tgt_in = (t.to(CUDA) for t in ragged_batch())
    targets = torch.roll(tgt_in, -1, dims=1).masked_fill(tgt_in == PAD_ID, PAD_ID)
    with torch.no_grad():
        reference = token_loss_sum(model(src, src_mask, tgt_in).logits, targets).item()
    with torch.autocast(CUDA.type, dtype=torch.bfloat16):
        logits = model(src, src_mask, tgt_in).logits
    loss = token_loss_sum(logits, targets)
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(reference, rel=0.05)
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize(
    "model_kwargs", [TRANSFORMER, {**RNN, "attention": "bahdanau"}], ids=["transformer", "rnn"]
)
@pytest.mark.parametrize("beam", [1, 5])
def test_search_on_cuda_scores_as_on_the_cpu(model_kwargs, beam, exact_cuda):
    """Batched greedy and beam search: each sentence's best score on CUDA is the CPU's
    (scores, not tokens, so a tie broken the other way cannot fail it)."""
    cpu_model = _model(model_kwargs)
    cuda_model = copy.deepcopy(cpu_model).to(CUDA)
    gen = torch.Generator().manual_seed(3)
    sources = [torch.randint(4, SRC_V, (n,), generator=gen).tolist() for n in (7, 3, 9, 1, 5)]
    cfg = DecodeConfig(beam=beam, alpha=0.6 if beam > 1 else 0.0, max_len_const=4)
    with torch.no_grad():
        on_cpu = decode_sorted(cpu_model, sources, cfg, False, "cpu")
        on_cuda = decode_sorted(cuda_model, sources, cfg, False, CUDA)
    for cpu_best, cuda_best in zip(on_cpu, on_cuda, strict=True):
        assert cuda_best[0].score == pytest.approx(cpu_best[0].score, abs=1e-4)


def test_compiled_training_on_cuda_follows_eager(tmp_path, tiny_config):
    """``train.compile`` really compiles on CUDA (no fallback note) and its losses are the
    eager run's: the first step's to float32 rounding, later ones within Adam's drift."""
    from dataclasses import replace

    from attnlab.experiment import apply_overrides
    from attnlab.train.trainer import Trainer

    config = apply_overrides(
        tiny_config,
        [
            *TINY_TRANSFORMER,
            "model.dropout=0",
            "train.amp=false",
            "train.eval_every=100",
        ],
    )
    losses = {}
    for compiled in (True, False):
        run = tmp_path / f"compile-{compiled}"
        cfg = replace(config, train=replace(config.train, compile=compiled))
        summary = Trainer(cfg, run, device=CUDA.type).run()
        assert summary["reason"] == "finished"
        events = list(iter_events(run))
        assert not [e for e in events if e["type"] == "note"], "torch.compile fell back"
        losses[compiled] = [e["loss"] for e in events if e["type"] == "step"]
    assert len(losses[True]) == len(losses[False]) == config.train.max_steps
    assert losses[True][0] == pytest.approx(losses[False][0], abs=1e-4)
    assert losses[True] == pytest.approx(losses[False], abs=1e-2)
