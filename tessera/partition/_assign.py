"""Placement by priority: each node goes to the first backend (in the config's priority order)
whose `supports()` claims it, else to the reference fallback. Partitions are runs of
consecutive nodes, in topological order, with one target: such runs are always convex and
their order is a valid schedule."""

from __future__ import annotations

from collections.abc import Mapping

from tessera import backends
from tessera.config import CompilationConfig
from tessera.errors import BackendUnavailableError, PartitionError
from tessera.ir import Model, bits
from tessera.partition._plan import Partition, Plan
from tessera.target import Target

FALLBACK = Target("reference")


def candidate_targets(config: CompilationConfig) -> list[Target]:
    """Backend targets in priority order, each available here."""
    chosen = []
    for target in config.priority:
        backend = backends.get(target.kind.name)
        availability = backend.is_available()
        if not availability.ok:
            raise BackendUnavailableError(f"{target.kind.name}: {availability.reason}")
        chosen.append(target)
    return chosen


Banned = Mapping[str, Mapping[str, str]]  # node name -> target string -> why it is excluded


def assign(model: Model, config: CompilationConfig, banned: Banned | None = None
           ) -> tuple[list[Target], dict[str, dict[str, str]]]:
    """The target of each node (topological order), and every backend's reason per node.
    `banned` excludes targets from nodes (the numeric guard's verdicts)."""
    flow = model.dataflow
    types, constants = flow.value_types, flow.constants
    targets = candidate_targets(config)
    fallback = config.options.fallback
    placed: list[Target] = []
    reasons: dict[str, dict[str, str]] = {}
    unplaced: list[str] = []
    for name, node in zip(flow.names, flow.nodes, strict=True):
        why: dict[str, str] = {}
        found = None
        excluded = (banned or {}).get(name, {})
        for target in targets:
            if str(target) in excluded:
                why[str(target)] = excluded[str(target)]
                continue
            support = backends.get(target.kind.name).supports(node, model.opset, types,
                                                              constants)
            why[str(target)] = support.reason
            if support.ok:
                found = target
                break
        if found is None and fallback:
            support = backends.get("reference").supports(node, model.opset, types, constants)
            why["reference"] = support.reason
            found = FALLBACK if support.ok else None
        reasons[name] = why
        if found is None:
            unplaced.append(name)
        else:
            placed.append(found)
    if unplaced:
        lines = [f"  {n} ({flow.nodes[flow.names.index(n)].op_type}): "
                 + "; ".join(f"{t}: {r}" for t, r in reasons[n].items()) for n in unplaced[:20]]
        more = f"\n  ... and {len(unplaced) - 20} more" if len(unplaced) > 20 else ""
        hint = "" if fallback else " (fallback is off; turn it on to run them on 'reference')"
        raise PartitionError(f"{len(unplaced)} node(s) have no backend{hint}:\n"
                             + "\n".join(lines) + more)
    return placed, reasons


def place_by_priority(model: Model, config: CompilationConfig, banned: Banned | None = None
                      ) -> Plan:
    placed, reasons = assign(model, config, banned)
    flow = model.dataflow
    partitions: list[Partition] = []
    start = 0
    for end in range(1, len(placed) + 1):
        if end == len(placed) or placed[end] != placed[start]:
            mask = bits(range(start, end))
            inputs, outputs = flow.boundary(mask)
            partitions.append(Partition(str(placed[start]), tuple(flow.names[start:end]),
                                        tuple(inputs), tuple(outputs)))
            start = end
    return Plan(tuple(partitions), "priority", reasons)
