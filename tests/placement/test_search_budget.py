"""A search too wide to finish exactly stops at its state budget and the best known plan is
kept, instead of running for minutes and gigabytes."""

from __future__ import annotations

import math

import pytest

from tessera.placement.search._cover import SearchBudgetError, cheapest_cover


def _wide(branches: int) -> tuple[int, list[int], list[tuple[int, float]]]:
    """A source, `branches` parallel nodes, a sink; every node alone and every pair."""
    count = branches + 2
    preds = [0] + [1] * branches + [((1 << (branches + 1)) - 1) & ~0]
    candidates = [(1 << i, 1.0) for i in range(count)]
    candidates += [((1 << i) | (1 << j), 1.5) for i in range(1, branches + 1)
                   for j in range(i + 1, branches + 1)]
    return count, preds, candidates


def test_a_small_budget_stops_the_search_with_a_typed_error() -> None:
    count, preds, candidates = _wide(14)
    with pytest.raises(SearchBudgetError, match="expanded 50 states"):
        cheapest_cover(count, preds, candidates, math.inf, max_states=50)
    assert cheapest_cover(count, preds, candidates).cost > 0  # the default budget finishes
