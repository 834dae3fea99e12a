"""The ``attnlab`` command line (click). Every command has ``--help``.

Exit codes: 0 on success; 2 with one line ``error: ...`` on stderr for a user mistake
(AttnlabError, a bad flag or argument), never a traceback; 130 when training was
interrupted (Ctrl+C / SIGTERM; the ``last`` checkpoint is saved); 1 when training stopped on
an error (e.g. a non-finite loss). torch and the engine are imported inside the commands, so
``attnlab --help`` and the lab start quickly.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from attnlab import __version__
from attnlab.errors import AttnlabError

DEFAULT_PRESET = "reverse-bahdanau"


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


class AttnlabGroup(click.Group):
    """A click group whose ``main`` turns user mistakes into one line and exit code 2."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args, prog_name or "attnlab", complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except click.exceptions.NoArgsIsHelpError as err:  # a group called bare: show its help
            click.echo(err.ctx.get_help() if err.ctx is not None else err.format_message())
            code = 0
        except click.UsageError as err:
            hint = f" (see {err.ctx.command_path} --help)" if err.ctx is not None else ""
            click.echo(f"error: {_one_line(err.format_message())}{hint}", err=True)
            code = 2
        except click.ClickException as err:
            click.echo(f"error: {_one_line(err.format_message())}", err=True)
            code = err.exit_code
        except AttnlabError as err:
            click.echo(f"error: {_one_line(str(err))}", err=True)
            code = 2
        except (click.Abort, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            code = 130
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(name="attnlab", cls=AttnlabGroup, invoke_without_command=True)
@click.version_option(__version__, prog_name="attnlab")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """attnlab: a terminal lab for attention in sequence-to-sequence models.

    With no command, opens the lab (the Textual app).
    """
    if ctx.invoked_subcommand is not None:
        return
    try:
        from attnlab.tui.app import run_app
    except ImportError as err:
        click.echo(f"the lab is not available in this installation ({err}); try attnlab --help", err=True)
        ctx.exit(1)
        return
    run_app()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (also ``python -m attnlab``, how the lab starts training)."""
    from attnlab.allocator import retain_freed_memory

    retain_freed_memory()  # this process owns its allocator: decode/train steps reuse pages
    cli.main(args=argv, prog_name="attnlab")


# -- shared options ------------------------------------------------------------------------------

DECODE_FLAGS: list[tuple[str, str, Any, str]] = [
    # (flag, config key, type, help)
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
    ("--max-len-ratio", "max_len_ratio", float, "maximum output length as a ratio of source length"),
    ("--batch-size", "batch_size", int, "sentences per decoding batch (0 = fill --batch-rows)"),
    ("--batch-rows", "batch_rows", int, "decoder rows per step when --batch-size is 0 (sentences × beam)"),
]


def decode_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The decoding flags (issue 4), each mapping onto a ``decode.*`` key."""
    func = click.option("--sample", is_flag=True, default=False, help="sample instead of searching")(func)
    for flag, _key, kind, help_text in reversed(DECODE_FLAGS):
        func = click.option(flag, type=kind, default=None, help=f"{help_text} (decode.*)")(func)
    return func


def decode_overrides(values: dict[str, Any]) -> list[str]:
    out = [f"decode.{key}={values[key]}" for _flag, key, _kind, _help in DECODE_FLAGS if values.get(key) is not None]
    if values.get("sample"):
        out.append("decode.sample=true")
        if values.get("nbest"):  # --sample --nbest N draws N samples per sentence
            out.append(f"decode.num_samples={values['nbest']}")
    return out


def _pop_decode(kwargs: dict[str, Any]) -> list[str]:
    keys = [key for _flag, key, _kind, _help in DECODE_FLAGS] + ["sample"]
    return decode_overrides({k: kwargs.pop(k, None) for k in keys})


DEVICE_CHOICE = click.Choice(["auto", "cpu", "cuda", "mps"])


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _compact(n: int) -> str:
    """511138 -> 511k, 20518405 -> 20.5M."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k" if n >= 1000 else str(n)


# -- train -----------------------------------------------------------------------------------------


class TrainProgress:
    """Live rich progress bar fed by the trainer's events."""

    def __init__(self, max_steps: int, start_step: int, quiet: bool):
        self.quiet = quiet
        self.max_steps = max_steps
        self.progress = None
        self.task = None
        if quiet:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[tps]} tok/s"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("dev BLEU {task.fields[bleu]}"),
            console=_console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task("train", total=max_steps, completed=start_step, loss="–", tps="–", bleu="–")

    def __enter__(self) -> TrainProgress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "start" and event.get("dropped_pairs"):
            click.echo(
                f"note: dropped {event['dropped_pairs']} training pairs longer than "
                "data.train_max_tokens tokens", err=True,
            )
        if kind == "error" and self.quiet:  # quiet still says why a run stopped
            click.echo(f"error: {_one_line(event.get('message', ''))}", err=True)
        if self.progress is None:
            return
        if kind == "step":
            self.progress.update(
                self.task, completed=event["step"], loss=f"{event['loss']:.4f}", tps=f"{event['tokens_per_s']:.0f}"
            )
        elif kind == "eval":
            self.progress.update(self.task, completed=event["step"], bleu=_fmt(event.get("bleu")))
        elif kind == "error":
            self.progress.console.print(f"[red]error:[/red] {event.get('message')}")
        elif kind == "checkpoint" and event.get("tag") == "last" and event["step"] < self.max_steps:
            pass


