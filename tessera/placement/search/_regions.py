"""Coarse to fine: what bounds Collage's search on large graphs. The model is cut into regions
of about `REGION_NODES` consecutive nodes (in a topological order, at the thinnest points:
`_segments`), and every target that runs a whole region is measured on it. The regions'
costs tell, in a few measurements per region, whether any mix of targets could beat the best
single target by more than the noise and the partitions' chain overhead (`coarse_choice`);
only regions where the best mix leaves that target are searched node by node, and a target
many times slower than the best on every region it was measured on so far stops being
measured (`Slowness`).

On today's CPU suite no mix wins (ONNX Runtime and OpenVINO run GEMM-bound models within a
few percent of each other), so the fine search, the bulk of a cold compile's measurements,
is mostly skipped; where one target is much faster on a part of the model, that part is
still searched exactly."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tessera.ir import DataflowGraph, NodeSet
from tessera.placement.search._priority import TIE
from tessera.placement.search._segments import segments

# a single-target plan modelled this far over the best one is neither the bound nor a rival
NEAR_SINGLE = 1.15

REGION_NODES = 40  # nodes per region: a few regions on small models, bounded cost per node
SLOW = 4.0  # a target this many times slower than the best on a region cannot win it
SLOW_AFTER = 2  # regions measured before a target may be found slow everywhere
FAR = 16.0  # ... or one region, this many times slower (TVM untuned on ResNet-50: 74x)


def regions(flow: DataflowGraph, order: Sequence[int], size: int = REGION_NODES
            ) -> list[NodeSet]:
    """`order` cut into runs of about `size` nodes, each convex (runs of a topological
    order are)."""
    count = max(1, math.ceil(len(order) / size))
    return [s.mask for s in segments(flow, order, count)]


@dataclass(frozen=True)
class CoarseChoice:
    """The best target per region and what mixing could save."""

    single: str | None  # the cheapest target running every region alone (None: none does)
    single_ms: float  # its summed region costs (inf when None)
    mixed_ms: float  # the best per-region mix, each change of target charged the overhead
    choice: tuple[str | None, ...]  # per region, the mix's target (None: no target runs it)
    whole_ms: float = math.inf  # the single target measured on the whole model, where it was

    @property
    def saving(self) -> float:
        """The share of the single target's time the best mix would save: against the model
        measured whole where it was, which pays one call where the regions' sum pays one
        per region (MobileNetV2: 3 regions, whose calls alone made the mix look 3% faster,
        and the search node by node that followed took 18 s and found nothing)."""
        single = min(self.single_ms, self.whole_ms)
        if math.isinf(single) or single <= 0:
            return 1.0 if not math.isinf(self.mixed_ms) else 0.0
        return max(0.0, (single - self.mixed_ms) / single)

    def worth_refining(self) -> bool:
        """Whether mixing targets could beat the single target by more than the noise."""
        return self.single is None or self.saving > TIE

    def refined(self) -> tuple[int, ...]:
        """The regions to search node by node: those no target runs whole and, where mixing
        is worth it, those where the mix leaves the single target; each with its neighbours,
        where the best boundary between two targets may lie."""
        mixing = self.worth_refining()
        core = [i for i, t in enumerate(self.choice)
                if t is None or (mixing and t != self.single)]
        return tuple(i for i in range(len(self.choice)) if any(abs(i - j) <= 1 for j in core))


def coarse_choice(costs: Sequence[Mapping[str, float]], targets: Sequence[str],
                  overhead_ms: float) -> CoarseChoice:
    """`costs[r][t]` is region r's cost on target t (absent: t cannot run it, or failed).
    The mix is the cheapest chain of per-region targets where each change of target costs
    `overhead_ms` (a partition more); regions no target runs are left out of both sums.
    The single target measured whole, where it is, goes in `whole_ms` (`replace`)."""
    singles = {t: sum(c.get(t, math.inf) for c in costs if c) for t in targets}
    single = min((t for t in targets if not math.isinf(singles[t])),
                 key=lambda t: (singles[t], targets.index(t)), default=None)
    best: dict[str, float] = dict.fromkeys(targets, 0.0)
    back: list[dict[str, str]] = []
    for region in costs:
        if not region:
            back.append({})
            continue
        step: dict[str, float] = {}
        came: dict[str, str] = {}
        for t in targets:
            if t not in region:
                continue
            prev = min(targets, key=lambda p: (best[p] + (overhead_ms if p != t else 0.0),
                                               targets.index(p)))
            step[t] = best[prev] + (overhead_ms if prev != t else 0.0) + region[t]
            came[t] = prev
        best = {t: step.get(t, math.inf) for t in targets}
        back.append(came)
    last = min(targets, key=lambda t: (best[t], targets.index(t)), default=None)
    mixed = best[last] if last is not None else math.inf
    choice: list[str | None] = [None] * len(costs)
    current = last
    for index in range(len(costs) - 1, -1, -1):
        if not costs[index] or current is None:
            continue
        choice[index] = current
        current = back[index].get(current, current)
    return CoarseChoice(single, singles[single] if single is not None else math.inf,
                        mixed, tuple(choice))


def optimistic_single(costs: Sequence[Mapping[str, float]], target: str) -> float:
    """A lower bound on `target`'s plan of the whole model: its cost on each region it ran,
    and the best target's on each region it did not."""
    return sum(region.get(target, min(region.values())) for region in costs if region)


class Slowness:
    """Which targets are many times slower than the best on every region measured so far
    (a failed measurement counts as infinitely slow)."""

    def __init__(self) -> None:
        self._best: dict[int, float] = {}  # region -> the lowest cost measured on it
        self._seen: dict[str, list[tuple[int, float]]] = {}

    def record(self, target: str, region: int, ms: float) -> None:
        self._seen.setdefault(target, []).append((region, ms))
        self._best[region] = min(self._best.get(region, math.inf), ms)

    def best(self, region: int) -> float:
        """The lowest cost measured on `region` so far (inf: none)."""
        return self._best.get(region, math.inf)

    def hopeless(self, target: str) -> bool:
        seen = self._seen.get(target, [])
        return (bool(seen) and all(ms > FAR * self._best[r] for r, ms in seen)) or (
            len(seen) >= SLOW_AFTER and all(ms > SLOW * self._best[r] for r, ms in seen))

    def describe(self, target: str) -> str:
        seen = self._seen.get(target, [])
        least = min((ms / self._best[r] for r, ms in seen), default=math.inf)
        return f"at least {least:.1f}x the best on each of {len(seen)} region(s)"


__all__ = ["FAR", "REGION_NODES", "SLOW", "SLOW_AFTER", "CoarseChoice", "Slowness", "coarse_choice",
           "optimistic_single", "regions"]
