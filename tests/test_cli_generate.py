"""``attnlab generate`` through click's CliRunner: refusals are one line with exit code 2."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from attnlab.cli import cli


def invoke(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


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
