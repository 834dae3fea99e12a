"""The length cap on source sentences given to ``translate`` (``data.eval_max_tokens``).

Decoding cost grows with the source length (attention over every source token, each
step; the output may be ``max_len_ratio`` times as long), so one 50,000-token line stalled
``translate`` for minutes. Longer inputs are cut to the cap, and the caller warns with the
count of lines cut.
"""

from __future__ import annotations

from collections.abc import Sequence


def cap_sources(sources: Sequence[list[str]], cap: int) -> tuple[list[list[str]], int]:
    """Each token list cut to ``cap`` tokens (0 = no cap), and how many were cut."""
    if cap <= 0:
        return [list(tokens) for tokens in sources], 0
    cut = sum(len(tokens) > cap for tokens in sources)
    return [list(tokens[:cap]) for tokens in sources], cut


def cut_warning(cut: int, total: int, cap: int) -> str | None:
    """The one warning line for ``cut`` of ``total`` input lines, or None when none was."""
    if not cut:
        return None
    return (
        f"warning: {cut} of {total} input lines cut to their first {cap} tokens "
        "(data.eval_max_tokens of the run)"
    )
