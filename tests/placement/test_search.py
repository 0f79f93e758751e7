"""The Collage search on SYNTHETIC cost tables (random DAGs, random candidate sets, random
costs; no backend is involved): its plan must cost exactly the brute-force optimum."""

from __future__ import annotations

import math
import random

import pytest

from tessera.errors import PartitionError
from tessera.ir import members
from tessera.placement.search._cover import cheapest_cover


def random_dag(rng: random.Random, n: int) -> list[int]:
    """preds[i] as bitsets; edges only go forward, so index order is topological."""
    preds = []
    for i in range(n):
        mask = 0
        for j in range(i):
            if rng.random() < 0.35:
                mask |= 1 << j
        preds.append(mask)
    return preds


def descendants(preds: list[int]) -> list[int]:
    n = len(preds)
    succ = [[j for j in range(n) if preds[j] >> i & 1] for i in range(n)]
    reach = [0] * n
    for i in reversed(range(n)):
        for j in succ[i]:
            reach[i] |= (1 << j) | reach[j]
    return reach


def is_convex(mask: int, desc: list[int]) -> bool:
    outside_reached = 0
    for i in members(mask):
        outside_reached |= desc[i] & ~mask
    return not any(desc[o] & mask for o in members(outside_reached))


def random_candidates(rng: random.Random, preds: list[int]) -> list[tuple[int, float]]:
    """Singletons on two synthetic 'targets', plus random convex sets (SYNTHETIC costs)."""
    n, desc = len(preds), descendants(preds)
    found: dict[int, float] = {}
    out = []
    for i in range(n):
        for _ in range(2):
            out.append((1 << i, rng.uniform(1.0, 10.0)))
    for _ in range(rng.randint(3, 14)):
        mask = 0
        for i in range(n):
            if rng.random() < 0.4:
                mask |= 1 << i
        if mask and is_convex(mask, desc) and mask not in found:
            found[mask] = rng.uniform(0.5, 4.0) * bin(mask).count("1")
            out.append((mask, found[mask]))
    return out


def quotient_acyclic(chosen: list[int], preds: list[int]) -> bool:
    """Partition graph acyclic: some order runs each part after all its outside preds."""
    done, left = 0, list(chosen)
    while left:
        for mask in left:
            outside = 0
            for i in members(mask):
                outside |= preds[i]
            if not outside & ~mask & ~done:
                done |= mask
                left.remove(mask)
                break
        else:
            return False
    return True


def brute_force(preds: list[int], candidates: list[tuple[int, float]]) -> float:
    """Every exact cover by candidates, then the acyclicity check: an independent oracle."""
    n, best = len(preds), math.inf

    def walk(covered: int, chosen: list[int], cost: float) -> None:
        nonlocal best
        if covered == (1 << n) - 1:
            if quotient_acyclic(chosen, preds):
                best = min(best, cost)
            return
        first = next(i for i in range(n) if not covered >> i & 1)
        for mask, c in candidates:
            if mask >> first & 1 and not mask & covered:
                walk(covered | mask, [*chosen, mask], cost + c)

    walk(0, [], 0.0)
    return best


@pytest.mark.parametrize("seed", range(220))
def test_search_equals_brute_force_on_synthetic_costs(seed: int) -> None:
    rng = random.Random(seed)
    preds = random_dag(rng, rng.randint(2, 8))
    candidates = random_candidates(rng, preds)
    result = cheapest_cover(len(preds), preds, candidates)
    assert result.cost == pytest.approx(brute_force(preds, candidates))
    chosen = [candidates[i][0] for i in result.chosen]
    covered = 0
    for mask in chosen:  # disjoint, complete, and in a schedulable order
        assert not covered & mask
        outside = 0
        for i in members(mask):
            outside |= preds[i]
        assert not outside & ~mask & ~covered
        covered |= mask
    assert covered == (1 << len(preds)) - 1
    assert sum(candidates[i][1] for i in result.chosen) == pytest.approx(result.cost)


def test_upper_bound_prunes_without_changing_the_optimum() -> None:
    rng = random.Random(7)
    preds = random_dag(rng, 8)
    candidates = random_candidates(rng, preds)
    free = cheapest_cover(8, preds, candidates)
    bounded = cheapest_cover(8, preds, candidates, upper_bound=free.cost)
    assert bounded.cost == pytest.approx(free.cost)
    assert bounded.states <= free.states


def test_cycle_between_convex_candidates_is_never_chosen() -> None:
    # a->b, c->d: {a,d} and {b,c} are each convex but need each other (SYNTHETIC costs)
    a, b, c, d = 0, 1, 2, 3
    preds = [0, 1 << a, 0, 1 << c]
    cheap = [((1 << a) | (1 << d), 0.1), ((1 << b) | (1 << c), 0.1)]
    singles = [(1 << i, 1.0) for i in range(4)]
    result = cheapest_cover(4, preds, cheap + singles)
    assert result.cost == pytest.approx(2.1)  # one pair plus two singles, never both pairs


def test_uncoverable_graph_is_a_partition_error() -> None:
    with pytest.raises(PartitionError, match="no candidate covers"):
        cheapest_cover(2, [0, 1], [(1, 1.0)])
