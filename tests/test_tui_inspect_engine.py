"""What Inspect computes from a checkpoint: every attention map with the right shapes.

The checkpoints here are untrained models saved directly (no training needed): the shapes,
labels, n-best list and the (target x source) orientation do not depend on the weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _tui_support import lab_config

from attnlab.data.dataset import load_dataset
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides
from attnlab.nn.model import build_model, count_parameters
from attnlab.runs import save_checkpoint
from attnlab.tui.inspect_engine import InspectRequest, analyse, select_map


def saved_run(tmp_path: Path, overrides: list[str]) -> Path:
    config = apply_overrides(lab_config(), overrides)
    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir, "best", model, config, dataset.meta(), 0, {}, count_parameters(model))
    return run_dir


def test_rnn_cross_attention_is_target_by_source(tmp_path: Path) -> None:
    run_dir = saved_run(tmp_path, ["data.max_len=5"])
    result = analyse(InspectRequest(run_dir, "best", "dev", 3))
    hyp = result.hypotheses[0]
    cross = hyp.maps["cross"]  # [L, H, T, S]
    assert cross.shape[0] == 1 and cross.shape[2:] == (len(hyp.tokens) + 1, len(result.src))
    rows, cols = hyp.labels["cross"]
    assert cols == result.src and rows[:-1] == hyp.tokens and rows[-1] in ("</s>", "…")
    # Each row is a distribution over the source tokens.
    assert np.allclose(select_map(cross, 0, None).sum(axis=-1), 1.0, atol=1e-5)
    # reverse has gold alignments: accuracy is reported as a fraction.
    assert result.ref is not None and 0.0 <= result.alignment_accuracy <= 1.0


def test_transformer_maps_for_every_role_layer_and_head(tmp_path: Path) -> None:
    run_dir = saved_run(
        tmp_path,
        [
            "model.arch=transformer",
            "model.d_model=16",
            "model.heads=2",
            "model.ff=32",
            "model.enc_layers=2",
            "model.dec_layers=1",
        ],
    )
    result = analyse(InspectRequest(run_dir, "best", "test", 0, beam=3))
    assert 1 <= len(result.hypotheses) <= 3  # the beam's n-best list
    hyp = result.hypotheses[0]
    s, t = len(result.src), len(hyp.tokens) + 1
    assert hyp.maps["enc_self"].shape == (2, 2, s, s)
    assert hyp.maps["dec_self"].shape == (1, 2, t, t)
    assert hyp.maps["cross"].shape == (1, 2, t, s)
    # Head average equals the mean of the heads; a single head is that head.
    cross = hyp.maps["cross"]
    assert np.allclose(select_map(cross, 0, None), cross[0].mean(axis=0))
    assert np.array_equal(select_map(cross, 0, 1), cross[0, 1])
    # Decoder self-attention is causal: nothing above the diagonal.
    dec = select_map(hyp.maps["dec_self"], 0, None)
    assert np.allclose(np.triu(dec, k=1), 0.0)


def test_typed_sentence_and_out_of_range_sample(tmp_path: Path) -> None:
    run_dir = saved_run(tmp_path, [])
    result = analyse(InspectRequest(run_dir, "best", "dev", 0, text="1 2 3"))
    assert (
        result.src == ["1", "2", "3"] and result.ref is None and result.alignment_accuracy is None
    )
    with pytest.raises(AttnlabError, match="out of range"):
        analyse(InspectRequest(run_dir, "best", "dev", 10_000))


def test_every_registered_decoder_runs_from_inspect(tmp_path: Path) -> None:
    from attnlab.decode.search import DECODERS
    from attnlab.tui.inspect_engine import decoder_choices

    run_dir = saved_run(tmp_path, [])
    assert [value for _label, value in decoder_choices()] == DECODERS.names()
    default = analyse(InspectRequest(run_dir, "best", "dev", 1, beam=2))
    named = analyse(InspectRequest(run_dir, "best", "dev", 1, beam=2, decoder="beam"))
    assert [h.tokens for h in default.hypotheses] == [h.tokens for h in named.hypotheses]
    assert [h.score for h in default.hypotheses] == [h.score for h in named.hypotheses]
    for name in DECODERS.names():
        result = analyse(InspectRequest(run_dir, "best", "dev", 1, beam=2, decoder=name))
        spec = DECODERS.get(name).meta
        assert len(result.hypotheses) == (2 if spec.nbest else 1), name
        hyp = result.hypotheses[0]
        assert hyp.maps["cross"].shape[2:] == (len(hyp.tokens) + 1, len(result.src))
