"""The decoder registry: listing, spec ranges, plugins, old flags, MBR against brute force."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import sys
import types

import pytest
import sacrebleu
import torch
from _decode_fakes import HashModel, pad_batch
from click.testing import CliRunner

from attnlab.cli import cli
from attnlab.config import DecodeConfig, ExperimentConfig
from attnlab.decode.hypothesis import Hypothesis
from attnlab.decode.mbr import expected_utilities, mbr_rank, sentence_utility
from attnlab.decode.search import DECODERS, decode_batch, decode_sorted, sentences_per_batch
from attnlab.decode.strategy import (
    COMMON_PARAMS,
    DecoderSpec,
    DecodingStrategy,
    derived_decoder,
)
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides

SOURCES = [[5, 6, 7], [8, 4], [9, 10, 11, 12, 13], [4]]
BUILTIN = ["greedy", "beam", "diverse-beam", "sampling", "mbr"]


# -- the registry ------------------------------------------------------------------------------


def test_builtin_strategies_are_registered_with_one_line_specs():
    assert DECODERS.names()[: len(BUILTIN)] == BUILTIN
    for entry in DECODERS.entries():
        spec = entry.meta
        assert isinstance(spec, DecoderSpec) and spec.name == entry.name
        assert spec.description and "\n" not in spec.description
        assert issubclass(entry.factory, DecodingStrategy) and entry.factory.spec is spec
    assert [DECODERS.get(n).meta.nbest for n in BUILTIN] == [False, True, True, True, True]


def test_attnlab_decoders_lists_the_registry():
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["decoders"])
    assert result.exit_code == 0, result.output
    for entry in DECODERS.entries():
        assert entry.name in result.output
    assert "mbr_utility {chrf|bleu}" in result.output and "beam [1..1000]" in result.output


# Ranges written out by hand (the config's); a spec that drifted from them fails here.
EXPECTED_RANGES = {
    "beam": (1, 1000),
    "groups": (1, 100),
    "nbest": (1, 1000),
    "num_samples": (1, 1000),
    "top_p": (1e-6, 1.0),
    "temperature": (1e-6, 100.0),
    "mbr_candidates": (1, 1000),
}


@pytest.mark.parametrize("name", BUILTIN)
def test_spec_ranges_are_the_ones_config_enforces(name):
    spec = DECODERS.get(name).meta
    fields = {f.name for f in dataclasses.fields(DecodeConfig)}
    for param in (*spec.params, *COMMON_PARAMS):
        assert param.key in fields, f"{name}: decode.{param.key} is not a config key"
        if param.key in EXPECTED_RANGES:
            assert (param.low, param.high) == EXPECTED_RANGES[param.key]
        if param.high is not None:  # just past the top of the range: one-line config error
            too_big = param.high * 2 if isinstance(param.high, float) else int(param.high) + 1
            with pytest.raises(AttnlabError, match=f"decode.{param.key}"):
                apply_overrides(ExperimentConfig(), [f"decode.{param.key}={too_big}"])
        if param.choices:
            with pytest.raises(AttnlabError, match=f"decode.{param.key}"):
                apply_overrides(ExperimentConfig(), [f"decode.{param.key}=nonsense"])
    mbr = DECODERS.get("mbr").meta
    assert [p.choices for p in mbr.params if p.key in ("mbr_source", "mbr_utility")] == [
        ("sample", "beam"),
        ("chrf", "bleu"),
    ]


class EchoSource(DecodingStrategy):
    """A plugin strategy: the source ids back, reversed (nothing a built-in would give)."""

    spec = DecoderSpec(name="echo-source", description="the source, reversed")

    def search(self, model, src, src_mask, cfg, budget, **_):
        return [
            [Hypothesis(tokens=row[mask].flip(0).tolist(), score=0.0, log_prob=0.0)]
            for row, mask in zip(src, src_mask, strict=True)
        ]


def test_an_entry_point_in_the_decoders_group_adds_a_strategy(monkeypatch):
    module = types.ModuleType("attnlab_test_decoder_plugin")
    module.EchoSource = EchoSource  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "attnlab_test_decoder_plugin", module)
    entry_point = importlib.metadata.EntryPoint(
        name="echo-source", value="attnlab_test_decoder_plugin:EchoSource", group="attnlab.decoders"
    )

    def fake_entry_points(group: str | None = None, **_: object) -> list:
        return [entry_point] if group == "attnlab.decoders" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(DECODERS, "_plugins_loaded", False)  # look again, with the fake group
    try:
        assert "echo-source" in DECODERS.names()
        assert DECODERS.get("echo-source").meta.description == "the source, reversed"
        # ... and it runs through the one dispatch and config validation like a built-in.
        config = apply_overrides(ExperimentConfig(), ["decode.decoder=echo-source"])
        src, mask = pad_batch(SOURCES)
        out = decode_batch(HashModel(), src, mask, config.decode)
        assert [n[0].tokens for n in out] == [s[::-1] for s in SOURCES]
    finally:
        DECODERS.remove("echo-source")


# -- the flags keep their meaning ------------------------------------------------------------------

OLD_FLAGS = [
    ({}, "greedy"),
    ({"alpha": 0.6, "beta": 0.2}, "greedy"),
    ({"beam": 4, "nbest": 3, "alpha": 0.6, "beta": 0.2}, "beam"),
    ({"beam": 4, "groups": 2, "diversity": 0.7, "nbest": 4}, "diverse-beam"),
    ({"sample": True, "num_samples": 3, "nbest": 3, "seed": 5, "top_p": 0.9}, "sampling"),
    ({"sample": True, "beam": 3, "num_samples": 2, "nbest": 2}, "sampling"),  # sample wins
]


def _same(a: Hypothesis, b: Hypothesis) -> bool:
    if a.attention is None or b.attention is None:
        equal_attention = a.attention is b.attention
    else:
        equal_attention = torch.equal(a.attention, b.attention)
    return (
        a.tokens == b.tokens
        and a.score == b.score
        and a.log_prob == b.log_prob
        and a.token_log_probs == b.token_log_probs
        and a.finished == b.finished
        and a.length_penalty == b.length_penalty
        and a.coverage_penalty == b.coverage_penalty
        and equal_attention
    )


@pytest.mark.parametrize("flags,name", OLD_FLAGS)
def test_decoder_name_equals_the_old_flags_bitwise(flags, name):
    model = HashModel(scale=1.5, eos_bias=0.2)
    src, mask = pad_batch(SOURCES)
    old = DecodeConfig(max_len_ratio=0.0, max_len_const=6, **flags)
    assert derived_decoder(old) == name
    by_flags = decode_batch(model, src, mask, old, need_attention=True)
    named = dataclasses.replace(old, decoder=name)
    by_name = decode_batch(model, src, mask, named, need_attention=True)
    assert [len(n) for n in by_flags] == [len(n) for n in by_name]
    for x, y in zip(by_flags, by_name, strict=True):
        assert all(_same(a, b) for a, b in zip(x, y, strict=True))
    assert sentences_per_batch(old) == sentences_per_batch(dataclasses.replace(old, decoder=name))


@pytest.mark.parametrize(
    "options,flag",
    [
        ({"decoder": "greedy", "beam": 4}, "decode.beam=4"),
        ({"decoder": "greedy", "sample": True}, "decode.sample=true"),
        ({"decoder": "beam", "beam": 4, "groups": 2}, "decode.groups=2"),
        ({"decoder": "beam", "sample": True}, "decode.sample=true"),
        ({"decoder": "diverse-beam", "sample": True}, "decode.sample=true"),
        ({"decoder": "mbr", "beam": 3}, "decode.beam=3"),
    ],
)
def test_an_explicit_decoder_with_contradicting_flags_is_one_line_error(options, flag):
    src, mask = pad_batch(SOURCES)
    with pytest.raises(AttnlabError) as err:
        decode_batch(HashModel(), src, mask, DecodeConfig(**options))
    message, name = str(err.value), options["decoder"]
    assert "\n" not in message and f"decode.decoder={name} contradicts {flag}" in message
    overrides = [f"decode.{k}={str(v).lower()}" for k, v in options.items()]
    with pytest.raises(AttnlabError, match="contradicts"):
        apply_overrides(ExperimentConfig(), overrides)


def test_unknown_decoder_names_the_choices():
    expected = 'unknown decode.decoder "mbrr" \\(did you mean "mbr"\\?\\)'
    with pytest.raises(AttnlabError, match=expected):
        apply_overrides(ExperimentConfig(), ["decode.decoder=mbrr"])


# -- MBR against brute force -------------------------------------------------------------------

# Model-score order: an outlier first, the consensus later (MBR must not just take the first).
CANDIDATES = [
    "a dog runs over the big red bridge",
    "the cat sat on the mat",
    "the cat sat on a mat",
    "the cat is sitting on the mat",
    "the cat sat on the mat",  # drawn twice: counts twice as a pseudo-reference
    "cat on mat",
]


def brute_force_mbr(texts: list[str], utility: str) -> tuple[list[float], int]:
    """Expected utility of each candidate against the others, by explicit loops."""
    gains = []
    for i in range(len(texts)):
        total = 0.0
        for j in range(len(texts)):
            if j == i:
                continue
            if utility == "chrf":
                total += sacrebleu.sentence_chrf(texts[i], [texts[j]]).score
            else:
                total += sacrebleu.sentence_bleu(texts[i], [texts[j]]).score
        gains.append(total / (len(texts) - 1))
    best = 0
    for i in range(1, len(texts)):
        if gains[i] > gains[best]:  # first of equals wins
            best = i
    return gains, best


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_mbr_picks_the_brute_force_winner_of_a_hand_written_set(utility):
    gains, best = brute_force_mbr(CANDIDATES, utility)
    assert best not in (0, len(CANDIDATES) - 1)  # not the model's first, not the shortest
    measured = expected_utilities(CANDIDATES, sentence_utility(utility))
    assert measured == pytest.approx(gains, abs=1e-9)
    hyps = [Hypothesis(tokens=[i], score=-i, log_prob=-float(i)) for i in range(len(CANDIDATES))]
    ranked = mbr_rank(hyps, CANDIDATES, sentence_utility(utility))
    assert ranked[0].tokens == [best] and ranked[0].score == pytest.approx(gains[best])
    assert [h.score for h in ranked] == sorted(gains, reverse=True)
    assert ranked[0].log_prob == -float(best)  # the model's log-prob stays


def test_mbr_utility_is_hypothesis_against_reference():
    # chrF (β = 2) weighs recall: a short hypothesis scores low against a long reference, not
    # the other way round; the expected utility must use the candidate as the hypothesis.
    texts = ["the cat", "the cat sat on the mat today"]
    chrf = sentence_utility("chrf")
    assert chrf(texts[0], texts[1]) != pytest.approx(chrf(texts[1], texts[0]))
    by_hand = [
        sacrebleu.sentence_chrf(texts[0], [texts[1]]).score,
        sacrebleu.sentence_chrf(texts[1], [texts[0]]).score,
    ]
    assert expected_utilities(texts, chrf) == pytest.approx(by_hand)


@pytest.mark.parametrize("source", ["sample", "beam"])
def test_mbr_search_equals_brute_force_over_its_candidates_in_one_batched_search(source):
    model = HashModel(vocab=9, scale=1.0, eos_bias=-0.3)
    src, mask = pad_batch(SOURCES)
    cfg = DecodeConfig(
        decoder="mbr",
        mbr_candidates=6,
        mbr_source=source,
        nbest=2,
        seed=3,
        temperature=1.5,
        max_len_ratio=0.0,
        max_len_const=5,
    )
    text = lambda ids: " ".join(f"w{i}" for i in ids)  # noqa: E731  (a word per id)
    model.calls = 0
    out = decode_batch(model, src, mask, cfg, to_text=text)
    mbr_calls = model.calls
    # The candidates: the same search by the old flags, over the whole batch at once.
    if source == "sample":
        cand_cfg = DecodeConfig(
            sample=True,
            num_samples=6,
            nbest=6,
            seed=3,
            temperature=1.5,
            max_len_ratio=0.0,
            max_len_const=5,
        )
    else:
        cand_cfg = DecodeConfig(beam=6, nbest=6, max_len_ratio=0.0, max_len_const=5)
    model.calls = 0
    candidates = decode_batch(model, src, mask, cand_cfg)
    assert mbr_calls == model.calls <= 5  # one step per time step for all sentences
    for nbest, cands in zip(out, candidates, strict=True):
        gains, best = brute_force_mbr([text(h.tokens) for h in cands], "chrf")
        assert len(nbest) == 2
        assert nbest[0].tokens == cands[best].tokens
        assert nbest[0].score == pytest.approx(gains[best])
        assert nbest[0].log_prob == cands[best].log_prob


def test_mbr_batches_by_its_candidate_rows():
    cfg = DecodeConfig(decoder="mbr", mbr_candidates=8, batch_rows=64)
    assert sentences_per_batch(cfg) == 8


# -- end to end: a tiny trained model through the CLI --------------------------------------------


def test_cli_decoder_mbr_on_a_tiny_trained_model(tmp_path, tiny_sets):
    from attnlab.evaluate import target_text
    from attnlab.runs import load_checkpoint

    def invoke(*args):
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)

    result = invoke("train", "--out", str(tmp_path), "--run-name", "t", "--quiet", *tiny_sets)
    assert result.exit_code == 0, result.output
    run = str(tmp_path / "t")
    lines = ["5 9 2 7 1 3", "4 4 8"]
    mbr = invoke(
        "translate",
        run,
        *lines,
        "--decoder",
        "mbr",
        "--mbr-candidates",
        "8",
        "--temperature",
        "2",
        "--seed",
        "4",
    )
    assert mbr.exit_code == 0, mbr.output
    # The reference: the same 8 samples per line, the winner by brute force on their text.
    loaded = load_checkpoint(tmp_path / "t" / "checkpoints" / "best")
    to_text = target_text(loaded.dataset)
    sources = [loaded.src_vocab.encode(loaded.dataset.tokenize_source(line)) for line in lines]
    cfg = dataclasses.replace(
        loaded.config.decode, sample=True, num_samples=8, nbest=8, temperature=2.0, seed=4
    )
    expected = []
    for cands in decode_sorted(loaded.model, sources, cfg):
        texts = [to_text(h.tokens) for h in cands]
        expected.append(texts[brute_force_mbr(texts, "chrf")[1]])
    assert mbr.output.splitlines() == expected

    # --decoder NAME equals the old flags, bit for bit, in translate and eval.
    assert (
        invoke("translate", run, *lines, "--decoder", "beam", "--beam", "3").output
        == invoke("translate", run, *lines, "--beam", "3").output
    )
    plain = json.loads(invoke("eval", run, "--json").output)
    named = json.loads(invoke("eval", run, "--json", "--decoder", "greedy").output)
    for report in (plain, named):  # a measured speed, not a score: it differs run to run
        report["cost"].pop("decode_sentences_per_s")
    assert plain == named
    scored = json.loads(
        invoke(
            "eval",
            run,
            "--json",
            "--decoder",
            "mbr",
            "--mbr-utility",
            "bleu",
            "--mbr-candidates",
            "4",
        ).output
    )
    assert scored["n"] == plain["n"] == 16 and 0.0 <= scored["bleu"] <= 100.0
    bad = invoke("translate", run, "1 2", "--decoder", "greedy", "--beam", "4")
    assert bad.exit_code == 2 and bad.output.startswith("error: decode.decoder=greedy contradicts")


# -- the lab ---------------------------------------------------------------------------------


async def test_inspect_search_menu_is_the_registry(tmp_path):
    from _tui_support import lab_config, ready, until
    from textual.widgets import Select

    from attnlab.tui.app import make_app

    app = make_app(tmp_path, config=lab_config())
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app, pilot)
        await pilot.press("3")  # Inspect
        select = app.query_one("#insp-decoder", Select)
        await until(pilot, lambda: len(select._options) > 1)
        assert [value for _label, value in select._options] == DECODERS.names()
        assert select.value == "beam"


def test_decoder_sampling_with_nbest_draws_that_many_samples_like_sample():
    from attnlab.cli.common import decode_overrides

    named = decode_overrides({"decoder": "sampling", "nbest": 3})
    assert named == ["decode.decoder=sampling", "decode.nbest=3", "decode.num_samples=3"]
    config = apply_overrides(ExperimentConfig(), named)
    flagged = apply_overrides(ExperimentConfig(), decode_overrides({"sample": True, "nbest": 3}))
    assert dataclasses.replace(config.decode, decoder="", sample=True) == flagged.decode
