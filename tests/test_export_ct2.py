"""CTranslate2 export: parity with attnlab's own searches, and every refusal in one line.

The reference is attnlab itself: its greedy and beam-5 searches (``decode_sorted``) and its
teacher-forced cross-attention (``forward(..., need_weights=True)``) on the same weights.
CTranslate2 must produce the same tokens on at least 99 % of the sentences, the same summed
log-probabilities within ``SCORE_TOL`` and the same attention rows within ``ATTENTION_TOL``.
Models are tiny (d_model 32, 2+2 layers), trained a few dozen steps on the reverse task so
that hypotheses end at varied lengths, plus one untrained model (every hypothesis cut by its
step budget). Tests that run CTranslate2 skip when it is not installed; the refusals do not.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from _tiny import TINY_TRANSFORMER, briefly_trained, tiny_config

from attnlab.config import DecodeConfig
from attnlab.data.dataset import load_dataset
from attnlab.data.vocab import BOS_ID, PAD_ID
from attnlab.decode.search import decode_sorted
from attnlab.errors import AttnlabError
from attnlab.exporters.ct2_check import CROSS_VARIANTS, SELF_VARIANTS, check_exportable
from attnlab.nn.attention import ATTENTION
from attnlab.nn.attention.base import ROLE_CAUSAL_SELF, ROLE_CROSS, ROLE_SELF
from attnlab.nn.model import build_model

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
needs_ct2 = pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed")

# Summed float32 log-probs of up to ~25 tokens, two engines with different kernels.
SCORE_TOL = 1e-4
ATTENTION_TOL = 1e-5
MIN_AGREEMENT = 0.99

SMALL = (
    *TINY_TRANSFORMER,
    "model.d_model=32",
    "model.heads=4",
    "model.ff=64",
    "model.enc_layers=2",
    "model.dec_layers=2",
    "model.dropout=0",
    "data.train_size=256",
    "data.test_size=100",
    "data.max_len=10",
)

# name -> (overrides, training steps): pre/post norm, tied/untied/shared embeddings, every
# position kind, Shaw relative, GQA and MQA, and untrained weights.
MODELS = {
    "pre-sinusoidal": ((), 30),
    "post-gelu-learned-tied": (
        ("model.norm=post", "model.activation=gelu", "model.positions=learned"),
        30,
    ),
    "shared-vocab-tied": (
        ("data.shared_vocab=true", "model.share_embeddings=true", "model.tie_embeddings=true"),
        60,
    ),
    "relative": (
        ("model.self_attention=relative", "model.positions=none", "model.relative.max_relative=3"),
        30,
    ),
    "gqa": (
        (
            "model.self_attention=gqa",
            "model.decoder_self_attention=gqa",
            "model.cross_attention=gqa",
            "model.gqa.kv_heads=2",
        ),
        30,
    ),
    "mqa-cross": (("model.cross_attention=gqa", "model.gqa.kv_heads=1"), 30),
    "rotary": (("model.positions=rotary",), 30),
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


def _export(tmp_path, name: str, **kwargs):
    from attnlab.exporters.ctranslate2 import load_ct2_model, save_ctranslate2

    model, config, dataset = _trained(name)
    out = save_ctranslate2(model, config, dataset, tmp_path / name, **kwargs)
    return load_ct2_model(out, "float32", threads=1)


def _compare(model, dataset, ct2_model, beam: int, attention: bool = False):
    """attnlab's and CTranslate2's best hypotheses on the test split, side by side."""
    from attnlab.exporters.ctranslate2 import translate_tokens

    test = dataset.splits.test
    sources = [dataset.src_vocab.encode(e.src_tokens) for e in test]
    ours = [n[0] for n in decode_sorted(model, sources, DecodeConfig(beam=beam), attention)]
    theirs = translate_tokens(
        ct2_model, [e.src_tokens for e in test], beam, return_attention=attention
    )
    itos = dataset.tgt_vocab.itos
    return [([itos[i] for i in h.tokens], h, t) for h, t in zip(ours, theirs, strict=True)]


@needs_ct2
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("beam", [1, 5])
def test_ctranslate2_decodes_what_attnlab_decodes(tmp_path, name, beam):
    model, _, dataset = _trained(name)
    pairs = _compare(model, dataset, _export(tmp_path, name), beam)
    same = [(h, t) for tokens, h, t in pairs if tokens == t.tokens]
    assert len(same) / len(pairs) >= MIN_AGREEMENT, [
        (tokens, t.tokens) for tokens, _, t in pairs if tokens != t.tokens
    ][:3]
    for h, t in same:
        assert t.score == pytest.approx(h.log_prob, abs=SCORE_TOL)
    lengths = {len(tokens) for tokens, _, _ in pairs}
    if MODELS[name][1]:  # trained: hypotheses of several lengths, most of them finished
        assert len(lengths) >= 3 and sum(h.finished for _, h, _ in pairs) > len(pairs) // 2
    else:  # untrained: the step budget cuts many, at the budget attnlab gives each sentence
        assert sum(not h.finished for _, h, _ in pairs) >= 10


def _teacher_forced_cross(model, src_ids: list[int], tokens: list[int]) -> torch.Tensor:
    """attnlab's cross-attention of the last layer [H, T, S] for ``tokens`` after <s>."""
    src = torch.tensor([src_ids])
    tgt_in = torch.tensor([[BOS_ID, *tokens]])
    with torch.no_grad():
        out = model(src, src != PAD_ID, tgt_in, need_weights=True)
    return out.attentions["cross"][0, -1, :, : len(tokens)]


