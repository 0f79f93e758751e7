"""Which targets may run each node: every configured backend's answer with its reason, the
guard's bans, pins, and the reference fallback. Both partitioners start from this table.

No device changes quietly: every device the config names, or a pin asks for, must be served
by a backend available on this machine (its library, its device and its build for that
device), and the reference fallback runs CPU nodes only, so a model compiled for a GPU never
ends up on the CPU. A config for another machine can still be created, shown and saved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tessera import backends
from tessera.backends import Support, region_support
from tessera.config import CompilationConfig
from tessera.errors import BackendUnavailableError, DeviceUnavailableError, PartitionError
from tessera.ir import Model
from tessera.placement.record._plan import Banned
from tessera.placement.search._pins import pinned_devices
from tessera.target import KINDS, Target

FALLBACK = Target("reference")

# What would serve a device on a machine that has it, and a target for it, for the error
# saying it is not served here; other devices list the backend kinds that declare them.
_SERVED_BY = {
    "cuda": "onnxruntime-gpu (its CUDAExecutionProvider: 'onnxruntime -device=cuda'), a CUDA "
            "build of torch ('torch -device=cuda') or TensorRT ('tensorrt')",
}
_EXAMPLE = {"cpu": "onnxruntime", "cuda": "onnxruntime -device=cuda"}


def candidate_targets(config: CompilationConfig) -> list[Target]:
    """Backend targets in priority order, each available here on its device."""
    return [available(target) for target in config.priority]


def available(target: Target) -> Target:
    """`target`, once this machine has its backend and the backend serves its device here;
    else a BackendUnavailableError (a DeviceUnavailableError for the device)."""
    backend = backends.get(target.kind.name)
    availability = backend.is_available()
    if not availability.ok:
        raise BackendUnavailableError(f"{target.kind.name}: {availability.reason}")
    on_device = backend.device_available(target)
    if not on_device.ok:
        raise DeviceUnavailableError(
            f"device {target.device_type!r} is not available to {str(target)!r} on this "
            f"machine: {on_device.reason}. {_what_serves(target.device_type)}")
    return target


def _what_serves(device: str) -> str:
    found = _SERVED_BY.get(device) or ", ".join(_kinds_serving(device)) or "no known backend"
    elsewhere = "" if device == FALLBACK.device_type else (
        " A config for another machine can still be created, shown and saved; placing it "
        "needs that machine.")
    return f"What serves {device}: {found}.{elsewhere}"


def _kinds_serving(device: str) -> list[str]:
    return [name for name, kind in KINDS.items() if device in kind.serves]


@dataclass(frozen=True)
class SupportTable:
    targets: tuple[Target, ...]  # the configured targets, priority order (fallback last)
    allowed: tuple[tuple[Target, ...], ...]  # per node (topological), priority order
    reasons: dict[str, dict[str, str]]  # node name -> target string -> reason
    pinned: dict[int, Target]  # node index -> the backend target it is pinned to
    # node index -> the device target a pin asked for (any backend of that device may run
    # the node): the partition holding it runs on that device target
    devices: dict[int, Target] = field(default_factory=dict)

    @classmethod
    def build(cls, model: Model, config: CompilationConfig, banned: Banned | None = None,
              pins: Mapping[int, Target] | None = None) -> SupportTable:
        flow = model.dataflow
        types, constants = flow.value_types, flow.constants
        fallback = config.options.fallback
        devices = pinned_devices(pins or {})
        pinned = {i: t for i, t in (pins or {}).items() if i not in devices}
        everyone = served_targets(flow.names, config, pins or {})
        targets = [t for t in everyone if t in config.priority]  # asked about every node
        cpu_fallback = fallback and FALLBACK.device_type in config.devices
        answers: dict[tuple[int, str], tuple[bool, str]] = {}
        whole: dict[str, list[Support]] = {}  # a configured target's answers, every node

        def ask(i: int, target: Target) -> tuple[bool, str]:
            key = (i, target.tuning_key())
            if key not in answers:
                backend = backends.get(target.kind.name)
                if not backend.dynamic_shapes and not model.is_static:
                    answers[key] = (False, _static_only(target, model.symbols))
                    return answers[key]
                region = region_support(backend, flow.nodes[i], model.proto.functions,
                                        model.opset, types, target)
                if region is not None:  # a region kept whole: never a per-node answer
                    answers[key] = (region.ok, region.reason)
                    return answers[key]
                if target in targets:  # asked about (nearly) every node: in one call
                    if key[1] not in whole:
                        whole[key[1]] = backend.supports_model(model, target)
                    support = whole[key[1]][i]
                else:
                    support = backend.supports(
                        flow.nodes[i], model.opset, types, constants, target=target)
                answers[key] = (support.ok, support.reason)
            return answers[key]

        allowed: list[tuple[Target, ...]] = []
        reasons: dict[str, dict[str, str]] = {}
        unplaced: list[int] = []
        for i, name in enumerate(flow.names):
            excluded = (banned or {}).get(name, {})
            why: dict[str, str] = {}
            ok: list[Target] = []
            if i in pinned:
                offered = [pinned[i]]
            elif i in devices:  # any backend of the device the pin asks for
                offered = [t for t in everyone if t.device_type == devices[i].device_type]
            else:
                offered = everyone
            for target in offered:
                if str(target) in excluded:
                    why[str(target)] = excluded[str(target)]
                    continue
                good, reason = ask(i, target)
                why[str(target)] = reason
                if good:
                    ok.append(target)
            reasons[name] = why
            allowed.append(tuple(ok))
            if not ok:
                unplaced.append(i)
        if unplaced:
            hint = ("fallback is off; turn it on to run them on 'reference'" if not fallback
                    else "" if cpu_fallback else
                    "the reference fallback runs CPU nodes only, and the config has no cpu "
                    "device: add 'cpu' to the targets to let it run them")
            raise _unplaced_error(flow.names, [flow.nodes[i].op_type for i in unplaced],
                                  [flow.names[i] for i in unplaced], reasons, hint,
                                  {**pinned, **devices})
        return cls(tuple(everyone), tuple(allowed), reasons, pinned, devices)


def served_targets(names: list[str], config: CompilationConfig,
                   pins: Mapping[int, Target]) -> list[Target]:
    """The targets that may run nodes, in priority order: the config's backends, the
    backends pins name, and the reference for a config with a cpu device (with fallback).
    Each is available here on its device, and every device the config names or a pin asks
    for (`names`: the nodes, for the error) is served by one of them: what no backend here
    serves is an error, never moved to another device."""
    devices = pinned_devices(pins)
    backend_pins = [t for i, t in pins.items() if i not in devices]
    everyone = list(dict.fromkeys([*candidate_targets(config),
                                   *(available(t) for t in backend_pins)]))
    if config.options.fallback and FALLBACK.device_type in config.devices \
            and FALLBACK not in everyone:
        everyone.append(FALLBACK)
    _check_served(names, config, everyone, devices)
    return everyone


def _check_served(names: list[str], config: CompilationConfig, everyone: list[Target],
                  devices: Mapping[int, Target]) -> None:
    served = {t.device_type for t in everyone}
    wanted = dict.fromkeys([*config.devices, *(t.device_type for t in devices.values())])
    for device in wanted:
        if device in served:
            continue
        nodes = [names[i] for i, t in sorted(devices.items()) if t.device_type == device]
        named = _device_target(config, device)
        listed = (f"the config lists {device!r}{'' if named == device else f' ({named})'}"
                  if device in config.devices else f"pins ask for {device!r}")
        off = " and fallback is off" if device == FALLBACK.device_type else ""
        pinned = (f"; node(s) pinned to it: {', '.join(nodes[:10])}"
                  f"{' ...' if len(nodes) > 10 else ''}") if nodes else ""
        raise DeviceUnavailableError(
            f"no backend serves device {device!r} here: {listed}, but no backend for it"
            f"{off}{pinned}. List one in the targets, e.g. "
            f"'{_example(device)},{named}'. {_what_serves(device)}")


def _device_target(config: CompilationConfig, device: str) -> str:
    return str(next((t for t in config.targets if t.device_type == device
                     and not t.is_external_codegen), device))


def _example(device: str) -> str:
    if device in _EXAMPLE:
        return _EXAMPLE[device]
    kinds = _kinds_serving(device)
    return f"{kinds[0]} -device={device}" if kinds else device


def _static_only(target: Target, symbols: tuple[str, ...]) -> str:
    return (f"{target.kind.name} compiles for static shapes, and the model's dimensions "
            f"{', '.join(symbols)} are symbolic: pin them (--input-shape) to use it")


def _unplaced_error(names: list[str], ops: list[str], unplaced: list[str],
                    reasons: Mapping[str, Mapping[str, str]], hint: str,
                    pins: Mapping[int, Target]) -> PartitionError:
    def mark(name: str) -> str:
        pin = pins.get(names.index(name))
        return "" if pin is None else f" [pinned to {pin}]"

    lines = [f"  {n} ({op}){mark(n)}: " + "; ".join(f"{t}: {r}" for t, r in reasons[n].items())
             for n, op in zip(unplaced[:20], ops[:20], strict=True)]
    more = f"\n  ... and {len(unplaced) - 20} more" if len(unplaced) > 20 else ""
    return PartitionError(f"{len(unplaced)} node(s) have no backend{f' ({hint})' if hint else ''}"
                          ":\n" + "\n".join(lines) + more)
