"""The command line through click's CliRunner, and exit codes through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnlab.cli import cli

COMMANDS = ["train", "eval", "translate", "generate", "variants", "presets", "runs", "export"]


def invoke(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_everywhere(command):
    result = invoke(*([command] if command else []), "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.output


def _every_command(group, path=()):
    import click

    for name, command in getattr(group, "commands", {}).items():
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _every_command(command, (*path, name))


def test_no_help_shows_rst_markup():
    """Docstrings are help text: ``literal`` markup printed as-is (issue 44, eval --help)."""
    shown = {" ".join(p): invoke(*p, "--help").output for p in _every_command(cli)}
    assert len(shown) > 10 and not [name for name, text in shown.items() if "``" in text]


def test_a_bare_group_shows_its_help():
    result = invoke("data")
    assert (
        result.exit_code == 0
        and "Usage: attnlab data" in result.output
        and "error" not in result.output
    )


def test_presets_lists_names_with_descriptions():
    result = invoke("presets")
    assert result.exit_code == 0
    for name in ("reverse-bahdanau", "reverse-none", "copy-local-m", "dates-bahdanau"):
        assert name in result.output


def test_variants_lists_the_registry():
    from attnlab.nn.attention import ATTENTION

    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["variants"])
    assert result.exit_code == 0
    for entry in ATTENTION.entries():
        assert entry.name in result.output
    assert "rnn-cross" in result.output
    # formulas are shown verbatim, brackets included (not eaten as rich markup)
    assert "tanh(W_a [s_t; h_j])" in result.output
    # fractional bounds are shown as they are (entmax refuses alpha <= 1.01, allows 2)
    assert "alpha=1.5 [1.01..2]" in result.output


def test_user_errors_are_one_line_with_exit_2():
    cases = [
        (["train", "--set", "model.attention=bahdanu"], 'did you mean "bahdanau"'),
        (["train", "--preset", "reverse-bahdanu"], 'did you mean "reverse-bahdanau"'),
        (["train", "--preset", "nowhere/missing.toml"], "no such preset file"),
        (["train", "--bogus"], "No such option"),
        (["train", "--device", "tpu"], "--device"),
        (["eval", "/definitely/missing/run"], "no such run directory"),
        (["export", "/definitely/missing/run", "--out", "x.safetensors"], "no such run directory"),
        (["frobnicate"], "No such command"),
    ]
    for args, needle in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1, (args, result.output)
        assert lines[0].startswith("error: ") and needle in lines[0], (args, lines[0])
        assert "Traceback" not in result.output


def test_a_toml_file_that_is_not_utf8_is_one_line(tmp_path):
    preset = tmp_path / "p.toml"
    preset.write_bytes(b'name = "ok"\n# caf\xe9\n')
    result = invoke("train", "--preset", str(preset), "--out", str(tmp_path / "runs"))
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: {preset}:2: invalid UTF-8 (byte 0xe9); save the file as UTF-8"
    ]


def test_resume_below_the_checkpoint_step_is_one_line_and_changes_nothing(tmp_path, tiny_sets):
    # It used to "finish" at once and rewrite config.toml with the smaller max_steps.
    first = invoke("train", "--out", str(tmp_path), "--run-name", "r", "--quiet", *tiny_sets)
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "r"
    config, log = (run_dir / "config.toml").read_bytes(), (run_dir / "events.jsonl").read_bytes()
    result = invoke("train", "--resume", str(run_dir), "--set", "train.max_steps=3", "--quiet")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"error: --resume {run_dir}: train.max_steps=3 is below the checkpoint's step 6; "
        "to train on, --set train.max_steps=N with N > 6"
    ]
    assert (run_dir / "config.toml").read_bytes() == config
    assert (run_dir / "events.jsonl").read_bytes() == log


def test_a_missing_corpus_is_one_line_and_leaves_no_empty_run(tmp_path):
    missing = tmp_path / "no-such-corpus"
    result = invoke(
        "train",
        "--out",
        str(tmp_path / "runs"),
        "--run-name",
        "r",
        "--quiet",
        "--set",
        "data.task=corpus",
        "--set",
        f"data.path={missing}",
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: data.path={missing}: no such file or folder"]
    assert not (tmp_path / "runs" / "r").exists()


def test_train_eval_translate_export_runs_round_trip(tmp_path, tiny_sets):
    result = invoke("train", "--out", str(tmp_path), "--run-name", "tiny", "--quiet", *tiny_sets)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "tiny"
    assert f"run directory: {run_dir}" in result.output
    assert "finished: step 6" in result.output

    result = invoke("eval", str(run_dir), "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)
    for key in ("bleu", "chrf", "exact_match", "loss", "n", "bleu_by_length", "alignment_accuracy"):
        assert key in metrics
    assert metrics["n"] == 16 and metrics["split"] == "dev"
    assert all({"bucket", "n", "bleu"} <= set(row) for row in metrics["bleu_by_length"])
    assert 0.0 <= metrics["alignment_accuracy"] <= 1.0

    test_metrics = json.loads(invoke("eval", str(run_dir), "--split", "test", "--json").output)
    assert test_metrics["split"] == "test"

    result = invoke("translate", str(run_dir), "5 9 2 7", "1 2 3")
    assert result.exit_code == 0, result.output
    assert len(result.output.strip().splitlines()) == 2

    result = invoke("translate", str(run_dir), input="5 9 2\n\n4 4\n")
    assert result.exit_code == 0
    assert len(result.output.splitlines()) == 3  # the empty line stays empty

    result = invoke("translate", str(run_dir), "--show-attention", "5 9 2 7")
    assert result.exit_code == 0
    assert len(result.output.splitlines()) > 3  # the heatmap follows the translation
    # Not a terminal (no colours): every row prints its weights in percent, summing to ~100.
    rows = [line.split() for line in result.output.splitlines()[1:]]  # after the translation
    hyp = result.output.splitlines()[0].split()
    weight_rows = [
        r
        for r in rows
        if r and r[0] in (*hyp, "</s>") and all(c.isdigit() for c in r[1:]) and len(r) == 5
    ]
    assert weight_rows, result.output
    assert all(abs(sum(int(c) for c in r[1:]) - 100) <= 4 for r in weight_rows)

    # Sampling: --seed makes the draws reproducible (an untrained-ish model at T 3 varies a lot).
    sample = (
        "translate",
        str(run_dir),
        "5 9 2 7 1 3 8 4",
        "--sample",
        "--temperature",
        "3",
        "--nbest",
        "4",
    )
    first, again = invoke(*sample, "--seed", "1"), invoke(*sample, "--seed", "1")
    assert first.exit_code == 0, first.output
    assert first.output == again.output
    assert any(invoke(*sample, "--seed", str(seed)).output != first.output for seed in (2, 3, 4))

    out = tmp_path / "tiny.safetensors"
    result = invoke("export", str(run_dir), "--out", str(out), "--checkpoint", "last")
    assert result.exit_code == 0 and out.is_file()
    exported = json.loads(invoke("eval", str(out), "--json").output)
    last = json.loads(invoke("eval", str(run_dir / "checkpoints" / "last"), "--json").output)
    assert exported["bleu"] == last["bleu"] and exported["loss"] == last["loss"]

    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["runs", str(tmp_path)])
    assert result.exit_code == 0 and "tiny" in result.output and "finished" in result.output


def test_decoding_flags_map_onto_decode_keys():
    from attnlab.cli.common import decode_overrides

    flags = {
        "beam": 5,
        "alpha": 0.6,
        "beta": 0.2,
        "nbest": 3,
        "top_k": None,
        "sample": False,
        "max_len_ratio": 2.0,
    }
    assert decode_overrides(flags) == [
        "decode.beam=5",
        "decode.alpha=0.6",
        "decode.beta=0.2",
        "decode.nbest=3",
        "decode.max_len_ratio=2.0",
    ]
    assert decode_overrides({"sample": True, "seed": 7, "nbest": 2}) == [
        "decode.seed=7",
        "decode.nbest=2",
        "decode.sample=true",
        "decode.num_samples=2",
    ]
    assert decode_overrides({"sample": True, "temperature": 0.7}) == [
        "decode.temperature=0.7",
        "decode.sample=true",
    ]
    assert decode_overrides({"sample": True, "nbest": 4}) == [
        "decode.nbest=4",
        "decode.sample=true",
        "decode.num_samples=4",
    ]


def test_bad_decoding_flag_value_is_a_user_error(tmp_path, tiny_sets):
    invoke("train", "--out", str(tmp_path), "--run-name", "t", "--quiet", *tiny_sets)
    result = invoke("translate", str(tmp_path / "t"), "--top-p", "7", "1 2")
    assert result.exit_code == 2 and result.output.startswith(
        "error: decode.top_p=7.0 is out of range"
    )


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "attnlab", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_exit_codes_in_a_real_process(tmp_path):
    ok = _run("presets")
    assert ok.returncode == 0 and "reverse-bahdanau" in ok.stdout

    bad = _run("train", "--out", str(tmp_path), "--set", "model.attention=bahdanu")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and 'did you mean "bahdanau"' in bad.stderr
    assert not any(tmp_path.iterdir())  # nothing was created

    missing = _run("translate", str(tmp_path / "no-such-run"), "1 2 3")
    assert (
        missing.returncode == 2
        and missing.stderr.startswith("error: ")
        and missing.stderr.count("\n") == 1
    )


def test_quiet_training_still_prints_why_it_stopped_on_a_nan(tmp_path, tiny_sets, monkeypatch):
    import attnlab.train.trainer as trainer_module

    real = trainer_module.token_loss_sum
    monkeypatch.setattr(
        trainer_module, "token_loss_sum", lambda *a, **k: real(*a, **k) * float("nan")
    )
    result = CliRunner().invoke(
        cli, ["train", "--out", str(tmp_path), "--run-name", "nan", "--quiet", *tiny_sets]
    )
    assert result.exit_code == 1
    assert (
        "error: loss became nan between steps 1 and 1; no checkpoint was written" in result.output
    )


def test_export_defaults_to_the_labs_path_and_says_when_best_falls_back_to_last(
    tmp_path, tiny_sets, monkeypatch
):
    import shutil

    monkeypatch.chdir(tmp_path)
    assert (
        invoke("train", "--out", "runs", "--run-name", "tiny", "--quiet", *tiny_sets).exit_code == 0
    )
    result = CliRunner().invoke(cli, ["export", "runs/tiny"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "exports" / "tiny-best.safetensors").is_file()
    assert "note:" not in result.output
    shutil.rmtree(tmp_path / "runs" / "tiny" / "checkpoints" / "best")
    result = CliRunner().invoke(cli, ["export", "runs/tiny"])
    assert result.exit_code == 0, result.output
    assert "note: runs/tiny has no best checkpoint yet; exported last" in result.output
    assert (tmp_path / "exports" / "tiny-last.safetensors").is_file()
    again = CliRunner().invoke(cli, ["export", "runs/tiny"])  # never replaces silently
    assert again.exit_code == 2 and "already exists; pass --force" in again.output


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["eval", "{runs}/avgtst"], '"{runs}/avgtest"'),
        (["eval", "{runs}/avgtest", "--device", "cdua"], '"cuda"'),
        (["eval", "{runs}/avgtest", "--split", "tset"], '"test"'),
        (["translate", "{runs}/avgtest", "--role", "crosss"], '"cross"'),
    ],
)
def test_near_misses_get_one_line_with_a_suggestion(tmp_path, args, suggestion):
    run = tmp_path / "avgtest"
    run.mkdir()
    (run / "config.toml").write_text("")
    result = invoke(*[a.format(runs=tmp_path) for a in args])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    assert f"did you mean {suggestion.format(runs=tmp_path)}" in lines[0]


def test_a_far_miss_gets_no_suggestion(tmp_path):
    result = invoke("eval", str(tmp_path / "zzzzqqq"), "--device", "xyzzy")
    assert result.exit_code == 2 and "did you mean" not in result.output


def test_runs_piped_prints_every_name_and_column_uncut(tmp_path):
    names = ["reverse-rnn-luong-general-20261129-101544-with-a-long-suffix", "avgtest"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.toml").write_text("")
    for columns in ("40", "80"):
        result = CliRunner(env={"COLUMNS": columns}).invoke(cli, ["runs", str(tmp_path)])
        assert result.exit_code == 0, result.output
        header = next(line for line in result.output.splitlines() if " run " in line)
        assert header.split() == ["run", "task", "model", "params", "steps"] + [
            "BLEU",
            "chrF",
            "EM",
            "tok/s",
            "status",
        ]
        listed = {line.split()[0] for line in result.output.splitlines()[3:] if line.strip()}
        assert set(names) <= listed and "…" not in result.output
        # a copied name is a run path eval accepts (it fails later, for its empty config)
        copied = invoke("eval", str(tmp_path / names[0]))
        assert "no such run directory" not in copied.output


def test_eval_hyps_and_refs_files_give_the_same_bleu_with_the_sacrebleu_command(
    tmp_path, tiny_sets
):
    import shutil

    sacrebleu = shutil.which("sacrebleu") or str(Path(sys.executable).parent / "sacrebleu")
    if not Path(sacrebleu).is_file():
        pytest.skip("the sacrebleu command is not installed")
    trained = invoke("train", "--out", str(tmp_path), "--run-name", "hr", "--quiet", *tiny_sets)
    assert trained.exit_code == 0, trained.output
    hyps, refs = tmp_path / "hyps.txt", tmp_path / "refs.txt"
    run = str(tmp_path / "hr")
    result = invoke(
        "eval", run, "--split", "test", "--json", "--hyps", str(hyps), "--refs", str(refs)
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert "sentences" not in report
    assert len(hyps.read_text().splitlines()) == len(refs.read_text().splitlines()) == report["n"]
    tok = report["bleu_signature"].split("tok:")[1].split("|")[0]
    score = subprocess.run(
        [sacrebleu, str(refs), "-i", str(hyps), "-m", "bleu", "-b", "-w", "4", "-tok", tok],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert float(score) == pytest.approx(report["bleu"], abs=1e-4)


def test_a_missing_corpus_is_one_line_naming_the_paths_tried_and_no_run_directory(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = invoke(
        "train", "--preset", "multi30k-gru-bahdanau", "--out", "runs",
        "--set", "data.path=corpora/multi30k",
    )  # fmt: skip
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: data.path=corpora/multi30k: no such file or folder")
    assert str(tmp_path / "corpora" / "multi30k") in lines[0]  # the current directory first
    assert "not shipped" in lines[0] and "github.com/multi30k/dataset" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_eval_srcs_writes_the_scored_sources_in_the_order_of_hyps_and_refs(tmp_path, tiny_sets):
    from attnlab.data.dataset import load_dataset
    from attnlab.runs import load_checkpoint

    trained = invoke("train", "--out", str(tmp_path), "--run-name", "sr", "--quiet", *tiny_sets)
    assert trained.exit_code == 0, trained.output
    srcs, refs = tmp_path / "srcs.txt", tmp_path / "refs.txt"
    run = tmp_path / "sr"
    result = invoke("eval", str(run), "--split", "test", "--srcs", str(srcs), "--refs", str(refs))
    assert result.exit_code == 0, result.output
    test = load_dataset(load_checkpoint(run / "checkpoints" / "best").config.data).splits.test
    assert srcs.read_text().splitlines() == [e.src_text for e in test]
    assert refs.read_text().splitlines() == [e.tgt_text for e in test]


def test_data_show_piped_prints_the_pairs_as_tab_separated_lines(tiny_sets):
    from attnlab.data.dataset import load_dataset
    from attnlab.experiment import apply_overrides

    result = invoke("data", "show", "-n", "4", "--split", "dev", *tiny_sets)
    assert result.exit_code == 0, result.output  # CliRunner's stdout is not a terminal
    from attnlab.config import ExperimentConfig

    config = apply_overrides(ExperimentConfig(), [v for v in tiny_sets if v != "--set"])
    dev = load_dataset(config.data).splits.dev[:4]
    assert result.output.splitlines() == [f"{e.src_text}\t{e.tgt_text}" for e in dev]
