"""CompilationConfig: the bag of targets, one host, the executor, the runtime and flow options.

It accepts every input form (one target, a priority list, a legacy {device: target} dict, a
comma string, JSON, a composite target), validates it, and puts it in one canonical form:
for each device type, its least-specialised device target, then the backends serving it in
priority order, then any more specialised device targets kept for partitions that ask.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from tessera._private.registry import did_you_mean
from tessera._private.values import legacy_host, load_json
from tessera.config._options import EXECUTORS, RUNTIMES, FlowOptions
from tessera.errors import ConfigError, TargetError
from tessera.target import KINDS, TAGS, Target, kind_for_device
from tessera.target._syntax import split_top_level

__all__ = ["CompilationConfig", "ConfigLike", "NamedTarget", "split_target_option"]

ConfigLike: TypeAlias = Any  # every form `CompilationConfig.create` accepts
_LEGACY_DEVICE_CODES = {1: "cpu", 2: "cuda"}  # DLDeviceType codes used by legacy dicts
_FULL_FORM_KEYS = ("targets", "host", "executor", "runtime", "options")


@dataclass(frozen=True)
class NamedTarget:
    name: str
    target: Target


@dataclass(frozen=True)
class CompilationConfig:
    """Build with `CompilationConfig.create(...)`; change with `dataclasses.replace`."""

    entries: tuple[NamedTarget, ...]
    host: Target
    executor: str = "graph"
    runtime: str = "python"
    options: FlowOptions = field(default_factory=FlowOptions)

    def __post_init__(self) -> None:
        EXECUTORS.get(self.executor)
        RUNTIMES.get(self.runtime)
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"target names must be unique, got {names}")
        canonical = _canonicalize([(e.name, e.target) for e in self.entries], self.host)
        if canonical != self.entries:
            raise ConfigError(
                "config targets are not in canonical order; build it with CompilationConfig.create"
            )

    # -- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        targets: ConfigLike,
        host: Any = None,
        *,
        executor: str | None = None,
        runtime: str | None = None,
        target_host: Any = None,
        target_options: Mapping[str, Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> CompilationConfig:
        """Canonicalise `targets` (any accepted form) with the given host and options."""
        host = legacy_host(host, target_host, ConfigError)
        base = _collect(targets)
        items = _apply_target_options(base.items, {} if target_options is None else target_options)
        items, carried = _expand_composites(items)
        chosen_host = _choose_host(host if host is not None else base.host, carried, items)
        entries = _canonicalize(items, chosen_host)
        return cls(
            entries=entries,
            host=chosen_host,
            executor=_known(EXECUTORS, executor or base.executor or "graph"),
            runtime=_known(RUNTIMES, runtime or base.runtime or "python"),
            options=FlowOptions.create(options, FlowOptions.create(base.options)),
        )

    @classmethod
    def from_json(cls, text: str) -> CompilationConfig:
        data = _load_json(text, "config JSON")
        if not isinstance(data, Mapping) or "targets" not in data:
            raise ConfigError("config JSON must be an object with a 'targets' entry")
        return cls.create(data)

    # -- lookups -------------------------------------------------------------------------
    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(e.target for e in self.entries)

    @property
    def named_targets(self) -> dict[str, Target]:
        return {e.name: e.target for e in self.entries}

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.device_type for t in self.targets))

    @property
    def priority(self) -> tuple[Target, ...]:
        """Every backend target in priority order (the order greedy partitioning walks)."""
        return tuple(t for t in self.targets if t.is_external_codegen)

    @property
    def partitioner(self) -> str:
        """The partitioner to use: 'auto' resolves to collage with more than one backend."""
        if self.options.partitioner != "auto":
            return self.options.partitioner
        return "collage" if len(self.priority) > 1 else "greedy"

    def target_for_device(self, device: str | Target) -> Target:
        """The least-specialised device target serving `device` (a device type or target)."""
        device_type = device.device_type if isinstance(device, Target) else device
        for target in self.targets:
            if target.device_type == device_type and not target.is_external_codegen:
                return target
        raise ConfigError(
            f"no target serves device {device_type!r}"
            f"{did_you_mean(device_type, list(self.devices))}"
            f" (configured devices: {', '.join(self.devices)})"
        )

    def backends_for_device(self, device: str | Target) -> list[Target]:
        device_type = self.target_for_device(device).device_type
        return [t for t in self.priority if t.device_type == device_type]

    def specialized_targets_for_device(self, device: str | Target) -> list[Target]:
        least = self.target_for_device(device)
        return [
            t for t in self.targets
            if not t.is_external_codegen and t.device_type == least.device_type and t != least
        ]

    def get(self, name: str) -> Target:
        named = self.named_targets
        if name not in named:
            raise ConfigError(
                f"no target named {name!r}{did_you_mean(name, list(named))}"
                f" (names: {', '.join(named)})"
            )
        return named[name]

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "targets": [{"name": e.name, "target": e.target.to_dict()} for e in self.entries],
            "host": self.host.to_dict(),
            "executor": self.executor,
            "runtime": self.runtime,
            "options": self.options.to_dict(),
        }

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.targets)

    def cache_key(self) -> str:
        """Digest of what changes a compile's result: tuning keys and cache-key options."""
        payload = {
            "targets": [t.tuning_key() for t in self.targets],
            "options": self.options.cache_key_items(),
            "executor": self.executor,
        }
        text = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def split_target_option(flag: str) -> tuple[str, str]:
    """'target-onnxruntime-num-threads' (tvmc style, dashes optional) -> ('onnxruntime',
    'num-threads')."""
    body = flag.lstrip("-")
    if not body.startswith("target-"):
        raise ConfigError(f"{flag!r} is not a --target-<kind>-<option> flag")
    rest = body[len("target-"):]
    names = sorted(KINDS.names() + [a for n in KINDS.names() for a in KINDS.aliases_of(n)],
                   key=len, reverse=True)
    for name in names:
        if rest.startswith(name + "-") and len(rest) > len(name) + 1:
            return KINDS.get(name).name, rest[len(name) + 1:]
    raise ConfigError(
        f"{flag!r} names no known target kind; expected --target-<kind>-<option>, "
        f"kinds: {', '.join(KINDS.names())}"
    )


