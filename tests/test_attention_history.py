"""Attention history (train.attention_history): what the trainer stores at each evaluation,
checked against decoding the checkpoint saved at that step, one sentence at a time; the
thinning rule against hand-derived survivors; damaged files as one error line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from attnlab.config import DecodeConfig
from attnlab.errors import AttnlabError
from attnlab.events import read_events
from attnlab.runs import load_checkpoint
from attnlab.runs.history import (
    HISTORY_DIR,
    INDEX_FILE,
    read_history,
    thin_steps,
    write_history_frame,
)
from attnlab.train.trainer import Trainer

SENTENCES = 3
HISTORY_SETS = (
    "train.eval_every=2",
    f"train.attention_history={SENTENCES}",
    "train.keep_last=3",  # checkpoints/step-2, -4 and -6: the references
)


def _train(root, name, *extra):
    from _tiny import tiny_config

    run = root / name
    config = tiny_config(name, *HISTORY_SETS, *extra)
    Trainer(config, run, install_signals=False).run()
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from _tiny import TINY_TRANSFORMER

    root = tmp_path_factory.mktemp("history")
    two_layers = (*TINY_TRANSFORMER, "model.dec_layers=2")
    return {"rnn": _train(root, "rnn"), "transformer": _train(root, "tf", *two_layers)}


def _decode_alone(loaded, source):
    """The checkpoint's greedy hypothesis of one sentence in a batch of its own, and its
    cross-attention rows for the hypothesis tokens (the map translate shows, less </s>)."""
    from attnlab.decode.search import decode_batch
    from attnlab.nn.seq2seq import PAD_ID

    src = torch.tensor([loaded.src_vocab.encode(source)])
    with torch.no_grad():
        hyp = decode_batch(loaded.model, src, src != PAD_ID, DecodeConfig(), True)[0][0]
    tokens = loaded.tgt_vocab.decode(hyp.tokens)
    return tokens, hyp.attention.float().numpy()[: len(tokens), : len(source)]


@pytest.mark.parametrize("arch", ["rnn", "transformer"])
def test_each_stored_map_is_what_the_checkpoint_of_its_step_decodes(runs, arch):
    run = runs[arch]
    history = read_history(run)
    assert history is not None and history.steps == [2, 4, 6]
    assert history.head == "mean"
    assert history.layer == (None if arch == "rnn" else 1)  # the last of 2 decoder layers
    evals = {e["step"]: e for e in read_events(run)[0] if e["type"] == "eval"}
    for step in history.steps:
        loaded = load_checkpoint(run / "checkpoints" / f"step-{step}")
        assert loaded.step == step
        frame = history.frame(step)
        assert frame.scores["bleu"] == evals[step]["bleu"]  # the eval event's numbers
        assert frame.scores["loss"] == evals[step]["loss"]
        assert len(frame.maps) == SENTENCES
        for i, source in enumerate(history.sources):
            tokens, expected = _decode_alone(loaded, source)
            assert frame.hyps[i] == tokens
            assert frame.maps[i].dtype == np.float32
            assert frame.maps[i].shape == (len(tokens), len(source))
            np.testing.assert_allclose(frame.maps[i], expected, atol=1e-3, rtol=1e-3)


def test_the_sentences_are_spread_over_dev_lengths_and_stored_as_float16(runs):
    from attnlab.data.dataset import load_dataset
    from attnlab.train.attention_history import history_sentences

    run = runs["rnn"]
    loaded = load_checkpoint(run / "checkpoints" / "best")
    assert loaded.config.train.attention_history_select == "spread"  # the default
    every = list(load_dataset(loaded.config.data).splits.dev)
    chosen = history_sentences(loaded.config.train, [len(e.src_tokens) for e in every])
    dev = [every[i] for i in chosen]
    assert len(dev) == SENTENCES
    history = read_history(run)
    assert history.sources == [list(e.src_tokens) for e in dev]
    from safetensors.numpy import load_file

    stored = load_file(str(run / HISTORY_DIR / "step-00000002.safetensors"))
    assert sorted(stored) == [f"map.{i}" for i in range(SENTENCES)]
    assert all(a.dtype == np.float16 for a in stored.values())


def test_history_off_writes_nothing(tmp_path):
    run = _train(tmp_path, "off", "train.attention_history=0")
    assert not (run / HISTORY_DIR).exists()
    assert read_history(run) is None


def test_attention_without_weights_keeps_no_history_and_says_so_once(tmp_path):
    run = _train(tmp_path, "none", "model.attention=none")
    assert not (run / HISTORY_DIR).exists()
    notes = [e["message"] for e in read_events(run)[0] if e["type"] == "note"]
    assert len([n for n in notes if "train.attention_history" in n]) == 1


def test_config_refuses_keep_under_two():
    from _tiny import tiny_config

    with pytest.raises(AttnlabError, match=r"train.attention_history_keep=1 is out of range"):
        tiny_config("x", "train.attention_history_keep=1")
    with pytest.raises(AttnlabError, match=r"train.attention_history=-1 is out of range"):
        tiny_config("x", "train.attention_history=-1")


# -- thinning -----------------------------------------------------------------------------------


def test_thinning_survivors_derived_by_hand():
    # keep 4, evaluations 1..9 (gaps g; drop the middle i minimising (max gap after, g[i-1]·g[i],
    # i)): +5 drops 2 (all tie) -> 1 3 4 5; +6 drops 4 -> 1 3 5 6; +7 drops 6 -> 1 3 5 7;
    # +8 drops 7 -> 1 3 5 8; +9: dropping 3 or 8 leaves a largest gap of 4, 8's product 3·1 is
    # the smaller -> 1 3 5 9
    kept: list[int] = []
    for step in range(1, 10):
        kept = thin_steps([*kept, step], 4)
    assert kept == [1, 3, 5, 9]
    # one full halving: 9 evaluations at keep 5 -> every other one
    kept = []
    for step in range(1, 10):
        kept = thin_steps([*kept, step], 5)
    assert kept == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("keep", [2, 3, 5, 8])
def test_thinning_keeps_the_first_and_newest_and_at_most_keep(keep):
    kept: list[int] = []
    for step in range(10, 500, 10):
        kept = thin_steps([*kept, step], keep)
        assert kept[0] == 10 and kept[-1] == step
        assert len(kept) <= keep and kept == sorted(set(kept))


def _frame(run, step, keep=3, **extra):
    args = {
        "step": step,
        "scores": {"bleu": float(step)},
        "sources": [["a", "b"], ["c"]],
        "hyps": [["x"], ["y", "z"]],
        "maps": [np.array([[0.25, 0.75]]), np.array([[1.0], [1.0]])],
        "layer": None,
        "keep": keep,
    }
    write_history_frame(run, **{**args, **extra})


def _files(run):
    return sorted(p.name for p in (run / HISTORY_DIR).iterdir())


def test_writer_deletes_thinned_files_and_the_index_names_the_survivors(tmp_path):
    for step in (10, 20, 30, 40):
        _frame(tmp_path, step)
    history = read_history(tmp_path)
    assert history.steps == [10, 30, 40]
    assert history.scores == [{"bleu": 10.0}, {"bleu": 30.0}, {"bleu": 40.0}]
    names = ["step-00000010.safetensors", "step-00000030.safetensors", "step-00000040.safetensors"]
    assert _files(tmp_path) == sorted([INDEX_FILE, *names])
    frame = history.frame(30)
    np.testing.assert_array_equal(frame.maps[0], np.array([[0.25, 0.75]], dtype=np.float32))
    assert frame.hyps == [["x"], ["y", "z"]]


def test_a_resumed_run_replaces_snapshots_from_its_step_on(tmp_path):
    for step in (10, 20, 30):
        _frame(tmp_path, step, keep=10)
    _frame(tmp_path, 20, keep=10, scores={"bleu": 99.0})  # resumed from the step-10 checkpoint
    history = read_history(tmp_path)
    assert history.steps == [10, 20] and history.scores[1] == {"bleu": 99.0}
    assert "step-00000030.safetensors" not in _files(tmp_path)


def test_other_sentences_start_a_new_history(tmp_path):
    _frame(tmp_path, 10)
    _frame(tmp_path, 20, sources=[["a", "b"], ["d"]])
    assert read_history(tmp_path).steps == [20]
    assert "step-00000010.safetensors" not in _files(tmp_path)


def test_an_orphaned_frame_file_is_not_read_and_goes_at_the_next_write(tmp_path):
    _frame(tmp_path, 10)
    orphan = tmp_path / HISTORY_DIR / "step-00000015.safetensors"  # killed before the index
    orphan.write_bytes(b"half a file")
    assert read_history(tmp_path).steps == [10]
    _frame(tmp_path, 20)
    assert not orphan.exists()


def test_nearest_step_and_an_absent_step(tmp_path):
    for step in (10, 20, 40):
        _frame(tmp_path, step, keep=10)
    history = read_history(tmp_path)
    assert [history.nearest_step(s) for s in (0, 14, 15, 16, 30, 31, 99)] == [
        10,
        10,
        10,  # a tie: the earlier
        20,
        20,
        40,
        40,
    ]
    with pytest.raises(
        AttnlabError, match=r"no attention snapshot at step 15; stored steps: 10, 20, 40"
    ):
        history.frame(15)


# -- damaged files --------------------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path):
    for step in (10, 20):
        _frame(tmp_path, step)
    return tmp_path


def _one_line(err: pytest.ExceptionInfo, name: str) -> None:
    message = str(err.value)
    assert "\n" not in message and name in message


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"\xff\xfe", b"[]", b'{"format": "other"}', b"9" * 5000, b"[" * 100000],
)
def test_a_garbage_index_is_one_error_line(stored, content):
    (stored / HISTORY_DIR / INDEX_FILE).write_bytes(content)
    with pytest.raises(AttnlabError) as err:
        read_history(stored)
    _one_line(err, INDEX_FILE)


def _edit_index(run, change):
    path = run / HISTORY_DIR / INDEX_FILE
    index = json.loads(path.read_text())
    change(index)
    path.write_text(json.dumps(index))


@pytest.mark.parametrize(
    "change",
    [
        lambda i: i.update(version=2),
        lambda i: i["frames"][0].update(file="../../config.toml"),
        lambda i: i["frames"][1].update(step=5),  # not ascending
        lambda i: i["frames"][0].update(hyps=[["x"]]),  # one sentence short
        lambda i: i["frames"][0].update(scores={"bleu": "high"}),
        lambda i: i.update(sources="ab"),
        lambda i: i.update(frames=[]),
    ],
)
def test_an_index_with_bad_fields_is_one_error_line(stored, change):
    _edit_index(stored, change)
    with pytest.raises(AttnlabError) as err:
        read_history(stored)
    _one_line(err, INDEX_FILE)


def test_a_large_index_is_refused_unread(stored, monkeypatch):
    from attnlab.runs import history

    monkeypatch.setattr(history, "INDEX_MAX_BYTES", 100)
    with pytest.raises(AttnlabError, match="larger than 100 bytes"):
        read_history(stored)


def test_a_fifo_index_never_blocks(stored):
    path = stored / HISTORY_DIR / INDEX_FILE
    path.unlink()
    import os

    os.mkfifo(path)
    with pytest.raises(AttnlabError, match="FIFO"):
        read_history(stored)


def test_damaged_frames_are_one_error_line_naming_the_file(stored):
    from safetensors.numpy import save_file

    history = read_history(stored)
    path = stored / HISTORY_DIR / "step-00000020.safetensors"
    whole = path.read_bytes()
    cases = [
        whole[: len(whole) // 2],  # truncated
        b"\x00" * 64,
        None,  # missing
    ]
    for content in cases:
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
        with pytest.raises(AttnlabError) as err:
            history.frame(20)
        _one_line(err, path.name)
    wrong = {
        "map.0": np.ones((2, 2), np.float16),  # hyp 0 has 1 token: [1, 2] expected
        "map.1": np.ones((2, 1), np.float16),
    }
    non_finite = {
        "map.0": np.array([[np.nan, 1.0]], np.float16),
        "map.1": np.ones((2, 1), np.float16),
    }
    for tensors, what in ((wrong, r"is \[2, 2\]"), (non_finite, "non-finite"), ({}, "no map.0")):
        save_file(tensors, str(path))
        with pytest.raises(AttnlabError, match=what) as err:
            history.frame(20)
        _one_line(err, path.name)
    assert history.frame(10).step == 10  # the other frame still reads


def test_no_history_directory_reads_as_none(tmp_path):
    assert read_history(tmp_path) is None
    (tmp_path / HISTORY_DIR).mkdir()
    assert read_history(tmp_path) is None


def test_a_copied_run_reads_the_same(stored, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(stored, copy)
    assert read_history(copy).steps == read_history(stored).steps


# -- attnlab translate RUN --at-step ------------------------------------------------------------


def _cli(*argv):
    from click.testing import CliRunner

    from attnlab.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in argv])


def test_at_step_list_names_every_stored_step_with_its_dev_scores(runs):
    run = runs["transformer"]
    result = _cli("translate", run, "--at-step", "list")
    assert result.exit_code == 0, result.output
    assert "3 stored steps of 3 dev sentences" in result.output
    assert "last layer (1), head average" in result.output
    evals = {e["step"]: e for e in read_events(run)[0] if e["type"] == "eval"}
    rows = [line.split("│") for line in result.output.splitlines() if line.startswith("│")]
    assert [int(r[1]) for r in rows] == [2, 4, 6]
    assert [float(r[2]) for r in rows] == [round(evals[s]["bleu"], 2) for s in (2, 4, 6)]


def _heatmap_rows(output: str, n_rows: int) -> list[list[int]]:
    """The numbers of the plain heatmap's rows (each line: a row label, then weights x 100)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "cross-attention (target × source)" in line)
    return [[int(x) for x in line.split()[1:]] for line in lines[start + 2 : start + 2 + n_rows]]