@needs_ct2
@pytest.mark.parametrize("beam", [1, 5])
def test_return_attention_is_the_last_layers_head_average(tmp_path, beam):
    model, _, dataset = _trained("pre-sinusoidal")
    pairs = _compare(model, dataset, _export(tmp_path, "pre-sinusoidal"), beam, attention=True)
    checked = 0
    for (tokens, h, t), example in zip(pairs, dataset.splits.test, strict=True):
        if tokens != t.tokens or not tokens:
            continue
        src_ids = dataset.src_vocab.encode(example.src_tokens)
        reference = _teacher_forced_cross(model, src_ids, h.tokens).mean(0)
        ct2 = torch.tensor(t.attention)  # one row per target token (no </s> row)
        assert ct2.shape == reference.shape
        torch.testing.assert_close(ct2, reference, atol=ATTENTION_TOL, rtol=0)
        checked += 1
    assert checked > 50


@needs_ct2
def test_one_alignment_head_returns_that_heads_map(tmp_path):
    model, _, dataset = _trained("pre-sinusoidal")
    pairs = _compare(
        model, dataset, _export(tmp_path, "pre-sinusoidal", alignment_heads=1), 1, True
    )
    for (tokens, h, t), example in list(zip(pairs, dataset.splits.test, strict=True))[:20]:
        assert tokens == t.tokens
        src_ids = dataset.src_vocab.encode(example.src_tokens)
        head0 = _teacher_forced_cross(model, src_ids, h.tokens)[0]
        torch.testing.assert_close(torch.tensor(t.attention), head0, atol=ATTENTION_TOL, rtol=0)


@needs_ct2
def test_a_saved_run_exports_and_translates_text(tmp_path):
    from attnlab.exporters.ctranslate2 import export_ctranslate2, translate_ctranslate2
    from attnlab.nn.model import count_parameters
    from attnlab.runs import export_checkpoint, save_checkpoint

    model, config, dataset = _trained("pre-sinusoidal")
    run = tmp_path / "run"
    params = count_parameters(model)
    save_checkpoint(run, "best", model, config, dataset.meta(), 30, {"bleu": 1.0}, params)
    out = export_ctranslate2(run, tmp_path / "ct2")
    files = {p.name for p in out.iterdir()}
    assert {"model.bin", "config.json", "attnlab.json"} <= files
    # Two vocabularies are two files; equal ones (the reverse task's alphabet on both sides)
    # are one, as CTranslate2 stores equal vocabularies once.
    if dataset.src_vocab.itos == dataset.tgt_vocab.itos:
        target_file = "shared_vocabulary.json"
        assert "source_vocabulary.json" not in files
    else:
        target_file = "target_vocabulary.json"
        assert "source_vocabulary.json" in files
    assert json.loads((out / target_file).read_text()) == dataset.tgt_vocab.itos
    ct2_config = json.loads((out / "config.json").read_text())
    assert ct2_config["layer_norm_epsilon"] == 1e-5  # torch.nn.LayerNorm's
    assert (ct2_config["bos_token"], ct2_config["eos_token"]) == ("<s>", "</s>")
    assert ct2_config["unk_token"] == "<unk>"

    texts = [dataset.src_tokenizer.decode(e.src_tokens) for e in dataset.splits.test[:10]]
    translations = translate_ctranslate2(out, [*texts, ""], beam=5, threads=1)
    assert (translations[-1].tokens, translations[-1].text) == ([], "")
    translations = translations[:-1]
    sources = [dataset.src_vocab.encode(dataset.src_tokenizer.encode(t)) for t in texts]
    ours = decode_sorted(model, sources, DecodeConfig(beam=5))
    for translation, nbest in zip(translations, ours, strict=True):
        tokens = dataset.tgt_vocab.decode(nbest[0].tokens)
        assert translation.tokens == tokens
        assert translation.text == dataset.tgt_tokenizer.decode(tokens)

    with pytest.raises(AttnlabError, match="already exists"):
        export_ctranslate2(run, out)
    export_ctranslate2(run, out, force=True)
    # an exported .safetensors file is a checkpoint too: the same model comes out
    bundle = export_checkpoint(run, tmp_path / "model.safetensors")
    again = export_ctranslate2(bundle, tmp_path / "from-file")
    assert (again / "model.bin").read_bytes() == (out / "model.bin").read_bytes()


