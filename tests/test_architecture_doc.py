"""docs/architecture.md's layer diagram is the import contract in pyproject.toml, layer by layer."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
LAYER_LINE = re.compile(r"^(attnlab\.\w+(?: \| attnlab\.\w+)*)(?:\s{2,}.*)?$")


def contract_layers() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    layers = contract["layers"]
    return [{f"attnlab.{name.strip()}" for name in layer.split("|")} for layer in layers]


def diagram_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for line in block.strip().splitlines():
        match = LAYER_LINE.match(line.strip())
        assert match, f"not a layer line in docs/architecture.md: {line!r}"
        layers.append({name.strip() for name in match.group(1).split("|")})
    return layers


def test_the_diagram_lists_the_contracts_layers_in_order():
    assert diagram_layers() == contract_layers()


def test_a_line_that_is_not_a_layer_is_not_read_as_one():
    assert LAYER_LINE.match("attnlab.nn | attnlab.data     models | tasks")
    assert not LAYER_LINE.match("models and tasks")
