"""Inputs without bound are bounded: translate input is cut to data.eval_max_tokens with a
counted warning, and what a run directory holds (special files, sparse giants, crafted
JSON) is refused or read in bounded pieces, each in one ``error:`` line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from attnlab.cli import cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny reverse run (toy symbols "0".."29" or so), trained through the CLI."""
    from conftest import TINY_OVERRIDES

    root = tmp_path_factory.mktemp("bounded")
    items = (*TINY_OVERRIDES, "train.max_steps=2", "train.eval_every=2", "data.eval_max_tokens=10")
    sets = [a for item in items for a in ("--set", item)]
    result = CliRunner().invoke(
        cli, ["train", "--out", str(root), "--run-name", "r", "--quiet", "--device", "cpu", *sets]
    )
    assert result.exit_code == 0, result.output
    return root / "r"


def test_translate_cuts_long_input_to_the_cap_with_one_warning(trained):
    from attnlab.runs import read_config

    vocab = read_config(trained).data.vocab_size
    long_line = " ".join(str(i % vocab) for i in range(5000))
    result = CliRunner().invoke(
        cli, ["translate", str(trained), "--device", "cpu", "1 2 3", long_line]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: 1 of 2 input lines cut to their first 10 tokens (data.eval_max_tokens of the run)"
    ]
