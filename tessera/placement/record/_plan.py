"""The Plan: which backend target runs which nodes, in execution order, with measured costs
and the statistics of the search. A value type: frozen, JSON round-trippable, and the thing
`explain` and artifacts are made of."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tessera.errors import PartitionError, TesseraError
from tessera.ir import DataflowGraph, NodeSet, members
from tessera.placement.record._stats import SearchStats
from tessera.target import Target

Banned = Mapping[str, Mapping[str, str]]  # node name -> target string -> why it is excluded


@dataclass(frozen=True)
class Partition:
    target: Target  # everything downstream needs to build it; JSON holds its string
    nodes: tuple[str, ...]  # node names, in topological order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    cost_ms: float | None = None  # measured latency of this partition alone, when known
    # the device target it runs on (PlanDevices, `assign_devices`): the config's least
    # specialised one for the backend's device, or the one placement chose; None until then
    device: Target | None = None

    def __post_init__(self) -> None:
        given: object = self.target
        if not isinstance(given, Target):  # a string or dict form: parsed once, here
            object.__setattr__(self, "target", Target(given))  # type: ignore[arg-type]
        device: object = self.device
        if device is not None and not isinstance(device, Target):
            object.__setattr__(self, "device", Target(device))  # type: ignore[arg-type]
        where = self.device
        if where is not None and (where.is_external_codegen or where.kind.is_composite
                                  or where.device_type != self.target.device_type):
            raise PartitionError(
                f"a partition of {str(self.target)!r} cannot run on {str(where)!r}: its device "
                f"target must be a {self.target.device_type} device target such as "
                f"{self.target.device_type!r}")

    @property
    def kind(self) -> str:
        """The backend's kind name."""
        return self.target.kind.name

    def to_dict(self) -> dict[str, Any]:
        return {"target": str(self.target), "nodes": list(self.nodes), "inputs": list(self.inputs),
                "outputs": list(self.outputs), "cost_ms": self.cost_ms,
                "device": None if self.device is None else str(self.device)}


@dataclass(frozen=True)
class Plan:
    partitions: tuple[Partition, ...]
    partitioner: str
    # node name -> target -> why that backend does (not) run it; what `explain` shows
    reasons: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)
    # node name -> why it went where it did (pinned, first in priority, cheaper by ...)
    decisions: dict[str, str] = field(default_factory=dict, compare=False)
    # what the placement did: measurements, the end-to-end race, the guard, ...
    stats: SearchStats = field(default_factory=SearchStats, compare=False)

    def __post_init__(self) -> None:
        given: object = self.stats
        if not isinstance(given, SearchStats):  # a mapping, from JSON or a caller
            object.__setattr__(self, "stats", SearchStats.create(given))  # type: ignore[arg-type]

    @property
    def targets(self) -> list[Target]:
        return list(dict.fromkeys(p.target for p in self.partitions))

    @property
    def kinds(self) -> list[str]:
        """The backends the plan uses, sorted."""
        return sorted({p.kind for p in self.partitions})

    def with_stats(self, **changes: Any) -> Plan:
        return replace(self, stats=self.stats.merged(**changes))

    @property
    def cost_ms(self) -> float | None:
        costs = [p.cost_ms for p in self.partitions]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    @property
    def boundaries(self) -> list[tuple[str, int, int]]:
        """(value, producing partition, consuming partition) for every handoff."""
        made = {v: i for i, p in enumerate(self.partitions) for v in p.outputs}
        return [(v, made[v], j) for j, p in enumerate(self.partitions) for v in p.inputs
                if v in made]

    def to_dict(self) -> dict[str, Any]:
        return {"version": 2, "partitioner": self.partitioner,
                "partitions": [p.to_dict() for p in self.partitions],
                "boundaries": [list(b) for b in self.boundaries],
                "stats": self.stats.to_dict(), "decisions": self.decisions, "reasons": self.reasons}

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
            parts = tuple(Partition(p["target"], tuple(p["nodes"]), tuple(p["inputs"]),
                                    tuple(p["outputs"]), p.get("cost_ms"), p.get("device"))
                          for p in data["partitions"])  # plans saved before devices: None
            return cls(parts, data["partitioner"], dict(data.get("reasons", {})),
                       dict(data.get("decisions", {})),
                       SearchStats.create(data.get("stats", {})))
        except (ValueError, KeyError, TypeError, TesseraError) as err:
            raise PartitionError(f"not a tessera plan: {type(err).__name__}: {err}") from err

    def summary(self) -> str:
        total = self.cost_ms
        lines = [f"{len(self.partitions)} partition(s), partitioner {self.partitioner}"
                 + (f", {total:.3f} ms measured" if total is not None else "")]
        if self.stats.interrupted is not None:
            lines.append(str(self.stats.interrupted))
        for i, p in enumerate(self.partitions):
            cost = f", {p.cost_ms:.3f} ms" if p.cost_ms is not None else ""
            on = f" on {p.device}" if p.device is not None else ""
            lines.append(f"  [{i}] {p.target}{on}: {len(p.nodes)} node(s){cost} "
                         f"({', '.join(p.nodes[:3])}{', ...' if len(p.nodes) > 3 else ''})")
        return "\n".join(lines)


def make_partitions(flow: DataflowGraph,
                    groups: Sequence[tuple[NodeSet, Target | str, float | None]],
                    devices: Sequence[Target | None] | None = None
                    ) -> tuple[Partition, ...]:
    """Partitions from (node set, target, cost) in execution order; `devices`, where
    placement chose a device target for a group (None: `assign_devices` decides)."""
    chosen = list(devices) if devices is not None else [None] * len(groups)
    parts = []
    for (mask, target, cost), device in zip(groups, chosen, strict=True):
        inputs, outputs = flow.boundary(mask)
        parts.append(Partition(Target(target), tuple(flow.names[i] for i in members(mask)),
                               tuple(inputs), tuple(outputs), cost, device))
    return tuple(parts)
