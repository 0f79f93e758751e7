"""Target tags: named, realistic target definitions kept as data.

A tag expands to a target dict; ``{"tag": name, ...overrides}`` or ``"name -opt=v"`` adjusts it.
Composite aliases are tags too: ``ov-cpu`` expands to a host plus its devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from tessera._private.registry import Registry
from tessera.errors import TargetError

__all__ = ["TAGS", "add_tag"]

TAGS: Registry[Mapping[str, Any]] = Registry("target tag", TargetError)


def add_tag(name: str, definition: Mapping[str, Any]) -> None:
    if not isinstance(definition, Mapping) or "kind" not in definition:
        raise TargetError(f"tag {name!r} must be a target dict that names a 'kind', e.g. "
                          f"{{'kind': 'cpu', 'mcpu': 'skylake'}}; got {definition!r}")
    TAGS.register(name, MappingProxyType(dict(definition)))


_X86_HOST = {"kind": "cpu", "mtriple": "x86_64-linux-gnu"}

def _gpu(arch: str, l2_bytes: int | None = None, *, host: dict[str, Any] | None = None,
         warp: bool = False) -> dict[str, Any]:
    """An NVIDIA GPU's tag: what every recent one shares, and what sets it apart."""
    definition: dict[str, Any] = {"kind": "cuda", "arch": arch,
                                  "max-shared-memory-per-block": 49152,
                                  "max-threads-per-block": 1024, "registers-per-block": 65536}
    if warp:
        definition["thread-warp-size"] = 32
    if l2_bytes is not None:
        definition["l2-cache-size-bytes"] = l2_bytes
    if host is not None:
        definition["host"] = host
    return definition


_TAG_DATA: dict[str, dict[str, Any]] = {
    # NVIDIA GPUs, with the host CPU of the usual server that carries them.
    "nvidia/h100": _gpu("sm_90", 52428800, warp=True,
                        host={**_X86_HOST, "mcpu": "sapphirerapids"}),
    "nvidia/a100": _gpu("sm_80", 41943040, warp=True, host={**_X86_HOST, "mcpu": "znver2"}),
    "nvidia/a10g": _gpu("sm_86", 6291456),
    "nvidia/l4": _gpu("sm_89", 50331648),
    "nvidia/t4": _gpu("sm_75", 4194304),
    "nvidia/v100": _gpu("sm_70", 6291456),
    "nvidia/rtx-4090": _gpu("sm_89", 75497472),
    "nvidia/jetson-agx-orin": _gpu("sm_87", host={"kind": "cpu", "mcpu": "cortex-a78ae",
                                                  "mtriple": "aarch64-linux-gnu",
                                                  "num-cores": 12}),
    # CPUs.
    "intel/xeon-8259cl": {"kind": "cpu", "mcpu": "cascadelake", "num-cores": 24,
                          "mtriple": "x86_64-linux-gnu",
                          "mattr": ["+avx2", "+fma", "+avx512f", "+avx512bw", "+avx512vnni"]},
    "intel/xeon-8375c": {"kind": "cpu", "mcpu": "icelake-server", "num-cores": 32,
                         "mtriple": "x86_64-linux-gnu",
                         "mattr": ["+avx2", "+fma", "+avx512f", "+avx512bw", "+avx512vnni"]},
    "intel/core-i7-1185g7": {"kind": "cpu", "mcpu": "tigerlake", "num-cores": 4,
                             "mtriple": "x86_64-linux-gnu", "mattr": ["+avx2", "+fma"]},
    "amd/epyc-7r13": {"kind": "cpu", "mcpu": "znver3", "num-cores": 48,
                      "mtriple": "x86_64-linux-gnu", "mattr": ["+avx2", "+fma"]},
    "arm/graviton3": {"kind": "cpu", "mcpu": "neoverse-v1", "num-cores": 64,
                      "mtriple": "aarch64-linux-gnu", "mattr": ["+neon", "+sve", "+bf16"]},
    "raspberry-pi/4b": {"kind": "cpu", "mcpu": "cortex-a72", "num-cores": 4,
                        "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]},
    # Cloud instances.
    "aws/c5.2xlarge": {"kind": "cpu", "mcpu": "skylake-avx512", "num-cores": 4,
                       "mtriple": "x86_64-linux-gnu",
                       "mattr": ["+avx2", "+fma", "+avx512f", "+avx512bw"]},
    "aws/c6i.2xlarge": {"kind": "cpu", "mcpu": "icelake-server", "num-cores": 4,
                        "mtriple": "x86_64-linux-gnu",
                        "mattr": ["+avx2", "+fma", "+avx512f", "+avx512bw", "+avx512vnni"]},
    "aws/g5.xlarge": _gpu("sm_86", host={**_X86_HOST, "mcpu": "znver2", "num-cores": 2}),
    "aws/p4d.24xlarge": _gpu("sm_80", host={**_X86_HOST, "mcpu": "cascadelake",
                                            "num-cores": 48}),
    # Composite aliases: a host and its devices in priority order.
    "ov-cpu": {"kind": "composite", "host": {"kind": "cpu"}, "devices": ["openvino", "cpu"]},
    "ort-cpu": {"kind": "composite", "host": {"kind": "cpu"}, "devices": ["onnxruntime", "cpu"]},
    "ort-cuda": {"kind": "composite", "host": {"kind": "cpu"},
                 "devices": ["onnxruntime -device=cuda", "cuda"]},
    "cpu-all": {"kind": "composite", "host": {"kind": "cpu"},
                "devices": ["openvino", "onnxruntime", "torch", "cpu"]},
}

# Checked by the tests rather than here: backend kinds such as openvino are registered after
# this module loads.
for _name, _definition in _TAG_DATA.items():
    add_tag(_name, _definition)
