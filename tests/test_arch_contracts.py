"""Registries own their facts: each variant its hyper-parameters, each architecture its
attention slots (and the one rule for an empty slot), each variant its length limit."""

from __future__ import annotations

import json
import subprocess
import sys

import _twin_variant as twin
import pytest

from attnlab.config import ExperimentConfig, dumps_toml, to_dict
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, from_dict, validate
from attnlab.naming import attention_roles, describe, experiment_name
from attnlab.nn.archs import ARCHITECTURES, ArchSpec, AttentionSlot
from attnlab.nn.attention import ATTENTION, AttentionSpec, HParam
from attnlab.nn.model import build_model
from attnlab.nn.transformer import check_transformer, decoder_self_attention_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SMALL = [
    "data.max_len=8",
    "model.hidden=8",
    "model.emb=8",
    "model.d_model=16",
    "model.heads=2",
    "model.ff=16",
    "model.enc_layers=1",
    "model.dec_layers=1",
]


@pytest.fixture
def twin_variant():
    twin.register()
    yield twin.SPEC
    twin.unregister()


def _built(config: ExperimentConfig):
    return build_model(validate(config), 9, 9)


def _windows(model) -> dict[str, int]:
    """Role -> the window its attention module was built with (Transformer: first layer)."""
    if hasattr(model, "encoder_layers"):
        enc, dec = model.encoder_layers[0], model.decoder_layers[0]
        mods = {"enc": enc.self_attn.attn, "dec": dec.self_attn.attn, "cross": dec.cross_attn.attn}
    else:
        mods = {"cross": model.attention}
    return {role: m.window for role, m in mods.items() if hasattr(m, "window")}


# -- 2. each variant owns its hyper-parameters ---------------------------------------------------


def test_a_new_variant_reusing_a_name_gets_its_own_default_in_the_cli(twin_variant) -> None:
    """The registry's defaults, each variant's own: twin 7, local-m 10, sliding-window 16."""
    rnn = apply_overrides(ExperimentConfig(), [*SMALL, f"model.attention={twin_variant.name}"])
    assert _windows(_built(rnn)) == {"cross": twin.TWIN_DEFAULT}
    local = apply_overrides(ExperimentConfig(), [*SMALL, "model.attention=local-m"])
    assert _windows(_built(local)) == {
        "cross": ATTENTION.get("local-m").meta.hparam("window").default
    }
    both = apply_overrides(
        ExperimentConfig(),
        [
            *SMALL,
            "model.arch=transformer",
            f"model.self_attention={twin_variant.name}",
            "model.decoder_self_attention=sliding-window",
        ],
    )
    assert _windows(_built(both)) == {"enc": 7, "dec": 16}


def test_qualified_keys_set_one_variant_and_round_trip(twin_variant) -> None:
    config = apply_overrides(
        ExperimentConfig(),
        [
            *SMALL,
            "model.arch=transformer",
            f"model.self_attention={twin_variant.name}",
            "model.decoder_self_attention=sliding-window",
            f"model.{twin_variant.name}.window=3",
            "model.sliding-window.window=5",
        ],
    )
    assert config.model.attn_params == {
        f"{twin_variant.name}.window": 3,
        "sliding-window.window": 5,
    }
    assert _windows(_built(config)) == {"enc": 3, "dec": 5}
    text = dumps_toml(config)
    assert "[model.sliding-window]\nwindow = 5" in text
    assert from_dict(tomllib.loads(text)) == config  # the preset form
    assert from_dict(json.loads(json.dumps(to_dict(config)))) == config  # meta.json's form


def test_an_ambiguous_flat_key_names_the_qualified_keys(twin_variant) -> None:
    with pytest.raises(AttnlabError) as err:
        apply_overrides(
            ExperimentConfig(),
            [
                *SMALL,
                "model.arch=transformer",
                f"model.self_attention={twin_variant.name}",
                "model.decoder_self_attention=sliding-window",
                "model.window=3",
            ],
        )
    message = str(err.value)
    assert "\n" not in message and "model.window is ambiguous" in message
    assert (
        f"model.{twin_variant.name}.window" in message and "model.sliding-window.window" in message
    )
    # Where the chosen variants agree (sliding-window and dilated: both 16), flat keys still work.
    agree = apply_overrides(
        ExperimentConfig(),
        [
            *SMALL,
            "model.arch=transformer",
            "model.self_attention=sliding-window",
            "model.decoder_self_attention=dilated",
            "model.window=3",
        ],
    )
    assert _windows(_built(agree)) == {"enc": 3, "dec": 3}


def test_an_old_flat_checkpoint_config_still_loads_and_builds_the_same_model() -> None:
    # What an older version wrote to meta.json / config.toml: attention params flat in [model].
    old = to_dict(ExperimentConfig())
    old["model"].update({"arch": "rnn", "attention": "local-m", "window": 3, "hidden": 8, "emb": 8})
    old["data"]["max_len"] = 8
    config = validate(from_dict(old))
    assert config.model.attn_params == {"window": 3}
    assert _windows(build_model(config, 9, 9)) == {"cross": 3}
    assert to_dict(config)["model"]["window"] == 3  # written back as it was read


