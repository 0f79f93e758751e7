"""Segments: the units a precision is chosen for. The nodes of a plan, in the plan's execution
order, are cut into a few runs of consecutive nodes. A run of consecutive nodes in a
topological order is convex, and runs taken in order never need each other's outputs
backwards, so any choice of target per segment, with neighbours of one target merged, is a
valid plan.

Cuts go where the fewest activations cross (between the blocks of a ResNet, the layers of an
encoder), spaced so each segment holds a similar share of the model's weights and nodes:
quantizing one segment then measures one block's share of the error."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.ir import DataflowGraph, NodeSet, bits

DEFAULT_SEGMENTS = 8


@dataclass(frozen=True)
class Segment:
    index: int
    nodes: tuple[int, ...]  # node indices in the plan's execution order
    weight: float  # the share of the model's work it is taken to hold, in (0, 1]

    @property
    def mask(self) -> NodeSet:
        return bits(self.nodes)


def segments(flow: DataflowGraph, order: Sequence[int], count: int = DEFAULT_SEGMENTS
             ) -> list[Segment]:
    """`order` (a topological order of node indices) cut into at most `count` segments."""
    if not order:
        return []
    weights = [_weight(flow, i) for i in order]
    total = sum(weights)
    crossing = _crossing(flow, order)
    gaps = list(range(1, len(order)))  # a cut at gap g ends a segment before order[g]
    fewest = min((crossing[g] for g in gaps), default=0)
    cuttable = [g for g in gaps if crossing[g] <= fewest] or gaps
    if not cuttable:  # one node: one segment
        count = 1
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    cuts: list[int] = []
    for k in range(1, count):
        goal = total * k / count
        best = min(cuttable, key=lambda g: (abs(prefix[g] - goal), g))
        if (not cuts or best > cuts[-1]) and abs(prefix[best] - goal) < total / count / 2:
            cuts.append(best)
    bounds = [0, *cuts, len(order)]
    return [Segment(i, tuple(order[a:b]), (prefix[b] - prefix[a]) / total)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))]


def _weight(flow: DataflowGraph, index: int) -> float:
    """A node's share of the work: one, plus its weights in units of 10k elements (the
    convolutions and matrix products are where the time and the int8 gain are)."""
    elements = 0
    for name in flow.nodes[index].input:
        tensor = flow.initializers.get(name)
        if tensor is not None:
            size = 1
            for d in tensor.dims:
                size *= d
            elements += size
    return 1.0 + elements / 1e4


def _crossing(flow: DataflowGraph, order: Sequence[int]) -> list[int]:
    """For each gap g of `order`, how many activations made before it are used after it."""
    position = {node: p for p, node in enumerate(order)}
    change = [0] * (len(order) + 2)
    for p, node in enumerate(order):
        last = max((position[c] for c in flow.consumers[node] if c in position), default=p)
        change[p + 1] += 1  # live from the gap after its producer to the gap of its last use
        change[last + 1] -= 1
    crossing, live = [], 0
    for delta in change[:len(order) + 1]:
        live += delta
        crossing.append(live)
    return crossing


__all__ = ["DEFAULT_SEGMENTS", "Segment", "segments"]
