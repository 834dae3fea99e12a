"""``attnlab variants``, ``decoders`` and ``presets``: what the registries and presets offer."""

from __future__ import annotations

import click

from attnlab.cli.common import rich_console


@click.command()
def variants() -> None:
    """Every registered attention variant: roles, formula and hyper-parameters."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.nn.attention import ATTENTION

    table = Table(title="attention variants")
    for column in ("name", "roles", "formula", "hyper-parameters"):
        table.add_column(column, overflow="fold")
    for entry in ATTENTION.entries():
        spec = entry.meta
        hparams = ", ".join(
            f"{h.name}={h.default}"
            + (
                f" [{'' if h.low is None else f'{h.low:g}'}"
                f"..{'' if h.high is None else f'{h.high:g}'}]"
                if h.low is not None or h.high is not None
                else ""
            )
            for h in spec.hparams
        )
        # Text, not markup: formulas such as "tanh(W_a [s_t; h_j])" contain brackets.
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    entry.name,
                    ", ".join(sorted(spec.roles)),
                    spec.formula,
                    hparams or "–",
                )
            )
        )
    rich_console().print(table)


@click.command()
def decoders() -> None:
    """Every registered decoding strategy: what it does and the decode.* keys it reads."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.decode.search import DECODERS
    from attnlab.decode.strategy import COMMON_PARAMS

    shared = ", ".join(p.key for p in COMMON_PARAMS)
    table = Table(
        title="decoders (--decoder NAME or decode.decoder)",
        caption=f"all also read decode.{{{shared}}}",
    )
    for column in ("name", "description", "returns", "decode.* keys"):
        table.add_column(column, overflow="fold")
    for entry in DECODERS.entries():
        spec = entry.meta
        returns = ("n-best" if spec.nbest else "1-best") + (", attention" if spec.attention else "")
        keys = ", ".join(p.describe() for p in spec.params)
        cells = (entry.name, spec.description, returns, keys or "–")
        table.add_row(*(Text(cell) for cell in cells))
    rich_console().print(table)


@click.command()
def presets() -> None:
    """Every preset with its one-line description."""
    from rich.table import Table
    from rich.text import Text

    from attnlab.config import PRESETS_DIR, load_toml, preset_names

    table = Table(title=f"presets ({PRESETS_DIR})")
    table.add_column("name", style="bold")
    table.add_column("description")
    for name in preset_names():
        raw = load_toml(PRESETS_DIR / f"{name}.toml")
        table.add_row(Text(name), Text(str(raw.get("description", ""))))
    rich_console().print(table)


COMMANDS = (variants, decoders, presets)
