"""No import circles in the package: every import counts, module-level and function-level.

The graph is read from the source (tests/_importgraph.py), so a circle closed only inside a
function (``def validate(): from attnlab.nn import ...``) is found too.
"""

from __future__ import annotations

import textwrap

from _importgraph import cycles, import_graph


def test_the_package_has_no_import_cycles():
    graph = import_graph()
    assert "attnlab.config" in graph and "attnlab.nn.attention.base" in graph
    found = cycles(graph)
    shown = "; ".join(" <-> ".join(c) for c in found)
    assert found == [], f"import cycles: {shown}"


def test_config_is_the_ground_floor():
    # config imports nothing of the package but errors and regular_files (reading a preset
    # only from a regular file); the registries sit above it.
    assert import_graph()["attnlab.config"] == {"attnlab.errors", "attnlab.regular_files"}
    assert import_graph()["attnlab.regular_files"] == {"attnlab.errors"}


def _write(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_finder_sees_a_circle_closed_inside_a_function(tmp_path):
    # A hand-made package: a -> b at module level, b -> a only inside a function, c alone,
    # d -> e and e -> d through relative imports.
    _write(
        tmp_path / "attnlab",
        {
            "__init__.py": "",
            "a.py": "from attnlab import b\n",
            "b.py": "def f():\n    from attnlab.a import thing\n",
            "c.py": "import attnlab.a\n",
            "sub/__init__.py": "",
            "sub/d.py": "from . import e\n",
            "sub/e.py": "from .d import name\n",
        },
    )
    graph = import_graph(tmp_path / "attnlab")
    assert graph["attnlab.b"] == {"attnlab.a"}
    assert graph["attnlab.sub.e"] == {"attnlab.sub.d"}
    assert cycles(graph) == [["attnlab.a", "attnlab.b"], ["attnlab.sub.d", "attnlab.sub.e"]]


def test_the_finder_reports_nothing_for_a_one_way_chain(tmp_path):
    _write(
        tmp_path / "attnlab",
        {
            "__init__.py": "",
            "low.py": "X = 1\n",
            "mid.py": "from attnlab.low import X\n",
            "top.py": "def f():\n    from attnlab import mid, low\n",
        },
    )
    graph = import_graph(tmp_path / "attnlab")
    assert graph["attnlab.top"] == {"attnlab.mid", "attnlab.low"}
    assert cycles(graph) == []
