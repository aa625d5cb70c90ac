"""String registries: one per extension point, so configs and the CLI name things by string."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ptmlab.core.errors import PtmlabError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of implementations. ``@REG.register("name")`` adds one; ``REG.get("name")`` finds it."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._help: dict[str, str] = {}

    def register(self, name: str, help: str = "") -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj, help)
            return obj

        return deco

    def add(self, name: str, obj: T, help: str = "") -> None:
        if name in self._items:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        self._items[name] = obj
        doc = help or (getattr(obj, "__doc__", "") or "").strip().splitlines()
        self._help[name] = doc if isinstance(doc, str) else (doc[0] if doc else "")

    def get(self, name: str) -> T:
        if name not in self._items:
            raise PtmlabError(f"unknown {self.kind} '{name}': {did_you_mean(name, self._items)}")
        return self._items[name]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def reorder(self, key: Callable[[str, T], Any]) -> None:
        """Sort the entries (stably) by ``key(name, obj)``: a listing that must not depend on import order."""
        order = sorted(self._items, key=lambda n: key(n, self._items[n]))
        self._items = {n: self._items[n] for n in order}

    def names(self) -> list[str]:
        return list(self._items)

    def help(self, name: str) -> str:
        return self._help.get(name, "")

    def items(self) -> list[tuple[str, Any]]:
        return list(self._items.items())
