"""Run directories: atomic writes, checkpoints without pickle, export, resume state, list_runs."""

from __future__ import annotations

import json
import os

import pytest
import torch

from attnlab.errors import AttnlabError
from attnlab.events import EventLog
from attnlab.runs import (
    atomic_open,
    atomic_write_text,
    export_checkpoint,
    list_runs,
    load_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    save_checkpoint,
    save_tensors,
    summarize_run,
)


def test_atomic_write_that_raises_midway_leaves_no_partial_file(tmp_path):
    target = tmp_path / "model.safetensors"
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write(b"half of a checkpoint")
        raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []  # neither the target nor a temp file


def test_atomic_write_that_raises_keeps_the_previous_version(tmp_path):
    target = tmp_path / "meta.json"
    atomic_write_text(target, "old")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as handle:
        handle.write(b"new but incomplete")
        raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def _tiny_model_and_dataset(config):
    from attnlab.data.dataset import load_dataset
    from attnlab.nn.model import build_model, count_parameters

    dataset = load_dataset(config.data)
    torch.manual_seed(0)
    model = build_model(config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    return model, dataset, count_parameters(model)


@pytest.fixture
def saved_run(tmp_path, tiny_config):
    model, dataset, params = _tiny_model_and_dataset(tiny_config)
    run_dir = tmp_path / "run"
    metrics = {"bleu": 12.5, "exact_match": 0.25, "loss": float("nan")}
    save_checkpoint(run_dir, "best", model, tiny_config, dataset.meta(), 7, metrics, params)
    return run_dir, model, dataset, tiny_config


def _same_outputs(model_a, model_b, dataset):
    from attnlab.data.batching import make_batch

    batch = make_batch(dataset.splits.dev[:4], dataset.src_vocab, dataset.tgt_vocab)
    model_a.eval()
    model_b.eval()
    with torch.no_grad():
        a = model_a(batch.src, batch.src_mask, batch.tgt_in).logits
        b = model_b(batch.src, batch.src_mask, batch.tgt_in).logits
    return torch.equal(a, b)


def test_load_checkpoint_never_unpickles(saved_run, monkeypatch):
    run_dir, model, dataset, config = saved_run

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load must not be used to load checkpoints")

    monkeypatch.setattr(torch, "load", refuse)
    for path in (run_dir, run_dir / "checkpoints" / "best"):
        loaded = load_checkpoint(path)
        assert loaded.step == 7
        assert loaded.metrics["bleu"] == 12.5 and loaded.metrics["loss"] is None  # NaN -> null
        assert loaded.config == config
        assert loaded.src_vocab.itos == dataset.src_vocab.itos
        assert not loaded.model.training
        assert _same_outputs(model, loaded.model, dataset)


def test_checkpoint_meta_is_written_last_and_is_plain_json(saved_run):
    run_dir, *_ = saved_run
    directory = run_dir / "checkpoints" / "best"
    meta = json.loads((directory / "meta.json").read_text())
    assert {"config", "dataset", "step", "metrics", "attnlab_version", "params"} <= set(meta)
    assert meta["dataset"]["src_vocab"][:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (
        os.stat(directory / "meta.json").st_mtime_ns
        >= os.stat(directory / "model.safetensors").st_mtime_ns
    )


def test_export_loads_with_plain_safetensors_and_json(saved_run, tmp_path, monkeypatch):
    run_dir, model, dataset, config = saved_run
    out = export_checkpoint(run_dir, tmp_path / "model.safetensors")
    # What another program does: safetensors + json only.
    from safetensors import safe_open

    with safe_open(str(out), framework="pt") as f:
        metadata = f.metadata()
        weights = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    cfg = json.loads(metadata["attnlab.config"])
    vocab = json.loads(metadata["attnlab.dataset"])
    metrics = json.loads(metadata["attnlab.metrics"])
    assert cfg["model"]["attention"] == "bahdanau" and cfg["model"]["hidden"] == 16
    assert vocab["tgt_vocab"] == dataset.tgt_vocab.itos
    assert metrics["bleu"] == 12.5
    assert metadata["attnlab.step"] == "7"
    state = model.state_dict()
    assert set(weights) == set(state) and all(torch.equal(weights[k], state[k]) for k in state)

    monkeypatch.setattr(
        torch, "load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no pickle"))
    )
    loaded = load_checkpoint(out)
    assert loaded.config == config and _same_outputs(model, loaded.model, dataset)


def test_export_refuses_a_wrong_suffix_and_missing_checkpoints(saved_run, tmp_path):
    run_dir, *_ = saved_run
    with pytest.raises(AttnlabError, match=r"\.safetensors"):
        export_checkpoint(run_dir, tmp_path / "model.bin")
    with pytest.raises(AttnlabError, match="no last checkpoint"):
        export_checkpoint(run_dir, tmp_path / "x.safetensors", which="last")


def test_loading_bad_paths_gives_user_errors(tmp_path):
    with pytest.raises(AttnlabError, match="no such run directory or checkpoint"):
        load_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AttnlabError, match="no checkpoint found"):
        load_checkpoint(tmp_path / "empty")
    foreign = tmp_path / "foreign.safetensors"
    save_tensors(foreign, {"w": torch.zeros(2)})
    with pytest.raises(AttnlabError, match="not an attnlab export"):
        load_checkpoint(foreign)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"not safetensors at all")
    with pytest.raises(AttnlabError, match="not a readable safetensors file"):
        load_checkpoint(garbage)
    # A text file given where a run is expected says what is expected instead.
    text = tmp_path / "config.toml"
    text.write_text('name = "x"\n[train]\nmax_steps = 5\n')
    with pytest.raises(AttnlabError) as err:
        load_checkpoint(text)
    assert str(err.value).startswith(f"{text}: not a readable safetensors file (")
    assert str(err.value).endswith(
        "; give a run directory, a checkpoint directory or an exported .safetensors file"
    )


