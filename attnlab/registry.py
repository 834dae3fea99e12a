"""A small registry type: name -> factory + metadata.

Menus (CLI, TUI), config validation and the parametrised tests all enumerate registries,
so a new attention variant, task or architecture is one class plus one registration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from attnlab.errors import unknown_choice

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered item: its name, what builds it, and free-form metadata for menus."""

    name: str
    factory: T
    meta: Any = None


@dataclass
class Registry(Generic[T]):
    """Ordered name -> Entry mapping with "did you mean" lookups."""

    kind: str
    _entries: dict[str, Entry[T]] = field(default_factory=dict)
    _plugin_group: str | None = None
    _plugins_loaded: bool = False

    def register(self, name: str, meta: Any = None) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name", meta)`` above a class or function."""

        def decorate(factory: T) -> T:
            self.add(name, factory, meta)
            return factory

        return decorate

    def add(self, name: str, factory: T, meta: Any = None) -> None:
        if name in self._entries and self._entries[name].factory is not factory:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = Entry(name, factory, meta)

    def remove(self, name: str) -> None:
        """Unregister (used by tests that register a dummy entry)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> Entry[T]:
        self._load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise unknown_choice(self.kind, name, self._entries) from None

    def names(self) -> list[str]:
        self._load_plugins()
        return list(self._entries)

    def entries(self) -> list[Entry[T]]:
        self._load_plugins()
        return list(self._entries.values())

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.entries())

    def enable_plugins(self, group: str) -> None:
        """Let other packages add entries through the entry-point ``group``."""
        self._plugin_group = group

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self._plugin_group is None:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self._plugin_group):
            # Loading the module runs its @register decorator; a plain class is added here.
            obj = ep.load()
            if ep.name not in self._entries and hasattr(obj, "spec"):
                self.add(ep.name, obj, obj.spec)
