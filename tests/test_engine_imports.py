"""The engine never imports textual or click (only attnlab/tui and attnlab/cli*.py may)."""

from __future__ import annotations

import subprocess
import sys

ENGINE_MODULES = [
    "attnlab.config",
    "attnlab.registry",
    "attnlab.nn.model",
    "attnlab.nn.attention",
    "attnlab.data.dataset",
    "attnlab.data.batching",
    "attnlab.decode",
    "attnlab.decode.search",
    "attnlab.evaluate",
    "attnlab.runs",
    "attnlab.device",
    "attnlab.train.trainer",
    "attnlab.train.schedules",
    "attnlab.train.events",
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
    "attnlab.viz.diverging",
]


def test_engine_imports_neither_textual_nor_click():
    code = (
        "import importlib, sys\n"
        f"for name in {ENGINE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'click'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "", f"engine imported: {result.stdout.strip()}"


def test_listing_runs_does_not_import_torch():
    # The lab lists runs at start-up; torch is only imported when a model is needed.
    code = "import sys, attnlab.runs, attnlab.train.events; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False"
