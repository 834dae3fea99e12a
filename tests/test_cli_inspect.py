"""CLI of issue 15: heads, compare, average, eval --gold-alignments, translate --show-alignment /
--method / --export, export --tensorboard; JSON fields and round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnlab.cli import cli

DATA = Path(__file__).parent / "data"
TRANSFORMER = (
    "model.arch=transformer",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=32",
    "model.enc_layers=1",
    "model.dec_layers=2",
    "train.keep_last=2",
)


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny RNN run and a tiny Transformer run (keep_last = 2: step-3 and step-6 kept)."""
    from conftest import TINY_OVERRIDES

    root = tmp_path_factory.mktemp("runs")
    sets = [arg for item in TINY_OVERRIDES for arg in ("--set", item)]
    assert invoke("train", "--out", str(root), "--run-name", "rnn", "--quiet", *sets).exit_code == 0
    extra = [arg for item in TRANSFORMER for arg in ("--set", item)]
    assert (
        invoke("train", "--out", str(root), "--run-name", "tr", "--quiet", *sets, *extra).exit_code
        == 0
    )
    return root


def test_shipped_gold_sample_is_the_toy_tasks_gold():
    from conftest import TINY_OVERRIDES

    from attnlab.config import ExperimentConfig
    from attnlab.data.dataset import load_dataset
    from attnlab.experiment import apply_overrides
    from attnlab.interpret.alignment import read_pharaoh

    cfg = apply_overrides(ExperimentConfig(name="tiny"), list(TINY_OVERRIDES))
    dev = load_dataset(cfg.data).splits.split("dev")
    golds = read_pharaoh(DATA / "reverse-tiny-dev.align")
    assert len(golds) == len(dev)
    for gold, example in zip(golds, dev, strict=True):
        assert gold.sure == {(s, t) for t, s in enumerate(example.alignment)}


