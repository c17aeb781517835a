"""A small generic registry (modelled on lm-evaluation-harness's).

Every swappable thing (algorithms, tasks, models) is registered as a *spec* object in a
``Registry``.  Re-registering a name raises; an unknown name raises ``UnknownName`` with a
"did you mean" suggestion and the list of valid names.  Outside packages add entries through
the entry-point groups ``rlsuite.algorithms``, ``rlsuite.tasks`` and ``rlsuite.models``: each
entry point names a module (or a callable) that registers its entries when imported/called.
"""

from __future__ import annotations

import difflib
import inspect
import sys
from importlib import metadata
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownName(KeyError):
    """An unknown registry name; ``str(err)`` lists the suggestion and the valid names."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0])


def suggest(name: str, valid: list[str]) -> str:
    """Return "did you mean 'x'? " for the closest valid name, or ''."""
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    return f"did you mean '{close[0]}'? " if close else ""


class Registry(Generic[T]):
    """Name → spec mapping with aliases, duplicate protection and helpful errors."""

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._origins: dict[str, str] = {}
        self._group = entry_point_group
        self._plugins_loaded = False

    def register(self, name: str, entry: T, aliases: tuple[str, ...] = ()) -> T:
        """Add ``entry`` under ``name`` (and ``aliases``); raise ValueError on duplicates."""
        for key in (name, *aliases):
            if key in self._entries or key in self._aliases:
                raise ValueError(
                    f"duplicate {self.kind} name '{key}' (already registered at {self.origin(key)})"
                )
        caller = sys._getframe(1)  # not inspect.stack(): that reads every frame's source (~0.1 s a call)
        self._entries[name] = entry
        self._origins[name] = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        for alias in aliases:
            self._aliases[alias] = name
        return entry

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self._group is None:
            return
        self._plugins_loaded = True
        for ep in metadata.entry_points(group=self._group):
            obj = ep.load()
            if callable(obj) and not inspect.ismodule(obj):
                obj()

    def canonical(self, name: str) -> str:
        """Resolve an alias to its canonical name (raise UnknownName if unknown)."""
        self._load_plugins()
        if name in self._entries:
            return name
        if name in self._aliases:
            return self._aliases[name]
        valid = self.names()
        raise UnknownName(
            f"unknown {self.kind} '{name}'; {suggest(name, valid + list(self._aliases))}"
            f"valid: {', '.join(valid)}"
        )

    def get(self, name: str) -> T:
        return self._entries[self.canonical(name)]

    def origin(self, name: str) -> str:
        """File and line where ``name`` was registered."""
        return self._origins.get(self._aliases.get(name, name), "?")

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        for name in self.names():
            yield name, self._entries[name]

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries or name in self._aliases

    def _clear(self) -> None:  # tests only
        self._entries.clear()
        self._aliases.clear()
        self._origins.clear()


def decorator(registry: Registry[T], name: str, aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
    """``@decorator(REG, "name")`` registers the decorated object."""

    def wrap(obj: T) -> T:
        registry.register(name, obj, aliases)
        return obj

    return wrap
