"""The engine never imports textual or click (only attnlab/tui and attnlab/cli/ may).

The engine is every module of the package, found by walking it (a new module is covered with
no edit here), except the front ends: attnlab.tui, attnlab.cli and attnlab.__main__ (which
runs the CLI).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import attnlab

FRONT_ENDS = (
    "attnlab.tui",
    "attnlab.cli",
    "attnlab.__main__",
)


def engine_modules() -> list[str]:
    names = [info.name for info in pkgutil.walk_packages(attnlab.__path__, "attnlab.")]
    return sorted(n for n in names if not any(n == f or n.startswith(f + ".") for f in FRONT_ENDS))


def test_the_walk_finds_the_engine_and_leaves_out_the_front_ends():
    found = engine_modules()
    # A few modules from each floor, to show the walk reaches nested packages.
    for name in (
        "attnlab.config",
        "attnlab.nn.attention.base",
        "attnlab.decode.mbr",
        "attnlab.train.trainer",
        "attnlab.data.corpus",
        "attnlab.runs",
        # main's explicit list (feat-inspect): interpret, exports, diverging maps
        "attnlab.interpret.rollout",
        "attnlab.interpret.attribution",
        "attnlab.interpret.heads",
        "attnlab.interpret.alignment",
        "attnlab.interpret.gold",
        "attnlab.interpret.compare",
        "attnlab.interpret.entropy",
        "attnlab.interpret.average",
        "attnlab.interpret.reports",
        "attnlab.viz.export",
        "attnlab.tensorboard_export",
        "attnlab.exporters.ctranslate2",
        "attnlab.viz.diverging",
        "attnlab.train.events",
        # the CLI's orchestration, moved into the engine (issue 28)
        "attnlab.train.session",
        "attnlab.train.signals",
        "attnlab.interpret.maps",
    ):
        assert name in found
    assert not [n for n in found if n.startswith(("attnlab.tui", "attnlab.cli"))]


def test_engine_imports_neither_textual_nor_click():
    code = (
        "import importlib, sys\n"
        f"for name in {engine_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'click'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "", f"engine imported: {result.stdout.strip()}"


def test_listing_runs_does_not_import_torch():
    # The lab lists runs at start-up; torch is only imported when a model is needed.
    code = "import sys, attnlab.runs, attnlab.train.events; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_lab_and_the_cli_start_without_torch():
    # Parsing and validation sit above the registries (attnlab.experiment imports torch):
    # the front ends import it where they use it, so start-up stays fast.
    code = "import sys, attnlab.cli, attnlab.tui.app; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "False"
