"""The CTranslate2 side of ``attnlab export --format ctranslate2`` and ``attnlab translate
--engine ctranslate2`` (docs/export.md); the engine is attnlab.exporters.ctranslate2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from attnlab.cli.common import line_chunks
from attnlab.errors import AttnlabError

# The decoding flags CTranslate2's search reads; every other one is attnlab's own search.
CT2_DECODE_KEYS = ("beam", "max_len_ratio", "batch_size")


def export_ct2(run: Path, out_dir: Path | None, which: str, quantization: str | None, force: bool):
    """``attnlab export RUN --format ctranslate2 --out DIR``."""
    from attnlab.exporters.ctranslate2 import export_ctranslate2

    if out_dir is None:
        raise AttnlabError("--format ctranslate2 needs --out DIR, the model directory to write")
    path = export_ctranslate2(run, out_dir, quantization, which=which, force=force)
    kind = quantization or "float32"
    engine = "Generator" if load_meta_kind(path) == "generator" else "Translator"
    click.echo(
        f"exported {path} (a CTranslate2 {engine}, {kind} weights); use it with: "
        f'attnlab translate --engine ctranslate2 {path} "..."'
    )
    if quantization not in (None, "float32"):
        _say_what_quantization_changed(run, which, path, kind)


def _say_what_quantization_changed(run: Path, which: str, model_dir: Path, kind: str) -> None:
    """Quantized weights: decode the dev split both ways and say how many outputs changed."""
    from attnlab.exporters.ct2_quantization import quantization_check
    from attnlab.runs import export_source

    checkpoint = run if run.is_file() else export_source(run, which)[0]
    try:
        check = quantization_check(checkpoint, model_dir)
    except AttnlabError as err:
        click.echo(f"note: {kind} weights not checked: {err}")
        return
    click.echo(check.line(kind))


def load_meta_kind(model_dir: Path) -> str:
    """ "generator" or "translator": what attnlab.json says the directory holds."""
    import json

    from attnlab.exporters.ctranslate2 import ATTNLAB_FILE

    meta = json.loads((model_dir / ATTNLAB_FILE).read_text(encoding="utf-8"))
    return str(meta.get("model_type", "translator"))


def _refuse_attnlab_only(flags: dict[str, Any], options: dict[str, bool]) -> None:
    """One line for the first flag only attnlab's own searches and views read."""
    from attnlab.cli.common import DECODE_FLAGS

    used = [flag for flag, on in options.items() if on]
    used += [
        flag
        for flag, key, _kind, _help in DECODE_FLAGS
        if flags.get(key) is not None and key not in CT2_DECODE_KEYS
    ]
    if flags.get("sample"):
        used.append("--sample")
    if used:
        raise AttnlabError(
            f"{used[0]} is attnlab's own search or view; --engine ctranslate2 takes --beam, "
            "--max-len-ratio and --batch-size (or use --engine attnlab on the run)"
        )


def _ct2_device(device: str | None) -> str:
    if device in (None, "cpu"):
        return "cpu"
    if device == "mps":
        raise AttnlabError("--device mps: CTranslate2 runs on cpu or cuda; valid: cpu, cuda, auto")
    if device == "auto":
        from attnlab.exporters.ctranslate2 import require_ctranslate2

        return "cuda" if require_ctranslate2().get_cuda_device_count() > 0 else "cpu"
    return "cuda"


def translate_ct2(
    model_dir: Path,
    text: tuple[str, ...],
    flags: dict[str, Any],
    options: dict[str, bool],
    device: str | None,
) -> None:
    """``attnlab translate --engine ctranslate2 DIR [TEXT]...``: one line out per line in."""
    from attnlab.exporters.ctranslate2 import load_ct2_model, translate_tokens

    _refuse_attnlab_only(flags, options)
    beam = flags.get("beam") or 1
    if beam < 1:
        raise AttnlabError(f"--beam {beam}: must be at least 1")
    model = load_ct2_model(model_dir, device=_ct2_device(device))
    for lines in line_chunks(text):  # chunk by chunk: bounded memory, streamed output
        sources = model.src_tokenizer.encode_batch(lines)
        found = translate_tokens(
            model,
            sources,
            beam,
            max_len_ratio=flags.get("max_len_ratio"),
            batch_size=flags.get("batch_size") or 64,
        )
        for translation in found:
            click.echo(translation.text)
        sys.stdout.flush()
