"""PlanDevices: every partition of a plan gets the device target it runs on, from the config.

A partition's backend target names a device type (`onnxruntime` runs on `cpu`); the config
holds that device's targets. The partition gets the least-specialised one
(`CompilationConfig.target_for_device`), unless placement already chose one (a pin or a
named target asking for a more specialised target): that one stays. A device the config has
no target for (the reference fallback's cpu under a cuda-only config) gets the host where it
is that device, else the plain device kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tessera.config import CompilationConfig
from tessera.errors import ConfigError, PartitionError
from tessera.placement.record._plan import Partition, Plan
from tessera.target import Target, kind_for_device


def device_for(config: CompilationConfig, device_type: str) -> Target:
    """The device target a partition on `device_type` gets when placement chose none."""
    try:
        return config.target_for_device(device_type)
    except ConfigError:
        if config.host.device_type == device_type:
            return config.host
        return Target(kind_for_device(device_type).name)


def assign_devices(plan: Plan, config: CompilationConfig,
                   requested: Mapping[str, Target] | None = None) -> Plan:
    """`plan` with a device target on every partition; those placement chose are kept, and a
    partition holding nodes pinned to a device target (`requested`, node name -> target)
    runs on that one."""
    asked = requested or {}
    if all(p.device is not None for p in plan.partitions) and not asked:
        return plan
    parts = []
    for part in plan.partitions:
        wanted = list(dict.fromkeys(asked[n] for n in part.nodes if n in asked))
        if len(wanted) > 1:
            raise PartitionError(
                f"partition on {part.target} holds nodes pinned to different device targets "
                f"({', '.join(repr(str(t)) for t in wanted)}); pin them to backends, or to "
                "one device target")
        if wanted and wanted[0].device_type == part.target.device_type:
            parts.append(replace(part, device=wanted[0]))
        elif part.device is None:
            parts.append(replace(part, device=device_for(config, part.target.device_type)))
        else:
            parts.append(part)
    return replace(plan, partitions=tuple(parts))


def config_devices(config: CompilationConfig) -> tuple[Target, ...]:
    """The device target a partition gets on each device of the config (and the host's)."""
    types = dict.fromkeys((*config.devices, config.host.device_type))
    return tuple(device_for(config, t) for t in types)


def device_of(part: Partition, config: CompilationConfig) -> Target:
    """The device target `part` runs on: its own, or the one `assign_devices` would give."""
    return part.device if part.device is not None else \
        device_for(config, part.target.device_type)


__all__ = ["assign_devices", "config_devices", "device_for", "device_of"]
