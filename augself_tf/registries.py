"""Name -> entry registries (methods, protocols, data sources) that refuse a second entry under a taken name.

A registry is a dict whose ``reg[name] = entry`` (and ``update``, ``setdefault``) raises one line when the
name is already registered, so a plug-in cannot silently replace a built-in. ``del reg[name]`` removes an
entry; ``with reg.registered(name, entry):`` registers one for the length of a block (tests).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

V = TypeVar("V")


class Registry(dict[str, V]):
    """A ``{name: entry}`` dict that refuses duplicate names.

    Args:
      kind: what an entry is, for the error line ("method", "protocol", ...).
      entries: the initial entries (registered in order, each checked).
      check: ``check(name, entry, registry)`` run before an entry is added; raises to refuse it.
    """

    def __init__(self, kind: str, entries: Mapping[str, V] | None = None, *,
                 check: Callable[[str, V, Registry[V]], None] | None = None) -> None:
        super().__init__()
        self.kind = kind
        self._check = check
        self.update(entries or {})

    def __setitem__(self, name: str, entry: V) -> None:
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered; choose another name")
        if self._check is not None:
            self._check(name, entry, self)
        super().__setitem__(name, entry)

    def update(self, *args: Any, **kwargs: V) -> None:
        """Registers every entry, or none of them when one is refused (dict.update would bypass the checks)."""
        added = []
        try:
            for name, entry in dict(*args, **kwargs).items():
                self[name] = entry
                added.append(name)
        except Exception:
            for name in added:
                del self[name]
            raise

    def setdefault(self, name: str, default: V) -> V:  # type: ignore[override]
        if name not in self:
            self[name] = default
        return self[name]

    def __ior__(self, other: Mapping[str, V]) -> Registry[V]:  # type: ignore[override]
        self.update(other)
        return self

    @contextlib.contextmanager
    def registered(self, name: str, entry: V) -> Iterator[V]:
        """Registers ``entry`` under ``name`` for the ``with`` block, then removes it (tests)."""
        self[name] = entry
        try:
            yield entry
        finally:
            del self[name]
