"""CTranslate2 export: a trained Transformer as a CTranslate2 model directory, and decoding
it with attnlab's tokenizers.

``export_ctranslate2(run, out_dir)`` writes ``model.bin``, ``config.json``, the vocabularies
(``shared_vocabulary.json``, or ``source_vocabulary.json`` + ``target_vocabulary.json``) and
``attnlab.json`` (the source and target tokenizers, the step budget rule, where the model came
from), so the directory alone translates text. ``translate_ctranslate2(model_dir, sentences)``
tokenises with those tokenizers, decodes with ``ctranslate2.Translator`` and detokenises.

ctranslate2 is an optional extra (``pip install 'attnlab[ctranslate2]'``); it is imported
only here, on use. What cannot be exported is refused by ``check_exportable`` (ct2_check).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from attnlab import __version__
from attnlab.config import ExperimentConfig
from attnlab.data.tokenizers import Tokenizer, tokenizer_from_dict
from attnlab.decode.greedy import max_lengths
from attnlab.errors import AttnlabError
from attnlab.exporters.ct2_check import check_exportable

__all__ = [
    "ATTNLAB_FILE",
    "QUANTIZATIONS",
    "CT2Model",
    "CT2Translation",
    "check_exportable",
    "export_ctranslate2",
    "load_ct2_model",
    "require_ctranslate2",
    "save_ctranslate2",
    "translate_ctranslate2",
    "translate_tokens",
]

ATTNLAB_FILE = "attnlab.json"  # tokenizers and the step budget, beside CTranslate2's files
FORMAT = "attnlab-ctranslate2"
FORMAT_VERSION = 1
# attnlab.json "model_type": an encoder–decoder is a ctranslate2.Translator, a decoder-only
# model (a prefix LM: prompt = source ⊕ <s>) a ctranslate2.Generator.
TRANSLATOR, GENERATOR = "translator", "generator"
# Weight types CTranslate2 converts to (its ACCEPTED_MODEL_TYPES); None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
INSTALL_HINT = "pip install 'attnlab[ctranslate2]'"


def require_ctranslate2() -> ModuleType:
    """The ctranslate2 module, or one AttnlabError line saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise AttnlabError(
            f"CTranslate2 export and decoding need the ctranslate2 package: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise AttnlabError(
            f"quantization={quantization}: not a CTranslate2 weight type; "
            f"valid: {', '.join(QUANTIZATIONS)}"
        )


# -- export ---------------------------------------------------------------------------------


def _attnlab_meta(config: ExperimentConfig, dataset: Any, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "attnlab_version": __version__,
        "name": config.name,
        "src_tokenizer": dataset.src_tokenizer.to_dict(),
        "tgt_tokenizer": dataset.tgt_tokenizer.to_dict(),
        # attnlab's step budget ceil(ratio · |X|) + const, </s> included (decode.max_len_*)
        "max_len_ratio": config.decode.max_len_ratio,
        "max_len_const": config.decode.max_len_const,
        "heads": config.model.heads,
        "source": source,
    }


# What a CTranslate2 model directory holds (CTranslate2's files and attnlab's marker): with
# --force, a directory holding attnlab's marker and nothing else is replaced; nothing else is.
CT2_FILES = frozenset(
    {
        "model.bin",
        "config.json",
        ATTNLAB_FILE,
        *(
            f"{side}vocabulary.{ext}"
            for side in ("", "shared_", "source_", "target_")
            for ext in ("json", "txt")
        ),
    }
)


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _out_dir_free(out_dir: Path, force: bool, protected: Sequence[Path] = ()) -> None:
    """Refuse an --out that would replace what attnlab did not write: a file, the working
    folder or one of its ancestors, a run being exported (itself, inside it or around it),
    and, even with ``force``, a folder holding anything but an attnlab CTranslate2 model."""
    target = out_dir.resolve()
    if _is_within(Path.cwd().resolve(), target):
        raise AttnlabError(
            f"{out_dir}: is the working folder or one of its ancestors; give a new folder "
            "for the CTranslate2 model, e.g. ct2-model"
        )
    for source in protected:
        source = Path(source).resolve()
        if _is_within(target, source) or _is_within(source, target):
            raise AttnlabError(
                f"{out_dir}: is, lies inside or contains the run being exported ({source}); "
                "give a folder outside it"
            )
    if out_dir.is_file() or (out_dir.exists() and not out_dir.is_dir()):
        raise AttnlabError(f"{out_dir}: is a file; give a directory for the CTranslate2 model")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not force:
        raise AttnlabError(
            f"{out_dir}: already exists and is not empty; pass --force to replace it"
        )
    entries = {entry.name: entry for entry in out_dir.iterdir()}
    foreign = sorted(
        name for name, entry in entries.items() if name not in CT2_FILES or not entry.is_file()
    )
    if ATTNLAB_FILE not in entries or foreign:
        what = f"holds {', '.join(foreign[:3])}" if foreign else f"has no {ATTNLAB_FILE}"
        raise AttnlabError(
            f"{out_dir}: --force replaces only a CTranslate2 model attnlab wrote, and this "
            f"folder {what}; remove it yourself or give another --out"
        )


