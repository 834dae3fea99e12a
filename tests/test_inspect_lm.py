"""Inspect on a language model: the engine continues the prompt greedily (the typed text, or
the first half of a dev window with its second half as the reference) and returns the causal
self-attention of prompt ⊕ continuation; checked against ``generate`` and a full forward pass
computed here, and the lab draws it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.decode.generate import Sampling, generate
from attnlab.errors import AttnlabError
from attnlab.runs import load_checkpoint, load_checkpoint_data
from attnlab.tui.inspect_engine import InspectRequest, analyse


def _loaded(run: Path):
    loaded = load_checkpoint(run / "checkpoints" / "best")
    return loaded, load_checkpoint_data(loaded)


def test_a_typed_prompt_is_continued_greedily_with_its_causal_map(lm_run):
    result = analyse(InspectRequest(lm_run, text="the k"))
    loaded, _ = _loaded(lm_run)
    vocab = loaded.dataset.src_vocab
    ids = vocab.encode(loaded.dataset.tokenize_source("the k"))
    block = loaded.config.data.block_size
    new = generate(loaded.model, [ids], block - len(ids), Sampling(temperature=0.0))[0].tolist()
    (hyp,) = result.hypotheses
    assert hyp.tokens == vocab.decode(new) and result.src == vocab.decode(ids)
    maps = hyp.maps["dec_self"]
    n = len(ids) + len(new)
    assert maps.shape == (1, 2, n, n) and len(hyp.labels["dec_self"][0]) == n
    # the same weights as one full causal pass over the text, computed here
    text = torch.tensor([ids + new])
    with torch.no_grad():
        out = loaded.model(text[:, :0], text[:, :0].bool(), text, need_weights=True)
        logits = loaded.model(text[:, :0], text[:, :0].bool(), text[:, :-1]).logits[0]
    np.testing.assert_allclose(maps, out.attentions["dec_self"][0].numpy(), atol=1e-6)
    assert np.allclose(np.triu(maps[0, 0], k=1), 0.0)  # causal: nothing later is read
    log_probs = torch.log_softmax(logits.double(), -1)[len(ids) - 1 :]
    expected = float(sum(log_probs[i, t] for i, t in enumerate(new)))
    assert hyp.score == pytest.approx(expected, abs=1e-4)


def test_without_a_prompt_a_dev_window_is_split_into_prompt_and_reference(lm_run):
    loaded, data = _loaded(lm_run)
    streams, block = data.streams, loaded.config.data.block_size
    start = int(streams.eval_starts("dev")[1])
    window = [int(i) for i in streams.split("dev")[start : start + block]]
    result = analyse(InspectRequest(lm_run, index=1))
    vocab = loaded.dataset.tgt_vocab
    assert result.src == vocab.decode(window[: block // 2])
    assert result.ref == vocab.decode(window[block // 2 :])
    with pytest.raises(AttnlabError, match="out of range"):
        analyse(InspectRequest(lm_run, index=10_000))


def test_an_unknown_character_in_the_prompt_is_one_line(lm_run):
    with pytest.raises(AttnlabError, match="never saw in training: 'Q'") as err:
        analyse(InspectRequest(lm_run, text="the Q"))
    assert "\n" not in str(err.value)


async def test_the_lab_draws_the_causal_map_of_an_lm_run(lm_run):
    from _tui_support import ready, tiny_config, until, workers_idle

    from attnlab.tui.app import make_app
    from attnlab.tui.views.inspect import InspectView

    app = make_app(lm_run.parent, config=tiny_config())
    async with app.run_test(size=(120, 40)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")
        view = app.query_one(InspectView)
        view.select_run(lm_run)  # selecting a run decodes its first sample
        await workers_idle(pilot)
        await until(pilot, lambda: "dec_self" in (view.maps or {}))
        assert set(view.maps) == {"dec_self"} and view.maps["dec_self"].shape[-1] == 12