def test_unknown_qualified_keys_are_one_line_errors() -> None:
    with pytest.raises(
        AttnlabError,
        match=(
            r"unknown key model.sliding-windw.window: no attention variant "
            r'.*did you mean "sliding-window"'
        ),
    ):
        apply_overrides(ExperimentConfig(), ["model.sliding-windw.window=3"])
    with pytest.raises(
        AttnlabError, match=r"sliding-window's hyper-parameters: model.sliding-window.window"
    ):
        apply_overrides(ExperimentConfig(), ["model.sliding-window.rank=3"])
    with pytest.raises(AttnlabError, match=r"model.sliding-window.window=0 is out of range"):
        apply_overrides(ExperimentConfig(), ["model.sliding-window.window=0"])


# -- 3. one rule for an empty decoder self-attention --------------------------------------------


def test_the_empty_decoder_self_attention_has_one_answer_everywhere(tmp_path) -> None:
    from attnlab.runs import summarize_run
    from attnlab.tui.menus import load_menus
    from attnlab.tui.views.setup import _summary

    config = apply_overrides(
        ExperimentConfig(),
        [
            *SMALL,
            "model.arch=transformer",
            "model.self_attention=linformer",
            "model.cross_attention=linformer",
        ],
    )
    assert "causal-self" not in ATTENTION.get("linformer").meta.roles  # so: the fallback
    model = _built(config)
    assert type(model.decoder_layers[0].self_attn.attn).spec.name == "scaled-dot"  # the engine
    assert decoder_self_attention_name(config.model) == "scaled-dot"
    assert attention_roles(config.model)["dec_self"] == "scaled-dot"  # the start event
    assert experiment_name(config).endswith("linformer_scaled-dot_linformer")  # run names
    assert "decoder self-attention scaled-dot" in describe(config)
    assert "linformer/scaled-dot/linformer" in _summary(config, load_menus())  # Setup
    (tmp_path / "config.toml").write_text(dumps_toml(config), encoding="utf-8")
    assert summarize_run(tmp_path).attention == "linformer/scaled-dot/linformer"  # Runs


def test_arch_specs_are_importable_without_torch() -> None:
    code = (
        "import sys, attnlab.nn.archs, attnlab.naming\n"
        "spec = attnlab.nn.archs.ARCHITECTURES.get('transformer').meta\n"
        "print([s.key for s in spec.slots], 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False")


# -- 4. a new architecture declares its slots -----------------------------------------------------


@pytest.fixture
def dummy_arch():
    spec = ArchSpec(
        "a test architecture with one attention slot",
        check=lambda config: None,
        slots=(AttentionSlot("model.cross_attention", "cross", "cross", "its attention", "attn"),),
    )
    ARCHITECTURES.add("dummy-test-arch", lambda config, s, t: None, spec)
    yield spec
    ARCHITECTURES.remove("dummy-test-arch")


def test_a_new_architecture_is_named_and_summarised_from_its_slots(dummy_arch, tmp_path) -> None:
    from attnlab.runs import summarize_run

    config = apply_overrides(
        ExperimentConfig(), ["model.arch=dummy-test-arch", "model.cross_attention=performer"]
    )
    assert experiment_name(config) == "reverse-dummy-test-arch-performer"
    assert attention_roles(config.model) == {"arch": "dummy-test-arch", "cross": "performer"}
    assert dummy_arch.summary(config) == "performer"
    (tmp_path / "config.toml").write_text(dumps_toml(config), encoding="utf-8")
    assert summarize_run(tmp_path).attention == "performer"


# -- 5. a length-limited variant says so in its spec -----------------------------------------------


def test_a_length_limited_variant_is_checked_by_its_spec() -> None:
    base = ATTENTION.get("sliding-window")
    spec = AttentionSpec(
        name="limited-test",
        roles=base.meta.roles,
        formula="",
        complexity="",
        known_for="",
        hparams=(HParam("span", 6, "longest source", low=1, high=100),),
        max_length_param="span",
    )
    ATTENTION.add(spec.name, base.factory, spec)
    try:
        ok = apply_overrides(ExperimentConfig(), ["model.arch=transformer", "data.max_len=6"])
        short = ok.replace(
            model=ok.model.__class__(**{**vars(ok.model), "self_attention": spec.name})
        )
        check_transformer(short)  # 6 <= 6
        longer = short.replace(data=short.data.__class__(**{**vars(short.data), "max_len": 7}))
        with pytest.raises(
            AttnlabError, match=r"model.limited-test.span=6 is shorter than the longest source"
        ):
            check_transformer(longer)
        flat = longer.replace(
            model=longer.model.__class__(**{**vars(longer.model), "attn_params": {"span": 7}})
        )
        check_transformer(flat)  # the flat key raises the limit
    finally:
        ATTENTION.remove(spec.name)
