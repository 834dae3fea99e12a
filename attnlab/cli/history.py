"""``attnlab translate RUN --at-step N|list`` (the attention snapshots a run stored during
training, ``attnlab.runs.history``) and ``attnlab export-history``'s shared pieces: the one
error line for a run without history, step labels, score text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from attnlab.errors import AttnlabError

ENABLE_HINT = "train with --set train.attention_history=4 to store it at each evaluation"
LIST_WORD = "list"
# What a snapshot's label names, in order, when the evaluation scored it.
LABEL_SCORES = (("bleu", "BLEU"), ("chrf", "chrF"), ("exact_match", "exact match"))


def load_history(run: Path) -> Any:
    """The run's AttentionHistory, or one error line saying how to get one."""
    from attnlab.runs.history import read_history

    if not run.is_dir():
        raise AttnlabError(f"{run}: no such run directory; --at-step reads a run's stored maps")
    history = read_history(run)
    if history is None and run.parent.name == "checkpoints":  # RUN/checkpoints/best given
        history = read_history(run.parent.parent)
    if history is None:
        raise AttnlabError(f"{run}: the run stored no attention history; {ENABLE_HINT}")
    return history


def parse_step(value: str) -> int | None:
    """``--at-step`` value: a step (int) or ``list`` (None)."""
    from attnlab.config import parse_int

    if value.strip().lower() == LIST_WORD:
        return None
    try:
        step = parse_int("--at-step", value)
    except AttnlabError:
        raise AttnlabError(
            f"--at-step {value!r}: give a training step (e.g. 500) or 'list'"
        ) from None
    if step < 0:
        raise AttnlabError(f"--at-step {step}: a training step is 0 or more")
    return step


def check_sentence(history: Any, sentence: int | None) -> list[int]:
    """The sentence indices to show: ``sentence`` (checked) or all."""
    count = len(history.sources)
    if sentence is None:
        return list(range(count))
    if not 0 <= sentence < count:
        raise AttnlabError(
            f"--sentence {sentence}: the run stored {count} sentence"
            f"{'s' if count != 1 else ''}; valid: 0..{count - 1}"
        )
    return [sentence]


def score_text(scores: dict[str, float]) -> str:
    """``dev BLEU 71.20 · chrF 80.10 · exact match 40.0 %`` (what the evaluation scored)."""
    parts = []
    for key, name in LABEL_SCORES:
        if key in scores:
            value = scores[key]
            parts.append(
                f"{name} {value * 100:.1f} %" if key == "exact_match" else f"{name} {value:.2f}"
            )
    return "dev " + " · ".join(parts) if parts else "no dev scores"


def step_label(step: int, scores: dict[str, float]) -> str:
    """``step 400 · dev BLEU 71.20 · …``: one snapshot's label (CLI, SVG and HTML frames)."""
    return f"step {step} · {score_text(scores)}"


def layer_text(layer: int | None, head: str) -> str:
    if layer is None:
        return "RNN attention"
    heads = "head average" if head == "mean" else f"head {head}"
    return f"last layer ({layer}), {heads}"


def show_at_step(
    run: Path,
    at_step: str,
    sentence: int | None,
    show_alignment: bool,
    export_path: Path | None,
) -> None:
    """Print the stored snapshot nearest ``at_step`` (or the list of stored steps)."""
    from attnlab.cli.common import rich_console
    from attnlab.interpret.maps import ChosenMap

    history = load_history(run)
    step = parse_step(at_step)
    sentences = check_sentence(history, sentence)  # before any output
    console: Any = rich_console()
    if export_path is not None:
        from attnlab.cli.inspect import TeeConsole

        console = TeeConsole(console)
    if step is None:
        _print_steps(console, history)
    else:
        shown = history.nearest_step(step)
        frame = history.frame(shown)
        which = "" if shown == step else f" (the stored step nearest {step})"
        _echo(console, f"{step_label(shown, frame.scores)}{which}")
        _echo(console, f"cross-attention: {layer_text(history.layer, history.head)}")
        import torch

        from attnlab.cli.map_printing import print_maps

        for i in sentences:
            source, hyp = history.sources[i], frame.hyps[i]
            _echo(console, "")
            _echo(console, f"sentence {i}: {' '.join(source)}")
            _echo(console, " ".join(hyp))
            title = f"step {shown} · sentence {i}: cross-attention (target × source)"
            weights = torch.from_numpy(frame.maps[i])  # the renderers' (and translate's) type
            chosen = ChosenMap(weights, list(hyp), list(source), title, "softmax")
            print_maps(console, [chosen], False, True, show_alignment)
    if export_path is not None:
        from attnlab.cli.inspect import save_recording

        save_recording(console.recording, export_path, "attnlab translate --at-step")


def _echo(console: Any, text: str) -> None:
    """A plain line, into the recording too under --export."""
    if getattr(console, "recording", None) is not None:
        console.print(text, markup=False, highlight=False)
    else:
        click.echo(text)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _print_steps(console: Any, history: Any) -> None:
    from rich.table import Table

    from attnlab.cli.common import fmt

    _echo(
        console,
        f"attention history: {plural(len(history.steps), 'stored step')} of "
        f"{plural(len(history.sources), 'dev sentence')}; "
        f"cross-attention: {layer_text(history.layer, history.head)}",
    )
    table = Table()
    keys = [k for k, _ in LABEL_SCORES if any(k in s for s in history.scores)]
    table.add_column("step", justify="right")
    for key in keys:
        name = dict(LABEL_SCORES)[key]
        table.add_column(f"{name} %" if key == "exact_match" else name, justify="right")
    for step, scores in zip(history.steps, history.scores, strict=True):
        cells = [
            fmt(scores[k] * 100, 1) if k == "exact_match" and k in scores else fmt(scores.get(k))
            for k in keys
        ]
        table.add_row(str(step), *cells)
    console.print(table)


@click.command("export-history")
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN")
@click.option(
    "--out",
    "out",
    type=click.Path(path_type=Path),
    required=True,
    help="FILE.svg (animated, one frame per stored step) or FILE.html (a slider)",
)
@click.option(
    "--sentence", type=int, default=0, show_default=True, help="stored sentence (0-based)"
)
@click.option("--force", is_flag=True, help="replace FILE if it exists")
def export_history(run: Path, out: Path, sentence: int, force: bool) -> None:
    """Write the cross-attention RUN stored at each evaluation (train.attention_history) for
    one dev sentence as an animated SVG or an HTML page with a slider."""
    from attnlab.runs import write_output_text
    from attnlab.viz.history_animation import Frame, animated_svg, slider_html

    suffix = out.suffix.lower()
    if suffix not in (".svg", ".html"):
        raise AttnlabError(f"{out}: --out writes .svg or .html; valid suffixes: .svg, .html")
    if out.exists() and not force:
        raise AttnlabError(f"{out}: exists; add --force to replace it")
    history = load_history(run)
    [index] = check_sentence(history, sentence)
    frames = []
    for step, scores in zip(history.steps, history.scores, strict=True):
        frame = history.frame(step)
        frames.append(Frame(step_label(step, scores), frame.hyps[index], frame.maps[index]))
    source = history.sources[index]
    title = (
        f"{run.name}: sentence {index} ({' '.join(source)[:60]}), cross-attention "
        f"{layer_text(history.layer, history.head)}, {len(frames)} stored steps"
    )
    render = animated_svg if suffix == ".svg" else slider_html
    write_output_text(out, render(frames, source, title))
    click.echo(f"wrote {out} ({len(frames)} frames, steps {history.steps[0]}..{history.steps[-1]})")


COMMANDS = (export_history,)
