"""One generic registry idiom for every extension point (kinds, tags, backends, executors)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from tessera.errors import RegistryError, TesseraError

T = TypeVar("T")


def did_you_mean(name: str, choices: list[str], prefix: str = "") -> str:
    """A '; did you mean ...?' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in choices}
        close = [lowered[name.lower()]] if name.lower() in lowered else []
    return f"; did you mean {' or '.join(repr(prefix + c) for c in close)}?" if close else ""


class Registry(Generic[T]):
    """Names to values, in registration order, with aliases and close-name suggestions."""

    def __init__(self, what: str, error: type[TesseraError] = RegistryError) -> None:
        self.what = what
        self._error = error
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._loaders: list[Callable[[], None]] = []

    def add_loader(self, load: Callable[[], None]) -> None:
        """`load()` runs before a listing and on a lookup that misses: entries that live in
        other packages (plugins) register themselves then, never earlier. It must be cheap
        once done, since it runs on every miss."""
        self._loaders.append(load)

    def _load(self) -> None:
        for load in self._loaders:
            load()

    @overload
    def register(self, name: str, value: T, *, aliases: tuple[str, ...] = ...) -> T: ...
    @overload
    def register(
        self, name: str, value: None = ..., *, aliases: tuple[str, ...] = ...
    ) -> Callable[[T], T]: ...
    def register(
        self, name: str, value: T | None = None, *, aliases: tuple[str, ...] = ()
    ) -> T | Callable[[T], T]:
        """Register `value` under `name`; without a value, return a decorator."""

        def add(item: T) -> T:
            for key in (name, *aliases):
                if key in self._items or key in self._aliases:
                    raise self._error(f"{self.what} {key!r} is already registered")
            self._items[name] = item
            for alias in aliases:
                self._aliases[alias] = name
            return item

        return add if value is None else add(value)

    def unregister(self, name: str) -> None:
        """Remove a name and its aliases (used by tests that register throwaway entries)."""
        self._items.pop(name, None)
        for alias in [a for a, n in self._aliases.items() if n == name]:
            del self._aliases[alias]

    def canonical_name(self, name: str) -> str | None:
        if name in self._items:
            return name
        found = self._aliases.get(name)
        if found is None and self._loaders:
            self._load()
            found = name if name in self._items else self._aliases.get(name)
        return found

    def find(self, name: str) -> T | None:
        canonical = self.canonical_name(name)
        return None if canonical is None else self._items[canonical]

    def get(self, name: str) -> T:
        found = self.find(name)
        if found is None:
            raise self._error(self.unknown_message(name))
        return found

    def unknown_message(self, name: str) -> str:
        known = self.names()
        return (
            f"unknown {self.what} {name!r}{did_you_mean(name, known + list(self._aliases))}"
            f" (known: {', '.join(known)})"
        )

    def names(self) -> list[str]:
        self._load()
        return list(self._items)

    def aliases_of(self, name: str) -> list[str]:
        return [alias for alias, target in self._aliases.items() if target == name]

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._items.items())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.canonical_name(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
