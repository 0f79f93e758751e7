"""The canonical form of one target list with its host: the rules every executor's targets
follow, whether the config has one target list or several named executors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from tessera._private.registry import did_you_mean
from tessera.errors import ConfigError
from tessera.target import KINDS, Target, kind_for_device
from tessera.target._target import host_problem

__all__ = ["Item", "NamedTarget", "apply_target_options", "canonicalize", "check_host",
           "choose_host", "expand_composites", "name_of", "target_of", "unknown_name"]

Item: TypeAlias = tuple[str | None, Target]  # a target and its name, if it was given one


@dataclass(frozen=True)
class NamedTarget:
    name: str
    target: Target


def target_of(value: Any) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, str | Mapping):
        return Target(value)
    raise ConfigError(f"expected a target (string, dict or Target), got {value!r}")


def name_of(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"target names must be non-empty strings, got {value!r}")
    return value


def apply_target_options(items: list[Item], options: Mapping[str, Mapping[str, Any]]
                         ) -> list[Item]:
    example = "e.g. target_options={'onnxruntime': {'num-threads': 2}}"
    if not isinstance(options, Mapping):
        raise ConfigError(f"target_options must map a target kind to a mapping of attribute "
                          f"to value, {example}; got {options!r}")
    for kind_name, values in options.items():
        if not isinstance(kind_name, str):
            raise ConfigError(f"target_options keys are target kind names, got {kind_name!r}; "
                              f"{example}")
        if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
            raise ConfigError(f"target_options[{kind_name!r}] must be a mapping of attribute "
                              f"name to value, e.g. {{'num-threads': 2}}; got {values!r}")
        kind = KINDS.canonical_name(kind_name)
        if kind is None or not any(t.kind.name == kind for _, t in items):
            raise ConfigError(
                f"options were given for target kind {kind_name!r}, but no such target is "
                f"configured (targets: {', '.join(str(t) for _, t in items)})"
            )
        items = [(n, t.with_attrs(**values) if t.kind.name == kind else t) for n, t in items]
    return items


def expand_composites(items: list[Item]) -> tuple[list[Item], list[Target]]:
    """Composite targets replaced by their devices, and the hosts the targets carried.

    A target a composite brings that is already listed is dropped, so composite aliases
    combine: `["ov-cpu", "ort-cpu"]` is one cpu with openvino then onnxruntime. A target the
    user lists twice by hand is still an error (in `canonicalize`)."""
    expanded: list[Item] = []
    from_composite: list[bool] = []
    carried: list[Target] = []

    def add(name: str | None, target: Target, brought: bool) -> None:
        bare = target.without_host()
        same = [i for i, (_, t) in enumerate(expanded) if t.without_host() == bare]
        if same and (brought or from_composite[same[0]]):
            return
        expanded.append((name, target))
        from_composite.append(brought)

    for name, target in items:
        if target.host is not None and target.host not in carried:
            carried.append(target.host)
        if target.kind.is_composite:
            for device in target.attrs["devices"]:
                if device.host is not None and device.host not in carried:
                    carried.append(device.host)
                add(None, device, True)
        else:
            add(name, target, False)
    if not expanded:
        raise ConfigError("no targets given; pass e.g. 'cpu' or 'openvino,onnxruntime,cpu'")
    return expanded, carried


def choose_host(explicit: Any, carried: list[Target], items: list[Item]) -> Target:
    """The explicit host (a target, or the name of one of `items`); else the one the
    targets carry; else the first cpu target; else `cpu`."""
    named = {name: target for name, target in items if name is not None}
    if isinstance(explicit, str) and explicit.strip() in named:  # a named target as host
        host = named[explicit.strip()]
    elif explicit is not None:
        host = explicit if isinstance(explicit, Target) else Target(explicit)
    elif len(carried) > 1:
        raise ConfigError(
            f"the targets carry different hosts ({', '.join(repr(str(h)) for h in carried)}); "
            "pass one host= explicitly"
        )
    elif carried:
        host = carried[0]
    else:
        cpus = [t for _, t in items if t.kind.device_type == "cpu" and not t.is_external_codegen]
        host = cpus[0] if cpus else Target("cpu")
    problem = host_problem(host)
    if problem:
        raise ConfigError(problem)
    return host.without_host()


def check_host(host: Target, targets: list[Target] | tuple[Target, ...]) -> None:
    """A ConfigError when `host` is no CPU target, or contradicts a CPU device target: both
    set one attribute to different values, so they cannot be one machine's CPU."""
    problem = host_problem(host)
    if problem:
        raise ConfigError(problem)
    for target in targets:
        if target.is_external_codegen or target.kind != host.kind:
            continue
        theirs = target.explicit_attrs
        clashes = [k for k, v in host.explicit_attrs.items() if k in theirs and theirs[k] != v]
        if clashes:
            key = clashes[0]
            raise ConfigError(
                f"the host {str(host)!r} contradicts the {target.device_type} target "
                f"{str(target)!r}: -{key} is {host.attrs[key]!r} on one and "
                f"{theirs[key]!r} on the other, so they cannot be the same CPU; give the "
                f"host the target's -{key}, or leave the host out (the first cpu target "
                "hosts then)"
            )


