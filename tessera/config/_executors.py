"""Named executors: one config describing several executors (say, a DSP board and a
low-power core), each with its own targets, host, executor kind, runtime and flow options.

The JSON shape (in keys, '_' and '-' are alike)::

    {"targets": {"dsp-cpu": {"kind": "llvm", "mcpu": "cortex-a72"}, "gpu": {"kind": "cuda"}},
     "executors": {"dsp": {"targets": ["dsp-cpu", "gpu"], "target_host": "dsp-cpu",
                           "executor": "vm", "runtime": "c++",
                           "flow-config": {"link-params": true,
                                           "enable-byoc": ["onnxruntime"]}}}}

Every target is named once at the top; an executor lists its device targets and its host by
name. `enable-byoc` is the executor's backend list in priority order: names of backend
targets, or backend targets themselves. Each executor is validated on its own, so two cpu
targets that could not share one target list may sit in two executors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera._private.registry import Registry, did_you_mean
from tessera.config._canonical import (
    Item,
    NamedTarget,
    apply_target_options,
    canonicalize,
    check_host,
    name_of,
    target_of,
    unknown_name,
)
from tessera.config._options import EXECUTORS, RUNTIMES, FlowOptions, Implementation
from tessera.errors import ConfigError, TargetError
from tessera.target import Target
from tessera.target._target import host_problem

__all__ = ["ExecutorConfig", "Overrides", "build_executors", "executors_to_dict",
           "target_pool"]

_TOP_KEYS = ("targets", "executors", "executor", "runtime", "options")
_EXECUTOR_KEYS = ("targets", "target-host", "executor", "runtime", "flow-config")
_BYOC = "enable-byoc"


@dataclass(frozen=True)
class ExecutorConfig:
    """One named executor. `targets` are its device targets and `backends` the backend
    targets serving them in priority order, both in canonical order; `host` is one of the
    config's named targets. `executor` is the executor kind (graph) and `runtime` the
    runtime; neither enters a tuning key."""

    name: str
    targets: tuple[NamedTarget, ...]
    backends: tuple[NamedTarget, ...]
    host: NamedTarget
    executor: str = "graph"
    runtime: str = "python"
    options: FlowOptions = field(default_factory=FlowOptions)

    def flat_entries(self) -> tuple[NamedTarget, ...]:
        """The executor's targets in a single config's canonical form (names kept)."""
        items: list[Item] = [(t.name, t.target) for t in (*self.targets, *self.backends)]
        host_device = self.host.target.device_type
        if (not any(t.target.device_type == host_device for t in self.targets)
                and any(b.target.device_type == host_device for b in self.backends)):
            items.append((self.host.name, self.host.target))  # the host serves its backends
        try:
            entries = canonicalize(items, self.host.target)
            check_host(self.host.target, [e.target for e in entries])
        except ConfigError as err:
            raise ConfigError(f"executor {self.name!r}: {err}") from None
        return entries


@dataclass(frozen=True)
class Overrides:
    """What `CompilationConfig.create`'s keywords change in every executor."""

    executor: str | None = None
    runtime: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    target_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def build_executors(data: Mapping[Any, Any], overrides: Overrides) -> tuple[ExecutorConfig, ...]:
    """The executors of a config mapping that has an 'executors' entry."""
    fields = _fields(data, _TOP_KEYS, "a config with executors",
                     {"host": "with 'executors', each executor names its host in "
                              "'target_host'; remove the top-level 'host'"})
    raw_targets = fields.get("targets")
    if not isinstance(raw_targets, Mapping) or not raw_targets:
        raise ConfigError("with 'executors', 'targets' must name every target: "
                          "{\"targets\": {\"dsp-cpu\": {\"kind\": \"llvm\", \"mcpu\": "
                          "\"cortex-a72\"}, ...}}")
    items: list[Item] = [(name_of(n), _named(n, t)) for n, t in raw_targets.items()]
    pool: dict[str, Target] = {
        n: t for n, t in apply_target_options(items, overrides.target_options) if n is not None}
    raw_executors = fields.get("executors")
    if not isinstance(raw_executors, Mapping) or not raw_executors:
        raise ConfigError("'executors' must be an object of named executors: "
                          "{\"dsp\": {\"targets\": [\"dsp-cpu\"], \"target_host\": \"dsp-cpu\"}}")
    defaults = _Defaults(_str(fields.get("executor"), "'executor'"),
                         _str(fields.get("runtime"), "'runtime'"),
                         FlowOptions.create(_mapping(fields.get("options") or {}, "'options'")))
    defined = frozenset(pool)
    return tuple(_executor(name_of(name), entry, pool, defined, defaults, overrides)
                 for name, entry in raw_executors.items())


