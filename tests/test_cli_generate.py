"""``attnlab generate`` through click's CliRunner: on a tiny character LM trained here, the
continuation is what the engine's ``generate`` gives, greedy is deterministic and a seed fixes
the text, stdin lines are continued one by one, the causal map is lower-triangular;
refusals are one line with exit code 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from attnlab.cli import cli


def invoke(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


def test_the_continuation_is_the_engines_and_a_seed_fixes_it(lm_run):
    from attnlab.decode.generate import Sampling, generate
    from attnlab.runs import load_checkpoint

    flags = ["--max-new", "30", "--temperature", "0.8", "--top-k", "5", "--seed", "3"]
    first = invoke("generate", str(lm_run), "the k", *flags)
    assert first.exit_code == 0, first.output
    assert invoke("generate", str(lm_run), "the k", *flags).output == first.output
    loaded = load_checkpoint(lm_run)
    vocab = loaded.dataset.src_vocab
    prompt = vocab.encode(loaded.dataset.tokenize_source("the k"))
    sampling = Sampling(temperature=0.8, top_k=5, seed=3)
    new = generate(loaded.model, [prompt], 30, sampling, context=12)[0].tolist()
    expected = loaded.dataset.detokenize_target(vocab.decode(prompt + new))
    assert first.output == expected + "\n"
    other = invoke("generate", str(lm_run), "the k", *flags[:-1], "4")
    assert other.output != first.output


def test_stdin_lines_are_continued_one_by_one(lm_run):
    greedy = ["--max-new", "6", "--temperature", "0"]
    result = invoke("generate", str(lm_run), *greedy, input="my\n\ngood\n")
    assert result.exit_code == 0, result.output
    alone = [invoke("generate", str(lm_run), p, *greedy).output for p in ("my", "", "good")]
    assert result.output == "".join(alone)
    # an empty prompt starts from a newline, as nanoGPT's sample.py
    assert alone[1].startswith("\n") and len(alone[1]) == 1 + 6 + 1


def test_show_attention_prints_a_lower_triangular_map(lm_run):
    result = invoke("generate", str(lm_run), "the", "--max-new", "4", "--show-attention")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("self-attention, layer 0" in line for line in lines)
    start = next(i for i, line in enumerate(lines) if "self-attention" in line) + 2
    rows = [line.split()[1:] for line in lines[start : start + 7]]  # "the" + 4 new tokens
    for i, row in enumerate(rows[:7]):
        weights = [int(w) for w in row]
        assert all(w == 0 for w in weights[i + 1 :]), (i, row)  # nothing after the query
        assert abs(sum(weights) - 100) <= len(weights)  # a row sums to ~100 (rounded cells)


def test_an_unknown_character_is_one_line(lm_run):
    result = invoke("generate", str(lm_run), "the Qé")
    assert result.exit_code == 2
    (line,) = error_lines(result.output)
    assert "'Q', 'é'" in line and "never saw" in line


def test_checkpoint_last_and_a_missing_one(lm_run, tmp_path):
    assert invoke("generate", str(lm_run), "my", "--checkpoint", "last").exit_code == 0
    run = tmp_path / "copy"
    (run / "checkpoints").mkdir(parents=True)
    result = invoke("generate", str(run), "my", "--checkpoint", "last")
    assert result.exit_code == 2
    assert error_lines(result.output) == [
        f"error: {run}: no last checkpoint (valid: --checkpoint best or last)"
    ]


def test_help():
    result = invoke("generate", "--help")
    assert result.exit_code == 0 and "Usage: attnlab generate" in result.output


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--temperature", "-0.5"], "temperature -0.5: valid: 0 to 100"),
        (["--top-k", "-1"], "top-k -1: valid"),
        (["--top-p", "1.5"], "top-p 1.5: valid"),
        (["--max-new", "0"], "max-new 0: valid"),
        (["--seed", "-3"], "seed -3: valid"),
        (["--checkpoint", "lats"], '"lats" is not one of best, last'),
    ],
)
def test_bad_values_are_one_line(tmp_path, flags, words):
    result = invoke("generate", str(tmp_path / "no-run"), "ROMEO:", *flags)
    assert result.exit_code == 2
    assert len(error_lines(result.output)) == 1 and words in result.output
    assert "Traceback" not in result.output


def test_a_sequence_to_sequence_run_is_referred_to_translate(tmp_path, tiny_sets):
    trained = invoke("train", "--out", str(tmp_path), "--run-name", "s2s", "--quiet", *tiny_sets)
    assert trained.exit_code == 0, trained.output
    result = invoke("generate", str(tmp_path / "s2s"), "5 9 2")
    assert result.exit_code == 2
    (line,) = error_lines(result.output)
    assert "not a language model" in line and "attnlab translate" in line
