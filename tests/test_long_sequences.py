"""Sequences up to 4096 tokens (#41): refused at config time when a variant's scores would
not fit, the packed CPU pass and the fused attention equal their references at 4096, and a
4096-token run trains under a token budget with bounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, load_preset
from attnlab.nn.attention.base import ATTENTION_MEMORY_LIMIT_GIB
from attnlab.nn.model import build_model
from attnlab.nn.reference import reference_mode

REPO = Path(__file__).resolve().parents[1]
LONG = 4096
TINY = (
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
)


def long_copy(*overrides: str):
    return apply_overrides(
        load_preset("selective-copy-transformer"), [f"data.max_len={LONG}", *overrides]
    )


def test_a_token_budget_makes_4096_tokens_fit_and_a_full_batch_is_refused_in_one_line():
    long_copy("train.batch_tokens=8192")  # 2 rows x 4 heads x 4096² x 4 bytes = 0.5 GiB
    with pytest.raises(AttnlabError) as err:
        long_copy()  # 32 rows x 4 heads x 4096² x 4 bytes = 8 GiB
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("data.max_len=4096, train.batch_size=32: scaled-dot attention")
    assert f"{32 * 4 * LONG * LONG * 4 / 2**30:.1f} GiB" in message
    assert f"{ATTENTION_MEMORY_LIMIT_GIB:g} GiB limit" in message


def test_additive_attention_s_pairwise_features_are_refused_even_for_one_row():
    with pytest.raises(AttnlabError, match="additive attention would keep 8.0 GiB"):
        # 1 row x 4 heads x 4096² x d_h 32 x 4 bytes
        long_copy("train.batch_tokens=4096", "model.self_attention=additive")


@pytest.mark.parametrize(
    "variant", ["linear", "performer", "sliding-window", "decayed-linear", "dilated"]
)
def test_variants_linear_in_length_take_a_full_batch_at_4096(variant):
    long_copy(
        f"model.self_attention={variant}",
        f"model.decoder_self_attention={variant}",
        "model.cross_attention=linear",
    )


def test_a_variant_with_its_own_position_table_is_refused_past_it():
    with pytest.raises(AttnlabError, match=r"model.linformer.max_len=512 is shorter"):
        long_copy(
            "train.batch_tokens=8192",
            "model.self_attention=linformer",
            "model.linformer.max_len=512",
        )
    long_copy(
        "train.batch_tokens=8192", "model.self_attention=linformer", "model.linformer.max_len=4096"
    )


def test_packed_and_fused_paths_equal_their_references_at_4096():
    """Loss and gradients of a tiny Transformer on two sources of 4096 and 3000 tokens: the
    padding-free CPU pass with the fused SDPA kernel against the padded explicit softmax."""
    config = long_copy("train.batch_tokens=8192", *TINY, "model.heads=1")  # one head: seconds
    torch.manual_seed(0)
    model = build_model(config, 20, 20)
    model.eval()  # no dropout: both passes compute the same function
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(4, 20, (2, LONG), generator=gen)
    src[1, 3000:] = 0  # padding: the packed pass skips it
    tgt_in = torch.randint(4, 20, (2, 17), generator=gen)
    tgt_in[:, 0] = 2

    def loss_and_grads():
        model.zero_grad()
        logits = model(src, src != 0, tgt_in).logits
        loss = logits.float().logsumexp(-1).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    fast_loss, fast_grads = loss_and_grads()
    with reference_mode(model):
        ref_loss, ref_grads = loss_and_grads()
    torch.testing.assert_close(fast_loss, ref_loss, rtol=1e-5, atol=1e-5)
    for fast, ref in zip(fast_grads, ref_grads, strict=True):
        torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-5)


TRAIN_SCRIPT = """
import json, resource, sys
import torch
from attnlab.experiment import apply_overrides, load_preset
from attnlab.train.trainer import Trainer
from attnlab.events import read_typed_log
config = apply_overrides(load_preset("selective-copy-transformer"), sys.argv[2:])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
Trainer(config, sys.argv[1], device="cpu", install_signals=False).run()
evals = [e for e in read_typed_log(sys.argv[1])[0] if e.TYPE == "eval"]
print(json.dumps({"before_mb": before, "cost": evals[-1].cost}))
"""


@pytest.mark.slow
def test_a_4096_token_run_trains_two_steps_on_the_cpu_with_bounded_memory(tmp_path):
    rows, heads, budget = 2, 2, 8192  # the budget pays for 2 rows of 4096 at most
    overrides = [
        f"data.max_len={LONG}",
        "data.train_size=8",
        "data.dev_size=1",
        "data.test_size=1",
        *TINY,
        f"train.batch_tokens={budget}",
        "train.max_steps=2",
        "train.eval_every=2",
        "train.warmup=1",
        "train.samples=0",
        "decode.max_len_ratio=0",
        "decode.max_len_const=20",
    ]
    out = subprocess.run(
        [sys.executable, "-c", TRAIN_SCRIPT, str(tmp_path), *overrides],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    cost = record["cost"]
    # The bound: the encoder's scores for the batch (rows x heads x T² float32) held about
    # three times over (scores, softmax, their gradient), plus 256 MiB for the model, the
    # data, the optimiser and the allocator's slack. A batch of train.batch_size=32 rows
    # would need 16 times the scores.
    scores_mb = rows * heads * LONG * LONG * 4 / 2**20
    assert cost["train_peak_memory_mb"] - record["before_mb"] < 3 * scores_mb + 256, record
    assert cost["train_tokens_per_s"] > 0