def target_pool(executors: tuple[ExecutorConfig, ...]) -> dict[str, Target]:
    """Every named target the executors use, by name, in order of first use."""
    pool: dict[str, Target] = {}
    for spec in executors:
        for named in (*spec.targets, spec.host, *spec.backends):
            if pool.setdefault(named.name, named.target) != named.target:
                raise ConfigError(
                    f"the name {named.name!r} stands for {str(pool[named.name])!r} and for "
                    f"{str(named.target)!r}; give each target its own name")
    return pool


def executors_to_dict(executors: tuple[ExecutorConfig, ...]) -> dict[str, Any]:
    defaults = FlowOptions().to_dict()
    out: dict[str, Any] = {"targets": {n: t.to_dict() for n, t in target_pool(executors).items()},
                           "executors": {}}
    for spec in executors:
        options = spec.options.to_dict()
        flow = {"link-params": options.pop("link-params"),
                _BYOC: [b.name for b in spec.backends],
                **{k: v for k, v in options.items() if v != defaults[k]}}
        out["executors"][spec.name] = {
            "targets": [t.name for t in spec.targets], "target_host": spec.host.name,
            "executor": spec.executor, "runtime": spec.runtime, "flow-config": flow}
    return out


# -- one executor --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Defaults:
    """The top-level 'executor', 'runtime' and 'options': what an executor does not set."""

    executor: str | None
    runtime: str | None
    options: FlowOptions


def _executor(name: str, entry: Any, pool: dict[str, Target], defined: frozenset[str],
              defaults: _Defaults, overrides: Overrides) -> ExecutorConfig:
    """One executor. `pool` holds the named targets, and gains the backends `enable-byoc`
    lists by value (named after their kind); a name resolves only to a target `defined` in
    the config, so a later 'onnxruntime' is never taken for the name an earlier
    'onnxruntime -device=cuda' was given."""
    where = f"executor {name!r}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} must be an object with 'targets', 'target_host', "
                          f"'executor', 'runtime' and 'flow-config'; got {entry!r}")
    fields = _fields(entry, _EXECUTOR_KEYS, where, {}, aliases={"host": "target-host"})
    devices: list[NamedTarget] = []
    backends: list[NamedTarget] = []
    for target_name in _names(fields.get("targets", []), f"{where}'s 'targets'"):
        if target_name not in defined:
            raise unknown_name("target", target_name, sorted(defined, key=list(pool).index),
                               f"{where} lists it; define it under the top-level 'targets'")
        named = NamedTarget(target_name, pool[target_name])
        (backends if named.target.is_external_codegen else devices).append(named)
    flow = dict(_mapping(fields.get("flow-config") or {}, f"{where}'s 'flow-config'"))
    byoc_keys = [k for k in flow if _key(k) == _BYOC]
    for item in _list(flow.pop(byoc_keys[0]) if byoc_keys else [], f"{where}'s '{_BYOC}'"):
        backends.append(_backend(item, pool, defined, where))
    if not devices and not backends:
        raise ConfigError(f"{where} has no targets; list named targets in its 'targets'")
    try:  # create's keywords, then the executor's flow-config, then the top-level options
        chosen = FlowOptions.create(overrides.options, FlowOptions.create(flow, defaults.options))
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    executor = (overrides.executor or _str(fields.get("executor"), f"{where}'s 'executor'")
                or defaults.executor or "graph")
    runtime = (overrides.runtime or _str(fields.get("runtime"), f"{where}'s 'runtime'")
               or defaults.runtime or "python")
    draft = ExecutorConfig(
        name, tuple(devices), tuple(backends),
        _host(fields.get("target-host"), devices, pool, defined, where),
        _registered(EXECUTORS, executor, where), _registered(RUNTIMES, runtime, where), chosen)
    order = [e.name for e in draft.flat_entries()]
    return dataclasses.replace(draft, targets=tuple(sorted(devices, key=lambda t: order.index(
        t.name))), backends=tuple(sorted(backends, key=lambda t: order.index(t.name))))


