"""``attnlab data``: look at a toy task or a parallel corpus before training on it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import Choice
from attnlab.errors import AttnlabError, unknown_choice


def _user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Exit 2 with one line on a user mistake (the CLI's contract), no traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AttnlabError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)

    return wrapper


def _data_config(path: str | None, preset: str | None, overrides: tuple[str, ...]):
    """The experiment config for PATH: a toy task name, a corpus folder or a .tsv file."""
    from attnlab.config import ExperimentConfig
    from attnlab.data.tasks import TASKS
    from attnlab.experiment import apply_overrides, load_preset

    config = load_preset(preset) if preset else ExperimentConfig()
    extra: list[str] = []
    if path:
        if path in TASKS:
            extra.append(f"data.task={path}")
        elif "/" not in path and "." not in path and not Path(path).exists():
            raise unknown_choice("toy task (or corpus path)", path, TASKS.names())
        else:
            extra += ["data.task=corpus", f"data.path={path}"]
    return apply_overrides(config, [*extra, *overrides])


@click.group("data")
def data() -> None:
    """Inspect datasets: toy tasks and parallel corpora."""


@data.command("stats")
@click.argument("path", required=False)
@click.option("--preset", help="take data and batching settings from this preset (name or file)")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.KEY=VALUE",
    help="override a config key, e.g. data.tokenizer=bpe",
)
@click.option("--json", "as_json", is_flag=True, help="print the statistics as JSON")
@_user_errors
def stats_command(
    path: str | None, preset: str | None, overrides: tuple[str, ...], as_json: bool
) -> None:
    """Sizes, length histograms, vocabulary coverage and tokenisation of PATH.

    PATH is a toy task name (reverse, dates, ...), a corpus folder or a .tsv file; omit it to
    use --preset / --set. Corpus preparation (tokenizer training, tokenising) is cached, so
    the same settings load instantly next time and in training.
    """
    from attnlab.data.dataset import load_dataset
    from attnlab.data.stats import dataset_stats, render_stats

    config = _data_config(path, preset, overrides)
    dataset = load_dataset(config.data)
    stats = dataset_stats(
        dataset, config.train.batch_size, config.train.batch_tokens, config.train.seed
    )
    if as_json:
        click.echo(json.dumps(stats, indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    Console().print(render_stats(stats))


@data.command("show")
@click.argument("path", required=False)
@click.option("--preset", help="take data settings from this preset (name or file)")
@click.option(
    "--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help="override a config key"
)
@click.option("--split", type=Choice(["train", "dev", "test"]), default="train", show_default=True)
@click.option(
    "-n", "count", type=click.IntRange(1, 10000), default=5, show_default=True, help="pairs to show"
)
@_user_errors
def show_command(
    path: str | None, preset: str | None, overrides: tuple[str, ...], split: str, count: int
) -> None:
    """The first pairs of a split, raw and tokenised as the model will see them (piped: plain
    source<TAB>target lines, as written)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from attnlab.data.dataset import load_dataset

    config = _data_config(path, preset, overrides)
    dataset = load_dataset(config.data)
    if dataset.streams is not None:  # a language model: its first fixed windows of the split
        windows = Table(show_lines=True)
        windows.add_column("#", justify="right")
        windows.add_column("start", justify="right")
        windows.add_column(f"window ({dataset.streams.block_size} tokens; the target is it +1)")
        ids = dataset.streams.split(split)
        for i, start in enumerate(dataset.streams.eval_starts(split)[:count].tolist()):
            tokens = dataset.tgt_vocab.decode(ids[start : start + dataset.streams.block_size])
            text = dataset.tgt_tokenizer.decode(tokens)
            windows.add_row(str(i), f"{start:,}", Text(text))  # the text as written
        Console().print(windows)
        return
    pairs = dataset.splits.split(split)[:count]
    if not sys.stdout.isatty():  # piped: lines a script can read
        for e in pairs:
            click.echo(f"{_one_line(e.src_text)}\t{_one_line(e.tgt_text)}")
        return
    table = Table(show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("source")
    table.add_column("target")
    for i, e in enumerate(pairs):
        table.add_row(
            str(i),
            Text.assemble(e.src_text, "\n", (" ".join(e.src_tokens), "dim")),
            Text.assemble(e.tgt_text, "\n", (" ".join(e.tgt_tokens), "dim")),
        )
    Console().print(table)


def _one_line(text: str) -> str:
    """A TSV field: tabs and line breaks as spaces (they would split the pair)."""
    return " ".join(text.split())


@data.command("export")
@click.argument("path", required=False)
@click.option("--preset", help="take data settings from this preset (name or file)")
@click.option(
    "--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help="override a config key"
)
@click.option("--split", type=Choice(["train", "dev", "test"]), required=True)
@click.option("--out", "out", type=click.Path(path_type=Path), required=True, help="FILE.tsv")
@click.option("--force", is_flag=True, help="replace an existing file")
@_user_errors
def export_command(
    path: str | None,
    preset: str | None,
    overrides: tuple[str, ...],
    split: str,
    out: Path,
    force: bool,
) -> None:
    """Write a split as "source<TAB>target" lines (no header), the tokens space-separated,
    which the TSV corpus reader (data.task=corpus, data.path=FILE.tsv) reads back to
    the same pairs."""
    from attnlab.data.dataset import load_dataset
    from attnlab.runs import write_output_text

    if out.is_dir():
        raise AttnlabError(f"--out {out}: is a folder; give a file name such as {out}/train.tsv")
    if out.exists() and not force:
        raise AttnlabError(f"--out {out}: the file exists; add --force to replace it")
    if not out.parent.is_dir():
        raise AttnlabError(f"--out {out}: no such folder {out.parent}")
    config = _data_config(path, preset, overrides)
    examples = load_dataset(config.data).splits.split(split)
    lines = [f"{' '.join(e.src_tokens)}\t{' '.join(e.tgt_tokens)}\n" for e in examples]
    write_output_text(out, "".join(lines))
    click.echo(f"wrote {len(lines):,} {split} pairs to {out}", err=True)


COMMANDS = (data,)