@needs_ct2
def test_a_shared_vocabulary_is_written_once(tmp_path):
    _export(tmp_path, "shared-vocab-tied")
    out = tmp_path / "shared-vocab-tied"
    assert (out / "shared_vocabulary.json").is_file()
    assert not (out / "source_vocabulary.json").exists()


@needs_ct2
def test_int8_export_is_smaller_and_still_translates(tmp_path):
    from attnlab.exporters.ctranslate2 import load_ct2_model, save_ctranslate2, translate_tokens

    model, config, dataset = _trained("pre-sinusoidal")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    full = save_ctranslate2(model, config, dataset, tmp_path / "f32")
    small = save_ctranslate2(model, config, dataset, tmp_path / "i8", "int8")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # quantized a copy
    # Every matrix (linears, embeddings) drops from 4 bytes a weight to 1 (+ a scale per row);
    # the position table and the vectors stay float32.
    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2)
    saved = (full / "model.bin").stat().st_size - (small / "model.bin").stat().st_size
    assert saved >= 2.5 * matrices
    assert json.loads((small / "attnlab.json").read_text())["quantization"] == "int8"
    ct2_model = load_ct2_model(small, "int8", threads=1)
    test = dataset.splits.test[:20]
    out = translate_tokens(ct2_model, [e.src_tokens for e in test], 1)
    assert len(out) == 20 and all(set(t.tokens) <= set(dataset.tgt_vocab.itos) for t in out)


# -- refusals -----------------------------------------------------------------------------------


def _refusal(config) -> str:
    with pytest.raises(AttnlabError) as err:
        check_exportable(config)
    message = str(err.value)
    assert "\n" not in message
    return message


def _with_model(**fields):
    config = tiny_config("t", *TINY_TRANSFORMER)
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **fields))


def test_an_rnn_model_is_refused():
    message = _refusal(tiny_config("rnn"))
    assert message.startswith("model.arch=rnn:") and "model.arch=transformer" in message


def test_a_model_without_encoder_layers_is_refused():
    assert _refusal(_with_model(enc_layers=0)).startswith("model.enc_layers=0:")


@pytest.mark.parametrize(
    "field,value", [("activation", "silu"), ("norm", "sandwich"), ("positions", "t5-bias")]
)
def test_settings_outside_ctranslate2s_graph_are_refused(field, value):
    message = _refusal(_with_model(**{field: value}))
    assert message.startswith(f"model.{field}={value}:")


def _variants(role: str, supported: tuple[str, ...]) -> list[str]:
    return [
        n for n in ATTENTION.names() if role in ATTENTION.get(n).meta.roles and n not in supported
    ]


@pytest.mark.parametrize("name", _variants(ROLE_SELF, SELF_VARIANTS))
def test_every_other_encoder_self_attention_is_refused(name):
    message = _refusal(_with_model(self_attention=name, decoder_self_attention="scaled-dot"))
    assert message.startswith(f"model.self_attention={name}:")
    assert "scaled-dot, gqa, relative" in message


@pytest.mark.parametrize("name", _variants(ROLE_CAUSAL_SELF, SELF_VARIANTS))
def test_every_other_decoder_self_attention_is_refused(name):
    message = _refusal(_with_model(decoder_self_attention=name))
    assert message.startswith(f"model.decoder_self_attention={name}:")


