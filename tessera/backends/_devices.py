"""The crossover from a backend target to the device target its partition was given.

A partition is placed on a backend target (`iree`) and a device target (`cpu -mcpu=znver3
-num-cores=2`). What the backend builds is its own target specialised for that device: the
device's attributes become the backend's own attributes wherever the user left those open.

- `-num-cores=N` caps the backend's `num-threads` at N (below this process's core budget it
  sets it; an explicit count above N is lowered, and the note says so);
- code-generation attributes (`-mcpu`, `-mattr`, `-mtriple`) become the attributes a backend
  names in `device_attrs` (IREE's llvm-cpu target, TVM's llvm target);
- every device attribute a backend cannot honour is a note, which `explain` shows.

Because the result is an ordinary target, everything keyed by a target's string or tuning key
(compiled caches, measured costs, probes) changes exactly when the build does: `-num-cores`
changes `num-threads`, a runtime setting that no probe key holds (`probe_attrs`), and `-mcpu`
changes only the keys of backends whose generated code depends on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tessera._private.cores import core_budget
from tessera.target import Target

THREADS = "num-threads"
CORES = "num-cores"
_NOT_CODEGEN = (CORES, "keys")  # device attributes that are no code-generation choice


@dataclass(frozen=True)
class DeviceSettings:
    """What a device target asks of one backend's build: attributes to set on the backend's
    target, and a note for each device attribute it cannot honour as given."""

    attrs: tuple[tuple[str, Any], ...] = ()
    notes: tuple[str, ...] = ()

    def __add__(self, other: DeviceSettings) -> DeviceSettings:
        merged = dict(self.attrs)
        merged.update(other.attrs)
        return DeviceSettings(tuple(merged.items()), self.notes + other.notes)


class DeviceBuilder(Protocol):
    """A backend as its device settings read it (`Backend.device_attrs`, `device_note`)."""

    @property
    def name(self) -> str: ...

    @property
    def device_attrs(self) -> Mapping[str, str]: ...

    @property
    def device_note(self) -> str: ...


def core_cap(device: Target | None) -> int | None:
    """The cores `device` lets code use, where it says (`cpu -num-cores=N`)."""
    if device is None:
        return None
    cores = device.attrs.get(CORES)
    return int(cores) if cores is not None else None


def default_settings(backend: DeviceBuilder, target: Target, device: Target) -> DeviceSettings:
    """The rule every backend follows unless it adds its own: threads capped by the device's
    cores, code-generation attributes mapped through `backend.device_attrs`."""
    return thread_cap(backend, target, device) + codegen(backend, target, device)


def thread_cap(backend: DeviceBuilder, target: Target, device: Target) -> DeviceSettings:
    cores = core_cap(device)
    if cores is None:
        return DeviceSettings()
    if THREADS not in target.kind.schema:
        return DeviceSettings(notes=(f"-{CORES}={cores}: {backend.name} has no thread "
                                     "setting; its library's own threads are not capped",))
    current = int(target.attrs[THREADS]) or core_budget()
    if current <= cores:
        return DeviceSettings()
    notes: tuple[str, ...] = ()
    if THREADS in target.explicit_attrs:
        notes = (f"-{THREADS}={current} of {backend.name} lowered to {cores} by "
                 f"-{CORES}={cores}",)
    return DeviceSettings(((THREADS, cores),), notes)


def codegen(backend: DeviceBuilder, target: Target, device: Target) -> DeviceSettings:
    attrs: list[tuple[str, Any]] = []
    ignored: list[str] = []
    notes: list[str] = []
    explicit = target.explicit_attrs
    for name, value in device.explicit_attrs.items():
        if name in _NOT_CODEGEN:
            continue
        own = backend.device_attrs.get(name)
        if own is None:
            ignored.append(_shown(device, name))
        elif own not in explicit:
            attrs.append((own, value))
        elif explicit[own] != value:
            notes.append(f"{_shown(device, name)}: not applied to {backend.name}, whose "
                         f"target sets {_shown(target, own)}")
    if ignored:
        notes.insert(0, f"{' '.join(ignored)}: not honoured by {backend.name}: "
                        f"{backend.device_note}")
    return DeviceSettings(tuple(attrs), tuple(notes))


def _shown(target: Target, name: str) -> str:
    """`-name=value` as it reads in `target`'s string."""
    alone = Target(target.kind.name).with_attrs(**{name: target.attrs[name]})
    return str(alone).partition(" ")[2] or f"-{name}"


__all__ = ["CORES", "THREADS", "DeviceBuilder", "DeviceSettings", "core_cap",
           "default_settings"]
