"""CTranslate2 export of the decoder-only model as a ``ctranslate2.Generator``.

The reference is attnlab itself on the same weights: its greedy and beam-5 searches
(``decode_sorted``, KV-cached start/step) over the prefix LM ``source ⊕ <s> ⊕ target``. The
Generator continues the same prompt and must give the same tokens on at least 99 % of the test
sentences, with the same summed log-probabilities within ``SCORE_TOL``. Models are tiny
(d_model 32, 2 layers) and trained a few dozen steps on the reverse task so that hypotheses end
at several lengths, plus one untrained model (the step budget cuts its hypotheses).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from _tiny import briefly_trained, tiny_config
from click.testing import CliRunner

from attnlab.config import DecodeConfig
from attnlab.decode.search import decode_sorted
from attnlab.errors import AttnlabError
from attnlab.exporters.ct2_check import GENERATOR_VARIANTS, check_exportable
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
needs_ct2 = pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed")

SCORE_TOL = 1e-4
MIN_AGREEMENT = 0.99

SMALL = (
    "model.arch=decoder-only",
    "model.d_model=32",
    "model.heads=4",
    "model.ff=64",
    "model.dec_layers=2",
    "model.dropout=0",
    "data.train_size=256",
    "data.test_size=100",
    "data.max_len=10",
)

# name -> (overrides, training steps): two tables (a source and a target vocabulary) or one,
# pre/post norm, tied output, every position kind CTranslate2 has, GQA/MQA, Shaw relative,
# ALiBi (with a head count that is not a power of two), and untrained weights.
MODELS = {
    "pre-sinusoidal": ((), 60),
    "post-gelu-learned-tied": (
        ("model.norm=post", "model.activation=gelu", "model.positions=learned"),
        60,
    ),
    "shared-vocab-tied": (
        ("data.shared_vocab=true", "model.share_embeddings=true", "model.tie_embeddings=true"),
        200,
    ),
    "rotary": (("model.positions=rotary",), 60),
    "gqa": (("model.self_attention=gqa", "model.gqa.kv_heads=2"), 60),
    "mqa": (("model.self_attention=gqa", "model.gqa.kv_heads=1"), 60),
    "relative": (
        ("model.self_attention=relative", "model.positions=none", "model.relative.max_relative=3"),
        60,
    ),
    "alibi-3-heads": (
        ("model.self_attention=alibi", "model.positions=none", "model.heads=3", "model.d_model=24"),
        60,
    ),
    "untrained-no-positions": (("model.positions=none",), 0),
}
_TRAINED: dict[str, tuple] = {}


def _trained(name: str):
    """(model, config, dataset) of MODELS[name], trained once per session."""
    if name not in _TRAINED:
        overrides, steps = MODELS[name]
        config = tiny_config(name, *SMALL, *overrides)
        model, dataset = briefly_trained(config, steps)
        _TRAINED[name] = (model, config, dataset)
    return _TRAINED[name]


def _export(tmp_path, name: str):
    from attnlab.exporters.ctranslate2 import load_ct2_model, save_ctranslate2

    model, config, dataset = _trained(name)
    out = save_ctranslate2(model, config, dataset, tmp_path / name)
    return load_ct2_model(out, "float32", threads=1)


@needs_ct2
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("beam", [1, 5])
def test_the_generator_decodes_what_attnlab_decodes(tmp_path, name, beam):
    from attnlab.exporters.ctranslate2 import translate_tokens

    model, _, dataset = _trained(name)
    ct2_model = _export(tmp_path, name)
    assert ct2_model.is_generator
    test = dataset.splits.test
    sources = [dataset.src_vocab.encode(e.src_tokens) for e in test]
    ours = [n[0] for n in decode_sorted(model, sources, DecodeConfig(beam=beam))]
    theirs = translate_tokens(ct2_model, [e.src_tokens for e in test], beam)
    itos = dataset.tgt_vocab.itos
    pairs = [([itos[i] for i in h.tokens], h, t) for h, t in zip(ours, theirs, strict=True)]
    same = [(h, t) for tokens, h, t in pairs if tokens == t.tokens]
    assert len(same) / len(pairs) >= MIN_AGREEMENT, [
        (tokens, t.tokens) for tokens, _, t in pairs if tokens != t.tokens
    ][:3]
    for h, t in same:
        assert t.score == pytest.approx(h.log_prob, abs=SCORE_TOL)
    if MODELS[name][1] and beam == 1:  # trained: greedy ends at several lengths
        assert len({len(tokens) for tokens, _, _ in pairs}) >= 3
    if not MODELS[name][1]:  # untrained: the step budget cuts many, as attnlab's
        assert sum(not h.finished for _, h, _ in pairs) >= 10


@needs_ct2
def test_a_source_token_outside_the_vocabulary_reads_as_the_sources_unk(tmp_path):
    """attnlab encodes an unknown source token as the source's <unk>; the Generator's prompt
    must use the same row of the source table, not the target's <unk>."""
    from attnlab.exporters.ctranslate2 import translate_tokens

    model, _, dataset = _trained("pre-sinusoidal")
    ct2_model = _export(tmp_path, "pre-sinusoidal")
    sources = [["never-seen", *e.src_tokens[:3]] for e in dataset.splits.test[:20]]
    ours = decode_sorted(model, [dataset.src_vocab.encode(s) for s in sources], DecodeConfig())
    theirs = translate_tokens(ct2_model, sources, 1)
    for nbest, translation in zip(ours, theirs, strict=True):
        assert dataset.tgt_vocab.decode(nbest[0].tokens) == translation.tokens
        assert translation.score == pytest.approx(nbest[0].log_prob, abs=SCORE_TOL)


