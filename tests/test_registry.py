"""The registry type: lookups with "did you mean", and variants added by other packages."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from attnlab.errors import AttnlabError
from attnlab.nn.attention import ROLE_SELF, Attention, AttentionSpec
from attnlab.registry import Registry


def test_unknown_name_lists_the_choices_and_the_closest_one() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("bahdanau", 1)
    reg.add("luong-general", 2)
    with pytest.raises(AttnlabError) as err:
        reg.get("bahdanu")
    assert (
        str(err.value)
        == 'unknown widget "bahdanu" (did you mean "bahdanau"?); valid: bahdanau, luong-general'
    )


def test_registering_the_same_name_twice_for_another_factory_is_refused() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(ValueError):
        reg.add("a", 2)


def test_an_entry_point_in_the_attention_group_adds_a_variant(monkeypatch) -> None:
    class PluginAttention(Attention):
        spec = AttentionSpec(
            name="plugin-attn",
            roles=frozenset({ROLE_SELF}),
            formula="x",
            complexity="O(1)",
            known_for="a test plugin",
        )

    module = types.ModuleType("attnlab_test_plugin")
    module.PluginAttention = PluginAttention  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "attnlab_test_plugin", module)
    entry_point = importlib.metadata.EntryPoint(
        name="plugin-attn", value="attnlab_test_plugin:PluginAttention", group="attnlab.attention"
    )

    def fake_entry_points(group: str | None = None, **_: object) -> list:
        return [entry_point] if group == "attnlab.attention" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    reg: Registry[type[Attention]] = Registry("attention")
    reg.enable_plugins("attnlab.attention")
    assert "plugin-attn" in reg.names()
    assert reg.get("plugin-attn").factory is PluginAttention
    assert reg.get("plugin-attn").meta.known_for == "a test plugin"
