"""Answer "is this backend's library installed?" without importing it."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from tessera.target import Availability


@dataclass(frozen=True)
class LibraryAvailability:
    """A check that finds `module` and reports the first installed distribution's version.
    `extra` is tessera's pip extra for it; None when it must be installed by hand."""

    module: str
    dists: tuple[str, ...]
    extra: str | None

    def __call__(self) -> Availability:
        if not _module_exists(self.module):
            how = (f"pip install 'tessera[{self.extra}]'" if self.extra
                   else f"pip install {self.dists[0]}")
            return Availability(False, f"{self.module} is not installed; install it with: {how}",
                                extra=self.extra)
        for dist in self.dists:
            try:
                version = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
            return Availability(True, f"{dist} {version}", version, self.extra)
        return Availability(True, f"{self.module} (version unknown)", extra=self.extra)


def library_availability(
    module: str, dists: tuple[str, ...], extra: str | None
) -> Callable[[], Availability]:
    """A check that finds `module` and reports the first installed distribution's version.
    `extra` is tessera's pip extra for it; None when it must be installed by hand."""
    return LibraryAvailability(module, dists, extra)


def _module_exists(module: str) -> bool:
    """Like find_spec, but a dotted name does not import its parent packages."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    for part in rest:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None
