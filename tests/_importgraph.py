"""The package's import graph, read from source (no imports run), and its cycles.

Every ``import`` / ``from ... import`` counts, wherever it sits: at module level, inside a
function, under ``if TYPE_CHECKING``. A function-level import still closes a circle (the
modules cannot be understood or moved apart), so the layering check treats it like any other.

Run ``python tests/_importgraph.py`` to print the cycles (strongly connected components).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "attnlab"


def module_files(root: Path | None = None) -> dict[str, Path]:
    """Map each module name in the package to its file."""
    root = root or Path(__file__).resolve().parent.parent / PACKAGE
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # A package's relative import starts from the package itself, a module's from its parent.
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports, anywhere in its source."""
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            # ``from pkg import sub`` imports the submodule when there is one.
            names = [f"{source}.{alias.name}" for alias in node.names] or [source]
        else:
            continue
        for name in names:
            target = _known(name, modules)
            if target and target != module and target.split(".")[0] == PACKAGE:
                out.add(target)
    return out


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    modules = module_files(root)
    return {name: imports_of(name, modules) for name in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def main() -> int:
    graph = import_graph()
    found = cycles(graph)
    for component in found:
        members = set(component)
        print(f"cycle of {len(component)}:")
        for name in component:
            print(f"  {name} -> {', '.join(sorted(graph[name] & members))}")
    if not found:
        print(f"no import cycles among {len(graph)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
