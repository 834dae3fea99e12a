"""data.task = "lm": nanoGPT's split, windows, fixed dev windows, LM metrics, refusals, presets.

References are computed here by hand: nanoGPT's ``prepare.py`` rule (``data[:int(n*0.9)]``
with ``sorted(set(text))`` as the vocabulary), its ``get_batch`` slicing, and the metrics as a
float64 loop over the windows one by one.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.config import ExperimentConfig
from attnlab.data.dataset import load_dataset
from attnlab.data.lm import TokenStreams, window_starts
from attnlab.data.vocab import SPECIALS
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, load_preset, validate

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
NANOGPT_CONFIG = SHARED / "bench" / "nanogpt" / "config" / "train_shakespeare_char.py"
SHAKESPEARE = SHARED / "corpora" / "tinyshakespeare" / "input.txt"

LM_MODEL = (
    "model.arch=decoder-only",
    "model.dec_layers=1",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.dropout=0.0",
    "model.positions=learned",
)


def lm_config(path: Path, *overrides: str) -> ExperimentConfig:
    return apply_overrides(
        ExperimentConfig(name="lm"),
        ["data.task=lm", f"data.path={path}", "data.tokenizer=char", *LM_MODEL, *overrides],
    )


def text_file(tmp_path: Path, text: str, name: str = "text.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def random_text(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcde fgh\nXYZ,.") for _ in range(n))


# -- the split ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.1, 0.25])
def test_the_split_and_ids_are_nanogpts_prepare_py_by_hand(tmp_path, fraction):
    text = random_text(1003)
    config = lm_config(text_file(tmp_path, text), f"data.dev_fraction={fraction}")
    dataset = load_dataset(config.data)
    # nanoGPT's shakespeare_char/prepare.py, with attnlab's four specials before the characters
    chars = sorted(set(text))
    stoi = {ch: i + len(SPECIALS) for i, ch in enumerate(chars)}
    n = len(text)
    train_ref = [stoi[c] for c in text[: int(n * (1 - fraction))]]
    dev_ref = [stoi[c] for c in text[int(n * (1 - fraction)) :]]
    assert dataset.streams.train.tolist() == train_ref
    assert dataset.streams.dev.tolist() == dev_ref
    assert dataset.streams.train.dtype == np.int64
    assert dataset.src_vocab is dataset.tgt_vocab  # one vocabulary for both sides
    assert len(dataset.tgt_vocab) == len(SPECIALS) + len(chars)
    decoded = dataset.tgt_tokenizer.decode(dataset.tgt_vocab.decode(train_ref))
    assert decoded == text[: len(train_ref)]


def test_a_subword_tokenizer_is_trained_on_the_train_split_only(tmp_path):
    train = "the cat sat on the mat\n" * 60
    dev = "zebra quagga okapi\n" * 10
    text = train + dev
    fraction = len(dev) / len(text)
    config = lm_config(
        text_file(tmp_path, text),
        "data.tokenizer=bpe",
        "data.subword_vocab=60",
        f"data.dev_fraction={fraction}",
        "data.block_size=4",
    )
    dataset = load_dataset(config.data)
    vocab = dataset.tgt_vocab
    assert "z" not in vocab.stoi and "▁zebra" not in vocab.stoi  # dev-only text: not learned
    assert (dataset.streams.dev == 1).any()  # <unk> where dev has unseen pieces
    tokens = vocab.decode(dataset.streams.train.tolist())
    assert dataset.tgt_tokenizer.decode(tokens).split() == train.split()


# -- windows ------------------------------------------------------------------------------------


def streams_of(n: int, block: int, windows: str = "random", dev_windows: int = 0) -> TokenStreams:
    ids = np.arange(10, 10 + n, dtype=np.int64)  # distinct ids: a window's start is its first id
    return TokenStreams(ids, ids[: n // 3].copy(), block, windows, dev_windows)


def test_random_windows_are_nanogpts_get_batch_seeded_by_step():
    streams = streams_of(500, 8)
    batch = streams.train_batch(step=3, rows=16, seed=7)
    again = streams.train_batch(step=3, rows=16, seed=7)
    assert torch.equal(batch.tgt_in, again.tgt_in)  # reproducible from (seed, step)
    assert not torch.equal(batch.tgt_in, streams.train_batch(4, 16, 7).tgt_in)  # fresh each step
    assert not torch.equal(batch.tgt_in, streams.train_batch(3, 16, 8).tgt_in)
    assert batch.src.shape == (16, 0) and batch.src_mask.shape == (16, 0)  # an empty source
    assert bool(batch.tgt_mask.all()) and batch.n_tokens == 16 * 8
    ids = streams.train
    for x, y in zip(batch.tgt_in.tolist(), batch.tgt_out.tolist(), strict=True):
        i = x[0] - 10
        assert 0 <= i < len(ids) - 8  # torch.randint(len(data) - block_size, ...)
        assert x == ids[i : i + 8].tolist() and y == ids[i + 1 : i + 9].tolist()
    starts = [streams.train_starts(step, 64, 0) for step in range(200)]
    hits = np.bincount(np.concatenate(starts), minlength=492)
    assert len(hits) == 492 and (hits > 0).mean() > 0.99  # uniform over every offset


def test_ranks_take_their_share_of_one_global_batch():
    streams = streams_of(300, 5)
    whole = streams.train_batch(2, 12, seed=1)
    parts = [streams.train_batch(2, 4, seed=1, rank=r, world=3) for r in range(3)]
    assert torch.equal(torch.cat([p.tgt_in for p in parts]), whole.tgt_in)


def test_sequential_windows_walk_the_split_in_order_and_wrap():
    streams = streams_of(103, 10, windows="sequential")
    count = (103 - 1) // 10  # windows of 11 tokens at 0, 10, 20, ...: the last starts at 90
    assert count == 10
    batches = [streams.train_batch(step, 3, 0).tgt_in.tolist() for step in range(4)]
    seen = [row[0] - 10 for rows in batches for row in rows]
    expected = [10 * (k % count) for k in range(12)]
    assert seen == expected  # every window once, in order, then from the start again
    covered = torch.cat([streams.train_batch(s, 5, 0).tgt_out for s in range(2)]).flatten()
    assert sorted(covered.tolist()) == list(range(11, 11 + 100))  # tokens 1..100 predicted once


def test_dev_windows_are_fixed_non_overlapping_and_capped():
    streams = streams_of(300, 7, dev_windows=0)  # dev: 100 tokens
    starts = streams.eval_starts("dev").tolist()
    assert starts == list(range(0, 100 - 7, 7))  # start + 8 <= 100
    assert streams.eval_starts("test").tolist() == starts  # test is the dev split
    capped = streams_of(300, 7, dev_windows=5)
    assert capped.eval_starts("dev").tolist() == starts[:5]
    batches = list(capped.eval_batches("dev", rows=2))
    assert [b.tgt_in.shape[0] for b in batches] == [2, 2, 1]
    firsts = [row[0] - 10 for b in batches for row in b.tgt_in.tolist()]
    assert firsts == starts[:5]
    assert window_starts(8, 7).tolist() == [0] and window_starts(7, 7).tolist() == []


def test_dev_windows_do_not_depend_on_the_seed_or_the_window_mode(tmp_path):
    path = text_file(tmp_path, random_text(800))
    a = load_dataset(lm_config(path, "data.block_size=16", "train.seed=1").data)
    b = load_dataset(lm_config(path, "data.block_size=16", "data.windows=sequential").data)
    assert np.array_equal(a.streams.eval_starts("dev"), b.streams.eval_starts("dev"))
    first = next(a.streams.eval_batches("dev", 64))
    again = next(b.streams.eval_batches("dev", 64))
    assert torch.equal(first.tgt_out, again.tgt_out)


# -- metrics ------------------------------------------------------------------------------------


def test_loss_perplexity_and_bits_equal_a_float64_loop_over_the_windows(tmp_path):
    from attnlab.evaluate import evaluate_split
    from attnlab.nn.model import build_model

    config = lm_config(text_file(tmp_path, random_text(700)), "data.block_size=12")
    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab)).eval()
    result = evaluate_split(model, dataset, "dev", batch_size=5)
    dev, total, count = dataset.streams.dev, 0.0, 0
    for start in range(0, len(dev) - 12, 12):  # one window at a time, in float64
        x = torch.tensor(dev[start : start + 12]).unsqueeze(0)
        y = dev[start + 1 : start + 13]
        with torch.no_grad():
            logits = model(x[:, :0], x[:, :0].bool(), x).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        total -= sum(float(logp[t, int(y[t])]) for t in range(12))
        count += 12
    loss = total / count
    assert result["n"] == count // 12 and result["tokens"] == count
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
    assert result["bits_per_token"] == pytest.approx(loss / math.log(2), rel=1e-5)
    assert 1.0 < result["loss"] < 2 * math.log(len(dataset.tgt_vocab))  # an untrained model


def test_nanogpts_estimate_is_the_mean_of_its_random_batches_losses(tmp_path):
    from attnlab.data.lm import random_starts
    from attnlab.evaluate import evaluate_split, nanogpt_estimate
    from attnlab.nn.model import build_model

    config = lm_config(text_file(tmp_path, random_text(900)), "data.block_size=10")
    dataset = load_dataset(config.data)
    torch.manual_seed(1)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab)).eval()
    estimate = nanogpt_estimate(model, dataset, "dev", iters=3, batch_size=4, seed=5)
    dev, batch_losses = dataset.streams.dev, []
    for i in range(3):  # by hand: each batch's mean token loss, then their mean (float64)
        total = 0.0
        for start in random_starts(len(dev), 10, 4, 5, i).tolist():
            x = torch.tensor(dev[start : start + 10]).unsqueeze(0)
            with torch.no_grad():
                logp = torch.log_softmax(model(x[:, :0], x[:, :0].bool(), x).logits[0].double(), -1)
            total -= sum(float(logp[t, int(dev[start + 1 + t])]) for t in range(10))
        batch_losses.append(total / 40)
    assert estimate == pytest.approx(sum(batch_losses) / 3, rel=1e-5)
    fixed = evaluate_split(model, dataset, "dev")["loss"]
    many = nanogpt_estimate(model, dataset, "dev", iters=50, batch_size=12, seed=5)
    assert many == pytest.approx(fixed, abs=0.1)  # the same quantity, up to sampling noise


def test_a_tiny_lm_learns_a_repetitive_text_end_to_end(tmp_path):
    """The trainer on LM windows: its dev loss falls far below a uniform guess, and the best
    checkpoint is the lowest loss (train.metric = loss)."""
    from attnlab.events import iter_events
    from attnlab.runs import load_checkpoint
    from attnlab.train.trainer import Trainer

    text = "the quick brown fox jumps over the lazy dog.\n" * 40
    config = lm_config(
        text_file(tmp_path, text),
        "data.block_size=16",
        "data.dev_fraction=0.2",
        "data.dev_windows=8",
        "train.max_steps=60",
        "train.batch_size=8",
        "train.lr=0.01",
        "train.eval_every=20",
        "train.log_every=20",  # train.metric left at its default (bleu): the LM's loss
        "train.samples=0",
        "train.attention_history=0",
    )
    summary = Trainer(config, tmp_path / "run", device="cpu").run()
    assert summary["reason"] == "finished"
    events = list(iter_events(tmp_path / "run"))
    assert events[0]["metrics"] == ["loss", "perplexity", "bits_per_token"]  # for the readers
    evals = [e for e in events if e["type"] == "eval"]
    assert [e["step"] for e in evals] == [20, 40, 60]
    losses = [e["loss"] for e in evals]
    vocab = len(set(text)) + len(SPECIALS)
    assert losses[-1] < losses[0] and losses[-1] < 0.5 * math.log(vocab)
    for event in evals:
        assert event["n"] == 8 and event["tokens"] == 8 * 16
        assert event["perplexity"] == pytest.approx(math.exp(event["loss"]))
        assert event["bits_per_token"] == pytest.approx(event["loss"] / math.log(2))
        assert event.get("bleu") is None
    best = load_checkpoint(tmp_path / "run" / "checkpoints" / "best")
    assert best.metrics["loss"] == min(losses) and best.metrics["chosen_by"] == "loss"
    assert best.config.train.metric == "loss"  # what the run's config records


def test_a_resumed_lm_run_draws_the_windows_of_an_uninterrupted_one(tmp_path):
    """Random windows are a function of (seed, step): 3 steps + a resume to 6 give the
    uninterrupted run's losses and weights."""
    from dataclasses import replace

    from attnlab.events import iter_events
    from attnlab.runs import read_tensors
    from attnlab.train.trainer import Trainer

    text = text_file(tmp_path, random_text(600))
    six = lm_config(
        text, "data.block_size=8", "train.max_steps=6", "train.eval_every=3", "train.log_every=1"
    )
    three = replace(six, train=replace(six.train, max_steps=3))
    Trainer(six, tmp_path / "straight", device="cpu").run()
    Trainer(three, tmp_path / "split", device="cpu").run()
    summary = Trainer(six, tmp_path / "split", device="cpu", resume=True).run()
    assert (summary["reason"], summary["step"]) == ("finished", 6)
    losses = {
        name: [e["loss"] for e in iter_events(tmp_path / name) if e["type"] == "step"]
        for name in ("straight", "split")
    }
    assert len(losses["split"]) == 6
    assert losses["split"] == pytest.approx(losses["straight"], rel=1e-5)
    a, _ = read_tensors(tmp_path / "straight" / "checkpoints" / "last" / "model.safetensors")
    b, _ = read_tensors(tmp_path / "split" / "checkpoints" / "last" / "model.safetensors")
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key


