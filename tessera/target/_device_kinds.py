"""The device kinds: where code finally runs. Backends declare their kinds in their own files."""

from __future__ import annotations

import os
import re
from typing import Any

from tessera.errors import TargetError
from tessera.target._kind import AttrSpec, AttrType, Availability, register_kind

_ARCH = re.compile(r"sm_\d{2,3}a?")


def _canonicalize_cpu(attrs: dict[str, Any]) -> dict[str, Any]:
    for item in attrs.get("mattr", ()):
        if item[0] not in "+-":
            raise TargetError(f"-mattr item {item!r} must start with '+' or '-', e.g. '+avx2'")
    return attrs


def _check_arch(value: str) -> str | None:
    if _ARCH.fullmatch(value):
        return None
    return f"{value!r} is not a CUDA compute capability of the form sm_NN or sm_NNa (e.g. sm_80)"


def _cuda_available() -> Availability:
    if os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0"):
        return Availability(True, "NVIDIA driver found")
    return Availability(False, "no NVIDIA driver found on this machine")


CPU = register_kind(
    "cpu",
    device_type="cpu",
    aliases=("llvm",),
    default_keys=("cpu",),
    doc="A host CPU; tessera's own fallback code runs here.",
    canonicalizer=_canonicalize_cpu,
    attrs=(
        AttrSpec("mcpu", AttrType.STR, doc="CPU model, e.g. skylake or cortex-a72"),
        AttrSpec("mattr", AttrType.STR_LIST, doc="CPU features, e.g. +avx2,+fma"),
        AttrSpec("mtriple", AttrType.STR, doc="LLVM target triple, e.g. x86_64-linux-gnu"),
        AttrSpec("num-cores", AttrType.INT, doc="number of cores code may use: caps every "
                 "backend's threads", minimum=1, runtime=True),
    ),
)

CUDA = register_kind(
    "cuda",
    device_type="cuda",
    default_keys=("cuda", "gpu"),
    doc="An NVIDIA GPU driven through CUDA.",
    availability=_cuda_available,
    attrs=(
        AttrSpec("arch", AttrType.STR, doc="compute capability, e.g. sm_80", check=_check_arch),
        AttrSpec("max-threads-per-block", AttrType.INT, 1024, "max threads in a block", minimum=1),
        AttrSpec("max-shared-memory-per-block", AttrType.INT, doc="shared memory bytes per block",
                 minimum=1),
        AttrSpec("thread-warp-size", AttrType.INT, 32, "threads in a warp", minimum=1),
        AttrSpec("registers-per-block", AttrType.INT, doc="registers per block", minimum=1),
        AttrSpec("l2-cache-size-bytes", AttrType.INT, doc="L2 cache size in bytes", minimum=1),
    ),
)


def _canonicalize_composite(attrs: dict[str, Any]) -> dict[str, Any]:
    devices = attrs.get("devices", ())
    if not devices:
        raise TargetError("a composite target needs at least one target in -devices")
    for device in devices:
        if device.kind.is_composite:
            raise TargetError(f"composite targets do not nest: {str(device)!r}")
    return attrs


COMPOSITE = register_kind(
    "composite",
    device_type="composite",
    default_keys=("composite",),
    doc="A host (also spelled target_host) plus device and backend targets in priority order.",
    canonicalizer=_canonicalize_composite,
    attrs=(
        AttrSpec("devices", AttrType.TARGET_LIST, aliases=("accelerators",),
                 doc="device and backend targets, by priority (also spelled accelerators)"),
    ),
)
