"""Moved: the event log lives beside the run-directory code, in attnlab.events.

This name stays importable and *is* that module (same object), so ``from
attnlab.train.events import X`` and monkeypatching either name keep working.
"""

from __future__ import annotations

import sys

import attnlab.events as _events

sys.modules[__name__] = _events
