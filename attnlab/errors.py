"""The one exception type meant for users.

Raised anywhere in the engine for a user's mistake (bad preset, unknown variant, missing
file). The CLI and the TUI catch it once and show ``str(err)`` as a single line; any other
exception is a programming error and stays loud.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AttnlabError(Exception):
    """A user-facing error: its message is one line that says what is wrong and what is valid."""


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def unknown_choice(what: str, value: str, choices: Iterable[str]) -> AttnlabError:
    """Build the standard error for a value outside a closed set of choices."""
    options = sorted(choices)
    return AttnlabError(
        f'unknown {what} "{value}"{did_you_mean(value, options)}; valid: {", ".join(options)}'
    )