def canonicalize(items: list[Item], host: Target) -> tuple[NamedTarget, ...]:
    """For each device type (in order of first mention): its least-specialised device target,
    the backends serving it in priority order, then its more specialised device targets.
    Unnamed targets are named after their kind or device type."""
    seen: list[Target] = []
    for _, target in items:
        bare = target.without_host()
        if bare in seen:
            raise ConfigError(f"target {str(bare)!r} is listed twice; list each target once")
        seen.append(bare)
    names = {id(t): n for (n, _), t in zip(items, seen, strict=True)}
    order = list(dict.fromkeys(t.device_type for t in seen))
    grouped: list[tuple[str | None, Target, str]] = []
    for device in order:
        devices = [t for t in seen if not t.is_external_codegen and t.device_type == device]
        if not devices:
            default = host if host.device_type == device else Target(kind_for_device(device).name)
            devices = [default]
        least = _least_specialised(device, devices)
        grouped.append((names.get(id(least)), least, device))
        grouped += [(names.get(id(t)), t, t.kind.name) for t in seen
                    if t.is_external_codegen and t.device_type == device]
        grouped += [(names.get(id(t)), t, f"{device}-{i}")
                    for i, t in enumerate((t for t in devices if t is not least), start=1)]
    given = [n for n, _, _ in grouped if n is not None]
    if len(set(given)) != len(given):
        twice = next(n for n in given if given.count(n) > 1)
        raise ConfigError(f"target names must be unique; {twice!r} names two targets")
    taken = set(given)
    entries = []
    for name, target, default_name in grouped:
        if name is None:
            name = default_name
            suffix = 1
            while name in taken:
                name, suffix = f"{default_name}-{suffix}", suffix + 1
            taken.add(name)
        entries.append(NamedTarget(name, target))
    return tuple(entries)


def _least_specialised(device: str, devices: list[Target]) -> Target:
    for candidate in devices:
        if all(other.is_specialization_of(candidate) for other in devices):
            return candidate
    a, b = next(
        (x, y) for x in devices for y in devices
        if x is not y and not x.is_specialization_of(y) and not y.is_specialization_of(x)
    )
    raise ConfigError(
        f"two {device} device targets, {str(a)!r} and {str(b)!r}, where neither specialises the "
        "other; keep one, or make one a specialisation of the other (or, when they belong "
        "to different machines, give each its own executor)"
    )


def unknown_name(what: str, name: str, known: list[str], fix: str) -> ConfigError:
    """'no <what> named NAME; did you mean ...? (names: ...); <fix>'."""
    return ConfigError(f"no {what} named {name!r}{did_you_mean(name, known)} "
                       f"(names: {', '.join(known) or 'none'}); {fix}")
