"""``attnlab generate``: continue a prompt with a language-model run (``data.task = "lm"``).

The engine's ``attnlab.decode.generate`` does the work (KV cache, sampling); this module reads
the prompt (the argument, or each line of standard input as it arrives), refuses what the
run cannot read in one line, prints prompt ⊕ continuation and, with ``--show-attention``, the
last layer's causal map over the last window the model read (``print_heatmap``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import DEVICE_CHOICE, Choice, line_chunks, rich_console, say
from attnlab.cli.map_printing import print_heatmap
from attnlab.errors import AttnlabError

NEWLINE = "\n"  # nanoGPT's sample.py starts from "\n" when no prompt is given


def checkpoint_of(run: Path, which: str) -> Path:
    """The checkpoint ``--checkpoint`` names in a run directory (best falls back to last, with a
    note); a checkpoint directory or an exported file as it is."""
    from attnlab.runs.checkpoints import CHECKPOINTS, checkpoint_dir, resolve_or_none

    if not (run / CHECKPOINTS).is_dir():
        return run  # a checkpoint directory or an exported file: load_checkpoint names it
    chosen = resolve_or_none(checkpoint_dir(run, which))
    if chosen is not None:
        return chosen
    last = resolve_or_none(checkpoint_dir(run, "last"))
    if which == "best" and last is not None:
        say(f"note: {run} has no best checkpoint yet; generating with last")
        return last
    raise AttnlabError(f"{run}: no {which} checkpoint (valid: --checkpoint best or last)")


def check_language_model(loaded: Any, run: Path) -> None:
    task = loaded.config.data.task
    if task != "lm":
        raise AttnlabError(
            f"{run}: a {task} run (sequence to sequence) is not a language model; "
            f'generate continues an LM run (data.task=lm): use attnlab translate {run} "..."'
        )


def prompt_ids(loaded: Any, text: str) -> list[int]:
    """The prompt's ids; an empty prompt starts from a newline, as nanoGPT's sample.py."""
    from attnlab.data.oov import unknown_tokens
    from attnlab.data.vocab import SPECIALS

    vocab = loaded.dataset.src_vocab
    tokens = loaded.dataset.tokenize_source(text) if text else []
    if not tokens:
        if NEWLINE not in vocab.stoi:
            raise AttnlabError(
                "an empty prompt starts from a newline, which the run's vocabulary lacks: "
                "give a prompt"
            )
        tokens = [NEWLINE]
    unknown = unknown_tokens(vocab, tokens)
    if unknown:
        shown = ", ".join(repr(t) for t in unknown[:8]) + (" …" if len(unknown) > 8 else "")
        known = len(vocab) - len(SPECIALS)
        kind = "character" if loaded.config.data.tokenizer == "char" else "token"
        raise AttnlabError(
            f"the prompt has {len(unknown)} {kind}(s) the run never saw in training, so the "
            f"model cannot read them: {shown} (its vocabulary has {known} {kind}s)"
        )
    return vocab.encode(tokens)


def _show_map(console: Any, loaded: Any, ids: list[int], context: int) -> None:
    from attnlab.decode.generate import causal_map
    from attnlab.nn.archs import normalisations_of

    window = ids[-context:]
    maps = causal_map(loaded.model, window)  # [L, H, N, N]
    matrix = maps[-1].mean(dim=0).float().cpu()
    from attnlab.viz.text import visible_token

    labels = [visible_token(t) for t in loaded.dataset.tgt_vocab.decode(window)]
    layers = maps.shape[0]
    title = (
        f"self-attention, layer {layers - 1} (the last), head average: "
        f"the last {len(window)} tokens the model read"
    )
    normalisation = normalisations_of(loaded.config).get("dec_self", "softmax")
    print_heatmap(console, matrix, labels, labels, title, normalisation)


@click.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.argument("prompt", required=False)
@click.option("--max-new", type=int, default=500, show_default=True, help="tokens to generate")
@click.option(
    "--temperature",
    type=float,
    default=1.0,
    show_default=True,
    help="0 = greedy; 1 = the model's own distribution",
)
@click.option("--top-k", type=int, default=0, show_default=True, help="0 = off")
@click.option("--top-p", type=float, default=1.0, show_default=True, help="1 = off")
@click.option("--seed", type=int, default=0, show_default=True, help="same seed, same text")
@click.option(
    "--show-attention", is_flag=True, help="print the causal map of the text (last layer)"
)
@click.option(
    "--checkpoint", "which", type=Choice(["best", "last"]), default="best", show_default=True
)
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
def generate(
    run: Path,
    prompt: str | None,
    max_new: int,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
    show_attention: bool,
    which: str,
    device: str | None,
) -> None:
    """Continue PROMPT (or each line of stdin) with a language-model run and print prompt ⊕
    continuation. The context is the run's data.block_size: a longer text slides the window
    (docs/decoder-only.md)."""
    from attnlab.cli.common import load_run
    from attnlab.decode.generate import Sampling, check_generation
    from attnlab.decode.generate import generate as continue_ids

    sampling = Sampling(temperature, top_k, top_p, seed)
    sampling.check()  # bad values before the run is read
    check_generation(max_new)
    loaded, _torch_device = load_run(checkpoint_of(run, which), device)
    check_language_model(loaded, run)
    context = int(loaded.config.data.block_size)
    # one line at a time: each prompt is answered as soon as it is read, alone in its batch
    # (a row's window and draws then never depend on the other lines)
    lines: Iterable[str] = (
        [prompt] if prompt is not None else (c[0] for c in line_chunks((), size=1))
    )
    console = rich_console() if show_attention else None
    for line in lines:
        ids = prompt_ids(loaded, line)
        new = continue_ids(loaded.model, [ids], max_new, sampling, context=context)
        ids = ids + new[0].tolist()  # one host copy, not one sync per token
        tokens = loaded.dataset.tgt_vocab.decode(ids)
        click.echo(loaded.dataset.detokenize_target(tokens))
        if console is not None:
            _show_map(console, loaded, ids, context)


COMMANDS = (generate,)
