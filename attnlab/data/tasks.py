"""Toy task registry: name -> generator(DataConfig) -> Splits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnlab.config import DataConfig
from attnlab.data.example import Splits
from attnlab.registry import Registry


@dataclass(frozen=True)
class TaskSpec:
    description: str  # one line for menus
    has_alignment: bool  # exposes gold alignments (alignment accuracy)
    example: str = ""  # e.g. "5 9 2 7 -> 7 2 9 5"


TASKS: Registry[Callable[[DataConfig], Splits]] = Registry("task")

# Importing registers the built-in toy tasks.
from attnlab.data import toy  # noqa: E402,F401
