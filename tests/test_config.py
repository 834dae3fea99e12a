"""Config: presets, --set coercion, ranges, "did you mean" errors and the TOML round trip."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from attnlab.config import (
    SECTIONS,
    ExperimentConfig,
    dumps_toml,
    load_toml,
    preset_names,
    resolve_preset,
)
from attnlab.errors import AttnlabError
from attnlab.experiment import apply_overrides, from_dict, load_preset

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REQUIRED_PRESETS = {
    "reverse-none",
    "reverse-bahdanau",
    "reverse-luong-dot",
    "reverse-luong-general",
    "reverse-local-p",
    "copy-local-m",
    "addition-bahdanau",
    "dates-bahdanau",
}


def test_required_presets_exist_and_validate():
    assert set(preset_names()) >= REQUIRED_PRESETS
    for name in REQUIRED_PRESETS:
        config = load_preset(name)
        assert config.name == name
        assert config.description


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_preset_holds_only_non_default_keys(name):
    raw = load_toml(resolve_preset(name))
    assert set(raw) <= {"name", "description", *SECTIONS}
    assert raw["description"].strip()
    defaults = ExperimentConfig()
    for section, values in raw.items():
        if section in SECTIONS:
            for key, value in values.items():
                default = getattr(getattr(defaults, section), key, None)
                assert value != default, f"{name}: {section}.{key} = {value!r} is the default"


def test_unknown_key_suggests_the_closest():
    with pytest.raises(
        AttnlabError, match=r'unknown key train\.max_step \(did you mean "max_steps"\?\)'
    ):
        from_dict({"train": {"max_step": 5}})


def test_unknown_attention_suggests_the_closest():
    with pytest.raises(AttnlabError, match='did you mean "bahdanau"'):
        apply_overrides(ExperimentConfig(), ["model.attention=bahdanu"])


def test_unknown_choice_value_lists_valid_choices():
    with pytest.raises(AttnlabError) as err:
        apply_overrides(ExperimentConfig(), ["train.tf_schedule=linearr"])
    message = str(err.value)
    assert 'did you mean "linear"' in message
    assert "inverse-sigmoid" in message and "\n" not in message


def test_unknown_section_suggests_the_closest():
    with pytest.raises(AttnlabError, match='did you mean "train"'):
        apply_overrides(ExperimentConfig(), ["trian.lr=0.1"])


def test_a_flat_set_that_no_chosen_variant_reads_is_refused_naming_those_that_do():
    """--set model.window=5 beside bahdanau would change nothing: one line, not a silent no-op;
    where a chosen variant reads it (whatever the order of the --set items), it applies."""
    with pytest.raises(AttnlabError) as err:
        apply_overrides(ExperimentConfig(), ["model.attention=bahdanau", "model.window=5"])
    message = str(err.value)
    assert "--set 'model.window=5': no chosen attention variant reads window" in message
    assert "(chosen: bahdanau)" in message and "local-m" in message and "local-p" in message
    config = apply_overrides(ExperimentConfig(), ["model.window=5", "model.attention=local-p"])
    assert config.model.params_for("local-p")["window"] == 5
    transformer = ["model.arch=transformer", "model.self_attention=sliding-window"]
    config = apply_overrides(ExperimentConfig(), [*transformer, "model.window=7"])
    assert config.model.params_for("sliding-window")["window"] == 7


def test_set_coerces_to_the_field_types():
    config = apply_overrides(
        ExperimentConfig(),
        [
            "train.max_steps=500",
            "train.lr=1e-3",
            "model.bidirectional=false",
            "train.betas=0.8,0.95",
            "data.task=copy",
            "train.max_steps=600",  # the last one wins
        ],
    )
    assert config.train.max_steps == 600 and isinstance(config.train.max_steps, int)
    assert config.train.lr == pytest.approx(0.001)
    assert config.model.bidirectional is False
    assert config.train.betas == (0.8, 0.95)
    assert config.data.task == "copy"


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("train.max_steps=abc", "must be an integer"),
        ("train.max_steps=2.5", "must be an integer"),
        ("model.bidirectional=maybe", "must be true or false"),
        ("train.teacher_forcing=1.5", r"out of range \[0, 1\]"),
        ("model.dropout=-0.1", "out of range"),
        ("train.max_steps=0", "out of range"),
        ("train.max_steps", "expected SECTION.KEY=VALUE"),
    ],
)
def test_bad_values_give_one_line_errors(override, pattern):
    with pytest.raises(AttnlabError, match=pattern) as err:
        apply_overrides(ExperimentConfig(), [override])
    assert "\n" not in str(err.value)


def test_min_len_above_max_len_is_refused():
    with pytest.raises(AttnlabError, match="data.min_len=9 is greater than data.max_len=5"):
        apply_overrides(ExperimentConfig(), ["data.min_len=9", "data.max_len=5"])


def test_missing_preset_file_and_unknown_preset_name():
    with pytest.raises(AttnlabError, match="no such preset file"):
        load_preset("does/not/exist.toml")
    with pytest.raises(AttnlabError, match='did you mean "reverse-bahdanau"'):
        load_preset("reverse-bahdanu")


@pytest.mark.parametrize("name", sorted(REQUIRED_PRESETS))
def test_dumps_toml_round_trips(name):
    config = load_preset(name)
    assert from_dict(tomllib.loads(dumps_toml(config))) == config


def test_round_trip_keeps_explicit_attention_hyper_parameters():
    config = apply_overrides(ExperimentConfig(), ["model.attention=local-m", "model.window=3"])
    assert config.model.attn_params == {"window": 3}
    again = from_dict(tomllib.loads(dumps_toml(config)))
    assert again == config
    assert dataclasses.asdict(again.model)["attn_params"] == {"window": 3}


def test_set_name_and_an_attention_parameter_together() -> None:
    cfg = apply_overrides(
        ExperimentConfig(), ["name=my-run", "model.attention=local-m", "model.window=3"]
    )
    assert cfg.name == "my-run"
    assert cfg.model.attention == "local-m" and cfg.model.attn_params == {"window": 3}
    # overriding again keeps the earlier explicit parameter
    again = apply_overrides(cfg, ["train.max_steps=7"])
    assert again.model.attn_params == {"window": 3} and again.train.max_steps == 7


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("train.lr=nan", r"train.lr=nan must be a finite number"),
        ("train.lr=inf", r"train.lr=inf must be a finite number"),
        ("model.dropout=nan", r"model.dropout=nan must be a finite number"),
        ("decode.alpha=-inf", r"decode.alpha=-inf must be a finite number"),
        ("train.betas=2,3", r"train.betas=2,3 must be 2 numbers, each in \[0, 1\)"),
        ("train.betas=0.9", r"train.betas=0.9 must be 2 numbers, each in \[0, 1\)"),
        ("train.betas=0.9,nan", r"train.betas must be a list of finite numbers"),
        ("model.window=nan", r"must be"),  # an attention hyper-parameter (an int)
    ],
)
def test_non_finite_numbers_and_malformed_betas_are_refused(override, pattern):
    with pytest.raises(AttnlabError, match=pattern) as err:
        apply_overrides(ExperimentConfig(), [override])
    assert "\n" not in str(err.value)


def test_a_float_attention_hyper_parameter_must_be_finite():
    from attnlab.nn.attention.base import HParam

    scale = HParam("scale", 1.0, "a float hyper-parameter", low=0.0, high=10.0)
    assert scale.validate("2.5") == 2.5
    for bad in ("nan", float("inf"), "-inf"):
        with pytest.raises(AttnlabError, match="model.scale=.* must be a finite number"):
            scale.validate(bad)


def test_a_type_error_in_a_preset_file_names_the_file(tmp_path):
    from attnlab.experiment import load_preset

    preset = tmp_path / "mine.toml"
    preset.write_text('[model]\nhidden = "big"\n', encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"mine\.toml: model\.hidden must be an integer"):
        load_preset(str(preset))
    preset.write_text("[train]\nlr = nan\n", encoding="utf-8")
    with pytest.raises(AttnlabError, match=r"mine\.toml: train\.lr=nan must be a finite number"):
        load_preset(str(preset))


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("500", 500),
        ("1_000", 1000),
        ("0x10", 16),
        ("0o17", 15),
        ("0b101", 5),
        ("007", 7),
        (" 12 ", 12),
        (str(2**63 - 1), 2**63 - 1),  # the largest: exact, no float round trip
        (str(2**53 + 1), 2**53 + 1),  # a float would make it 2**53
    ],
)
def test_integers_are_parsed_as_integers(literal, expected):
    config = apply_overrides(ExperimentConfig(), [f"train.max_steps={literal}"])
    assert config.train.max_steps == expected and type(config.train.max_steps) is int


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("train.max_steps=1e3", "must be an integer"),  # refused, as 0x10 is accepted: literals
        ("train.max_steps=2.0", "must be an integer"),
        ("train.max_steps=1__0", "must be an integer"),
        ("train.max_steps=99999999999999999999999", r"out of range \[-2\^63"),
        ("train.max_steps=" + "9" * 5000, "must be an integer"),  # no int() of 5,000 digits
        ("train.seed=1180591620717411303424", "out of range"),  # 2**70: no OverflowError
        ("train.seed=-1", "out of range"),
        ("train.threads=100000", r"train.threads=100000 is out of range \[0, 1024\]"),
        ("decode.seed=" + str(2**64), "out of range"),
    ],
)
def test_huge_and_non_integer_values_are_one_line_errors(override, pattern):
    with pytest.raises(AttnlabError, match=pattern) as err:
        apply_overrides(ExperimentConfig(), [override])
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_a_toml_float_for_an_integer_is_refused_like_the_command_line(tmp_path):
    from attnlab.experiment import load_preset

    preset = tmp_path / "mine.toml"
    preset.write_text("[train]\nmax_steps = 1e3\n")
    with pytest.raises(AttnlabError, match=r"mine\.toml: train\.max_steps must be an integer"):
        load_preset(str(preset))
    preset.write_text(f"[train]\nmax_steps = {2**63}\n")
    with pytest.raises(AttnlabError, match="out of range"):
        load_preset(str(preset))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[train]\nmax_steps = " + "9" * 5000 + "\n", "invalid TOML: Exceeds the limit"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "invalid TOML: nested too deeply"),
    ],
)
def test_a_crafted_toml_is_one_error_line(tmp_path, content, needle):
    from attnlab.config import load_toml

    path = tmp_path / "mine.toml"
    path.write_text(content)
    with pytest.raises(AttnlabError, match=needle) as err:
        load_toml(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_toml_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    import os

    from attnlab.config import load_toml

    path = tmp_path / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a plain open() waits forever
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(AttnlabError, match="not a regular file"):
        load_toml(path)