# -- collecting the input forms ----------------------------------------------------------
@dataclass
class _Collected:
    items: list[tuple[str | None, Target]]
    host: Any = None
    executor: str | None = None
    runtime: str | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


def _collect(value: ConfigLike) -> _Collected:
    if value is None:
        raise ConfigError("no targets given; pass e.g. 'cpu' or 'openvino,onnxruntime,cpu'")
    if isinstance(value, CompilationConfig):
        return _Collected([(e.name, e.target) for e in value.entries], value.host,
                          value.executor, value.runtime, value.options.to_dict())
    if isinstance(value, Target):
        return _Collected([(None, value)])
    if isinstance(value, os.PathLike):
        return _collect(_read_json_file(Path(value)))
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(".json") and not text.startswith(("{", "[")):
            return _collect(_read_json_file(Path(text)))
        if text.startswith(("{", "[")):
            return _collect(_load_json(text, "config JSON"))
        return _Collected([(None, Target(part)) for part in _split_cli(value)])
    if isinstance(value, Mapping):
        return _collect_mapping(value)
    if isinstance(value, Sequence):
        return _Collected([_entry(item) for item in value])
    raise ConfigError(f"cannot build a CompilationConfig from {type(value).__name__} {value!r}")


def _collect_mapping(value: Mapping[Any, Any]) -> _Collected:
    if "targets" in value:
        unknown = [k for k in value if k not in _FULL_FORM_KEYS]
        if unknown:
            raise ConfigError(
                f"unknown config entries {unknown}"
                f"{did_you_mean(str(unknown[0]), list(_FULL_FORM_KEYS))}"
                f" (valid: {', '.join(_FULL_FORM_KEYS)})"
            )
        raw_targets = value["targets"]
        if isinstance(raw_targets, Mapping):  # named targets: {name: target}
            items: list[tuple[str | None, Target]] = [
                (_name(n), _target(t)) for n, t in raw_targets.items()
            ]
        elif isinstance(raw_targets, list):
            items = [_entry(item) for item in raw_targets]
        else:
            raise ConfigError("'targets' must be a list or a {name: target} object")
        options = value.get("options") or {}
        if not isinstance(options, Mapping):
            raise ConfigError("'options' must be an object of option names to values")
        return _Collected(items, value.get("host"), _str_or_none(value, "executor"),
                          _str_or_none(value, "runtime"), dict(options))
    if "kind" in value or "tag" in value:
        return _Collected([(None, _target(value))])
    legacy: list[tuple[str | None, Target]] = []
    for key, target_like in value.items():  # legacy {device: target}
        device = _LEGACY_DEVICE_CODES.get(key) if isinstance(key, int) else key
        if not isinstance(device, str):
            raise ConfigError(f"legacy target dict keys must be device types, got {key!r}")
        _check_device_type(device)
        target = _target(target_like)
        if target.device_type != device:
            raise ConfigError(
                f"legacy target dict maps device {device!r} to {str(target)!r}, "
                f"which runs on {target.device_type!r}"
            )
        legacy.append((None, target))
    return _Collected(legacy)


