"""The Collage search: the cheapest cover of all nodes by disjoint candidates, taken in an
order that is a valid schedule. Exact for the cost model (a plan's cost is the sum of its
candidates' costs): A* over the sets of nodes covered so far, which are always closed under
predecessors. The heuristic charges every uncovered node its cheapest per-node share of any
candidate holding it, which never overestimates, so the first goal popped is optimal."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.errors import PartitionError
from tessera.ir import NodeSet, members

MAX_STATES = 50_000  # expanded states; beyond, the search gives up (SearchBudgetError)


class SearchBudgetError(PartitionError):
    """The exact search expanded more states than allowed (wide graphs with many parallel
    branches); the caller falls back to the best known plan."""


@dataclass(frozen=True)
class SearchResult:
    cost: float
    chosen: tuple[int, ...]  # candidate indices, in execution order
    states: int  # states expanded
    pruned: int  # states cut by the upper bound


def cheapest_cover(
    node_count: int,
    preds: Sequence[NodeSet],
    candidates: Sequence[tuple[NodeSet, float]],
    upper_bound: float = math.inf,
    max_states: int = MAX_STATES,
) -> SearchResult:
    """`preds[i]` is the bitset of node i's predecessors; each candidate is (node set, cost)
    and must be convex. States costlier than `upper_bound` (a known plan's cost) are pruned:
    the optimum is never among them."""
    goal = (1 << node_count) - 1
    by_first: list[list[int]] = [[] for _ in range(node_count)]
    share = [math.inf] * node_count
    external = []
    for index, (mask, cost) in enumerate(candidates):
        by_first[(mask & -mask).bit_length() - 1].append(index)
        size = bin(mask).count("1")
        outside = 0
        for i in members(mask):
            share[i] = min(share[i], cost / size)
            outside |= preds[i]
        external.append(outside & ~mask)
    if any(s == math.inf for s in share):
        missing = [i for i, s in enumerate(share) if s == math.inf]
        raise PartitionError(f"no candidate covers node(s) {missing[:10]}")

    weight = [sum(share[i] for i in members(mask)) for mask, _ in candidates]
    best: dict[NodeSet, float] = {0: 0.0}
    came: dict[NodeSet, tuple[NodeSet, int]] = {}
    heap: list[tuple[float, float, int, NodeSet]] = [(sum(share), 0.0, 0, 0)]
    counter, expanded, pruned = 1, 0, 0
    slack = upper_bound * (1 + 1e-9) + 1e-12
    while heap:
        estimate, cost, _, state = heapq.heappop(heap)
        remaining = estimate - cost
        if cost > best.get(state, math.inf):
            continue
        if state == goal:
            return SearchResult(cost, _path(came, state), expanded, pruned)
        expanded += 1
        if expanded > max_states:
            raise SearchBudgetError(f"the search expanded {max_states} states without "
                                    "reaching the goal")
        for first in range(node_count):  # every ready candidate's first node is ready
            if state >> first & 1 or preds[first] & ~state:
                continue
            for index in by_first[first]:
                mask, step = candidates[index]
                if mask & state or external[index] & ~state:
                    continue
                nxt, total = state | mask, cost + step
                if total >= best.get(nxt, math.inf):
                    continue
                bound = total + max(0.0, remaining - weight[index])
                if bound > slack:
                    pruned += 1
                    continue
                best[nxt] = total
                came[nxt] = (state, index)
                heapq.heappush(heap, (bound, total, counter, nxt))
                counter += 1
    raise PartitionError("no valid placement: the candidates cannot cover the graph in a "
                         "schedulable order (or the upper bound is below every plan)")


def _path(came: dict[NodeSet, tuple[NodeSet, int]], state: NodeSet) -> tuple[int, ...]:
    chosen = []
    while state:
        state, index = came[state]
        chosen.append(index)
    return tuple(reversed(chosen))
