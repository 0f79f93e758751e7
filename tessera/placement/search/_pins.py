"""Pins: hard placement constraints, by node name, by a regex over names, or by the node's
ONNX metadata_props entry `tessera.target`; and `annotate`, which writes a plan into those
entries so that a placed model can be edited and handed back.

A pin names a backend target (`onnxruntime`: exactly that backend), a device target (`cpu`:
any backend of that device, placement chooses among them), or a named target of the config
(`dsp-cpu`, or the canonical names such as `cpu-1` or `onnxruntime`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera._private.registry import did_you_mean
from tessera.config import CompilationConfig
from tessera.errors import ConfigError, PartitionError
from tessera.ir import DataflowGraph, Model, inline_weights
from tessera.placement.record._plan import Plan
from tessera.target import KINDS, Target

if TYPE_CHECKING:
    import onnx

METADATA_KEY = "tessera.target"
PinSpec = Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None


def resolve_pins(flow: DataflowGraph, pins: PinSpec,
                 config: CompilationConfig | None = None) -> dict[int, Target]:
    """Node index -> pinned target. Keys are node names, `re.Pattern`s or 're:<regex>'
    strings (full match); node metadata pins come first and explicit pins override them.
    A value is a target, or a string naming a named target of `config` (looked up first), a
    backend target or a device target; with `config`, a device target must be one of its
    own (a bare device kind stands for the config's least-specialised target of it)."""
    found: dict[int, Target] = {}
    for i, node in enumerate(flow.nodes):
        for prop in node.metadata_props:
            if prop.key == METADATA_KEY:
                found[i] = _target(prop.value, f"metadata of node {flow.names[i]!r}", config)
    by_name = {name: i for i, name in enumerate(flow.names)}
    explicit: dict[int, tuple[str, Target]] = {}
    for key, value in _pin_items(pins):
        target = _target(value, f"pin {key!r}", config)
        pattern = key if isinstance(key, re.Pattern) else (
            _regex(key) if key.startswith("re:") else None)
        if pattern is not None:
            hits = [i for i, name in enumerate(flow.names) if pattern.fullmatch(name)]
        elif isinstance(key, str) and key in by_name:
            hits = [by_name[key]]
        else:
            raise PartitionError(
                f"pin {key!r} names no node{did_you_mean(str(key), flow.names)}; use a node "
                "name, or 're:<regex>' to match several")
        if not hits:
            raise PartitionError(f"pin {key!r} matches no node name")
        for i in hits:
            previous = explicit.get(i)
            if previous is not None and previous[1] != target:
                raise PartitionError(
                    f"node {flow.names[i]!r} is pinned to both {str(previous[1])!r} (by "
                    f"{previous[0]!r}) and {str(target)!r} (by {key!r})")
            explicit[i] = (str(key), target)
    found.update({i: target for i, (_, target) in explicit.items()})
    return dict(sorted(found.items()))


_PINS_FORM = ("pins must be a mapping of node name or 're:<regex>' to target, e.g. "
              "{'/Softmax': 'onnxruntime', 're:/encoder/.*': 'torch'}")


def _pin_items(pins: PinSpec) -> list[tuple[str | re.Pattern[str], Any]]:
    """The (key, target) pairs of a pin spec, each key a string or a compiled pattern."""
    if pins is None:
        return []
    if isinstance(pins, Mapping):
        items: list[Any] = list(pins.items())
    elif isinstance(pins, Iterable) and not isinstance(pins, (str, bytes)):
        items = list(pins)
    else:
        raise ConfigError(f"{_PINS_FORM}; got {pins!r}")
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise ConfigError(f"{_PINS_FORM}, or a list of (node, target) pairs; got {pins!r} "
                              f"(its item {item!r} is not a pair)")
        if not isinstance(item[0], str | re.Pattern):
            raise ConfigError(f"{_PINS_FORM}; the key {item[0]!r} in {pins!r} is neither a "
                              "node name nor a regular expression")
    return [(key, value) for key, value in items]


def _regex(key: str) -> re.Pattern[str]:
    try:
        return re.compile(key[3:])
    except re.error as err:
        raise ConfigError(f"pin {key!r}: {key[3:]!r} is not a regular expression ({err}); "
                          "escape special characters such as '.' or '[' with a backslash"
                          ) from None


def pinned_devices(pins: Mapping[int, Target]) -> dict[int, Target]:
    """Node index -> the device target a pin asks for, where a pin names a device (any
    backend of it may run the node) rather than a backend: what placement passes on, so the
    node's partition runs on that device target (a specialised one, such as a named
    'cpu -mcpu=skylake', included)."""
    return {i: t for i, t in pins.items() if not t.is_external_codegen}


def _target(value: Any, where: str, config: CompilationConfig | None) -> Target:
    if isinstance(value, str) and config is not None and value.strip() in config.named_targets:
        return config.named_targets[value.strip()]
    try:
        target = value if isinstance(value, Target) else Target(value)
    except Exception as err:
        raise PartitionError(_not_a_target(value, where, config, err)) from err
    if target.kind.is_composite:
        raise PartitionError(f"{where}: {str(target)!r} is a composite target; a pin names one "
                             f"backend, device target or named target ({_valid(config)})")
    if target.is_external_codegen or config is None or target in config.targets:
        return target
    if target == Target(target.kind.name) and target.device_type in config.devices:
        return config.target_for_device(target.device_type)  # a bare kind: the config's
    devices = [str(t) for t in config.targets if not t.is_external_codegen]
    raise PartitionError(
        f"{where}: device target {str(target)!r} is not one of the config's device targets "
        f"({', '.join(devices)}); add it to the targets to pin to it ({_valid(config)})")


def _not_a_target(value: Any, where: str, config: CompilationConfig | None,
                  err: Exception) -> str:
    """Which kind of name failed, and the valid ones."""
    text = value.strip() if isinstance(value, str) else ""
    kind = KINDS.canonical_name(text.split()[0]) if text.split() else None
    if kind is not None:  # a known kind with a bad option: say which kind of target
        what = "backend target" if KINDS.get(kind).is_external_codegen else "device target"
        return f"{where}: {what} {text!r} is not valid: {err}"
    names = list(dict.fromkeys([*(config.named_targets if config is not None else ()),
                                *backends.names(), *_device_kinds()]))
    named = "named target of the config, " if config is not None else ""
    return (f"{where}: {value!r} names no {named}backend or device target"
            f"{did_you_mean(text, names) if text else ''} ({_valid(config)})")


def _valid(config: CompilationConfig | None) -> str:
    named = "" if config is None else f"named targets: {', '.join(config.named_targets)}; "
    devices = _device_kinds() if config is None else [
        str(t) for t in config.targets if not t.is_external_codegen]
    return (f"{named}backends: {', '.join(backends.names())}; device targets: "
            f"{', '.join(devices)}")


def _device_kinds() -> list[str]:
    return [name for name, kind in KINDS.items()
            if not kind.is_external_codegen and not kind.is_composite]


def annotate(model: Model, plan: Plan, only: Iterable[str] | None = None) -> onnx.ModelProto:
    """The model as a valid ONNX model whose nodes record their plan's target in the
    metadata_props entry `tessera.target` (all nodes, or those in `only`). Handed back to
    tessera, those entries are pins: the fixed parts stay, only the rest is placed."""
    import onnx

    copy = inline_weights(model.proto)  # a model of its own, holding its weights
    if copy is model.proto:
        copy = onnx.ModelProto()
        copy.CopyFrom(model.proto)
    flow = DataflowGraph(copy.graph)  # same order as the model's: nodes are references
    where = {n: str(p.target) for p in plan.partitions for n in p.nodes}
    keep = None if only is None else dict.fromkeys(only)
    for name, node in zip(flow.names, flow.nodes, strict=True):
        if name not in where or (keep is not None and name not in keep):
            continue
        for prop in node.metadata_props:
            if prop.key == METADATA_KEY:
                prop.value = where[name]
                break
        else:
            entry = node.metadata_props.add()
            entry.key, entry.value = METADATA_KEY, where[name]
    return copy
