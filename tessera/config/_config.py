"""CompilationConfig: the bag of targets, one host, the executor, the runtime and flow options.

It accepts every input form (one target, a priority list, a legacy {device: target} dict, a
comma string, JSON, a composite target, named executors), validates it, and puts it in one
canonical form: for each device type, its least-specialised device target, then the backends
serving it in priority order, then any more specialised device targets kept for partitions
that ask. A config with named executors holds one such form per executor.
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
from tessera.config._canonical import (
    Item,
    NamedTarget,
    apply_target_options,
    canonicalize,
    check_host,
    choose_host,
    expand_composites,
    name_of,
    target_of,
    unknown_name,
)
from tessera.config._executors import (
    ExecutorConfig,
    Overrides,
    build_executors,
    executors_to_dict,
    target_pool,
)
from tessera.config._options import EXECUTORS, RUNTIMES, FlowOptions, Partitioner
from tessera.errors import ConfigError, TargetError
from tessera.target import KINDS, TAGS, Target, kind_for_device
from tessera.target._syntax import split_top_level

__all__ = ["CompilationConfig", "ConfigLike", "NamedTarget", "split_target_option"]

ConfigLike: TypeAlias = Any  # every form `CompilationConfig.create` accepts
_LEGACY_DEVICE_CODES = {1: "cpu", 2: "cuda"}  # DLDeviceType codes used by legacy dicts
_FULL_FORM_KEYS = ("targets", "host", "executor", "runtime", "options", "executors")


@dataclass(frozen=True)
class CompilationConfig:
    """Build with `CompilationConfig.create(...)`; change with `dataclasses.replace`.

    `entries`, `host`, `executor` (the executor kind), `runtime` and `options` describe one
    target list. With named `executors`, they are those of the first executor, and
    `executor_config(name)` gives each executor's; `tessera.compile` needs one picked."""

    entries: tuple[NamedTarget, ...]
    host: Target
    executor: str = "graph"
    runtime: str = "python"
    options: FlowOptions = field(default_factory=FlowOptions)
    executors: tuple[ExecutorConfig, ...] = ()

    def __post_init__(self) -> None:
        EXECUTORS.get(self.executor)
        RUNTIMES.get(self.runtime)
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"target names must be unique, got {names}")
        canonical = canonicalize([(e.name, e.target) for e in self.entries], self.host)
        if canonical != self.entries:
            raise ConfigError(
                "config targets are not in canonical order; build it with CompilationConfig.create"
            )
        check_host(self.host, self.targets)
        if self.executors:
            executor_names = [e.name for e in self.executors]
            if len(set(executor_names)) != len(executor_names):
                raise ConfigError(f"executor names must be unique, got {executor_names}")
            target_pool(self.executors)
            if _flat_fields(self.executors[0]) != (self.entries, self.host, self.executor,
                                                   self.runtime, self.options):
                raise ConfigError(
                    "a config's targets, host, executor, runtime and options are those of its "
                    "first executor; build it with CompilationConfig.create"
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
        """Canonicalise `targets` (any accepted form) with the given host and options.
        `executor` is the executor kind (graph); with named executors, `executor`,
        `runtime`, `target_options` and `options` apply to every executor."""
        host = legacy_host(host, target_host, ConfigError)
        base = _collect(targets)
        if base.executors is not None:
            if host is not None:
                raise ConfigError("a config with named executors takes no host=: each "
                                  "executor names its host with 'target_host'")
            return cls._of(build_executors(base.executors, Overrides(
                executor, runtime, options, {} if target_options is None else target_options)))
        items = apply_target_options(base.items, {} if target_options is None else target_options)
        items, carried = expand_composites(items)
        chosen_host = choose_host(host if host is not None else base.host, carried, items)
        entries = canonicalize(items, chosen_host)
        return cls(
            entries=entries,
            host=chosen_host,
            executor=_known(EXECUTORS, executor or base.executor or "graph"),
            runtime=_known(RUNTIMES, runtime or base.runtime or "python"),
            options=FlowOptions.create(options, FlowOptions.create(base.options)),
        )

    @classmethod
    def _of(cls, executors: tuple[ExecutorConfig, ...]) -> CompilationConfig:
        entries, host, executor, runtime, options = _flat_fields(executors[0])
        return cls(entries, host, executor, runtime, options, executors)

    @classmethod
    def from_json(cls, text: str) -> CompilationConfig:
        data = _load_json(text, "config JSON")
        if not isinstance(data, Mapping) or "targets" not in data:
            raise ConfigError("config JSON must be an object with a 'targets' entry")
        return cls.create(data)

    # -- named executors -----------------------------------------------------------------
    @property
    def executor_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.executors)

    def executor_config(self, name: str | None = None) -> CompilationConfig:
        """The config of one executor: one target list, ready to compile.

        With named executors, `name` picks one (it may be left out when there is only one).
        A config without them is one already: it comes back as it is, and a `name` given
        is taken as the executor kind (graph), as `create(executor=...)` takes it; this is
        what `tessera.compile(model, config, executor=...)` does."""
        if not self.executors:
            if name is None or name == self.executor:
                return self
            if name in EXECUTORS:
                return CompilationConfig.create(self, executor=name)
            raise ConfigError(
                f"{EXECUTORS.unknown_message(name)}; this config has no named executors, so "
                "executor= (--executor) is taken as the executor kind (name executors under "
                "'executors' in the config to pick one by name)")
        names = list(self.executor_names)
        if name is None:
            if len(self.executors) > 1:
                raise ConfigError(
                    f"this config has {len(names)} executors ({', '.join(names)}); pick one, "
                    f"e.g. tessera.compile(model, config, executor={names[0]!r}), "
                    f"config.executor_config({names[0]!r}) or --executor {names[0]} on the "
                    "command line")
            chosen = self.executors[0]
        elif name in names:
            chosen = self.executors[names.index(name)]
        else:
            hint = (f"{name!r} is an executor kind, which each executor sets with 'executor' "
                    "in the config; executor= (--executor) picks an executor by name"
                    if name in EXECUTORS
                    else "executor= (--executor) picks one of the config's executors by name")
            raise unknown_name("executor", name, names, hint)
        entries, host, executor, runtime, options = _flat_fields(chosen)
        return CompilationConfig(entries, host, executor, runtime, options)

    def to_target(self) -> Target:
        """The config's targets and host as one composite target (what `Target(config)`
        gives). Names, executor, runtime and flow options are not part of a target."""
        if len(self.executors) > 1:
            raise ConfigError(
                f"a config with {len(self.executors)} executors is not one composite target; "
                f"take one executor's: config.executor_config({self.executors[0].name!r})"
                ".to_target()")
        return Target({"kind": "composite", "host": self.host, "devices": list(self.targets)})

    # -- lookups -------------------------------------------------------------------------
    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(e.target for e in self.entries)

    @property
    def named_targets(self) -> dict[str, Target]:
        """Every named target: those of the target list, or with named executors, those of
        all executors."""
        if self.executors:
            return target_pool(self.executors)
        return {e.name: e.target for e in self.entries}

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.device_type for t in self.targets))

    @property
    def priority(self) -> tuple[Target, ...]:
        """Every backend target in priority order (the order greedy partitioning walks)."""
        return tuple(t for t in self.targets if t.is_external_codegen)

    @property
    def partitioner(self) -> Partitioner:
        """The partitioner to use: 'auto' resolves to collage with more than one backend."""
        if self.options.partitioner is not Partitioner.AUTO:
            return self.options.partitioner
        return Partitioner.COLLAGE if len(self.priority) > 1 else Partitioner.GREEDY

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
        if self.executors:
            return executors_to_dict(self.executors)
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
        if self.executors:
            return "; ".join(f"{name}: {self.executor_config(name)}"
                             for name in self.executor_names)
        return ",".join(str(t) for t in self.targets)

    def cache_key(self) -> str:
        """Digest of what changes a compile's result: tuning keys and cache-key options."""
        if self.executors:
            keys = {name: self.executor_config(name).cache_key() for name in self.executor_names}
            return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:16]
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
    items: list[Item]
    host: Any = None
    executor: str | None = None
    runtime: str | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    executors: Mapping[Any, Any] | None = None  # a mapping with named executors, whole