def test_a_metric_the_task_does_not_report_is_refused(tmp_path):
    path = text_file(tmp_path, random_text(300))
    with pytest.raises(AttnlabError, match="train.metric=exact_match: data.task=lm reports loss"):
        lm_config(path, "train.metric=exact_match")
    assert lm_config(path, "train.metric=perplexity").train.metric == "perplexity"


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "block", "message"),
    [
        (b"", 8, "the file is empty"),
        (b" \n\n ", 8, "the file is empty"),
        (b"text\x00\x01binary", 8, "not a text file (a NUL byte at offset 4)"),
        (b"caf\xe9 au lait, " * 20, 8, "not UTF-8 text (byte 0xe9 at offset 3)"),
        (b"a short text\n" * 5, 16, "window needs data.block_size + 1 = 17 tokens"),
    ],
)
def test_a_file_that_is_no_lm_text_is_one_line(tmp_path, content, block, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(AttnlabError, match="data.path=") as err:
        load_dataset(lm_config(path, f"data.block_size={block}").data)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_missing_text_names_the_paths_tried(tmp_path, monkeypatch):
    from attnlab.data.corpus import check_source_paths

    monkeypatch.chdir(tmp_path)
    config = lm_config(Path("no/such.txt"))
    with pytest.raises(AttnlabError, match=r"no such file or folder \(tried ") as err:
        check_source_paths(config.data)
    assert str(tmp_path / "no" / "such.txt") in str(err.value) and "\n" not in str(err.value)


def test_an_lm_needs_the_decoder_only_architecture(tmp_path):
    path = text_file(tmp_path, random_text(300))
    with pytest.raises(AttnlabError, match="data.task=lm needs model.arch=decoder-only"):
        lm_config(path, "model.arch=transformer")
    with pytest.raises(AttnlabError, match="a language model's batch is train.batch_size"):
        lm_config(path, "train.batch_tokens=4000")
    validate(lm_config(path))


# -- presets and the optimiser ------------------------------------------------------------------


def test_the_shakespeare_presets_are_nanogpts_recipes():
    cpu, gpu = load_preset("shakespeare-char"), load_preset("shakespeare-char-gpu")
    for preset in (cpu, gpu):
        assert preset.data.task == "lm" and preset.data.tokenizer == "char"
        assert preset.data.path == "../shared/corpora/tinyshakespeare/input.txt"
        assert preset.data.dev_fraction == 0.1 and preset.model.arch == "decoder-only"
        t = preset.train
        assert (t.lr, t.min_lr, t.warmup, t.schedule) == (1e-3, 1e-4, 100, "cosine")
        assert tuple(t.betas) == (0.9, 0.99) and t.weight_decay == 0.1
        assert t.weight_decay_scope == "matrices" and t.metric == "loss"
        assert preset.model.ff == 4 * preset.model.d_model and preset.model.activation == "gelu"
    # the README's CPU command line
    m, d, t = cpu.model, cpu.data, cpu.train
    assert (m.dec_layers, m.heads, m.d_model, d.block_size) == (4, 4, 128, 64)
    assert (t.batch_size, t.max_steps, m.dropout) == (12, 2000, 0.0)


@pytest.mark.skipif(not NANOGPT_CONFIG.is_file(), reason="../shared/bench/nanogpt is absent")
def test_the_gpu_preset_is_train_shakespeare_char_py():
    nanogpt: dict[str, object] = {}
    exec(NANOGPT_CONFIG.read_text(), nanogpt)  # the peer's own config file (plain assignments)
    gpu = load_preset("shakespeare-char-gpu")
    m, d, t = gpu.model, gpu.data, gpu.train
    assert (m.dec_layers, m.heads, m.d_model) == (
        nanogpt["n_layer"],
        nanogpt["n_head"],
        nanogpt["n_embd"],
    )
    assert (d.block_size, t.batch_size, m.dropout) == (
        nanogpt["block_size"],
        nanogpt["batch_size"],
        nanogpt["dropout"],
    )
    assert (t.lr, t.min_lr, t.betas[1], t.warmup, t.max_steps) == (
        nanogpt["learning_rate"],
        nanogpt["min_lr"],
        nanogpt["beta2"],
        nanogpt["warmup_iters"],
        nanogpt["max_iters"],
    )


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="../shared/corpora/tinyshakespeare is absent")
def test_the_preset_reads_tiny_shakespeare_as_nanogpt_splits_it(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # presets name ../shared/..., relative to the repository root
    dataset = load_dataset(load_preset("shakespeare-char").data)
    # nanoGPT's prepare.py prints: vocab size 65, train 1,003,854 tokens, val 111,540 tokens
    assert len(dataset.tgt_vocab) == 65 + len(SPECIALS)
    assert (len(dataset.streams.train), len(dataset.streams.dev)) == (1_003_854, 111_540)


def test_weight_decay_scope_matrices_spares_biases_and_norms():
    from attnlab.nn.model import build_model
    from attnlab.train.trainer import make_optimizer

    config = apply_overrides(ExperimentConfig(), ["train.weight_decay=0.1", *LM_MODEL])
    model = build_model(config, 20, 20)
    every = make_optimizer(model, config.train)
    assert len(every.param_groups) == 1 and every.param_groups[0]["weight_decay"] == 0.1
    scoped = apply_overrides(config, ["train.weight_decay_scope=matrices"])
    groups = make_optimizer(model, scoped.train).param_groups
    decayed, plain = ({id(p) for p in g["params"]} for g in groups)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    for name, p in model.named_parameters():
        assert (id(p) in decayed) == (p.dim() >= 2), name
        assert (id(p) in plain) == (p.dim() < 2), name


def test_data_stats_counts_an_lms_tokens_and_windows(tmp_path):
    import json

    from click.testing import CliRunner

    from attnlab.cli import cli

    text = random_text(1000)
    path = text_file(tmp_path, text)
    sets = ["data.task=lm", f"data.path={path}", "data.tokenizer=char", "data.block_size=16"]
    sets += ["data.dev_fraction=0.1", "data.dev_windows=3", "model.arch=decoder-only"]
    args = ["data", "stats", "--json", *(a for s in sets for a in ("--set", s))]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lm = json.loads(result.output)["lm"]
    assert lm["splits"]["train"] == {"tokens": 900, "windows": (900 - 1) // 16}
    assert lm["splits"]["dev"] == {"tokens": 100, "windows": (100 - 1) // 16}
    assert lm["dev_windows_scored"] == 3 and lm["tokens_per_step"] == 64 * 16
    table = CliRunner().invoke(cli, args[:2] + args[3:])
    assert table.exit_code == 0 and "56" in table.output and "pairs" not in table.output
    shown = CliRunner().invoke(cli, ["data", "show", "-n", "2", "--split", "dev", *args[3:]])
    assert shown.exit_code == 0, shown.output
    # the dev split's first window, as written (its longest line: a table cell wraps at \n)
    first = max(text[900 : 900 + 16].split("\n"), key=len).strip()
    assert len(first) > 3 and first in shown.output
