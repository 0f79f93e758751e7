"""PlanDevices: every partition of a plan gets the device target it runs on, from the config.

A partition's backend target names a device type (`onnxruntime` runs on `cpu`); the config
holds that device's targets. The partition gets the least-specialised one
(`CompilationConfig.target_for_device`), unless placement already chose one (a pin or a
named target asking for a more specialised target): that one stays. A device the config has
no target for (the reference fallback's cpu under a cuda-only config) gets the host where it
is that device, else the plain device kind."""

from __future__ import annotations

from dataclasses import replace

from tessera.config import CompilationConfig
from tessera.errors import ConfigError
from tessera.placement._plan import Partition, Plan
from tessera.target import Target, kind_for_device


def device_for(config: CompilationConfig, device_type: str) -> Target:
    """The device target a partition on `device_type` gets when placement chose none."""
    try:
        return config.target_for_device(device_type)
    except ConfigError:
        if config.host.device_type == device_type:
            return config.host
        return Target(kind_for_device(device_type).name)


def assign_devices(plan: Plan, config: CompilationConfig) -> Plan:
    """`plan` with a device target on every partition; those placement chose are kept."""
    if all(p.device is not None for p in plan.partitions):
        return plan
    parts = tuple(p if p.device is not None else
                  replace(p, device=device_for(config, p.target.device_type))
                  for p in plan.partitions)
    return replace(plan, partitions=parts)


def config_devices(config: CompilationConfig) -> tuple[Target, ...]:
    """The device target a partition gets on each device of the config (and the host's)."""
    types = dict.fromkeys((*config.devices, config.host.device_type))
    return tuple(device_for(config, t) for t in types)


def device_of(part: Partition, config: CompilationConfig) -> Target:
    """The device target `part` runs on: its own, or the one `assign_devices` would give."""
    return part.device if part.device is not None else \
        device_for(config, part.target.device_type)


__all__ = ["assign_devices", "config_devices", "device_for", "device_of"]