def test_eval_gold_alignments_aer_equals_the_toy_aer(runs):
    for name in ("rnn", "tr"):
        result = invoke(
            "eval",
            str(runs / name),
            "--json",
            "--gold-alignments",
            str(DATA / "reverse-tiny-dev.align"),
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        gold = report["gold_alignments"]
        # the file holds exactly the toy's gold links: both AERs are the same number
        assert gold["aer"] == pytest.approx(report["aer"]) and gold["n"] == report["n"] == 16
        assert report["aer"] == pytest.approx(1 - report["alignment_accuracy"])
        assert isinstance(report["attention_entropy"]["cross"][0][0], float)
        if name == "tr":
            assert len(gold["aer_by_layer"]) == 2 and gold["shift_att"]["layer"] in (0, 1)
            assert set(report["attention_entropy"]) == {"enc_self", "dec_self", "cross"}
        else:
            assert "shift_att" not in gold


def test_eval_gold_alignments_user_errors(runs, tmp_path):
    bad = tmp_path / "bad.align"
    bad.write_text("0-0 1x1\n")
    result = CliRunner().invoke(cli, ["eval", str(runs / "rnn"), "--gold-alignments", str(bad)])
    assert (
        result.exit_code == 2
        and "error: " in result.output
        and '"1x1" is not a Pharaoh link' in result.output
    )
    short = tmp_path / "short.align"
    short.write_text("0-0\n")
    result = CliRunner().invoke(cli, ["eval", str(runs / "rnn"), "--gold-alignments", str(short)])
    assert result.exit_code == 2 and "has 1 lines but the split has 16" in result.output
    # a link past its sentence's tokens (here source 99 on line 2) is refused, not scored
    lines = (DATA / "reverse-tiny-dev.align").read_text().splitlines()
    n_src = len(lines[1].split())  # reverse: one sure link per token, as many as the source
    outside = tmp_path / "outside.align"
    outside.write_text("\n".join([lines[0], lines[1] + " 99?0", *lines[2:]]) + "\n")
    result = CliRunner().invoke(cli, ["eval", str(runs / "rnn"), "--gold-alignments", str(outside)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: {outside}:2: link 99?0 (src-tgt) is outside sentence 2, which has {n_src} "
        f"source and {n_src} target tokens; valid: source 0..{n_src - 1}, target 0..{n_src - 1} "
        "(the model's tokens)"
    ]


def test_eval_gold_alignments_score_the_same_max_sentences(runs, tmp_path):
    """--max-sentences N scores the first N sentences: the gold file's AER too (a file of N
    lines is accepted; a longer one is read for its first N), so both AERs are one number."""
    lines = (DATA / "reverse-tiny-dev.align").read_text().splitlines()
    first = tmp_path / "first8.align"
    first.write_text("\n".join(lines[:8]) + "\n")
    for path in (first, DATA / "reverse-tiny-dev.align"):
        args = ("--json", "--max-sentences", "8", "--gold-alignments", str(path))
        result = invoke("eval", str(runs / "tr"), *args)
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        gold = report["gold_alignments"]
        assert report["n"] == gold["n"] == 8
        # the toy's own AER (one batched teacher-forced pass) over the same 8 sentences
        assert gold["aer"] == pytest.approx(report["aer"])


def test_eval_events_carry_entropy(runs):
    from attnlab.events import iter_events

    evals = [e for e in iter_events(runs / "tr") if e["type"] == "eval"]
    assert evals and all(len(e["attention_entropy"]["enc_self"]) == 1 for e in evals)
    assert all(len(e["alignment_accuracy_by_layer"]) == 2 for e in evals)


def test_heads_json(runs):
    result = invoke("heads", str(runs / "tr"), "--json", "--max-sentences", "8")
    report = json.loads(result.output)
    assert set(report["importance"]) == {"enc_self", "dec_self", "cross"}
    assert len(report["order"]) == 10 and len(report["curve"]) == 11
    assert report["curve"][0]["masked"] == 0 and report["curve"][0]["head"] is None
    assert [p["head"] for p in report["curve"][1:]] == report["order"]
    result = CliRunner().invoke(cli, ["heads", str(runs / "rnn"), "--json"])
    assert result.exit_code == 2 and "no multi-head attention" in result.output


def test_compare_json_same_model_gives_zero_difference(runs):
    result = invoke("compare", str(runs / "tr"), str(runs / "tr"), "--index", "1", "--json")
    report = json.loads(result.output)
    assert report["same_target"] and all(x == 0.0 for x in report["js"])
    assert all(v == 0.0 for row in report["difference"] for v in row)
    assert report["a"]["aer"] is not None and report["a"]["alignment_accuracy"] == pytest.approx(
        1 - report["a"]["aer"]
    )
    typed = json.loads(
        invoke("compare", str(runs / "tr"), str(runs / "rnn"), "3 5 7", "--json").output
    )
    assert typed["a"]["aer"] is None and len(typed["a"]["map"]) == len(typed["a"]["rows"])
    both = CliRunner().invoke(
        cli, ["compare", str(runs / "tr"), str(runs / "rnn"), "3 5", "--index", "0"]
    )
    assert both.exit_code == 2 and "not both" in both.output


def test_translate_alignment_method_and_exports(runs, tmp_path):
    result = invoke(
        "translate", str(runs / "tr"), "3 5 7 2", "--show-alignment", "--method", "gradient"
    )
    assert result.exit_code == 0 and "target" in result.output and "weight" in result.output
    for suffix, marker in ((".svg", "<svg"), (".html", "<html")):
        out = tmp_path / f"map{suffix}"
        result = invoke(
            "translate", str(runs / "tr"), "3 5 7 2", "--show-attention", "--export", str(out)
        )
        assert result.exit_code == 0 and marker in out.read_text()
    assert (
        "#440154" in (tmp_path / "map.svg").read_text()
        or "#fde725" in (tmp_path / "map.svg").read_text()
    )
    bad = CliRunner().invoke(
        cli, ["translate", str(runs / "tr"), "3", "--export", str(tmp_path / "m.png")]
    )
    assert bad.exit_code == 2 and "valid suffixes: .svg, .html" in bad.output


def test_average_of_two_kept_checkpoints_is_their_mean(runs, tmp_path):
    from attnlab.runs import read_checkpoint, read_tensors

    ckpts = runs / "tr" / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step-*")) == ["step-3", "step-6"]
    out = tmp_path / "avg.safetensors"
    assert invoke("average", str(runs / "tr"), "--last", "2", "--out", str(out)).exit_code == 0
    a, _ = read_checkpoint(ckpts / "step-3")
    b, _ = read_checkpoint(ckpts / "step-6")
    avg, metadata = read_tensors(out)
    assert metadata["format"] == "pt" and json.loads(metadata["attnlab.averaged_steps"]) == [3, 6]
    for key, value in avg.items():
        expected = ((a[key].double() + b[key].double()) / 2).to(value.dtype)
        assert torch.equal(value, expected), key
    result = invoke("eval", str(out), "--json")
    assert result.exit_code == 0 and json.loads(result.output)["n"] == 16
    many = CliRunner().invoke(cli, ["average", str(runs / "tr"), "--last", "3", "--out", str(out)])
    assert many.exit_code == 2 and "kept only 2" in many.output
    none = CliRunner().invoke(cli, ["average", str(runs / "rnn"), "--last", "1", "--out", str(out)])
    assert none.exit_code == 2 and "train.keep_last" in none.output


def test_exported_safetensors_carry_format_pt(runs, tmp_path):
    from attnlab.runs import read_tensors

    out = tmp_path / "m.safetensors"
    assert invoke("export", str(runs / "rnn"), "--out", str(out)).exit_code == 0
    _, metadata = read_tensors(out)
    assert metadata["format"] == "pt" and "attnlab.config" in metadata


def test_tensorboard_export_skips_a_step_beyond_int64(tmp_path):
    # tensorboardX stores steps as int64: a damaged line's step 10**29 was a ValueError
    # traceback; the event reader now skips that line like any malformed one.
    pytest.importorskip("tensorboardX")
    from attnlab.tensorboard_export import read_event_files

    run = tmp_path / "r"
    run.mkdir()
    lines = [
        {"type": "step", "time": 1.0, "step": 1, "loss": 2.5},
        {"type": "step", "time": 2.0, "step": 10**29, "loss": 1.0},
        {"type": "step", "time": 3.0, "step": 2, "loss": 2.0},
    ]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    result = invoke("export", str(run), "--tensorboard", str(tmp_path / "tb"))
    assert result.exit_code == 0, result.output
    loss = {
        event.step: value.simple_value
        for event in read_event_files(tmp_path / "tb")
        for value in event.summary.value
        if value.tag == "train/loss"
    }
    assert loss == {1: 2.5, 2: 2.0}


def test_tensorboard_round_trip(runs, tmp_path):
    pytest.importorskip("tensorboardX")
    from attnlab.events import iter_events
    from attnlab.tensorboard_export import read_event_files

    result = invoke("export", str(runs / "tr"), "--tensorboard", str(tmp_path / "tb"))
    assert result.exit_code == 0, result.output
    scalars: dict[tuple[str, int], float] = {}
    texts = []
    for event in read_event_files(tmp_path / "tb"):
        for value in event.summary.value:
            if value.HasField("simple_value"):
                scalars[(value.tag, event.step)] = value.simple_value
            elif value.metadata.plugin_data.plugin_name == "text":
                texts.append(value.tensor.string_val[0].decode())
    events = list(iter_events(runs / "tr"))
    for e in events:
        if e["type"] == "step":
            assert scalars[("train/loss", e["step"])] == pytest.approx(e["loss"], rel=1e-6)
            assert scalars[("train/lr", e["step"])] == pytest.approx(e["lr"], rel=1e-6)
        if e["type"] == "eval":
            assert scalars[("dev/bleu", e["step"])] == pytest.approx(e["bleu"], rel=1e-6)
            assert scalars[("dev/exact_match", e["step"])] == pytest.approx(
                e["exact_match"], abs=1e-7
            )
            entropy = e["attention_entropy"]["cross"][1][0]
            assert scalars[("entropy/cross/layer1/head0", e["step"])] == pytest.approx(
                entropy, rel=1e-6
            )
    samples = [e for e in events if e["type"] == "sample"]
    assert len(texts) == len(samples) and " ".join(samples[0]["hyp"]) in texts[0]


def _plain_rows(output: str, title: str) -> list[list[int]]:
    lines = output.splitlines()
    at = lines.index(title)
    rows = []
    for line in lines[at + 2 :]:
        if line.startswith("("):
            break
        rows.append([int(c) for c in line.split()[1:]])
    return rows


def test_translate_method_takes_the_chosen_layer_and_head(runs):
    """--method gradient / norm with --layer / --head = that head's own map (explain with a
    per-head reference computed here from the trace), printed plain when piped."""
    from attnlab.interpret.attribution import trace
    from attnlab.runs import load_checkpoint

    run = runs / "tr"
    src = "3 5 7 2"
    result = invoke(
        "translate",
        str(run),
        src,
        "--show-attention",
        "--method",
        "gradient",
        "--layer",
        "0",
        "--head",
        "1",
    )
    assert result.exit_code == 0, result.output
    hyp = result.output.splitlines()[0].split()
    loaded = load_checkpoint(run, device=torch.device("cpu"))
    n_heads = loaded.config.model.heads
    layers = loaded.config.model.dec_layers
    title = f"gradient (target × source), layer 0/{layers}, head 1/{n_heads}"
    printed = _plain_rows(result.output, title)
    ids = loaded.src_vocab.encode(src.split())
    tgt = loaded.tgt_vocab.encode(hyp)
    finished = len(printed) == len(tgt) + 1  # a row for </s>
    assert finished or len(printed) == len(tgt)
    rows = len(printed)
    out_ids = [*tgt, 3][:rows]  # EOS_ID = 3
    traced = trace(
        loaded.model.eval(),
        torch.tensor([ids] * rows),
        torch.tensor([ids] * rows) != 0,
        torch.tensor([[2, *tgt][:rows]] * rows),
        torch.tensor([out_ids] * rows),
        torch.arange(rows),
    )
    cross, grads = traced.maps["cross"], traced.grads["cross"]  # [B, L, H, T, S]
    expected = [(grads[r, 0, 1, r] * cross[r, 0, 1, r]).clamp_min(0) for r in range(rows)]
    assert printed == [[round(100 * float(v)) for v in row] for row in expected]
    norm = invoke("translate", str(run), src, "--show-alignment", "--method", "norm", "--head", "0")
    title = f"alignment from norm (target × source), layer {layers - 1}/{layers}, head 0/{n_heads}"
    assert norm.exit_code == 0 and title in " ".join(norm.output.split())  # the title wraps


def test_translate_method_maps_are_labelled_as_scores_not_weights(runs):
    """Attribution scores have no row sum of 1: the piped footer says so (not "each row sums
    to ~100"); rollout rows printed are explain's own; norm names how it combines heads."""
    from attnlab.interpret.attribution import explain
    from attnlab.runs import load_checkpoint

    run, src = runs / "tr", "3 5 7 2"
    result = invoke("translate", str(run), src, "--show-attention", "--method", "rollout")
    assert result.exit_code == 0, result.output
    hyp = result.output.splitlines()[0].split()
    printed = _plain_rows(result.output, "rollout (target × source), all layers and heads")
    assert result.output.rstrip().endswith(
        "(weights x 100; rows: queries, columns: keys; rows need not sum to 100)"
    )
    assert "each row sums to ~100" not in result.output
    loaded = load_checkpoint(run, device=torch.device("cpu"))
    tgt = loaded.tgt_vocab.encode(hyp)
    maps = explain(loaded.model, loaded.src_vocab.encode(src.split()), tgt, len(printed) > len(tgt))
    assert printed == [[round(100 * float(v)) for v in row] for row in maps["rollout"]]
    assert any(abs(sum(row) - 100) > len(row) for row in printed)  # not a distribution
    norm = invoke("translate", str(run), src, "--show-attention", "--method", "norm")
    layers = loaded.config.model.dec_layers
    assert f"norm (target × source), layer {layers - 1}/{layers}, heads summed in ‖·‖" in (
        norm.output
    )


def test_translate_method_refuses_combinations_that_mean_nothing(runs):
    run = str(runs / "tr")
    for args, message in (
        (("--method", "rollout", "--layer", "0"), "--method rollout combines every layer and head"),
        (("--method", "norm", "--role", "dec-self"), "it needs --role cross"),
        (("--method", "gradient", "--head", "7"), "--head 7: this model has 2 heads; valid: 0..1"),
    ):
        result = CliRunner().invoke(cli, ["translate", run, "3 5", "--show-attention", *args])
        assert result.exit_code == 2, args
        assert [line for line in result.output.splitlines() if line.startswith("error: ")] == [
            "error: " + result.output.split("error: ", 1)[1].strip()
        ]
        assert message in result.output, result.output
        assert len(result.output.splitlines()) == 1, result.output  # no translation before it


def test_translate_export_records_a_chosen_role_in_colour(runs, tmp_path):
    out = tmp_path / "enc.svg"
    result = invoke(
        "translate",
        str(runs / "tr"),
        "3 5 7",
        "--show-attention",
        "--role",
        "enc-self",
        "--export",
        str(out),
    )
    assert result.exit_code == 0
    assert "encoder self-attention (source × source)" in result.output  # plain, piped
    svg = out.read_text()
    assert "<svg" in svg and "encoder" in svg and "\x1b" not in result.output


def test_compare_refuses_another_task_in_one_line(runs, tmp_path):
    from conftest import TINY_OVERRIDES

    sets = [arg for item in TINY_OVERRIDES for arg in ("--set", item)]
    trained = invoke(
        "train", "--out", str(tmp_path), "--run-name", "cp", "--quiet", *sets,
        "--set", "data.task=copy",
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    result = CliRunner().invoke(cli, ["compare", str(runs / "rnn"), str(tmp_path / "cp"), "3 5"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: cannot compare") and "different tasks" in lines[0]
    assert "reverse" in lines[0] and "copy" in lines[0]


def test_compare_piped_prints_both_maps_as_numbers_and_names_the_search(runs):
    result = invoke("compare", str(runs / "tr"), str(runs / "rnn"), "--index", "0")
    assert result.exit_code == 0, result.output
    report = json.loads(
        invoke("compare", str(runs / "tr"), str(runs / "rnn"), "--index", "0", "--json").output
    )
    lines = result.output.splitlines()
    assert lines[0] == f"search: {report['search']} (both runs)"
    for key in ("a", "b"):
        side = report[key]
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key.upper()}: "))
        assert lines[at - 1] == ""  # the A and B headers are separated
        assert lines[at + 1].split() == report["source"]
        for row, values, line in zip(side["rows"], side["map"], lines[at + 2 :], strict=False):
            label, *cells = line.split()
            assert label == row
            # the JSON's weights are rounded to 4 digits, so a printed x.5 may round either way
            assert len(cells) == len(values)
            assert all(abs(int(c) - 100 * v) <= 0.51 for c, v in zip(cells, values, strict=True))


def test_compare_significance_json_scores_each_run_as_eval_does(runs):
    result = invoke("compare", str(runs / "rnn"), str(runs / "tr"), "--significance", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    scores = {
        name: json.loads(invoke("eval", str(runs / name), "--split", "test", "--json").output)
        for name in ("rnn", "tr")
    }
    assert report["n"] == scores["rnn"]["n"] and set(report["methods"]) == {
        "paired_bootstrap", "paired_randomization", "paired_exact_match"
    }  # fmt: skip
    seen = set()
    for test in report["tests"]:
        assert 0.0 < test["p_value"] <= 1.0 and test["method"]
        metric = test["metric"]
        seen.add((metric, test["test"]))
        assert test["a"] == pytest.approx(scores["rnn"][metric], abs=1e-9)
        assert test["b"] == pytest.approx(scores["tr"][metric], abs=1e-9)
    assert {m for m, _ in seen} == {"bleu", "chrf", "exact_match"} and len(seen) == 5


def test_eval_alignment_accuracy_by_layer_scores_the_same_sentences(tmp_path):
    """More dev sentences than the attention statistics' 32: the last layer of
    alignment_accuracy_by_layer is alignment_accuracy itself (same rule, same sentences)."""
    from conftest import TINY_OVERRIDES

    items = (*TINY_OVERRIDES, *TRANSFORMER, "data.dev_size=48")
    sets = [arg for item in items for arg in ("--set", item)]
    trained = invoke("train", "--out", str(tmp_path), "--run-name", "t", "--quiet", *sets)
    assert trained.exit_code == 0, trained.output
    report = json.loads(invoke("eval", str(tmp_path / "t"), "--json").output)
    assert report["n"] > 32
    by_layer = report["alignment_accuracy_by_layer"]
    assert len(by_layer) == 2
    assert by_layer[-1] == pytest.approx(report["alignment_accuracy"], abs=1e-12)


def _plain_map(lines: list[str], at: int) -> list[list[str]]:
    """The rows of a plain map whose title is ``lines[at]`` (source line, then one per row)."""
    rows = []
    for line in lines[at + 2 :]:
        if not line.strip() or not line.split()[-1].lstrip("-").isdigit():
            break
        rows.append(line.split())
    return rows


def test_compare_names_the_last_layer_it_shows_and_matches_translate_there(runs):
    """Issue 30 item 7: compare, translate and Inspect show the last layer and say so."""
    run = str(runs / "tr")  # dec_layers = 2: the last layer is 1 of 2
    report = json.loads(invoke("compare", run, run, "3 5 7", "--json").output)
    assert report["a"]["layer"] == 1 and report["a"]["where"] == "layer 1/2, head average"
    lines = invoke("compare", run, run, "3 5 7").output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("A: "))
    assert lines[at].endswith("(raw, layer 1/2, head average)")
    assert any(line.startswith("A − B (layer 1/2, head average)") for line in lines)
    shown = _plain_map(lines, at)
    for layer, same in ((1, True), (0, False)):
        out = invoke(
            "translate", run, "3 5 7", "--show-attention", "--beam", "1", "--layer", str(layer)
        ).output.splitlines()
        title = next(i for i, line in enumerate(out) if f"layer {layer}/2" in line)
        theirs = _plain_map(out, title)
        assert [row[0] for row in theirs] == [row[0] for row in shown]
        # compare's weights are rounded to 4 digits before × 100, so a cell may differ by 1
        close = all(
            abs(int(x) - int(y)) <= 1
            for a, b in zip(theirs, shown, strict=True)
            for x, y in zip(a[1:], b[1:], strict=True)
        )
        assert close is same


def test_eval_table_names_the_layer_of_its_alignment_accuracy(runs):
    out = invoke("eval", str(runs / "tr"), "--max-sentences", "4").output
    assert "alignment_accuracy (last layer, head average)" in out


def test_translate_from_an_endless_line_on_stdin_is_one_error_line(runs):
    """``translate RUN < /dev/zero`` once grew to 11 GB: stdin lines have the corpus limit."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [sys.executable, "-m", "attnlab", "translate", str(runs / "rnn")],
            stdin=zero,
            capture_output=True,
            timeout=120,
            env=env,
        )
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == [
        "error: standard input: line 1 is longer than 1,048,576 bytes (the most one sentence "
        "may be)"
    ]


def test_translate_streams_stdin_chunk_by_chunk_before_it_closes_and_keeps_the_order(runs):
    """#43 item 4: stdin was collected whole before any decoding, so an endless stream of
    short lines grew without bound and printed nothing. Fed through a pipe that stays open,
    the first chunk's translations must arrive; then every line's, in order, equal to the
    same line translated alone (TEXT)."""
    import os
    import select
    import subprocess
    import sys

    from attnlab.cli.common import STDIN_CHUNK

    distinct = ["5 9 2 7", "3 4 8 6", "2 2 5 1", "9 8 7 6"]
    alone = {line: invoke("translate", str(runs / "rnn"), line).output.strip() for line in distinct}
    lines = [distinct[i % 4] for i in range(STDIN_CHUNK + 40)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab", "translate", str(runs / "rnn")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        proc.stdin.write("".join(f"{line}\n" for line in lines).encode())
        proc.stdin.flush()  # ... and the pipe stays open: a collect-all reader waits forever
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "no translation before standard input closed"
        first = proc.stdout.readline().decode().strip()
        assert first == alone[lines[0]]
        # The rest through the same buffered reader: communicate() reads the raw pipe and
        # would lose the lines readline() has already buffered.
        proc.stdin.close()  # the last, short chunk
        out = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = [first, *out.decode().strip().splitlines()]
    assert proc.returncode == 0, err.decode()
    assert got == [alone[line] for line in lines]


def test_stdin_chunks_are_bounded_and_number_lines_across_chunks(monkeypatch):
    import io

    from attnlab.cli.common import line_chunks
    from attnlab.data.corpus import MAX_LINE_BYTES
    from attnlab.errors import AttnlabError

    data = b"a b\n" * 600 + b"x" * (MAX_LINE_BYTES + 5) + b"\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    chunks = line_chunks((), size=256)
    assert [len(next(chunks)) for _ in range(3)] == [256, 256, 88]  # the 88 before it too
    with pytest.raises(AttnlabError, match="line 601 is longer than 1,048,576 bytes"):
        next(chunks)
    assert list(line_chunks(("one", "two"), size=1)) == [["one", "two"]]  # TEXT: one chunk


def test_translate_reads_ordinary_stdin_lines(runs):
    result = CliRunner().invoke(cli, ["translate", str(runs / "rnn")], input="5 9 2 7\n3 4\n")
    assert result.exit_code == 0 and len(result.output.strip().splitlines()) >= 2