@pytest.mark.parametrize("name", _variants(ROLE_CROSS, CROSS_VARIANTS))
def test_every_other_cross_attention_is_refused(name):
    message = _refusal(_with_model(cross_attention=name))
    assert message.startswith(f"model.cross_attention={name}:")
    assert message.endswith("exportable cross-attention variants: scaled-dot, gqa")


def test_alibi_is_refused_for_what_ctranslate2_lacks():
    message = _refusal(_with_model(self_attention="alibi"))
    assert "ALiBi only in decoder-only models" in message


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rotary"])
def test_relative_attention_with_absolute_positions_is_refused(positions):
    message = _refusal(_with_model(self_attention="relative", positions=positions))
    assert message.startswith(f"model.self_attention=relative with model.positions={positions}:")
    assert "model.positions=none" in message


def test_every_exportable_setting_passes():
    for self_attention in SELF_VARIANTS:
        positions = "none" if self_attention == "relative" else "rotary"
        check_exportable(_with_model(self_attention=self_attention, positions=positions))
    for cross in CROSS_VARIANTS:
        check_exportable(_with_model(cross_attention=cross, norm="post", activation="gelu"))


def test_a_missing_ctranslate2_says_how_to_install_it(monkeypatch, tmp_path):
    from attnlab.exporters.ctranslate2 import export_ctranslate2, translate_ctranslate2

    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import raises ImportError
    for call in (
        lambda: export_ctranslate2(tmp_path / "run", tmp_path / "out"),
        lambda: translate_ctranslate2(tmp_path / "model", ["a b"]),
    ):
        with pytest.raises(AttnlabError) as err:
            call()
        assert "pip install 'attnlab[ctranslate2]'" in str(err.value)
        assert "\n" not in str(err.value)


def test_a_bad_quantization_or_target_is_one_line(tmp_path):
    from attnlab.exporters.ctranslate2 import export_ctranslate2, load_ct2_model

    with pytest.raises(AttnlabError, match=r"quantization=int4: .*valid: int8, "):
        export_ctranslate2(tmp_path / "run", tmp_path / "out", "int4")
    (tmp_path / "file").write_text("x")
    with pytest.raises(AttnlabError, match="is a file"):
        export_ctranslate2(tmp_path / "run", tmp_path / "file")
    if HAS_CT2:
        with pytest.raises(AttnlabError, match="not a CTranslate2 model exported by attnlab"):
            load_ct2_model(tmp_path)