def _check_device_type(device: str) -> None:
    try:
        kind_for_device(device)
    except TargetError as err:
        raise ConfigError(str(err)) from None


def _entry(item: Any) -> tuple[str | None, Target]:
    if isinstance(item, Mapping) and "target" in item:
        extra = set(item) - {"name", "target"}
        if extra:
            raise ConfigError(
                f"a named target entry has only 'name' and 'target', got {sorted(extra)}"
            )
        return (_name(item["name"]) if "name" in item else None), _target(item["target"])
    return None, _target(item)


def _target(value: Any) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, str | Mapping):
        return Target(value)
    raise ConfigError(f"expected a target (string, dict or Target), got {value!r}")


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"target names must be non-empty strings, got {value!r}")
    return value


def _str_or_none(value: Mapping[Any, Any], key: str) -> str | None:
    found = value.get(key)
    if found is not None and not isinstance(found, str):
        raise ConfigError(f"{key!r} must be a string, got {found!r}")
    return found


def _split_cli(text: str) -> list[str]:
    names = sorted(KINDS.names() + TAGS.names()
                   + [a for n in KINDS.names() for a in KINDS.aliases_of(n)], key=len, reverse=True)
    # A comma starts a new target only before a kind, tag or alias (so `-mattr=+a,+b` keeps
    # its commas), or before another comma or the end (an empty item, reported below).
    alternatives = "|".join(re.escape(n) for n in names)
    starts = re.compile(r"\s*(?:(?:" + alternatives + r")(?=[\s,]|$)|(?=,|$))")
    parts = [p.strip() for p in split_top_level(text, ",", starts)]
    if any(not p for p in parts):
        raise ConfigError(f"empty target in the list {text!r}")
    return parts


def _read_json_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read config file {str(path)!r}: {err}") from None
    return _load_json(text, f"config file {str(path)!r}")


def _load_json(text: str, what: str) -> Any:
    return load_json(text, what, ConfigError)


def _known(registry: Any, name: str) -> str:
    registry.get(name)
    return name


# -- canonicalisation --------------------------------------------------------------------
def _apply_target_options(
    items: list[tuple[str | None, Target]], options: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str | None, Target]]:
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


def _expand_composites(
    items: list[tuple[str | None, Target]],
) -> tuple[list[tuple[str | None, Target]], list[Target]]:
    expanded: list[tuple[str | None, Target]] = []
    carried: list[Target] = []
    for name, target in items:
        if target.host is not None and target.host not in carried:
            carried.append(target.host)
        if target.kind.is_composite:
            for device in target.attrs["devices"]:
                if device.host is not None and device.host not in carried:
                    carried.append(device.host)
                expanded.append((None, device))
        else:
            expanded.append((name, target))
    if not expanded:
        raise ConfigError("no targets given; pass e.g. 'cpu' or 'openvino,onnxruntime,cpu'")
    return expanded, carried


def _choose_host(
    explicit: Any, carried: list[Target], items: list[tuple[str | None, Target]]
) -> Target:
    if explicit is not None:
        host = Target(explicit) if not isinstance(explicit, Target) else explicit
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
    if host.is_external_codegen or host.kind.is_composite:
        raise ConfigError(f"the host must be a device target such as 'cpu', not {str(host)!r}")
    return host.without_host()


def _canonicalize(
    items: list[tuple[str | None, Target]], host: Target
) -> tuple[NamedTarget, ...]:
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
    taken = {n for n, _, _ in grouped if n is not None}
    if len(taken) != len([n for n, _, _ in grouped if n is not None]):
        raise ConfigError("target names must be unique")
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
        "other; keep one, or make one a specialisation of the other"
    )
