"""The Plan: which backend target runs which nodes, in execution order. A value type: frozen,
JSON round-trippable, and the thing `explain` and artifacts are made of."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tessera.errors import PartitionError


@dataclass(frozen=True)
class Partition:
    target: str  # canonical target string
    nodes: tuple[str, ...]  # node names, in topological order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "nodes": list(self.nodes), "inputs": list(self.inputs),
                "outputs": list(self.outputs)}


@dataclass(frozen=True)
class Plan:
    partitions: tuple[Partition, ...]
    partitioner: str
    # node name -> backend name -> why it does (not) run it; what `explain` shows
    reasons: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(p.target for p in self.partitions))

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "partitioner": self.partitioner,
                "partitions": [p.to_dict() for p in self.partitions], "reasons": self.reasons}

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
            parts = tuple(Partition(p["target"], tuple(p["nodes"]), tuple(p["inputs"]),
                                    tuple(p["outputs"])) for p in data["partitions"])
            return cls(parts, data["partitioner"], dict(data.get("reasons", {})))
        except (ValueError, KeyError, TypeError) as err:
            raise PartitionError(f"not a tessera plan: {type(err).__name__}: {err}") from err

    def summary(self) -> str:
        lines = [f"{len(self.partitions)} partition(s), partitioner {self.partitioner}"]
        for i, p in enumerate(self.partitions):
            lines.append(f"  [{i}] {p.target}: {len(p.nodes)} node(s) "
                         f"({', '.join(p.nodes[:3])}{', ...' if len(p.nodes) > 3 else ''})")
        return "\n".join(lines)