def test_at_step_prints_the_nearest_stored_map_as_translate_draws_maps(runs):
    run = runs["rnn"]
    history = read_history(run)
    result = _cli("translate", run, "--at-step", "3", "--sentence", "1")  # 2 and 4 tie: 2
    assert result.exit_code == 0, result.output
    frame = history.frame(2)
    first = result.output.splitlines()[0]
    assert first.startswith(f"step 2 · dev BLEU {frame.scores['bleu']:.2f}")
    assert first.endswith("(the stored step nearest 3)")
    assert f"sentence 1: {' '.join(history.sources[1])}" in result.output
    assert "sentence 0:" not in result.output
    shown = np.array(_heatmap_rows(result.output, len(frame.hyps[1])))
    expected = frame.maps[1] * 100
    assert shown.shape == expected.shape
    assert np.abs(shown - expected).max() <= 0.5 + 1e-3  # weights x 100, rounded


def test_at_step_without_history_says_how_to_enable_it(tmp_path):
    run = _train(tmp_path, "off", "train.attention_history=0")
    result = _cli("translate", run, "--at-step", "2")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert "--set train.attention_history=4" in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--at-step", "2", "--sentence", "3"], "--sentence 3: the run stored 3 sentences"),
        (["--at-step", "two"], "--at-step 'two': give a training step"),
        (["--at-step", "-1"], "a training step is 0 or more"),
        (["--sentence", "0"], "add --at-step"),
        (["--at-step", "2", "some text"], "TEXT cannot apply"),
        (["--at-step", "2", "--beam", "4"], "decoding flags cannot apply"),
        (["--at-step", "2", "--layer", "0"], "--layer cannot apply"),
    ],
)
def test_at_step_mistakes_are_one_error_line(runs, extra, message):
    result = _cli("translate", runs["rnn"], *extra)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and message in result.output


