"""The values of a TOML table's arrays as written in the file (``3e-4``, not
``0.00030000000000000003``): study cells and tuning candidates are named by them.

tomllib keeps no source text, so this reads the ``[TABLE]`` section's ``KEY = [ ... ]`` lines
itself. Each item found is checked against tomllib's own value; anything it cannot match
(an inline table, a dotted key) gives no entry, and the caller names it by its value.
"""

from __future__ import annotations

import re
from typing import Any

import tomllib

_HEADER = re.compile(r"^\s*\[\s*([^\]\[]+?)\s*\]\s*(#.*)?$")


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside a string stays)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\" and quote == '"':
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _split_items(body: str) -> list[str] | None:
    """Top-level comma-separated items of an array body; None for nested arrays/tables."""
    items, current, quote = [], "", ""
    for ch in body:
        if quote:
            current += ch
            if ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "[]{}":
            return None
        elif ch == ",":
            items.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        items.append(current.strip())
    return items


def _key(text: str) -> str | None:
    text = text.strip()
    try:
        parsed = tomllib.loads(f"{text} = 0")
    except tomllib.TOMLDecodeError:
        return None
    if len(parsed) != 1:
        return None
    ((key, value),) = parsed.items()
    return key if value == 0 else None  # a dotted bare key nests: not ours


def array_literals(text: str, table: str, parsed: dict[str, Any]) -> dict[str, list[str]]:
    """``{key: [item text, ...]}`` for the arrays of ``[table]`` whose every item, read by
    tomllib, equals ``parsed[key]``'s (strings give their value, without quotes)."""
    lines = [_strip_comment(line) for line in text.splitlines()]
    out: dict[str, list[str]] = {}
    inside = False
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _HEADER.match(line)
        if header:
            inside = header.group(1).strip() == table
            i += 1
            continue
        if inside and "=" in line:
            key_text, rest = line.split("=", 1)
            body = rest.strip()
            while body.startswith("[") and body.count("[") > body.count("]") and i + 1 < len(lines):
                i += 1
                body += " " + lines[i].strip()
            key = _key(key_text)
            if key is not None and body.startswith("[") and body.endswith("]"):
                items = _split_items(body[1:-1])
                if items is not None and _same(items, parsed.get(key)):
                    # A string by its value (no quotes), a number as written.
                    out[key] = [
                        v if isinstance(v, str) else item
                        for item, v in zip(items, parsed[key], strict=True)
                    ]
        i += 1
    return out


def _same(items: list[str], values: Any) -> bool:
    if not isinstance(values, list) or len(items) != len(values):
        return False
    try:
        read = [tomllib.loads(f"x = {item}")["x"] for item in items]
    except tomllib.TOMLDecodeError:
        return False
    return all(type(a) is type(b) and a == b for a, b in zip(read, values, strict=True))
