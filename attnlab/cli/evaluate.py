"""``attnlab eval`` and ``attnlab translate``: score a run on a split, translate text and show
the attention map ``attnlab.interpret.maps`` picks (heatmap, alignment table, --export)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import (
    DEVICE_CHOICE,
    Choice,
    decode_options,
    export_option,
    fmt,
    line_chunks,
    load_run,
    max_sentences_option,
    pop_decode,
    rich_console,
    say,
)
from attnlab.cli.map_printing import print_maps
from attnlab.errors import AttnlabError
from attnlab.interpret.maps import METHODS, ROLES, MapChoice, chosen_map


@click.command("eval")
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.option("--split", type=Choice(["dev", "test"]), default="dev", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the metrics as one JSON object")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@max_sentences_option(
    0, "score only the first N sentences (0 = all; training scores train.eval_sentences of dev)"
)
@click.option(
    "--gold-alignments",
    "gold_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Pharaoh file (i-j sure, i?j possible; one line per sentence of --split): report AER",
)
@click.option(
    "--alignment-order",
    type=Choice(["src-tgt", "tgt-src"]),
    default="src-tgt",
    show_default=True,
    help="what i and j in i-j index (0-based): source-target or target-source",
)
@click.option(
    "--hyps",
    "hyps_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the detokenised hypotheses here, one per line (check a figure with sacrebleu)",
)
@click.option(
    "--refs",
    "refs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the references here, one per line, in the same order",
)
@click.option(
    "--srcs",
    "srcs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the sources here, one per line, in the same order",
)
@decode_options
def eval_command(
    run: Path,
    split: str,
    as_json: bool,
    device: str | None,
    max_sentences: int,
    gold_path: Path | None,
    alignment_order: str,
    hyps_path: Path | None,
    refs_path: Path | None,
    srcs_path: Path | None,
    **flags: Any,
) -> None:
    """Score a run (its best checkpoint), a checkpoint directory or an exported file on a split.
    --hyps / --refs write what was scored, one sentence per line, so that
    "sacrebleu REFS -i HYPS" gives the same BLEU; --srcs the sources, in the same order."""
    outputs = (
        ("--hyps", hyps_path, "hyps"),
        ("--refs", refs_path, "refs"),
        ("--srcs", srcs_path, "srcs"),
    )
    for flag, path, _key in outputs:
        if path is not None and not path.parent.is_dir():
            raise AttnlabError(f"{flag} {path}: no such folder {path.parent}")
    from attnlab.evaluate import evaluate_split, with_training_cost
    from attnlab.experiment import apply_overrides
    from attnlab.nn.archs import normalisations_of
    from attnlab.runs import jsonable, load_checkpoint_data

    loaded, torch_device = load_run(run, device)
    config = apply_overrides(loaded.config, pop_decode(flags))
    dataset = load_checkpoint_data(loaded, config.data)
    result = evaluate_split(
        loaded.model,
        dataset,
        split,
        config.decode,
        device=torch_device,
        max_sentences=max_sentences,
        normalisations=normalisations_of(config),
        keep_sentences=any(path is not None for _flag, path, _key in outputs),
    )
    result.pop("samples", None)
    with_training_cost(result["cost"], loaded.metrics)
    sentences = result.pop("sentences", None)
    if sentences is not None:
        from attnlab.runs import write_output_text

        for flag, path, key in outputs:
            if path is not None:  # one line each: a line break inside would shift the pairs
                lines = [" ".join(line.split()) for line in sentences[key]]
                write_output_text(path, "".join(f"{line}\n" for line in lines), flag)
    result["checkpoint"] = str(loaded.path)
    result["step"] = loaded.step
    if gold_path is not None:
        from attnlab.cli.inspect import gold_alignment_result

        # the same first --max-sentences sentences the rest of the report scores
        result["gold_alignments"] = gold_alignment_result(
            loaded, dataset, split, gold_path, alignment_order, torch_device, max_sentences
        )
    if as_json:
        click.echo(json.dumps(jsonable(result), ensure_ascii=False, allow_nan=False))
        return
    from rich.table import Table

    table = Table(
        title=f"attnlab eval: {loaded.path} ({split}, step {loaded.step})", show_header=False
    )
    table.add_column("metric", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")  # wrap, never cut, the BLEU signature
    for key, digits in (
        ("n", 0),
        ("tokens", 0),  # a language model's: the tokens of its fixed windows
        ("bleu", 2),
        ("chrf", 2),
        ("exact_match", 4),
        ("loss", 4),
        ("ppl" if "perplexity" not in result else "perplexity", 3),
        ("bits_per_token", 4),
        ("alignment_accuracy", 4),
    ):
        if result.get(key) is not None:
            # every attention figure names its layer, as translate, compare and Inspect do
            label = f"{key} (last layer, head average)" if key == "alignment_accuracy" else key
            table.add_row(label, fmt(result[key], digits))
    if result.get("aer") is not None:
        table.add_row("aer", fmt(result["aer"], 4))
    for key, value in result["cost"].items():
        if value is not None:
            table.add_row(key.replace("_", " "), fmt(value, 1))
    gold = result.get("gold_alignments")
    if gold is not None:
        table.add_row("AER (gold file, last layer)", fmt(gold["aer"], 4))
        shift = gold.get("shift_att")
        if shift is not None and shift["aer"] is not None:
            table.add_row(f"AER (Shift-Att, layer {shift['layer']})", fmt(shift["aer"], 4))
    console = rich_console()
    if "bleu_by_length" not in result:  # a language model: no sentences, no BLEU
        console.print(table)
        return
    table.add_row("BLEU signature", result.get("bleu_signature", ""))
    console.print(table)
    buckets = Table(title="BLEU by source length")
    for column in ("bucket", "n", "bleu"):
        buckets.add_column(column, justify="right")
    for row in result["bleu_by_length"]:
        buckets.add_row(row["bucket"], str(row["n"]), fmt(row["bleu"]))
    console.print(buckets)


@click.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.argument("text", nargs=-1)
@click.option("--show-attention", is_flag=True, help="print each hypothesis's attention map")
@click.option(
    "--show-alignment",
    is_flag=True,
    help="print each target row's arg-max source token and weight (from the map --method picks)",
)
@click.option(
    "--role",
    type=Choice(list(ROLES)),
    default="cross",
    show_default=True,
    help="which attention --show-attention prints (Transformers have all three)",
)
@click.option("--layer", type=int, default=None, help="0-based layer (default: the last)")
@click.option("--head", type=int, default=None, help="0-based head (default: the head average)")
@click.option(
    "--method",
    type=Choice(list(METHODS)),
    default="raw",
    show_default=True,
    help="raw attention or an attribution of it (cross only; rollout / relevancy span all "
    "layers and heads, gradient / norm take --layer and --head)",
)
@export_option("also write what is printed to FILE.svg or FILE.html (in colour)")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@click.option(
    "--engine",
    type=Choice(["attnlab", "ctranslate2"]),
    default="attnlab",
    show_default=True,
    help="ctranslate2: RUN is a directory from attnlab export --format ctranslate2",
)
@click.option(
    "--at-step",
    metavar="STEP|list",
    default=None,
    help="instead of decoding, show the cross-attention RUN stored at the evaluation nearest "
    "STEP (train.attention_history); 'list' lists the stored steps",
)
@click.option(
    "--sentence",
    type=int,
    default=None,
    help="with --at-step: only this stored sentence (0-based; default: all)",
)
@decode_options
def translate(
    run: Path,
    text: tuple[str, ...],
    show_attention: bool,
    show_alignment: bool,
    role: str,
    layer: int | None,
    head: int | None,
    method: str,
    export_path: Path | None,
    device: str | None,
    engine: str,
    at_step: str | None,
    sentence: int | None,
    **flags: Any,
) -> None:
    """Translate TEXT (or each line of stdin) with a run or checkpoint, or with --engine
    ctranslate2 a CTranslate2 export of one; with --at-step, show the attention RUN stored
    during training instead."""
    from attnlab.cli.inspect import check_export_path
    from attnlab.experiment import apply_overrides

    if at_step is not None or sentence is not None:
        from attnlab.cli.history import show_at_step

        if at_step is None:
            raise AttnlabError("--sentence picks a stored sentence of --at-step; add --at-step")
        decoding = pop_decode(flags)
        unused = {
            "TEXT": bool(text),
            "--role": role != "cross",
            "--layer": layer is not None,
            "--head": head is not None,
            "--method": method != "raw",
            "--engine": engine != "attnlab",
            "--device": device is not None,
            "decoding flags": bool(decoding),
        }
        given = [name for name, used in unused.items() if used]
        if given:
            raise AttnlabError(
                f"--at-step shows the stored map (last layer, head average) of the run's own "
                f"dev sentences; {', '.join(given)} cannot apply to it"
            )
        check_export_path(export_path)
        show_at_step(run, at_step, sentence, show_alignment, export_path)
        return

    if engine == "ctranslate2":
        from attnlab.cli.ct2 import translate_ct2

        views = {
            "--show-attention": show_attention,
            "--show-alignment": show_alignment,
            "--role": role != "cross",
            "--layer": layer is not None,
            "--head": head is not None,
            "--method": method != "raw",
            "--export": export_path is not None,
        }
        translate_ct2(run, text, flags, views, device)
        return
    check_export_path(export_path)
    MapChoice(role, layer, head, method).check()
    from attnlab.data.oov import source_labels

    loaded, torch_device = load_run(run, device)
    config = apply_overrides(loaded.config, pop_decode(flags))
    from attnlab.nn.archs import normalisations_of

    roles = [key.replace("_", "-") for key in normalisations_of(loaded.config)]
    if role not in roles:
        raise AttnlabError(
            f"--role {role}: a {loaded.config.model.arch} model has no {role} attention; "
            f"valid: {', '.join(f'--role {r}' for r in roles)}"
        )
    need_maps = show_attention or show_alignment
    choice = MapChoice(role, layer, head, method)
    console: Any = rich_console()
    if export_path is not None:  # also record what is printed, as a colour terminal shows it
        from attnlab.cli.inspect import TeeConsole

        console = TeeConsole(console)
    detailed = config.decode.nbest > 1 or config.decode.beam > 1
    warned: set[str] = set()  # unknown tokens already named (once per stream, not per chunk)
    # Chunk by chunk (TEXT is one): decode, print, read on. An endless stdin stream keeps
    # memory bounded and its first translations appear before it ends; order is kept.
    for lines in line_chunks(text):
        results = _translate_lines(loaded, lines, config.decode, torch_device, need_maps, warned)
        # Every map of a chunk before its output: a bad --layer/--head is one line, not a
        # half-printed chunk (the first chunk finds it, before anything is printed).
        maps = [
            # columns read as the model saw them: <unk> for a token outside its vocabulary
            [
                chosen_map(loaded, labels, hyp, tokens, choice, torch_device)
                for hyp, tokens in nbest
                for labels in [source_labels(loaded.src_vocab, toks)]
            ]
            if need_maps
            else []
            for toks, nbest in results
        ]
        for line, (_source_tokens, nbest), chosen in zip(lines, results, maps, strict=True):
            if not nbest:
                console.print("")
                continue
            texts = [loaded.dataset.detokenize_target(tokens) for _hyp, tokens in nbest]
            if detailed:
                from attnlab.viz.nbest import render_nbest

                console.print(render_nbest([hyp for hyp, _ in nbest], texts, title=line))
            elif export_path is not None:
                console.print(texts[0], markup=False, highlight=False)
            else:
                click.echo(texts[0])
            print_maps(console, chosen, detailed, show_attention, show_alignment)
        sys.stdout.flush()  # a pipe's reader gets this chunk now, not at the stream's end
    if export_path is not None:
        from attnlab.cli.inspect import save_recording

        save_recording(console.recording, export_path, "attnlab translate")


def _translate_lines(
    loaded: Any,
    lines: list[str],
    decode_cfg: Any,
    device: Any,
    need_attention: bool,
    warned: set[str] | None = None,
) -> list[tuple[list[str], list[tuple[Any, list[str]]]]]:
    """Decode every non-empty line (length-sorted batches).

    Per line: (source tokens, [(hyp, tokens)]). Unknown tokens in ``warned`` were named by
    an earlier chunk's warning; new ones are added to it.
    """
    import torch

    from attnlab.data.oov import unknown_tokens, unknown_warning
    from attnlab.decode.search import decode_sorted
    from attnlab.decode.source_cap import cap_sources, cut_warning
    from attnlab.evaluate import target_text

    cap = loaded.config.data.eval_max_tokens
    tokenized, cut = cap_sources([loaded.dataset.tokenize_source(line) for line in lines], cap)
    warning = cut_warning(cut, len(lines), cap)
    if warning:
        say(warning)
    unknown = unknown_tokens(loaded.src_vocab, [t for toks in tokenized for t in toks])
    if warned is not None:
        unknown = [t for t in unknown if t not in warned]
        warned.update(unknown)
    if unknown:  # they are decoded as <unk>: never silently (issue 30)
        say(f"warning: {unknown_warning(unknown)}")
    results: list[tuple[list[str], list[tuple[Any, list[str]]]]] = [
        (toks, []) for toks in tokenized
    ]
    todo = [i for i, toks in enumerate(tokenized) if toks]
    sources = [loaded.src_vocab.encode(tokenized[i]) for i in todo]
    need = need_attention or decode_cfg.beta > 0
    with torch.no_grad():
        nbests = decode_sorted(
            loaded.model, sources, decode_cfg, need, device, to_text=target_text(loaded.dataset)
        )
    for i, nbest in zip(todo, nbests, strict=True):
        chosen = nbest[: decode_cfg.nbest]
        results[i] = (tokenized[i], [(h, loaded.tgt_vocab.decode(h.tokens)) for h in chosen])
    return results


COMMANDS = (eval_command, translate)