@needs_ct2
def test_an_rnn_run_is_refused_before_anything_is_written(tmp_path, tiny_config):
    from attnlab.exporters.ctranslate2 import export_ctranslate2
    from attnlab.runs import save_checkpoint

    dataset = load_dataset(tiny_config.data)
    model = build_model(tiny_config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    save_checkpoint(tmp_path / "run", "best", model, tiny_config, dataset.meta(), 1, {}, 1)
    with pytest.raises(AttnlabError, match=r"^model\.arch=rnn:"):
        export_ctranslate2(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the command line -------------------------------------------------------------------------


def _cli(*args: str, input: str | None = None):
    from click.testing import CliRunner

    from attnlab.cli import cli

    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def saved_transformer_run(tmp_path):
    from attnlab.nn.model import count_parameters
    from attnlab.runs import save_checkpoint

    model, config, dataset = _trained("pre-sinusoidal")
    run = tmp_path / "run"
    save_checkpoint(run, "best", model, config, dataset.meta(), 30, {}, count_parameters(model))
    return run, dataset


@needs_ct2
def test_export_and_translate_on_the_command_line_agree_with_attnlab(saved_transformer_run):
    run, dataset = saved_transformer_run
    out = run.parent / "ct2"
    exported = _cli("export", str(run), "--format", "ctranslate2", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    assert "attnlab translate --engine ctranslate2" in exported.output
    texts = [dataset.src_tokenizer.decode(e.src_tokens) for e in dataset.splits.test[:8]]
    stdin = "\n".join(texts) + "\n"
    ours = _cli("translate", str(run), input=stdin)
    theirs = _cli("translate", "--engine", "ctranslate2", str(out), input=stdin)
    assert theirs.exit_code == 0, theirs.output
    assert theirs.output.splitlines() == ours.output.splitlines()
    assert len(ours.output.splitlines()) == len(texts)
    beam = _cli("translate", "--engine", "ctranslate2", str(out), "--beam", "5", *texts[:3])
    assert beam.exit_code == 0 and len(beam.output.splitlines()) == 3

    again = _cli("export", str(run), "--format", "ctranslate2", "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.output
    forced = _cli(
        "export", str(run), "--format", "ctranslate2", "--out", str(out), "--force",
        "--quantization", "int8",
    )  # fmt: skip
    assert forced.exit_code == 0 and "int8 weights" in forced.output


@needs_ct2
@pytest.mark.parametrize(
    "args,needle",
    [
        (["--alpha", "0.6"], "--alpha is attnlab's own search"),
        (["--sample"], "--sample is attnlab's own search"),
        (["--show-attention"], "--show-attention is attnlab's own search or view"),
        (["--device", "mps"], "CTranslate2 runs on cpu or cuda"),
    ],
)
def test_translate_with_ctranslate2_refuses_attnlabs_own_flags(tmp_path, args, needle):
    model, config, dataset = _trained("pre-sinusoidal")
    from attnlab.exporters.ctranslate2 import save_ctranslate2

    out = save_ctranslate2(model, config, dataset, tmp_path / "ct2")
    result = _cli("translate", "--engine", "ctranslate2", str(out), *args, "1 2 3")
    assert result.exit_code == 2
    assert result.output.splitlines() == [result.output.splitlines()[0]]
    assert result.output.startswith("error: ") and needle in result.output


def test_export_flags_that_do_not_fit_are_one_line(saved_transformer_run):
    run, _ = saved_transformer_run
    for args, needle in (
        (["--quantization", "int8"], "--quantization int8 applies to --format ctranslate2"),
        (["--format", "ctranslate2"], "--format ctranslate2 needs --out DIR"),
    ):
        result = _cli("export", str(run), *args)
        assert result.exit_code == 2 and result.output.count("\n") == 1
        assert result.output.startswith("error: ") and needle in result.output


def test_an_rnn_run_is_refused_on_the_command_line(tmp_path, tiny_config):
    from attnlab.runs import save_checkpoint

    dataset = load_dataset(tiny_config.data)
    model = build_model(tiny_config, len(dataset.src_vocab), len(dataset.tgt_vocab))
    save_checkpoint(tmp_path / "run", "best", model, tiny_config, dataset.meta(), 1, {}, 1)
    result = _cli(
        "export", str(tmp_path / "run"), "--format", "ctranslate2", "--out", str(tmp_path / "o")
    )
    assert result.exit_code == 2
    if HAS_CT2:  # without it, the first line says how to install it
        assert result.output.startswith("error: model.arch=rnn: ")
    assert result.output.count("\n") == 1


# -- the benchmark that measures parity and speed ------------------------------------------


@needs_ct2
def test_decode_speed_benchmark_reports_parity_differences_and_attention(
    saved_transformer_run, monkeypatch, capsys
):
    """benchmarks/decode_speed.py --ctranslate2 on a saved run: every search gets a row, each
    float32 difference is listed with both log-probs, and return_attention is checked."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import decode_speed

    run, _ = saved_transformer_run
    argv = ["decode_speed.py", "--ctranslate2", str(run), "--sentences", "40", "--rounds", "1"]
    argv += ["--threads", "1", "--attention-sentences", "12"]
    monkeypatch.setattr(sys, "argv", argv)
    decode_speed.main()
    out = capsys.readouterr().out
    rows = dict(re.findall(r"^\| ((?:attnlab|CTranslate2) [^|]+?) \| (.+) \|$", out, re.M))
    engines = ("attnlab batched", "CTranslate2 float32", "CTranslate2 int8")
    assert set(rows) == {f"{e} {s}" for e in engines for s in ("greedy", "beam 5")}
    for search in ("greedy", "beam 5"):
        same = float(rows[f"CTranslate2 float32 {search}"].split("|")[2].strip().rstrip("%"))
        (differ,) = re.findall(rf"^### {search}: (\d+) of 40 sentences differ", out, re.M)
        assert same == pytest.approx(100 * (40 - int(differ)) / 40, abs=0.05)
        assert same >= MIN_AGREEMENT * 100
    assert out.count("- sentence ") == sum(
        int(n) for n in re.findall(r"^### .*: (\d+) of 40", out, re.M)
    )
    (gap,) = re.findall(r"first 12 sentences, \d+ non-empty\): largest .* weight (\S+)", out)
    assert float(gap) <= ATTENTION_TOL


@needs_ct2
def test_force_replaces_only_a_model_attnlab_wrote(saved_transformer_run, tmp_path, monkeypatch):
    run, _ = saved_transformer_run
    work = tmp_path / "work"
    (work / "keep").mkdir(parents=True)
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)

    def export(out: str):
        return _cli("export", str(run), "--format", "ctranslate2", "--out", out, "--force")

    # the working folder, an ancestor of it, the run, inside it, a folder holding the run
    for out in (".", "keep/..", str(tmp_path), str(run), str(run / "checkpoints")):
        result = export(out)
        assert result.exit_code == 2 and result.output.count("\n") == 1, (out, result.output)
    assert (work / "notes.txt").read_text() == "mine" and (work / "keep").is_dir()
    assert (run / "checkpoints" / "best").is_dir()
    users = work / "users"
    users.mkdir()
    (users / "thesis.tex").write_text("x")
    result = export("users")
    assert result.exit_code == 2 and "replaces only a CTranslate2 model attnlab wrote" in (
        result.output
    )
    assert (users / "thesis.tex").read_text() == "x"
    # a model attnlab wrote is replaced whole, and nothing is left beside it
    assert export("model").exit_code == 0
    first = (work / "model" / "attnlab.json").stat().st_mtime_ns
    assert export("model").exit_code == 0
    assert (work / "model" / "attnlab.json").stat().st_mtime_ns >= first
    assert sorted(p.name for p in work.iterdir()) == ["keep", "model", "notes.txt", "users"]
    (work / "model" / "mine.txt").write_text("added by the user")
    assert export("model").exit_code == 2 and (work / "model" / "mine.txt").exists()


@needs_ct2
def test_a_float32_export_changes_no_output_and_keeps_the_bleu(tmp_path):
    """The check's reference property: float32 weights decode attnlab's tokens (parity), so
    nothing changes and the two BLEU figures are one."""
    from attnlab.exporters.ct2_quantization import quantization_check
    from attnlab.nn.model import count_parameters
    from attnlab.runs import save_checkpoint

    model, config, dataset = _trained("pre-sinusoidal")
    run = tmp_path / "run"
    save_checkpoint(run, "best", model, config, dataset.meta(), 30, {}, count_parameters(model))
    _export(tmp_path, "pre-sinusoidal")
    check = quantization_check(run / "checkpoints" / "best", tmp_path / "pre-sinusoidal")
    assert check.sentences == len(dataset.splits.dev[:500]) and check.changed == 0
    assert check.bleu_quantized == pytest.approx(check.bleu_float32)


@needs_ct2
def test_an_int8_export_says_how_many_dev_outputs_changed(saved_transformer_run):
    """The printed count and BLEU figures, recomputed here with attnlab's search, the int8
    model and sacrebleu itself."""
    import sacrebleu

    from attnlab.exporters.ctranslate2 import load_ct2_model, translate_tokens
    from attnlab.runs import load_checkpoint, load_checkpoint_data

    run, _ = saved_transformer_run
    out = run.parent / "i8"
    result = _cli("export", str(run), "--format", "ctranslate2", "--out", str(out),
                  "--quantization", "int8")  # fmt: skip
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("int8 weights change"))
    changed, total = map(int, re.search(r"change (\d+) of (\d+) dev", line).groups())
    loaded = load_checkpoint(run / "checkpoints" / "best")
    data = load_checkpoint_data(loaded)
    dev = list(data.splits.dev)[:500]
    ours = decode_sorted(
        loaded.model, [data.src_vocab.encode(e.src_tokens) for e in dev], DecodeConfig()
    )
    theirs = translate_tokens(load_ct2_model(out), [list(e.src_tokens) for e in dev], 1)
    ours_tokens = [data.tgt_vocab.decode(n[0].tokens) for n in ours]
    assert total == len(dev)
    assert changed == sum(a != b.tokens for a, b in zip(ours_tokens, theirs, strict=True))
    refs = [data.tgt_tokenizer.decode(list(e.tgt_tokens)) for e in dev]
    bleu_ours = sacrebleu.corpus_bleu([data.tgt_tokenizer.decode(t) for t in ours_tokens], [refs])
    bleu_int8 = sacrebleu.corpus_bleu([t.text for t in theirs], [refs])
    assert f"BLEU {bleu_ours.score:.1f} (float32, attnlab) -> {bleu_int8.score:.1f} (int8" in line
    plain = _cli("export", str(run), "--format", "ctranslate2", "--out", str(run.parent / "f"))
    assert "weights change" not in plain.output  # float32: parity, nothing to check