@needs_ct2
def test_two_vocabularies_become_one_with_the_source_marked(tmp_path):
    from attnlab.exporters.ct2_spec import SOURCE_MARK

    _, _, dataset = _trained("pre-sinusoidal")
    _export(tmp_path, "pre-sinusoidal")
    out = tmp_path / "pre-sinusoidal"
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert vocabulary == [
        *dataset.tgt_vocab.itos,
        *(SOURCE_MARK + t for t in dataset.src_vocab.itos),
    ]
    meta = json.loads((out / "attnlab.json").read_text())
    assert meta["model_type"] == "generator" and meta["shared_table"] is False
    _export(tmp_path, "shared-vocab-tied")
    shared = json.loads((tmp_path / "shared-vocab-tied" / "vocabulary.json").read_text())
    assert shared == _trained("shared-vocab-tied")[2].tgt_vocab.itos


@needs_ct2
def test_a_generator_returns_no_attention_in_one_line(tmp_path):
    from attnlab.exporters.ctranslate2 import translate_tokens

    ct2_model = _export(tmp_path, "pre-sinusoidal")
    with pytest.raises(AttnlabError, match="returns no attention"):
        translate_tokens(ct2_model, [["a", "b"]], 1, return_attention=True)


def _refusal(*overrides: str) -> str:
    with pytest.raises(AttnlabError) as err:
        check_exportable(tiny_config("x", *SMALL, *overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_bidirectional_prefix_is_refused():
    message = _refusal("model.prefix=bidirectional")
    assert message.startswith("model.prefix=bidirectional:") and "model.prefix=causal" in message


_OTHERS = [
    n
    for n in ATTENTION.names()
    if ROLE_CAUSAL_SELF in ATTENTION.get(n).meta.roles and n not in GENERATOR_VARIANTS
]


@pytest.mark.parametrize("name", _OTHERS)
def test_every_other_causal_variant_is_refused(name):
    message = _refusal(f"model.self_attention={name}")
    assert message.startswith(f"model.self_attention={name}:")
    assert "scaled-dot, gqa, relative, alibi" in message


@pytest.mark.parametrize("name", GENERATOR_VARIANTS)
def test_every_generator_variant_passes(name):
    extra = ("model.positions=none",) if name in ("relative", "alibi") else ()
    check_exportable(tiny_config("x", *SMALL, f"model.self_attention={name}", *extra))


@needs_ct2
def test_export_and_translate_a_decoder_only_run_on_the_command_line(tmp_path):
    from attnlab.cli import cli as main
    from attnlab.nn.model import count_parameters
    from attnlab.runs import save_checkpoint

    model, config, dataset = _trained("rotary")
    run = tmp_path / "run"
    save_checkpoint(run, "best", model, config, dataset.meta(), 60, {}, count_parameters(model))
    out = tmp_path / "gen"
    runner = CliRunner()
    args = ["export", str(run), "--format", "ctranslate2", "--out", str(out)]
    exported = runner.invoke(main, args)
    assert exported.exit_code == 0, exported.output
    assert "Generator" in exported.output
    texts = [dataset.src_tokenizer.decode(e.src_tokens) for e in dataset.splits.test[:8]]
    stdin = "\n".join(texts) + "\n"
    ours = runner.invoke(main, ["translate", str(run)], input=stdin)
    theirs = runner.invoke(main, ["translate", "--engine", "ctranslate2", str(out)], input=stdin)
    assert ours.exit_code == 0 and theirs.exit_code == 0, theirs.output
    assert theirs.output.splitlines() == ours.output.splitlines()
    assert len(theirs.output.splitlines()) == len(texts)


@needs_ct2
def test_a_language_model_exports_and_continues_prompts_as_attnlab_generate(lm_run, tmp_path):
    """An LM run (one table, an empty source): the Generator continues the prompt's own
    tokens, greedy, with the tokens attnlab's KV-cached generate gives."""
    import ctranslate2

    from attnlab.decode.generate import Sampling, generate
    from attnlab.exporters.ctranslate2 import export_ctranslate2
    from attnlab.runs import load_checkpoint

    out = export_ctranslate2(lm_run, tmp_path / "lm-ct2")
    meta = json.loads((out / "attnlab.json").read_text())
    assert meta["model_type"] == "generator" and meta["shared_table"] is True
    generator = ctranslate2.Generator(str(out), intra_threads=1)
    loaded = load_checkpoint(lm_run / "checkpoints" / "best")
    vocab = loaded.dataset.src_vocab
    prompts = ["the k", "my", "good n", "sweet", "t", "prince\nmy"]
    for prompt in prompts:
        tokens = loaded.dataset.tokenize_source(prompt)
        new = 12 - len(tokens)  # within the run's context of 12
        ours = generate(loaded.model, [vocab.encode(tokens)], new, Sampling(temperature=0.0))
        theirs = generator.generate_batch(
            [tokens], max_length=new, sampling_topk=1, include_prompt_in_result=False
        )[0]
        assert theirs.sequences[0] == vocab.decode(ours[0].tolist()), prompt
