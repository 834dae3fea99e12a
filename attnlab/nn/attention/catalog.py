"""The attention registry as Markdown: ``docs/variants.md`` and the README's variant list.

Both are generated (``python -m attnlab.nn.attention.catalog --write``) and a test checks that
the committed files are current, so the docs cannot drift from the registry.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from attnlab.nn.attention.base import ATTENTION, AttentionSpec, HParam

NORMALISATION_TEXT = {  # what each kind promises of a row (AttentionSpec.normalisation)
    "softmax": "rows >= 0, summing to 1",
    "sparse": "rows >= 0, summing to 1, with exact zeros",
    "sub-stochastic": "rows >= 0, summing to at most 1; the rest is unattended",
    "signed": "rows may be negative",
    "unnormalised": "rows >= 0 with no bound on their sum",
}

ROOT = Path(__file__).resolve().parents[3]
VARIANTS_DOC = ROOT / "docs" / "variants.md"
README = ROOT / "README.md"
README_BEGIN = "<!-- variants:begin (generated from the registry; do not edit by hand) -->"
README_END = "<!-- variants:end -->"


def builtin_specs() -> list[AttentionSpec]:
    """The variants attnlab ships (plugins and test doubles left out), in menu order."""
    import attnlab.nn.attention  # noqa: F401  registers the built-ins

    return [e.meta for e in ATTENTION.entries() if e.factory.__module__.startswith("attnlab.")]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _hparam(h: HParam) -> str:
    bounds = ""
    if h.choices:
        bounds = f" ({' / '.join(h.choices)})"
    elif h.low is not None or h.high is not None:
        low = "" if h.low is None else f"{h.low:g}"
        high = "" if h.high is None else f"{h.high:g}"
        bounds = f" [{low}..{high}]"
    return f"`{h.name}`={h.default}{bounds}: {h.help}"


def variants_markdown() -> str:
    """docs/variants.md: one section per variant with its formula, roles, settings and paper."""
    specs = builtin_specs()
    out = [
        "# Attention variants",
        "",
        "Generated from the registry by `python -m attnlab.nn.attention.catalog --write`",
        "(`attnlab variants` prints the same in the terminal). Each variant owns its",
        "hyper-parameters: `model.<variant>.<name>` (a `[model.<variant>]` table in a preset),",
        "checked against its range; the flat `model.<name>` still works where unambiguous.",
        "How each kind of weights is drawn in the lab: [inspection.md](inspection.md).",
        "",
        "| variant | roles | formula | complexity |",
        "|---|---|---|---|",
    ]
    for s in specs:
        roles = ", ".join(sorted(s.roles))
        out.append(f"| `{s.name}` | {roles} | {_cell(s.formula)} | {_cell(s.complexity)} |")
    for s in specs:
        out += ["", f"## `{s.name}`", "", _cell(s.known_for), ""]
        out.append(f"- formula: {_cell(s.formula)}")
        out.append(f"- roles: {', '.join(sorted(s.roles))}")
        out.append(f"- cost: {_cell(s.complexity)}")
        out.append(f"- weights: {s.normalisation} ({NORMALISATION_TEXT[s.normalisation]})")
        if s.paper:
            out.append(f"- paper: {_cell(s.paper)}")
        for h in s.hparams:
            out.append(f"- {_cell(_hparam(h))}")
        if s.max_length_param:
            out.append(
                f"- length limit: sources longer than `{s.max_length_param}` "
                "are refused at config time (toy tasks)"
            )
    return "\n".join(out) + "\n"


def readme_list() -> str:
    """The README's short list: one line per variant, linking to docs/variants.md."""
    lines = [README_BEGIN]
    for s in builtin_specs():
        anchor = re.sub(r"[^a-z0-9-]", "", s.name.lower())
        lines.append(f"- [`{s.name}`](docs/variants.md#{anchor}): {_cell(s.known_for)}")
    lines.append(README_END)
    return "\n".join(lines)


def readme_with_list(text: str) -> str:
    """``text`` (the README) with its generated block replaced by the current list."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < 0:
        raise ValueError("README.md has no variants block")
    return text[:start] + readme_list() + text[end + len(README_END) :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--write", action="store_true", help="rewrite docs/variants.md and the README list"
    )
    args = parser.parse_args()
    if not args.write:
        print(variants_markdown())
        return
    VARIANTS_DOC.write_text(variants_markdown(), encoding="utf-8")
    README.write_text(readme_with_list(README.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