def test_optimizer_state_round_trips_through_tensors_and_json():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=0.01, betas=(0.8, 0.9))
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(4, 3)).pow(2).sum().backward()
        opt.step()
    tensors, info = optimizer_to_tensors(opt.state_dict())
    info = json.loads(json.dumps(info))  # it must survive JSON
    restored_net = torch.nn.Linear(3, 2)
    restored = torch.optim.AdamW(restored_net.parameters(), lr=0.5)
    restored.load_state_dict(optimizer_from_tensors(tensors, info))
    a, b = opt.state_dict(), restored.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for index, values in a["state"].items():
        for name, value in values.items():
            assert torch.equal(value, b["state"][index][name])


def _write_run(root, name, events, task="reverse", attention="bahdanau"):
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(
        f'name = "{name}"\n[data]\ntask = "{task}"\n'
        f'[model]\narch = "rnn"\nattention = "{attention}"\n'
    )
    log = EventLog(run_dir)
    for kind, step, fields in events:
        log.emit(kind, step, **fields)
    log.close()
    return run_dir


def test_list_runs_summarises_status_and_best_metrics(tmp_path):
    start = ("start", 0, {"params": 1234, "pid": os.getpid(), "host": os.uname().nodename})
    evals = [
        ("step", 10, {"loss": 1.0, "tokens_per_s": 900.0, "elapsed_s": 2.0}),
        ("eval", 10, {"bleu": 40.0, "chrf": 50.0, "exact_match": 0.1, "elapsed_s": 3.0}),
        ("eval", 20, {"bleu": 35.0, "chrf": 55.0, "exact_match": 0.2, "elapsed_s": 5.0}),
    ]
    _write_run(
        tmp_path, "done", [start, *evals, ("done", 20, {"reason": "finished", "elapsed_s": 6.0})]
    )
    _write_run(tmp_path, "early", [start, ("done", 5, {"reason": "early-stop"})])
    _write_run(tmp_path, "ctrl-c", [start, ("done", 5, {"reason": "interrupted"})])
    _write_run(tmp_path, "stopped", [start, ("done", 5, {"reason": "stopped"})])
    _write_run(
        tmp_path,
        "nan",
        [start, ("error", 5, {"message": "nan", "kind": "nan"}), ("done", 5, {"reason": "error"})],
    )
    _write_run(tmp_path, "live", [start, *evals])
    # a config and no start event, or only malformed lines, and no live lock: not "running"
    _write_run(tmp_path, "never-started", [])
    _write_run(tmp_path, "garbage", [])
    (tmp_path / "garbage" / "events.jsonl").write_text("{not json\n", encoding="utf-8")
    (tmp_path / "not-a-run").mkdir()
    runs = {r.path.name: r for r in list_runs(tmp_path)}
    assert set(runs) == {
        "done",
        "early",
        "ctrl-c",
        "stopped",
        "nan",
        "live",
        "never-started",
        "garbage",
    }
    assert {name: r.status for name, r in runs.items()} == {
        "done": "finished",
        "early": "finished",
        "ctrl-c": "interrupted",
        "stopped": "stopped",
        "nan": "error",
        "live": "running",  # no done event and its process (this one) is alive
        "never-started": "incomplete",
        "garbage": "incomplete",
    }
    done = runs["done"]
    assert (done.task, done.arch, done.attention, done.params, done.steps) == (
        "reverse",
        "rnn",
        "bahdanau",
        1234,
        20,
    )
    assert (done.best_bleu, done.best_chrf, done.best_exact_match) == (40.0, 55.0, 0.2)
    assert done.tokens_per_s == 900.0 and done.wall_s == 6.0
    assert list_runs(tmp_path / "missing") == []


def test_a_run_whose_process_died_without_done_is_an_error(tmp_path):
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    run_dir = _write_run(
        tmp_path,
        "killed",
        [("start", 0, {"params": 1, "pid": dead_pid, "host": os.uname().nodename})],
    )
    assert summarize_run(run_dir).status == "error"


def test_runs_show_the_mean_throughput_not_the_last_window(tmp_path):
    """#44: `attnlab runs` showed the last step's window figure; the mean over training time
    (total tokens / total stepping seconds) is the one speed of a run."""
    start = ("start", 0, {"params": 10, "pid": os.getpid(), "host": os.uname().nodename})
    # Two windows: 1000 tokens in 2 s, then 3000 tokens in 1 s -> mean 4000 / 3 s.
    steps = [
        ("step", 5, {"tokens_per_s": 500.0, "mean_tokens_per_s": 500.0, "tokens": 1000}),
        ("step", 10, {"tokens_per_s": 3000.0, "mean_tokens_per_s": 1333.3, "tokens": 4000}),
    ]
    live = _write_run(tmp_path, "live", [start, *steps])
    done = _write_run(
        tmp_path,
        "done",
        [start, *steps, ("done", 10, {"reason": "finished", "tokens_per_s": 1333.3})],
    )
    old = _write_run(tmp_path, "old", [start, ("step", 5, {"tokens_per_s": 700.0})])
    runs = {r.path: r for r in list_runs(tmp_path)}
    assert runs[live].tokens_per_s == pytest.approx(4000 / 3, abs=0.05)
    assert runs[done].tokens_per_s == pytest.approx(4000 / 3, abs=0.05)
    assert runs[old].tokens_per_s == 700.0  # logs from before the mean: the window's figure