def _flat_fields(spec: ExecutorConfig) -> tuple[tuple[NamedTarget, ...], Target, str, str,
                                                FlowOptions]:
    return spec.flat_entries(), spec.host.target, spec.executor, spec.runtime, spec.options


def _collect(value: ConfigLike) -> _Collected:
    if value is None:
        raise ConfigError("no targets given; pass e.g. 'cpu' or 'openvino,onnxruntime,cpu'")
    if isinstance(value, CompilationConfig):
        if value.executors:
            return _Collected([], executors=value.to_dict())
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
    if "executors" in value:
        return _Collected([], executors=value)
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
            items: list[Item] = [(name_of(n), target_of(t)) for n, t in raw_targets.items()]
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
        return _Collected([(None, target_of(value))])
    legacy: list[Item] = []
    for key, target_like in value.items():  # legacy {device: target}
        device = _LEGACY_DEVICE_CODES.get(key) if isinstance(key, int) else key
        if not isinstance(device, str):
            raise ConfigError(f"legacy target dict keys must be device types, got {key!r}")
        _check_device_type(device)
        target = target_of(target_like)
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


def _entry(item: Any) -> Item:
    if isinstance(item, Mapping) and "target" in item:
        extra = set(item) - {"name", "target"}
        if extra:
            raise ConfigError(
                f"a named target entry has only 'name' and 'target', got {sorted(extra)}"
            )
        return (name_of(item["name"]) if "name" in item else None), target_of(item["target"])
    return None, target_of(item)


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
    """JSON, where a comma before a closing bracket is allowed (as configs copied from
    documents often have one)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        relaxed = _without_trailing_commas(text)
        if relaxed != text:
            try:
                return json.loads(relaxed)
            except json.JSONDecodeError:
                pass
    except RecursionError:
        pass
    return load_json(text, what, ConfigError)  # the error, as the text has it


def _without_trailing_commas(text: str) -> str:
    out, in_string, i = [], False, 0
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            in_string = ch != '"'
        elif ch == '"':
            in_string = True
        elif ch == ",":
            j = i + 1
            while j < len(text) and text[j].isspace():
                j += 1
            if j < len(text) and text[j] in "}]":
                i += 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _known(registry: Any, name: str) -> str:
    registry.get(name)
    canonical: str = registry.canonical_name(name)
    return canonical