# -- attnlab export-history ---------------------------------------------------------------------

SVG_NS = "{http://www.w3.org/2000/svg}"


def _expected_label(step, scores):
    """The label of a frame, spelled out here: step, then dev BLEU / chrF (2 decimals) and
    exact match in percent (1 decimal)."""
    return (
        f"step {step} · dev BLEU {scores['bleu']:.2f} · chrF {scores['chrf']:.2f} · "
        f"exact match {scores['exact_match'] * 100:.1f} %"
    )


def _expected_fill(weight):
    from attnlab.viz.heatmap import PALETTE

    r, g, b = PALETTE[int(round(min(max(weight, 0.0), 1.0) * 100))]  # 101 levels on 0..1
    return f"#{r:02x}{g:02x}{b:02x}"


def _check_cells(cells, weights):
    """Every cell of a frame: the palette colour of its stored weight, and the weight itself."""
    assert len(cells) == weights.size
    for cell in cells:
        r, c = int(cell.get("data-row")), int(cell.get("data-col"))
        assert cell.get("fill") == _expected_fill(float(weights[r, c]))
        assert float(cell.get("data-weight")) == pytest.approx(float(weights[r, c]), abs=1e-4)


def test_export_history_svg_has_one_labelled_animated_frame_per_stored_step(runs, tmp_path):
    import xml.etree.ElementTree as ET

    run = runs["transformer"]
    out = tmp_path / "h.svg"
    result = _cli("export-history", run, "--out", out, "--sentence", "2")
    assert result.exit_code == 0, result.output
    history = read_history(run)
    root = ET.parse(out).getroot()
    groups = [g for g in root.iter(f"{SVG_NS}g") if g.get("class") == "frame"]
    assert len(groups) == len(history.steps) == 3
    style = root.find(f"{SVG_NS}style").text
    assert "@keyframes" in style
    for step, group in zip(history.steps, groups, strict=True):
        frame = history.frame(step)
        label = group.find(f"{SVG_NS}text").text
        assert label == _expected_label(step, frame.scores)
        cells = [r for r in group.iter(f"{SVG_NS}rect") if r.get("class") == "cell"]
        _check_cells(cells, frame.maps[2])
        assert f"#{group.get('id')}" in style  # each frame has its turn in the animation


