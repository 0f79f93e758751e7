"""Candidate partitions for the Collage search, per target: the subgraphs its backend and
registered proposers proposed (`_proposed.py`), every supported node alone, connected convex
sets of supported nodes grown up to `max_size` nodes, the target's maximal acyclic regions
(the whole model when the target runs all of it), and the partitions of known plans (greedy,
single-target). Deterministic order: by target priority, then by mask."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tessera.ir import DataflowGraph, NodeSet, members
from tessera.placement.search._groups import GroupGraph, fuse
from tessera.placement.search._support import FALLBACK, SupportTable
from tessera.target import Target

_GROWN_PER_SEED = 64  # bounds the enumeration around very wide nodes


@dataclass(frozen=True)
class Candidate:
    mask: NodeSet
    target: Target
    # who proposed it ('openvino (query_model)'); '' for the per-node grouping's own
    origin: str = field(default="", compare=False)


def generate(flow: DataflowGraph, table: SupportTable, max_size: int,
             extra: Iterable[Candidate] = (), proposed: Iterable[Candidate] = (),
             within: NodeSet | None = None) -> list[Candidate]:
    """`proposed` come first, so a set both proposed and grouped keeps its proposer. With
    `within`, the grouped candidates (single nodes, grown sets, maximal regions) hold only
    its nodes: the part of the model the fine search refines (`_regions`)."""
    found: dict[tuple[str, NodeSet], Candidate] = {}

    def add(mask: NodeSet, target: Target) -> None:
        found.setdefault((str(target), mask), Candidate(mask, target))

    for candidate in proposed:
        found.setdefault((str(candidate.target), candidate.mask), candidate)
    for target in table.targets:
        # the reference is slow everywhere: it is a candidate only where nothing else runs
        mine = [i for i in range(len(flow)) if target in table.allowed[i]
                and (target != FALLBACK or table.allowed[i] == (FALLBACK,))
                and (within is None or within >> i & 1)]
        allowed = 0
        for i in mine:
            allowed |= 1 << i
            add(1 << i, target)
        for mask in grown(flow, mine, allowed, max_size):
            add(mask, target)
        groups = GroupGraph(flow)
        for group in fuse(groups, mine):
            add(groups.masks[group], target)
    for candidate in extra:
        add(candidate.mask, candidate.target)
    rank = {str(t): r for r, t in enumerate(table.targets)}
    return sorted(found.values(), key=lambda c: (rank.get(str(c.target), len(rank)),
                                                 bin(c.mask).count("1"), c.mask))


def grown(flow: DataflowGraph, seeds: list[int], allowed: NodeSet, max_size: int
          ) -> list[NodeSet]:
    """Connected convex sets of 2..max_size allowed nodes, each grown from its lowest node."""
    out: dict[NodeSet, None] = {}
    for seed in seeds:
        frontier = [1 << seed]
        made = 0
        for _ in range(max_size - 1):
            nxt: dict[NodeSet, None] = {}
            for mask in frontier:
                for j in _neighbours(flow, mask, allowed):
                    if j > seed and made < _GROWN_PER_SEED:
                        bigger = mask | (1 << j)
                        if bigger not in nxt and bigger not in out and flow.is_convex(bigger):
                            nxt[bigger] = None
                            out[bigger] = None
                            made += 1
            frontier = list(nxt)
    return list(out)


def _neighbours(flow: DataflowGraph, mask: NodeSet, allowed: NodeSet) -> list[int]:
    near: dict[int, None] = {}
    for i in members(mask):
        for j in (*flow.producers[i], *flow.consumers[i]):
            if allowed >> j & 1 and not mask >> j & 1:
                near[j] = None
    return sorted(near)
