"""What quantized CTranslate2 weights change: the dev split decoded both ways.

int8 keeps a large model's BLEU (Multi30k) but can change a small one's outputs a lot (a
200-step reverse Transformer: 293 of 500 the same). ``quantization_check`` decodes up to
``max_sentences`` dev sentences greedily with attnlab's own float32 model and with the
exported CTranslate2 model, and counts the outputs that differ, with each side's BLEU against
the references, so an export says what its weights cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.errors import AttnlabError

CHECK_SENTENCES = 500


@dataclass(frozen=True)
class QuantizationCheck:
    split: str
    sentences: int
    changed: int  # outputs whose tokens differ from attnlab's float32 greedy search
    bleu_float32: float  # attnlab's float32 model
    bleu_quantized: float  # the exported CTranslate2 model

    def line(self, quantization: str) -> str:
        return (
            f"{quantization} weights change {self.changed} of {self.sentences} {self.split} "
            f"outputs (greedy) from the float32 model's; {self.split} BLEU "
            f"{self.bleu_float32:.1f} (float32, attnlab) -> {self.bleu_quantized:.1f} "
            f"({quantization}, CTranslate2)"
        )


def quantization_check(
    checkpoint: Path,
    model_dir: Path,
    *,
    split: str = "dev",
    max_sentences: int = CHECK_SENTENCES,
    threads: int = 0,
) -> QuantizationCheck:
    """Decode the first ``max_sentences`` of ``split`` with the checkpoint (attnlab, float32,
    greedy) and with the CTranslate2 directory ``model_dir`` (its own weights)."""
    from attnlab.config import DecodeConfig
    from attnlab.decode.search import decode_sorted
    from attnlab.evaluate import text_scores
    from attnlab.exporters.ctranslate2 import load_ct2_model, translate_tokens
    from attnlab.runs import load_checkpoint, load_checkpoint_data

    loaded = load_checkpoint(checkpoint)
    if loaded.config.data.task == "lm":
        raise AttnlabError("a language model has no sentence pairs to decode for the check")
    data = load_checkpoint_data(loaded)
    examples = list(data.splits.split(split))[:max_sentences]
    if not examples:
        raise AttnlabError(f"the {split} split is empty: nothing to check the weights on")
    sources = [data.src_vocab.encode(e.src_tokens) for e in examples]
    ours = decode_sorted(loaded.model, sources, DecodeConfig(beam=1))
    ct2_model = load_ct2_model(model_dir, threads=threads)
    theirs = translate_tokens(ct2_model, [list(e.src_tokens) for e in examples], 1)
    detok = data.tgt_tokenizer.decode
    our_tokens = [data.tgt_vocab.decode(nbest[0].tokens) for nbest in ours]
    refs = [detok(list(e.tgt_tokens)) for e in examples]
    changed = sum(a != b.tokens for a, b in zip(our_tokens, theirs, strict=True))
    return QuantizationCheck(
        split=split,
        sentences=len(examples),
        changed=changed,
        bleu_float32=float(text_scores([detok(t) for t in our_tokens], refs)["bleu"]),
        bleu_quantized=float(text_scores([t.text for t in theirs], refs)["bleu"]),
    )


__all__ = ["CHECK_SENTENCES", "QuantizationCheck", "quantization_check"]