def test_export_history_html_is_a_slider_over_every_stored_step(runs, tmp_path):
    from html.parser import HTMLParser

    run = runs["rnn"]
    out = tmp_path / "h.html"
    result = _cli("export-history", run, "--out", out)
    assert result.exit_code == 0, result.output

    class Collect(HTMLParser):
        def __init__(self):
            super().__init__()
            self.frames, self.inputs, self.cells = [], [], []

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "g" and attrs.get("class") == "map":
                self.frames.append(attrs["data-label"])
                self.cells.append([])
            if tag == "rect" and attrs.get("class") == "cell":
                self.cells[-1].append(attrs)
            if tag == "input":
                self.inputs.append(attrs)

    parser = Collect()
    parser.feed(out.read_text())
    history = read_history(run)
    expected = [_expected_label(s, history.frame(s).scores) for s in history.steps]
    assert parser.frames == expected
    [slider] = parser.inputs
    assert (slider["type"], slider["min"], slider["max"]) == ("range", "0", "2")
    for step, cells in zip(history.steps, parser.cells, strict=True):
        _check_cells([_Attrs(a) for a in cells], history.frame(step).maps[0])
    assert "http" not in out.read_text().replace("http://www.w3.org/2000/svg", "")  # offline


class _Attrs:
    def __init__(self, attrs):
        self.attrs = attrs

    def get(self, key):
        return self.attrs.get(key)


