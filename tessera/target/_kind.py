"""Target kinds: the schema of a target's attributes, registered where each kind lives."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera._private.registry import Registry, did_you_mean
from tessera.errors import TargetError

__all__ = [
    "KINDS",
    "AttrSpec",
    "AttrType",
    "Availability",
    "TargetKind",
    "kind_for_device",
    "register_kind",
]


class AttrType(enum.Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    STR_LIST = "list[str]"
    TARGET = "Target"
    TARGET_LIST = "list[Target]"


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of a kind. `tuning` says whether it can change generated code or how
    that code runs, and so belongs to the tuning key (what a measured cost is kept under);
    deployment-only options stay out of it. `runtime` marks a tuning attribute that changes
    only how the code runs (threads, streams, spinning), never the code itself: it stays out
    of the code key (`Target.codegen_key`), under which compiled partitions are kept."""

    name: str
    type: AttrType
    default: Any = None
    doc: str = ""
    tuning: bool = True
    runtime: bool = False
    choices: tuple[str, ...] | None = None
    minimum: int | None = None
    # Returns an error text for a bad (already typed) value, or None when it is fine.
    check: Callable[[Any], str | None] | None = None
    aliases: tuple[str, ...] = ()  # other spellings accepted on input, never written


@dataclass(frozen=True)
class Availability:
    """Whether something can be used on this machine, and why not. `extra` is tessera's
    pip extra that installs it, where it has one."""

    ok: bool
    reason: str = ""
    version: str | None = None
    extra: str | None = None

    def __bool__(self) -> bool:
        return self.ok


Canonicalizer = Callable[[dict[str, Any]], dict[str, Any]]


def _always_available() -> Availability:
    return Availability(True, "built in")


@dataclass(frozen=True, eq=False)
class TargetKind:
    """A kind of target. Device kinds have no `serves`; external codegens (backends) list the
    device types they can serve, and get a `device` attribute choosing one of them."""

    name: str
    device_type: str
    attrs: tuple[AttrSpec, ...] = ()
    default_keys: tuple[str, ...] = ()
    serves: tuple[str, ...] = ()
    doc: str = ""
    canonicalizer: Canonicalizer | None = None
    availability: Callable[[], Availability] = field(default=_always_available)

    @property
    def is_external_codegen(self) -> bool:
        return bool(self.serves)

    @property
    def is_composite(self) -> bool:
        return self.device_type == "composite"

    @property
    def device_types(self) -> tuple[str, ...]:
        return self.serves or (self.device_type,)

    @property
    def schema(self) -> Mapping[str, AttrSpec]:
        return {spec.name: spec for spec in self.attrs}

    def attr(self, name: str, *, context: str = "") -> AttrSpec:
        spec = self.schema.get(name) or next((a for a in self.attrs if name in a.aliases), None)
        if spec is None:
            where = f" in {context!r}" if context else ""
            valid = ", ".join(f"-{a.name}" for a in self.attrs)
            hint = did_you_mean(name, [a.name for a in self.attrs], prefix="-")
            raise TargetError(
                f"unknown option '-{name}' for target kind {self.name!r}{where}{hint}"
                f" (valid options: {valid})"
            )
        return spec

    def is_available(self) -> Availability:
        return self.availability()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TargetKind) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("TargetKind", self.name))

    def __repr__(self) -> str:
        return f"TargetKind({self.name!r})"


_ATTR_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

KINDS: Registry[TargetKind] = Registry("target kind", TargetError)

_KEYS = AttrSpec(
    "keys", AttrType.STR_LIST, doc="dispatch keys, most specific first", tuning=False
)


def register_kind(
    name: str,
    *,
    device_type: str | None = None,
    serves: tuple[str, ...] = (),
    attrs: tuple[AttrSpec, ...] = (),
    default_keys: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
    doc: str = "",
    canonicalizer: Canonicalizer | None = None,
    availability: Callable[[], Availability] | None = None,
) -> TargetKind:
    """Declare a kind. Backends pass `serves`; every kind gets a `keys` attribute, and
    backends also get `device`, which must be one of the device types they serve."""
    keys = default_keys or ((name,) if serves else (device_type or name,))
    common = [AttrSpec(_KEYS.name, _KEYS.type, keys, _KEYS.doc, tuning=False)]
    if serves:
        device = AttrSpec("device", AttrType.STR, serves[0], "device type this backend runs on",
                          choices=serves)
        common.insert(0, device)
    kind = TargetKind(
        name=name,
        device_type=device_type or (serves[0] if serves else name),
        attrs=(*common, *attrs),
        default_keys=keys,
        serves=serves,
        doc=doc,
        canonicalizer=canonicalizer,
        availability=availability or _always_available,
    )
    names = [a.name for a in kind.attrs] + [alias for a in kind.attrs for alias in a.aliases]
    if len(set(names)) != len(names) or set(names) & {"kind", "host", "tag"}:
        raise TargetError(f"target kind {name!r} declares a duplicate or reserved attribute")
    bad = [n for n in names if not _ATTR_NAME.fullmatch(n)]
    if bad:
        raise TargetError(f"target kind {name!r}: attribute names {bad} must be lower-case-dashed")
    return KINDS.register(name, kind, aliases=aliases)


def kind_for_device(device_type: str) -> TargetKind:
    """The device kind (not a backend) whose device type is `device_type`."""
    for _, kind in KINDS.items():
        if kind.device_type == device_type and not kind.is_external_codegen:
            return kind
    devices = sorted(
        {k.device_type for _, k in KINDS.items()
         if not k.is_external_codegen and not k.is_composite}
    )
    raise TargetError(
        f"unknown device type {device_type!r}{did_you_mean(device_type, devices)}"
        f" (known: {', '.join(devices)})"
    )
