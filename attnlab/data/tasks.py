"""Toy task registry with the built-in tasks loaded: name -> generator(DataConfig) -> Splits.

The registry itself is attnlab.data.task_registry (which imports no task); importing this
module also imports attnlab.data.toy, whose decorators register the built-in tasks.
"""

from __future__ import annotations

from attnlab.data import listops, lm, synthetic, toy  # noqa: F401  (register the built-in tasks)
from attnlab.data.task_registry import TASKS, TaskSpec, task_metrics

__all__ = ["TASKS", "TaskSpec", "task_metrics"]
