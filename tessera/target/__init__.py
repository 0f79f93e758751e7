"""Targets: one description for every place code can go (devices and backends)."""

from __future__ import annotations

from tessera.target import _device_kinds
from tessera.target._kind import (
    KINDS,
    AttrSpec,
    AttrType,
    Availability,
    TargetKind,
    kind_for_device,
    register_kind,
)
from tessera.target._tags import TAGS
from tessera.target._target import Target, TargetLike, TargetSource, register_tag

del _device_kinds

__all__ = [
    "KINDS",
    "TAGS",
    "AttrSpec",
    "AttrType",
    "Availability",
    "Target",
    "TargetKind",
    "TargetLike",
    "TargetSource",
    "kind_for_device",
    "register_kind",
    "register_tag",
]
