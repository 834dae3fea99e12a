"""What the command modules share: one-line errors, the decoding flags, consoles, number
formats and loading a run. No command lives here (see attnlab/cli/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from attnlab.errors import did_you_mean
from attnlab.train.signals import primary_process


class Choice(click.Choice):
    """click.Choice whose refusal is one line with a "did you mean" (``--device cdua``)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            valid = ", ".join(str(c) for c in self.choices)
            hint = did_you_mean(str(value), [str(c) for c in self.choices])
            self.fail(f'"{value}" is not one of {valid}{hint}', param, ctx)


def say(line: str) -> None:
    """A line on stderr; under torchrun only rank 0 speaks (the others say the same)."""
    if primary_process():
        click.echo(line, err=True)


def one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


# -- shared options ------------------------------------------------------------------------------

DECODE_FLAGS: list[tuple[str, str, Any, str]] = [
    # (flag, config key, type, help)
    ("--decoder", "decoder", str, "decoding strategy (attnlab decoders; default: from the flags)"),
    ("--beam", "beam", int, "beam size (1 = greedy)"),
    ("--alpha", "alpha", float, "length penalty exponent α (GNMT ((5+|Y|)/6)^α)"),
    ("--beta", "beta", float, "coverage penalty weight β"),
    ("--groups", "groups", int, "diverse beam search groups"),
    ("--diversity", "diversity", float, "Hamming diversity strength λ"),
    ("--temperature", "temperature", float, "sampling temperature"),
    ("--top-k", "top_k", int, "sample from the k most likely tokens (0 = off)"),
    ("--top-p", "top_p", float, "nucleus sampling mass (1 = off)"),
    ("--seed", "seed", int, "sampling seed: the same seed draws the same samples"),
    ("--nbest", "nbest", int, "hypotheses to print per sentence"),
    (
        "--max-len-ratio",
        "max_len_ratio",
        float,
        "maximum output length as a ratio of source length",
    ),
    ("--batch-size", "batch_size", int, "sentences per decoding batch (0 = fill --batch-rows)"),
    (
        "--batch-rows",
        "batch_rows",
        int,
        "decoder rows per step when --batch-size is 0 (sentences × beam)",
    ),
    ("--mbr-candidates", "mbr_candidates", int, "MBR: candidates per sentence"),
    ("--mbr-source", "mbr_source", str, "MBR: candidates from sample or beam"),
    ("--mbr-utility", "mbr_utility", str, "MBR: utility chrf or bleu"),
]


def decode_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The decoding flags (issue 4), each mapping onto a ``decode.*`` key."""
    func = click.option(
        "--sample", is_flag=True, default=False, help="sample instead of searching"
    )(func)
    for flag, _key, kind, help_text in reversed(DECODE_FLAGS):
        func = click.option(flag, type=kind, default=None, help=f"{help_text} (decode.*)")(func)
    return func


def decode_overrides(values: dict[str, Any]) -> list[str]:
    out = [
        f"decode.{key}={values[key]}"
        for _flag, key, _kind, _help in DECODE_FLAGS
        if values.get(key) is not None
    ]
    if values.get("sample"):
        out.append("decode.sample=true")
    if (values.get("sample") or values.get("decoder") == "sampling") and values.get("nbest"):
        out.append(f"decode.num_samples={values['nbest']}")  # --nbest N draws N samples
    return out


# The run's stored keys that choose a search: `--decoder NAME` resets those NAME does not read
# to DecodeConfig's defaults, unless the command line sets them too.
SEARCH_SELECTORS = ("sample", "beam", "groups", "nbest")


def pop_decode(kwargs: dict[str, Any]) -> list[str]:
    """The decoding flags as ``decode.*`` overrides of a loaded run's config.

    ``--decoder NAME`` replaces the run's stored choice of search: a run trained with, say,
    ``decode.sample = true`` is scored with ``--decoder greedy`` (the search of its eval
    events) instead of failing on a contradiction the command line cannot remove.
    Contradicting flags on the command line itself stay an error.
    """
    keys = [key for _flag, key, _kind, _help in DECODE_FLAGS] + ["sample"]
    values = {k: kwargs.pop(k, None) for k in keys}
    overrides = decode_overrides(values)
    name = values.get("decoder")
    if name:
        from attnlab.config import DecodeConfig
        from attnlab.decode.search import DECODERS

        if name in DECODERS:
            reads = {param.key for param in DECODERS.get(name).factory.spec.params}
            defaults = DecodeConfig()
            resets = [
                f"decode.{key}={str(getattr(defaults, key)).lower()}"  # False -> false
                for key in SEARCH_SELECTORS
                if not values.get(key) and key not in reads
            ]
            overrides = [*resets, *overrides]
    return overrides


DEVICE_CHOICE = Choice(["auto", "cpu", "cuda", "mps"])
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]  # what click.option returns


def max_sentences_option(default: int, help_text: str) -> Decorator:
    """``--max-sentences N`` (0 = all) of the commands that score a split."""
    return click.option(
        "--max-sentences",
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        help=help_text,
    )


def out_file_option(help_text: str, required: bool = False) -> Decorator:
    """``--out FILE``: the .safetensors bundle a command writes (with ``--force`` to replace)."""
    return click.option(
        "--out",
        "out_file",
        required=required,
        default=None,
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
    )


def export_option(help_text: str) -> Decorator:
    """``--export FILE``: also write what a command prints as SVG or HTML (inspect.TeeConsole)."""
    return click.option(
        "--export",
        "export_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


def rich_console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def compact(n: int) -> str:
    """511138 -> 511k, 20518405 -> 20.5M."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if n >= 1000 else str(n)


def load_run(run: Path, device: str | None) -> tuple[Any, Any]:
    """(the loaded checkpoint of RUN, the torch device it is on)."""
    from attnlab.device import resolve_device
    from attnlab.runs import load_checkpoint

    torch_device = resolve_device(device or "auto")
    return load_checkpoint(run, device=torch_device), torch_device


STDIN_CHUNK = 256  # stdin lines decoded as one batch: memory stays bounded, output streams


def line_chunks(text: Sequence[str], size: int = STDIN_CHUNK) -> Iterator[list[str]]:
    """TEXT as one chunk, or standard input's lines (without their endings) in chunks of at
    most ``size``, each yielded as soon as it is read: an endless stream of short lines is
    decoded and printed chunk by chunk, never collected whole. From a terminal every line is
    its own chunk (a typed line is answered at once). Each line has the corpus reader's
    limit (``MAX_LINE_BYTES``, 1 MiB): ``< /dev/zero`` is one error line."""
    import sys

    from attnlab.data.corpus import MAX_LINE_BYTES
    from attnlab.errors import AttnlabError
    from attnlab.regular_files import LineTooLong, bounded_lines

    if text:
        yield list(text)
        return
    if sys.stdin.isatty():
        size = 1
    chunk: list[str] = []
    try:
        for number, raw in enumerate(bounded_lines(sys.stdin.buffer, MAX_LINE_BYTES), 1):
            try:
                chunk.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise AttnlabError(f"standard input: line {number} is not UTF-8 text") from None
            if len(chunk) >= size:
                yield chunk
                chunk = []
    except LineTooLong as err:
        if chunk:  # the lines before it are translated first, then the one error line
            yield chunk
        raise AttnlabError(f"standard input: {err} (the most one sentence may be)") from None
    if chunk:
        yield chunk