def _swap_into_place(scratch: Path, out_dir: Path) -> None:
    """``scratch`` renamed to ``out_dir``; an existing ``out_dir`` is moved aside first and
    removed only once the new one is in place (restored if the rename fails)."""
    if not out_dir.exists():
        scratch.rename(out_dir)
        return
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    out_dir.rename(old)
    try:
        scratch.rename(out_dir)
    except OSError:
        old.rename(out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def save_ctranslate2(
    model: Any,
    config: ExperimentConfig,
    dataset: Any,
    out_dir: Path,
    quantization: str | None = None,
    *,
    force: bool = False,
    alignment_heads: int = 0,
    source: dict[str, Any] | None = None,
    protected: Sequence[Path] = (),
) -> Path:
    """Write ``model`` (a TransformerSeq2Seq, with ``dataset``'s vocabularies and tokenizers)
    as a CTranslate2 model directory. The directory appears whole: it is written beside
    ``out_dir`` and renamed into place (an existing one is replaced only with ``force``)."""
    check_exportable(config)
    check_quantization(quantization)
    out_dir = Path(out_dir)
    _out_dir_free(out_dir, force, protected)
    out_dir = out_dir.resolve()  # "some/.." names its folder: the scratch goes beside that
    require_ctranslate2()
    from attnlab.exporters.ct2_spec import build_generator_spec, build_spec

    generator = config.model.arch == "decoder-only"
    if generator:
        spec = build_generator_spec(model, config, dataset.src_vocab.itos, dataset.tgt_vocab.itos)
    else:
        spec = build_spec(
            model,
            config,
            dataset.src_vocab.itos,
            dataset.tgt_vocab.itos,
            alignment_heads=alignment_heads,
        )
    spec.optimize(quantization=quantization)
    scratch = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    try:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        spec.save(str(scratch))
        meta = _attnlab_meta(config, dataset, source or {})
        meta["quantization"] = quantization or "float32"
        if generator:
            meta["model_type"] = GENERATOR
            meta["shared_table"] = model.src_embed is model.tgt_embed
        (scratch / ATTNLAB_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False))
        _out_dir_free(out_dir, force, protected)  # again: it may have changed meanwhile
        _swap_into_place(scratch, out_dir)
    except OSError as err:
        shutil.rmtree(scratch, ignore_errors=True)
        raise AttnlabError(f"{out_dir}: cannot write the CTranslate2 model ({err})") from None
    return out_dir


def export_ctranslate2(
    run_or_checkpoint: Path | str,
    out_dir: Path | str,
    quantization: str | None = None,
    *,
    which: str = "best",
    force: bool = False,
) -> Path:
    """A run (its ``which`` checkpoint, best falling back to last), a checkpoint directory or
    an exported ``.safetensors`` file -> a CTranslate2 model directory ``out_dir``."""
    from attnlab.runs import export_source, load_checkpoint

    check_quantization(quantization)
    path = Path(run_or_checkpoint)
    # the run, checkpoint directory or exported file is never replaced, nor what holds it
    protected = [path]
    _out_dir_free(Path(out_dir), force, protected)
    require_ctranslate2()
    loaded = load_checkpoint(path if path.is_file() else export_source(path, which)[0])
    check_exportable(loaded.config)
    source = {"checkpoint": str(loaded.path), "step": loaded.step, "metrics": loaded.metrics}
    return save_ctranslate2(
        loaded.model,
        loaded.config,
        loaded.dataset,
        Path(out_dir),
        quantization,
        force=force,
        source=source,
        protected=protected,
    )