def test_export_history_mistakes_are_one_error_line(runs, tmp_path):
    run = runs["rnn"]
    cases = [
        (["--out", tmp_path / "h.png"], "valid suffixes: .svg, .html"),
        (["--out", tmp_path / "h.svg", "--sentence", "9"], "--sentence 9"),
    ]
    (tmp_path / "old.svg").write_text("keep")
    cases.append((["--out", tmp_path / "old.svg"], "add --force"))
    for extra, message in cases:
        result = _cli("export-history", run, *extra)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert message in result.output
    assert (tmp_path / "old.svg").read_text() == "keep"


def test_tokens_are_escaped_in_both_files(tmp_path):
    import xml.etree.ElementTree as ET

    from attnlab.viz.history_animation import Frame, animated_svg, slider_html

    frames = [Frame("step 1 · <b>", ["</svg>", "&amp;\x01"], np.array([[0.5], [1.0]]))]
    svg = animated_svg(frames, ['"<script>'], "t")
    root = ET.fromstring(svg.encode())
    texts = [t.text for t in root.iter(f"{SVG_NS}text")]
    assert "</svg>" in texts and '"<script>' in texts and "&amp;\ufffd" in texts
    assert "<script>" not in slider_html(frames, ['"<script>'], "t").split("<script>const")[0]


def _selection(select: str, count: int = 4):
    from types import SimpleNamespace

    return SimpleNamespace(attention_history=count, attention_history_select=select)


def test_each_selection_rule_by_hand():
    from attnlab.train.attention_history import history_sentences

    lengths = [5, 3, 9, 3, 7, 1, 9, 4]  # sorted by (length, index): 5 1 3 7 0 4 2 6
    assert history_sentences(_selection("first"), lengths) == [0, 1, 2, 3]
    assert history_sentences(_selection("longest"), lengths) == [2, 6, 4, 0]
    # spread: positions round(k * 7 / 3) = 0, 2, 5, 7 of the length order
    assert history_sentences(_selection("spread"), lengths) == [5, 3, 4, 6]
    assert history_sentences(_selection("spread", 1), lengths) == [6]  # the longest
    assert history_sentences(_selection("2, 7,30"), lengths) == [2, 7]  # past the split: left out
    assert history_sentences(_selection("spread", 20), lengths) == list(range(8))


@pytest.mark.parametrize("value", ["middle", "1,x", "", "2,2", "-1"])
def test_a_bad_selection_is_one_line(value):
    from _tiny import tiny_config

    from attnlab.errors import AttnlabError

    with pytest.raises(AttnlabError, match="train.attention_history_select") as err:
        tiny_config("t", f"train.attention_history_select={value}")
    assert "\n" not in str(err.value) and "3,17,42" in str(err.value)