def _summary_table(summary: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="attnlab train: summary", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    best = summary.get("best") or {}
    rows = [
        ("run", summary["run_dir"]),
        ("ended", summary["reason"]),
        ("steps", summary["step"]),
        ("params", f"{summary['params']:,}"),
        ("device", summary["device"]),
        ("wall time", f"{summary['wall_s']:.1f} s"),
        ("tokens/s", _fmt(summary.get("tokens_per_s"), 0)),
        ("best step", _fmt(best.get("step"))),
        ("best chosen by", _fmt(best.get("chosen_by"))),
        ("dev BLEU", _fmt(best.get("bleu"))),
        ("dev chrF", _fmt(best.get("chrf"))),
        ("dev exact match", _fmt(best.get("exact_match"), 3)),
        ("dev loss / ppl", f"{_fmt(best.get('loss'), 4)} / {_fmt(best.get('ppl'), 3)}"),
    ]
    if best.get("alignment_accuracy") is not None:
        rows.append(("dev alignment accuracy", _fmt(best["alignment_accuracy"], 3)))
    for key, value in rows:
        table.add_row(key, str(value))
    return table


@cli.command()
@click.option("--preset", default=None, metavar="NAME|FILE", help=f"preset name or TOML file (default {DEFAULT_PRESET})")
@click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE", help="override a config key (repeatable), e.g. model.attention=luong-general")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False, path_type=Path), help="parent directory of run directories")
@click.option("--run-name", default=None, help="run directory name (default PRESET-YYYYmmdd-HHMMSS)")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@click.option("--seed", type=int, default=None, help="random seed (train.seed)")
@click.option("--quiet", is_flag=True, help="no progress bar; print the run directory and one result line")
@click.option("--resume", "resume_dir", default=None, type=click.Path(file_okay=False, path_type=Path), metavar="RUN", help="continue RUN from its last checkpoint (--set may change e.g. train.max_steps)")
@click.pass_context
def train(ctx: click.Context, preset: str | None, overrides: tuple[str, ...], out: Path, run_name: str | None,
          device: str | None, seed: int | None, quiet: bool, resume_dir: Path | None) -> None:
    """Train a model and write a run directory (config, events, checkpoints)."""
    from attnlab.config import apply_overrides, load_preset
    from attnlab.runs import new_run_dir, read_config

    extra = list(overrides)
    if seed is not None:
        extra.append(f"train.seed={seed}")
    if device is not None:
        extra.append(f"train.device={device}")
    if resume_dir is not None:
        if preset is not None or run_name is not None:
            raise AttnlabError("--resume continues an existing run; it takes no --preset or --run-name (use --set)")
        config = read_config(resume_dir)
    else:
        config = load_preset(preset or DEFAULT_PRESET)
    if extra:
        config = apply_overrides(config, extra)
    if resume_dir is not None:
        run_dir = resume_dir
    else:
        run_dir = new_run_dir(out, run_name or f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    click.echo(f"run directory: {run_dir}")

    from attnlab.train.trainer import Trainer

    start_step = _resume_step(run_dir) if resume_dir is not None else 0
    trainer = Trainer(config, run_dir, resume=resume_dir is not None)
    try:
        with TrainProgress(config.train.max_steps, start_step, quiet) as progress:
            trainer.on_event = progress.on_event
            summary = trainer.run()
    except AttnlabError:
        # A user mistake found while setting up (e.g. a missing corpus): leave no empty run behind.
        if resume_dir is None and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise
    if quiet:
        best = summary.get("best") or {}
        click.echo(
            f"{summary['reason']}: step {summary['step']}, dev BLEU {_fmt(best.get('bleu'))}, "
            f"exact match {_fmt(best.get('exact_match'), 3)}, {summary['wall_s']:.1f} s"
        )
    else:
        _console().print(_summary_table(summary))
    if summary["exit_code"]:
        ctx.exit(summary["exit_code"])


def _resume_step(run_dir: Path) -> int:
    from attnlab.runs import META_FILE, checkpoint_dir, read_json

    meta = checkpoint_dir(run_dir, "last") / META_FILE
    return int(read_json(meta).get("step", 0)) if meta.is_file() else 0


# -- eval / translate -----------------------------------------------------------------------------


def _load(run: Path, device: str | None) -> tuple[Any, Any]:
    from attnlab.device import resolve_device
    from attnlab.runs import load_checkpoint

    torch_device = resolve_device(device or "auto")
    return load_checkpoint(run, device=torch_device), torch_device


@cli.command("eval")
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.option("--split", type=click.Choice(["dev", "test"]), default="dev", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the metrics as one JSON object")
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@click.option(
    "--gold-alignments", "gold_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Pharaoh file (i-j sure, i?j possible; one line per sentence of --split): report AER",
)
@click.option(
    "--alignment-order", type=click.Choice(["src-tgt", "tgt-src"]), default="src-tgt",
    show_default=True, help="what i and j in i-j index (0-based): source-target or target-source",
)
@decode_options
def eval_command(run: Path, split: str, as_json: bool, device: str | None, gold_path: Path | None,
                 alignment_order: str, **flags: Any) -> None:
    """Score a run (its best checkpoint), a checkpoint directory or an exported file on a split."""
    import dataclasses

    from attnlab.config import apply_overrides
    from attnlab.data.dataset import load_dataset
    from attnlab.evaluate import evaluate_split

    loaded, torch_device = _load(run, device)
    config = apply_overrides(loaded.config, _pop_decode(flags))
    examples = load_dataset(config.data)
    # Score with the checkpoint's own vocabularies and tokenizers.
    dataset = dataclasses.replace(
        examples,
        src_vocab=loaded.dataset.src_vocab,
        tgt_vocab=loaded.dataset.tgt_vocab,
        src_tokenizer=loaded.dataset.src_tokenizer,
        tgt_tokenizer=loaded.dataset.tgt_tokenizer,
    )
    result = evaluate_split(loaded.model, dataset, split, config.decode, device=torch_device)
    result.pop("samples", None)
    result["checkpoint"] = str(loaded.path)
    result["step"] = loaded.step
    if gold_path is not None:
        from attnlab.cli_inspect import gold_alignment_result

        result["gold_alignments"] = gold_alignment_result(
            loaded, dataset, split, gold_path, alignment_order, torch_device
        )
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
        return
    from rich.table import Table

    table = Table(title=f"attnlab eval: {loaded.path} ({split}, step {loaded.step})", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value")
    for key, digits in (("n", 0), ("bleu", 2), ("chrf", 2), ("exact_match", 4), ("loss", 4), ("ppl", 3), ("alignment_accuracy", 4)):
        if result.get(key) is not None:
            table.add_row(key, _fmt(result[key], digits))
    if result.get("aer") is not None:
        table.add_row("aer", _fmt(result["aer"], 4))
    gold = result.get("gold_alignments")
    if gold is not None:
        table.add_row("AER (gold file, last layer)", _fmt(gold["aer"], 4))
        shift = gold.get("shift_att")
        if shift is not None and shift["aer"] is not None:
            table.add_row(f"AER (Shift-Att, layer {shift['layer']})", _fmt(shift["aer"], 4))
    table.add_row("BLEU signature", result.get("bleu_signature", ""))
    console = _console()
    console.print(table)
    buckets = Table(title="BLEU by source length")
    for column in ("bucket", "n", "bleu"):
        buckets.add_column(column, justify="right")
    for row in result["bleu_by_length"]:
        buckets.add_row(row["bucket"], str(row["n"]), _fmt(row["bleu"]))
    console.print(buckets)


@cli.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN|CHECKPOINT")
@click.argument("text", nargs=-1)
@click.option("--show-attention", is_flag=True, help="print each hypothesis's alignment as a heatmap")
@click.option(
    "--show-alignment", is_flag=True, help="print each target token's arg-max source token and weight"
)
@click.option(
    "--method", type=click.Choice(["raw", "rollout", "relevancy", "gradient", "norm"]),
    default="raw", show_default=True,
    help="the map shown: raw attention or an attribution (attnlab.interpret)",
)
@click.option(
    "--export", "export_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="also write what is printed to FILE.svg or FILE.html",
)
@click.option("--device", type=DEVICE_CHOICE, default=None, help="auto picks cuda > mps > cpu")
@decode_options
def translate(run: Path, text: tuple[str, ...], show_attention: bool, show_alignment: bool,
              method: str, export_path: Path | None, device: str | None, **flags: Any) -> None:
    """Translate TEXT (or each line of stdin) with a run or checkpoint."""
    from attnlab.cli_inspect import check_export_path
    from attnlab.config import apply_overrides

    check_export_path(export_path)
    loaded, torch_device = _load(run, device)
    config = apply_overrides(loaded.config, _pop_decode(flags))
    lines = list(text) if text else [line.rstrip("\n") for line in sys.stdin]
    need_maps = show_attention or show_alignment
    results = _translate_lines(loaded, lines, config.decode, torch_device, need_maps)
    console: Any = _console()
    if export_path is not None:  # also record what is printed, as a colour terminal shows it
        from attnlab.cli_inspect import TeeConsole

        console = TeeConsole(console)
    detailed = config.decode.nbest > 1 or config.decode.beam > 1
    for line, (source_tokens, nbest) in zip(lines, results, strict=True):
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
        if need_maps:
            _print_maps(
                console, loaded, nbest, source_tokens, method, show_attention, show_alignment, detailed
            )
    if export_path is not None:
        from attnlab.cli_inspect import save_recording

        save_recording(console.recording, export_path, "attnlab translate")


def _translate_lines(loaded: Any, lines: list[str], decode_cfg: Any, device: Any, need_attention: bool) -> list[tuple[list[str], list[tuple[Any, list[str]]]]]:
    """Decode every non-empty line (length-sorted batches); per line (source tokens, [(hyp, tokens)])."""
    import torch

    from attnlab.decode.search import decode_sorted

    tokenized = [loaded.dataset.tokenize_source(line) for line in lines]
    results: list[tuple[list[str], list[tuple[Any, list[str]]]]] = [(toks, []) for toks in tokenized]
    todo = [i for i, toks in enumerate(tokenized) if toks]
    sources = [loaded.src_vocab.encode(tokenized[i]) for i in todo]
    need = need_attention or decode_cfg.beta > 0
    with torch.no_grad():
        nbests = decode_sorted(loaded.model, sources, decode_cfg, need, device)
    for i, nbest in zip(todo, nbests, strict=True):
        chosen = nbest[: decode_cfg.nbest]
        results[i] = (tokenized[i], [(h, loaded.tgt_vocab.decode(h.tokens)) for h in chosen])
    return results


def _print_maps(console: Any, loaded: Any, nbest: list[Any], source_tokens: list[str], method: str,
                show_attention: bool, show_alignment: bool, detailed: bool) -> None:
    """Each hypothesis's map (``method``) as a heatmap and / or its alignment table."""
    from attnlab.cli_inspect import alignment_renderable, alignment_rows, method_map

    for rank, (hyp, tokens) in enumerate(nbest, start=1):
        if hyp.attention is None and method == "raw":
            continue
        matrix = method_map(loaded, source_tokens, hyp, method)
        if show_attention:
            plain = not console.is_terminal or console.no_color
            rank_shown = rank if detailed else None
            console.print(_heatmap(hyp, tokens, source_tokens, rank_shown, matrix, method, plain))
        if show_alignment:
            rows = list(tokens) + (["</s>"] if matrix.size(0) > len(tokens) else [])
            title = "alignment" if not detailed else f"alignment, hypothesis {rank}"
            table = alignment_rows(matrix, rows, list(source_tokens))
            console.print(alignment_renderable(table, title))


def _heatmap(hyp: Any, tokens: list[str], source_tokens: list[str], rank: int | None,
             matrix: Any = None, method: str = "raw", plain: bool | None = None) -> Any:
    from attnlab.viz.heatmap import render_heatmap
    matrix = hyp.attention.float() if matrix is None else matrix
    rows = list(tokens) + (["</s>"] if matrix.size(0) > len(tokens) else [])
    name = "attention" if method == "raw" else f"attention ({method})"
    title = name if rank is None else f"{name}, hypothesis {rank}"
    # Without colours (output piped to a file) the cells would be blank: print the weights.
    if plain is None:
        console = _console()
        plain = not console.is_terminal or console.no_color
    return render_heatmap(
        matrix[: len(rows), : len(source_tokens)], rows, list(source_tokens), title=title, show_values=plain
    )


# -- registries and runs ----------------------------------------------------------------------------


@cli.command()
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
            f"{h.name}={h.default}" + (f" [{_fmt(h.low, 0) if h.low is not None else ''}..{_fmt(h.high, 0) if h.high is not None else ''}]" if h.low is not None or h.high is not None else "")
            for h in spec.hparams
        )
        # Text, not markup: formulas such as "tanh(W_a [s_t; h_j])" contain brackets.
        table.add_row(*(Text(cell) for cell in (entry.name, ", ".join(sorted(spec.roles)), spec.formula, hparams or "–")))
    _console().print(table)


@cli.command()
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
    _console().print(table)


@cli.command()
@click.argument("directory", required=False, default="runs", type=click.Path(file_okay=False, path_type=Path))
def runs(directory: Path) -> None:
    """Runs in DIRECTORY (default runs) with their best dev metrics."""
    from rich import box
    from rich.table import Table

    from attnlab.runs import list_runs

    if not directory.is_dir():
        raise AttnlabError(f"{directory}: no such directory")
    found = list_runs(directory)
    console = _console()
    wide = console.width >= 110  # narrow terminals get the essential columns only
    columns = ["run", "task", "model", "params", "steps", "BLEU", "chrF", "EM", "tok/s", "status"]
    if not wide:
        columns = ["run", "model", "steps", "BLEU", "EM", "status"]
    table = Table(title=f"runs in {directory}", box=box.SIMPLE_HEAD)
    for column in columns:
        numeric = column in ("params", "steps", "BLEU", "chrF", "EM", "tok/s")
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for r in found:
        cells = {
            "run": r.path.name,
            "task": r.task,
            "model": f"{r.task} {r.arch} {r.attention}" if not wide else f"{r.arch} {r.attention}",
            "params": _compact(r.params),
            "steps": str(r.steps),
            "BLEU": _fmt(r.best_bleu, 1),
            "chrF": _fmt(r.best_chrf, 1),
            "EM": _fmt(r.best_exact_match, 2),
            "tok/s": _fmt(r.tokens_per_s, 0),
            "status": r.status,
        }
        table.add_row(*(cells[c] for c in columns))
    console.print(table)


@cli.command()
@click.argument("run", type=click.Path(path_type=Path), metavar="RUN")
@click.option("--out", "out_file", required=False, default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="the .safetensors file to write")
@click.option("--checkpoint", "which", type=click.Choice(["best", "last"]), default="best", show_default=True)
@click.option("--tensorboard", "tb_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="write events.jsonl as TensorBoard event files into DIR (needs tensorboardX)")
def export(run: Path, out_file: Path | None, which: str, tb_dir: Path | None) -> None:
    """Write one self-contained .safetensors file (weights + config, vocabularies, metrics)."""
    from attnlab.runs import export_checkpoint

    if not run.exists():
        raise AttnlabError(f"{run}: no such run directory")
    if tb_dir is not None:
        from attnlab.tensorboard_export import export_tensorboard

        counts = export_tensorboard(run, tb_dir)
        click.echo(f"wrote {counts['scalars']} scalars and {counts['texts']} texts to {tb_dir}")
    if out_file is None:
        if tb_dir is None:
            raise AttnlabError("export needs --out FILE.safetensors (or --tensorboard DIR)")
        return
    path = export_checkpoint(run, out_file, which)
    click.echo(f"exported {path}; use it with: attnlab translate {path} \"...\"")


try:  # heads, compare, average (issue 15) live in their own module
    from attnlab.cli_inspect import COMMANDS as _inspect_commands

    for _command in _inspect_commands:
        cli.add_command(_command)
except ImportError:  # pragma: no cover - optional
    pass

try:  # the data group (attnlab data stats ...) lives in its own module
    from attnlab.cli_data import data as _data_group

    cli.add_command(_data_group)
except ImportError:  # pragma: no cover - optional
    pass
