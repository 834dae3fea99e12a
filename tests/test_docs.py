"""The docs that are generated stay current, and the docs stay free of machine paths."""

from __future__ import annotations

import re
from pathlib import Path

from attnlab.nn.attention.catalog import README, VARIANTS_DOC, readme_list, variants_markdown

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_docs_variants_page_is_generated_from_the_current_registry():
    assert VARIANTS_DOC.read_text(encoding="utf-8") == variants_markdown(), (
        "docs/variants.md is stale: run python -m attnlab.nn.attention.catalog --write"
    )


def test_readme_variant_list_is_generated_from_the_current_registry():
    assert readme_list() in README.read_text(encoding="utf-8"), (
        "README's variant list is stale: run python -m attnlab.nn.attention.catalog --write"
    )


def test_every_builtin_variant_has_a_section_in_the_variants_page():
    from attnlab.nn.attention.catalog import builtin_specs

    page = variants_markdown()
    for spec in builtin_specs():
        assert f"## `{spec.name}`" in page and spec.formula.replace("|", "\\|") in page


def test_the_readme_stays_short_and_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)(?:#[\w-]*)?\)", text):
        assert (ROOT / target).is_file(), target


def test_no_machine_paths_in_the_docs():
    pattern = re.compile(r"(/work/|/root/|/home/\w+|/Users/\w+|C:\\\\Users)")
    for path in DOCS:
        found = pattern.findall(path.read_text(encoding="utf-8"))
        assert not found, f"{path.name}: {found}"
