"""The toy-task registry alone: name -> generator(DataConfig) -> Splits.

Task modules (attnlab.data.toy, or a plug-in) import this and register; nothing here imports
them back. ``attnlab.data.tasks`` is the public face that also loads the built-in tasks.
"""

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
