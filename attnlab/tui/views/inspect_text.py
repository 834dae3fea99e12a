"""Inspect's text: the header's source → translation fitted to a width, and the lines the
diagnostics panel shows for each kind of map."""

from __future__ import annotations

from attnlab.attention_map import (
    NORM_SIGNED,
    NORM_SPARSE,
    NORM_SUB_STOCHASTIC,
    UNATTENDED_LABEL,
    axes_text,
)
from attnlab.tui.diagnostics import Diagnostics, entropy_note

KIND_LABELS = {
    "cross": "cross",
    "enc_self": "encoder self",
    "dec_self": "decoder self",
    "rollout": "rollout",
    "relevancy": "relevancy (∇)",
    "gradient": "gradient × attn",
    "norm": "‖α f(v)‖",
}
METHOD_CYCLE = ("cross", "rollout", "relevancy", "gradient", "norm")  # the "m" key
# (rows × columns) of each kind of map: self-attention relates a sequence to itself; every
# interpretation method explains target tokens by source tokens
KIND_AXES = {
    **{role: axes_text(role) for role in ("cross", "enc_self", "dec_self")},
    **{kind: axes_text("cross") for kind in METHOD_CYCLE[1:]},
}
HEAD_AVERAGE = -1


def fit_pair(src: str, hyp: str, width: int, arrow: str = " → ") -> tuple[str, str]:
    """Source and translation cut (with "…") so that ``src → hyp`` fits ``width``: a long
    source no longer pushes the arrow and the translation off the line. Each side gets at
    least half the room, and a short side leaves the rest to the other."""
    room = max(width - len(arrow), 8)
    if len(src) + len(hyp) <= room:
        return src, hyp
    half = room // 2
    src_room = room - min(len(hyp), room - half) if len(src) > half else len(src)
    hyp_room = room - min(len(src), src_room)
    return _cut(src, src_room), _cut(hyp, hyp_room)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def normalisation_lines(d: Diagnostics) -> list[str]:
    """The entropy line (read by the map's kind) and what the kind adds: the unattended mass
    of sub-stochastic rows, the exact zeros of sparse ones, the negative weights of signed."""
    note = entropy_note(d.normalisation)
    if d.mean_entropy is None:  # signed: no distribution, no entropy
        lines = [f"row entropy — ({note})"]
    else:
        lines = [
            f"row entropy {d.mean_entropy:.2f} / uniform {d.uniform_entropy:.2f} nats "
            f"({d.entropy_ratio:.0%})" + (f" · {note}" if note else "")
        ]
    if d.normalisation == NORM_SUB_STOCHASTIC and d.unattended is not None:
        lines.append(f"unattended mass ({UNATTENDED_LABEL}) {d.unattended:.0%} per row on average")
    elif d.normalisation == NORM_SPARSE:
        lines.append(f"exact zeros {d.zeros} of {d.size} weights ({d.zeros / max(d.size, 1):.0%})")
    elif d.normalisation == NORM_SIGNED:
        lines.append(f"signed weights: {d.negatives} of {d.size} negative")
    return lines


def escape_markup(text: str) -> str:
    return text.replace("[", r"\[")
