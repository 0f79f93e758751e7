"""The plan verifier: the invariants every placement step must keep. Run after each step with
the `verify` flow option (debug mode); each broken invariant is a PartitionError naming it."""

from __future__ import annotations

from collections.abc import Mapping

from tessera.config import CompilationConfig
from tessera.errors import PartitionError
from tessera.ir import Model, NodeSet, bits, members
from tessera.placement.record._plan import Partition, Plan
from tessera.placement.search._support import FALLBACK, SupportTable
from tessera.target import Target


def verify_plan(model: Model, plan: Plan, against: SupportTable | CompilationConfig,
                pins: Mapping[int, Target] | None = None, *, when: str = "") -> None:
    """Every node is in exactly one partition; each partition is convex and its recorded
    nodes, inputs and outputs are what the dataflow graph says of it; partitions come in an
    order where every input is a graph input, a weight or an output of an earlier one; each
    partition's target is one `against` offers (a configured backend, the reference fallback
    when it is on, or a pin's target) on one of its devices; every pin holds. `pins` are node
    index -> target, by default the table's. `when` says where in the flow the check ran."""
    where = f" {when}" if when else ""
    if pins is None and isinstance(against, SupportTable):
        pins = {**against.pinned, **against.devices}
    masks = _masks(model, plan, where)
    _check_partitions(model, plan, masks, where)
    _check_order(model, plan, where)
    _check_targets(plan, against, dict(pins or {}), where)
    _check_pins(model, plan, dict(pins or {}), where)


def _masks(model: Model, plan: Plan, where: str) -> list[NodeSet]:
    """Each partition's node set, once every node is known and in exactly one partition."""
    flow = model.dataflow
    index = {name: i for i, name in enumerate(flow.names)}
    owner: dict[str, int] = {}
    masks = []
    for p, part in enumerate(plan.partitions):
        if not part.nodes:
            raise _broken(where, f"partition {_label(p, part)} has no nodes")
        for name in part.nodes:
            if name not in index:
                raise _broken(where, f"partition {_label(p, part)} lists node {name!r}, which "
                                     "the model does not have")
            if name in owner:
                raise _broken(where, f"node {name!r} is in two partitions: "
                                     f"{_label(owner[name], plan.partitions[owner[name]])} and "
                                     f"{_label(p, part)}")
            owner[name] = p
        masks.append(bits(index[name] for name in part.nodes))
    missing = [name for name in flow.names if name not in owner]
    if missing:
        raise _broken(where, f"{len(missing)} node(s) are in no partition: {missing[:8]}")
    return masks


def _check_partitions(model: Model, plan: Plan, masks: list[NodeSet], where: str) -> None:
    flow = model.dataflow
    for p, (part, mask) in enumerate(zip(plan.partitions, masks, strict=True)):
        label = _label(p, part)
        if not flow.is_convex(mask):
            raise _broken(where, f"partition {label} is not convex: a path leaves it and "
                                 "comes back in")
        ordered = tuple(flow.names[i] for i in members(mask))
        if part.nodes != ordered:
            raise _broken(where, f"partition {label} lists its nodes out of topological "
                                 f"order: {list(part.nodes[:8])}, expected {list(ordered[:8])}")
        inputs, outputs = flow.boundary(mask)
        for kind, recorded, actual in (("inputs", part.inputs, inputs),
                                       ("outputs", part.outputs, outputs)):
            if sorted(recorded) != sorted(actual):
                extra = [v for v in recorded if v not in actual]
                lacking = [v for v in actual if v not in recorded]
                raise _broken(where, f"partition {label} records {kind} that the dataflow "
                                     f"graph does not give it: {extra[:8]} recorded but not "
                                     f"{kind}, {lacking[:8]} {kind} but not recorded")


def _check_order(model: Model, plan: Plan, where: str) -> None:
    flow = model.dataflow
    available = set(flow.graph_inputs) | set(flow.initializers)
    for p, part in enumerate(plan.partitions):
        for name in part.inputs:
            if name in available:
                continue
            later = next((q for q, other in enumerate(plan.partitions)
                          if q > p and name in other.outputs), None)
            if later is not None:
                raise _broken(where, f"partitions are not in execution order: partition "
                                     f"{_label(p, part)} reads {name!r}, which partition "
                                     f"{_label(later, plan.partitions[later])} produces later")
            raise _broken(where, f"partition {_label(p, part)} reads {name!r}, which no "
                                 "earlier partition, graph input or weight provides")
        available.update(part.outputs)
    lost = [name for name in flow.graph_outputs if name not in available]
    if lost:
        raise _broken(where, f"graph output(s) {lost[:8]} come out of no partition")


def _check_targets(plan: Plan, against: SupportTable | CompilationConfig,
                   pins: Mapping[int, Target], where: str) -> None:
    if isinstance(against, SupportTable):
        offered = list(against.targets)
        devices = {t.device_type for t in offered}
    else:
        offered = [*against.priority, *([FALLBACK] if against.options.fallback else [])]
        devices = {*against.devices, against.host.device_type}
    offered += list(pins.values())
    kinds = {t.kind.name for t in offered}
    for p, part in enumerate(plan.partitions):
        target = part.target
        if target.kind.name not in kinds:
            raise _broken(where, f"partition {_label(p, part)} runs on {target.kind.name}, "
                                 "which the config does not offer (it offers "
                                 f"{', '.join(sorted(kinds))})")
        if target.device_type not in devices:
            raise _broken(where, f"partition {_label(p, part)} runs on device "
                                 f"{target.device_type!r}, which the config does not serve "
                                 f"(devices: {', '.join(sorted(devices))})")


def _check_pins(model: Model, plan: Plan, pins: Mapping[int, Target], where: str) -> None:
    names = model.dataflow.names
    placed = {name: part.target for part in plan.partitions for name in part.nodes}
    for i, target in sorted(pins.items()):
        name = names[i]
        runs = placed.get(name)
        held = runs == target if target.is_external_codegen else (  # a device: any backend
            runs is not None and runs.device_type == target.device_type)
        if not held:
            raise _broken(where, f"node {name!r} is pinned to {str(target)!r} but runs on "
                                 f"{str(runs)!r}")


def _label(index: int, part: Partition) -> str:
    return f"{index} ({part.target})"


def _broken(where: str, what: str) -> PartitionError:
    return PartitionError(f"plan verifier{where}: {what}")
