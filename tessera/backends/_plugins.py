"""Backends from other packages, found through the `tessera.backends` entry-point group.

A plugin's entry point is named after its backend and points at the Backend object (or its
class, or a module that registers it). They load lazily: on the first lookup of a backend or
target kind that misses, and when backends or kinds are listed, never at `import tessera`.
A plugin that fails to load is a PluginWarning, and asking for its backend by name is a
BackendUnavailableError carrying the same message."""

from __future__ import annotations

import sys
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera._private.text import first_line
from tessera.backends._protocol import BACKENDS, Backend
from tessera.errors import TesseraError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["GROUP", "PluginFailure", "PluginWarning", "failures", "load_plugins"]

GROUP = "tessera.backends"


class PluginWarning(UserWarning):
    """A backend plugin (an entry point of the `tessera.backends` group) failed to load."""


@dataclass(frozen=True)
class PluginFailure:
    name: str  # the entry point's name: the backend it promised
    value: str  # 'package.module:attribute'
    dist: str  # the distribution declaring it, with its version
    error: str

    def message(self) -> str:
        return (f"backend plugin {self.name!r} (entry point '{self.name} = {self.value}' in "
                f"group {GROUP!r}, from {self.dist}) failed to load: {self.error}; fix or "
                "uninstall that package")


_lock = threading.RLock()  # the loading thread re-enters through its plugins' own lookups
_scanned: tuple[str, ...] | None = None  # sys.path when the group was last read
_loading = False
_seen: set[tuple[str, str, str]] = set()
_failures: dict[str, PluginFailure] = {}


def load_plugins() -> None:
    """Load each entry point of the group once per process. The group is read again only
    when `sys.path` has changed since (a plugin put on the path at run time is found).
    Other threads wait while plugins load; a lookup made by a plugin's own import returns."""
    global _scanned, _loading
    path = tuple(sys.path)
    if path == _scanned:
        return
    with _lock:
        if path == _scanned or _loading:
            return
        _loading = True
        try:
            for point in _entry_points():
                key = (point.name, point.value, _location(point))
                if key not in _seen:
                    _seen.add(key)
                    _load(point)
        finally:
            _scanned, _loading = path, False


def failures() -> dict[str, PluginFailure]:
    """The plugins that failed to load, by backend name."""
    load_plugins()
    return dict(_failures)


def _entry_points() -> list[EntryPoint]:
    from importlib.metadata import entry_points

    try:
        points = entry_points(group=GROUP)
    except Exception as err:  # an unreadable installed distribution: no plugins, said so
        warnings.warn(PluginWarning(f"could not read the entry points of group {GROUP!r}: "
                                    f"{type(err).__name__}: {err}"), stacklevel=4)
        return []
    found = {(p.name, p.value, _location(p)): p for p in points}
    return [found[key] for key in sorted(found)]


def _location(point: EntryPoint) -> str:
    return str(point.dist.locate_file("")) if point.dist is not None else ""


def _load(point: EntryPoint) -> None:
    dist = point.dist
    where = f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    try:
        _register(point.name, point.load())
    except Exception as err:  # a plugin's own bug must not stop tessera, only that plugin
        detail = first_line(err, 300) if str(err).strip() else ""
        failure = PluginFailure(point.name, point.value, where,
                                f"{type(err).__name__}: {detail}")
        _failures[point.name] = failure
        warnings.warn(PluginWarning(failure.message()), stacklevel=3)


def _register(name: str, loaded: Any) -> None:
    """`loaded` is the Backend, its class, or a module whose import registered it."""
    import types

    if isinstance(loaded, type) and issubclass(loaded, Backend):
        loaded = loaded()
    if isinstance(loaded, Backend):
        if BACKENDS.find(loaded.name) is not loaded:
            BACKENDS.register(loaded.name, loaded)
    elif not isinstance(loaded, types.ModuleType):
        raise TesseraError(f"it points at {type(loaded).__name__} {loaded!r}, not at a "
                           "tessera Backend, a Backend class or a module")
    if name not in BACKENDS:
        raise TesseraError(f"it registered no backend named {name!r} (an entry point of "
                           f"this group is named after its backend; registered: "
                           f"{', '.join(BACKENDS.names())})")