# -- decoding -------------------------------------------------------------------------------


@dataclass
class CT2Model:
    """A loaded CTranslate2 model with the attnlab tokenizers it was exported with."""

    translator: Any  # ctranslate2.Translator, or ctranslate2.Generator for a decoder-only model
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    max_len_ratio: float
    max_len_const: int
    path: Path
    # A Generator's prompt: source token -> its vocabulary entry (None: a Translator).
    prompt_entry: Callable[[str], str] | None = None

    @property
    def is_generator(self) -> bool:
        return self.prompt_entry is not None


def _prompt_entries(model_dir: Path, shared_table: bool) -> Callable[[str], str]:
    """Source token -> the Generator's entry for it: the marked source entry (two tables) or
    the token itself (one table); a token outside the vocabulary -> the source's <unk>, as
    attnlab's own encoding gives (CTranslate2 alone would map it to the target's <unk>)."""
    from attnlab.data.vocab import UNK
    from attnlab.exporters.ct2_spec import SOURCE_MARK

    path = model_dir / "vocabulary.json"
    try:
        entries = set(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise AttnlabError(f"{path}: not a readable vocabulary ({err})") from None
    mark = "" if shared_table else SOURCE_MARK

    def entry(token: str) -> str:
        marked = mark + token
        return marked if marked in entries else mark + UNK

    return entry


def _read_attnlab_meta(model_dir: Path) -> dict[str, Any]:
    path = model_dir / ATTNLAB_FILE
    if not (model_dir / "model.bin").is_file() or not path.is_file():
        raise AttnlabError(
            f"{model_dir}: not a CTranslate2 model exported by attnlab (needs model.bin and "
            f"{ATTNLAB_FILE}; make one with attnlab export RUN --format ctranslate2)"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise AttnlabError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise AttnlabError(f'{path}: field "format" must be "{FORMAT}"')
    return meta


def load_ct2_model(
    model_dir: Path | str, compute_type: str = "default", threads: int = 0, device: str = "cpu"
) -> CT2Model:
    """``ctranslate2.Translator`` on ``model_dir`` (``threads`` 0 = CTranslate2's default)."""
    ctranslate2 = require_ctranslate2()
    model_dir = Path(model_dir)
    meta = _read_attnlab_meta(model_dir)
    generator = meta.get("model_type", TRANSLATOR) == GENERATOR
    engine = ctranslate2.Generator if generator else ctranslate2.Translator
    try:
        translator = engine(
            str(model_dir), device=device, compute_type=compute_type, intra_threads=threads
        )
    except (RuntimeError, ValueError) as err:
        raise AttnlabError(f"{model_dir}: CTranslate2 cannot load it ({err})") from None
    prompt_entry = None
    if generator:
        prompt_entry = _prompt_entries(model_dir, bool(meta.get("shared_table")))
    return CT2Model(
        translator=translator,
        src_tokenizer=tokenizer_from_dict(meta["src_tokenizer"]),
        tgt_tokenizer=tokenizer_from_dict(meta["tgt_tokenizer"]),
        max_len_ratio=float(meta.get("max_len_ratio", 1.5)),
        max_len_const=int(meta.get("max_len_const", 10)),
        path=model_dir,
        prompt_entry=prompt_entry,
    )


@dataclass
class CT2Translation:
    tokens: list[str]  # target tokens, without <s> and </s>
    text: str  # detokenised with attnlab's target tokenizer
    score: float  # sum of the token log-probs (</s> included when finished)
    # Cross-attention [rows, source tokens]: one row per decoding step, from the layer and
    # heads the export chose (default: last layer, head average); None unless asked.
    attention: list[list[float]] | None = None


def step_budgets(lengths: Sequence[int], ratio: float, const: int) -> list[int]:
    """attnlab's per-sentence step budget (``attnlab.decode.greedy.max_lengths``)."""
    if not lengths:
        return []
    width = max(max(lengths), 1)
    mask = torch.arange(width)[None, :] < torch.tensor(list(lengths))[:, None]
    return max_lengths(mask, ratio, const).tolist()


def translate_tokens(
    model: CT2Model,
    sources: Sequence[Sequence[str]],
    beam: int = 1,
    *,
    return_attention: bool = False,
    max_len_ratio: float | None = None,
    max_len_const: int | None = None,
    batch_size: int = 64,
) -> list[CT2Translation]:
    """Decode token lists. Each sentence gets attnlab's step budget: CTranslate2 takes one
    ``max_decoding_length`` per call, so sentences are decoded in groups of equal budget
    (equal source length). Length penalty 0 and no minimum length, as attnlab's defaults.
    An empty source gives an empty translation (score 0)."""
    if beam < 1:
        raise AttnlabError(f"beam={beam}: must be at least 1")
    ratio = model.max_len_ratio if max_len_ratio is None else max_len_ratio
    const = model.max_len_const if max_len_const is None else max_len_const
    budgets = step_budgets([len(s) for s in sources], ratio, const)
    groups: dict[int, list[int]] = {}
    for index, budget in enumerate(budgets):
        if sources[index]:  # an empty line translates to nothing, as attnlab translate prints
            groups.setdefault(budget, []).append(index)
    # CTranslate2 4.8's beam search gives each sentence of a multi-sentence batch the first
    # attention row of another sentence (its later rows are right): with attention asked
    # for, a beam decodes one sentence per batch, where the rows are exact.
    rows_ok = not return_attention or beam == 1
    out: list[CT2Translation | None] = [None] * len(sources)
    for budget, indices in sorted(groups.items()):
        if model.is_generator:
            if return_attention:
                raise AttnlabError(
                    f"{model.path}: a CTranslate2 Generator returns no attention; "
                    "use attnlab translate --show-attention on the run"
                )
            found = _generate(model, [sources[i] for i in indices], beam, budget, batch_size)
            for i, translation in zip(indices, found, strict=True):
                out[i] = translation
            continue
        results = model.translator.translate_batch(
            [list(sources[i]) for i in indices],
            beam_size=beam,
            length_penalty=0.0,
            max_decoding_length=budget,
            min_decoding_length=0,
            return_scores=True,
            return_attention=return_attention,
            max_batch_size=batch_size if rows_ok else 1,
        )
        for i, result in zip(indices, results, strict=True):
            tokens = list(result.hypotheses[0])
            out[i] = CT2Translation(
                tokens=tokens,
                text=model.tgt_tokenizer.decode(tokens),
                score=float(result.scores[0]),
                attention=[list(row) for row in result.attention[0]] if return_attention else None,
            )
    empty = CT2Translation([], "", 0.0, [] if return_attention else None)
    return [empty if t is None else t for t in out]


def _generate(
    model: CT2Model, sources: Sequence[Sequence[str]], beam: int, budget: int, batch_size: int
) -> list[CT2Translation]:
    """A Generator continues ``source ⊕ <s>`` (the prefix LM's prompt) up to ``budget``
    tokens, </s> included, as attnlab's search does."""
    from attnlab.data.vocab import BOS

    assert model.prompt_entry is not None
    prompts = [[*map(model.prompt_entry, source), BOS] for source in sources]
    results = model.translator.generate_batch(
        prompts,
        beam_size=beam,
        length_penalty=0.0,
        max_length=budget,
        min_length=0,
        include_prompt_in_result=False,
        return_scores=True,
        max_batch_size=batch_size,
    )
    out = []
    for result in results:
        tokens = list(result.sequences[0])
        out.append(
            CT2Translation(
                tokens=tokens,
                text=model.tgt_tokenizer.decode(tokens),
                score=float(result.scores[0]),
            )
        )
    return out


def translate_ctranslate2(
    model_dir: Path | str | CT2Model,
    sentences: Sequence[str],
    beam: int = 1,
    *,
    return_attention: bool = False,
    compute_type: str = "default",
    threads: int = 0,
    max_len_ratio: float | None = None,
    max_len_const: int | None = None,
) -> list[CT2Translation]:
    """Translate raw ``sentences`` with an exported model directory (or a loaded CT2Model):
    attnlab's source tokenizer in, CTranslate2's search, attnlab's detokenizer out."""
    model = (
        model_dir
        if isinstance(model_dir, CT2Model)
        else load_ct2_model(model_dir, compute_type, threads)
    )
    sources = model.src_tokenizer.encode_batch(list(sentences))
    return translate_tokens(
        model,
        sources,
        beam,
        return_attention=return_attention,
        max_len_ratio=max_len_ratio,
        max_len_const=max_len_const,
    )
