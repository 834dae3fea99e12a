"""Long sample maps: stored float16 beside the ``sample`` event that names them, read back,
and every damage one line. The reference for the stored map is the same run's inline map (the
same seed and weights), which the event writes with 4 decimals."""

from __future__ import annotations

import numpy as np
import pytest
from _tiny import tiny_config

from attnlab.attention_map import INLINE_MAX_CELLS, is_long_map
from attnlab.errors import AttnlabError
from attnlab.events import Sample, iter_typed_events
from attnlab.runs.sample_maps import SAMPLES_DIR, read_sample_map, store_long_maps
from attnlab.train.trainer import Trainer


def test_a_map_over_the_inline_limit_is_long():
    assert not is_long_map((64, 64)) and INLINE_MAX_CELLS == 64 * 64
    assert is_long_map((65, 64)) and is_long_map((1, 4097))
    # 2,048² weights of JSON rows would exceed the event reader's 8 MiB line
    assert is_long_map((2048, 2048))


def _samples(rng):
    small = rng.random((3, 4))
    long = rng.random((70, 90))
    return [
        {"index": 0, "src": list("abcd"), "hyp": list("xyz"), "attention": small.tolist()},
        {
            "index": 1,
            "src": [f"s{i}" for i in range(90)],
            "hyp": [f"h{i}" for i in range(69)],  # + the </s> row of a finished hypothesis
            "attention": [],
            "attention_array": long,
        },
    ], long


def test_long_maps_are_stored_beside_the_event_and_read_back(tmp_path):
    samples, long = _samples(np.random.default_rng(0))
    store_long_maps(tmp_path, 40, samples)
    assert "attention_array" not in samples[1] and samples[1]["attention"] is None
    assert samples[1]["attention_file"] == "step-00000040.safetensors"
    assert "attention_file" not in samples[0] and len(samples[0]["attention"]) == 3
    assert (tmp_path / SAMPLES_DIR / "step-00000040.safetensors").is_file()
    back = read_sample_map(
        tmp_path, "step-00000040.safetensors", 1, samples[1]["hyp"], samples[1]["src"]
    )
    assert back.dtype == np.float32 and back.shape == (70, 90)
    np.testing.assert_array_equal(back, long.astype(np.float16).astype(np.float32))


def test_nothing_is_written_without_a_long_map(tmp_path):
    samples, _ = _samples(np.random.default_rng(0))
    store_long_maps(tmp_path, 5, samples[:1])
    assert not (tmp_path / SAMPLES_DIR).exists()


@pytest.mark.parametrize(
    "name,damage,needle",
    [
        ("../events.jsonl", None, "not a samples/step-<N>.safetensors name"),
        ("/etc/passwd", None, "not a samples/step-<N>.safetensors name"),
        ("step-00000041.safetensors", None, "no such file"),
        ("step-00000040.safetensors", b"\x00garbage" * 10, "not a readable safetensors file"),
    ],
)
def test_a_bad_name_or_file_is_one_line(tmp_path, name, damage, needle):
    samples, _ = _samples(np.random.default_rng(0))
    store_long_maps(tmp_path, 40, samples)
    if damage is not None:
        (tmp_path / SAMPLES_DIR / name).write_bytes(damage)
    with pytest.raises(AttnlabError, match=needle) as err:
        read_sample_map(tmp_path, name, 1, samples[1]["hyp"], samples[1]["src"])
    assert "\n" not in str(err.value)


def test_a_map_of_another_shape_or_index_is_one_line(tmp_path):
    samples, _ = _samples(np.random.default_rng(0))
    store_long_maps(tmp_path, 40, samples)
    name = samples[1]["attention_file"]
    with pytest.raises(AttnlabError, match="is \\[70, 90\\], but its sentence has"):
        read_sample_map(tmp_path, name, 1, ["h"] * 10, samples[1]["src"])
    with pytest.raises(AttnlabError, match="no map.0"):
        read_sample_map(tmp_path, name, 0, samples[1]["hyp"], samples[1]["src"])


def _sample_events(run_dir):
    return [e for e in iter_typed_events(run_dir) if isinstance(e, Sample)]


def test_the_trainer_stores_long_maps_that_equal_the_inline_ones(tmp_path, monkeypatch):
    """Two runs of one seed: the first keeps its maps inline, the second (the inline limit
    lowered to 4 weights) beside its events; the maps agree to float16 and 4 decimals."""
    from attnlab.tui.follow import Sample as FollowedSample

    config = tiny_config("maps", "train.max_steps=6", "train.eval_every=3", "train.samples=2")
    Trainer(config, tmp_path / "inline", device="cpu").run()
    monkeypatch.setattr("attnlab.attention_map.INLINE_MAX_CELLS", 4)
    Trainer(config, tmp_path / "beside", device="cpu").run()
    inline, beside = _sample_events(tmp_path / "inline"), _sample_events(tmp_path / "beside")
    assert len(inline) == len(beside) == 4  # two evaluations, two samples each
    for a, b in zip(inline, beside, strict=True):
        assert a.attention_file is None and b.attention is None
        assert b.attention_file == f"step-{b.step:08d}.safetensors"
        followed = FollowedSample(
            b.index, b.src, b.ref, b.hyp, None, attention_file=b.attention_file,
            run_dir=tmp_path / "beside",
        )  # fmt: skip
        np.testing.assert_allclose(followed.weights(), np.asarray(a.attention), atol=1e-3)