def _named(name: Any, value: Any) -> Target:
    target = target_of(value)
    if target.kind.is_composite:
        raise ConfigError(f"the named target {name!r} is a composite target; name each of its "
                          "devices and backends as a target of its own")
    return target.without_host()  # each executor names its host with 'target_host'


def _backend(item: Any, pool: dict[str, Target], defined: frozenset[str], where: str
             ) -> NamedTarget:
    if isinstance(item, str) and item in defined:
        name, target = item, pool[item]
    else:
        try:
            target = target_of(item).without_host()
        except TargetError as err:
            raise ConfigError(f"{where}: '{_BYOC}' entry {item!r}: {err}") from None
        name = next((n for n, t in pool.items() if t == target), "")
    if not target.is_external_codegen:
        raise ConfigError(
            f"{where}: '{_BYOC}' lists backends such as 'onnxruntime' or 'openvino', but "
            f"{item!r} is the {'composite' if target.kind.is_composite else 'device'} target "
            f"{str(target)!r}; list device targets by name in the executor's 'targets'")
    if not name:
        name, suffix = target.kind.name, 1
        while name in pool:
            name, suffix = f"{target.kind.name}-{suffix}", suffix + 1
        pool[name] = target
    return NamedTarget(name, target)


def _host(value: Any, devices: list[NamedTarget], pool: dict[str, Target],
          defined: frozenset[str], where: str) -> NamedTarget:
    if value is None:
        cpus = [d for d in devices if host_problem(d.target) is None]
        if not cpus:
            raise ConfigError(f"{where} has no cpu target to host it; add \"target_host\": "
                              "NAME, naming a cpu target under the top-level 'targets'")
        return cpus[0]
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise ConfigError(f"{where}'s 'target_host' names one target, got {list(value)!r}")
        value = value[0]
    if not isinstance(value, str):
        raise ConfigError(f"{where}'s 'target_host' is the name of one of the targets, e.g. "
                          f"\"dsp-cpu\"; got {value!r}")
    if value not in defined:
        raise unknown_name("target", value, sorted(defined, key=list(pool).index),
                           f"{where} names it as its host; define it under the top-level "
                           "'targets'")
    problem = host_problem(pool[value])
    if problem:
        raise ConfigError(f"{where}'s host {value!r}: {problem}")
    return NamedTarget(value, pool[value])


# -- small readers -------------------------------------------------------------------------
def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise ConfigError(f"config keys must be strings, got {key!r}")
    return key.replace("_", "-")


def _fields(data: Mapping[Any, Any], valid: tuple[str, ...], where: str,
            refused: Mapping[str, str], aliases: Mapping[str, str] | None = None
            ) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for raw, value in data.items():
        key = _key(raw)
        key = (aliases or {}).get(key, key)
        if key in refused:
            raise ConfigError(refused[key])
        if key not in valid:
            raise ConfigError(f"unknown entry {raw!r} in {where}"
                              f"{did_you_mean(key, list(valid))} (valid: {', '.join(valid)})")
        if key in fields:
            raise ConfigError(f"{key!r} is given more than once in {where}")
        fields[key] = value
    return fields


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be an object of option names to values, got {value!r}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if isinstance(value, str | Mapping | Target):
        return [value]
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{what} must be a list, got {value!r}")
    return list(value)


def _names(value: Any, what: str) -> list[str]:
    names = _list(value, what)
    for name in names:
        if not isinstance(name, str):
            raise ConfigError(f"{what} lists targets by name, got {name!r}; name the target "
                              "under the top-level 'targets' and list its name here")
    return names


def _str(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {value!r}")
    return value


def _registered(registry: Registry[Implementation], name: str, where: str) -> str:
    canonical = registry.canonical_name(name)
    if canonical is None:
        raise ConfigError(f"{where}: {registry.unknown_message(name)}")
    return canonical
