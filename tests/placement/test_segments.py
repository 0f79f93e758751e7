"""Segments: consecutive runs of the plan's order, cut where the fewest activations cross."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import zoo
from tessera.ir import load_model
from tessera.placement.search._segments import _crossing, segments


@pytest.fixture(scope="module", params=["resnet-tiny", "bert-tiny", "mobilenetv2-tiny"])
def flow(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return load_model(zoo.export(request.param)).dataflow


@settings(max_examples=20, deadline=None)
@given(count=st.integers(min_value=1, max_value=16))
def test_segments_cover_the_order_once_in_consecutive_runs(flow, count: int) -> None:  # type: ignore[no-untyped-def]
    order = list(range(len(flow)))
    cut = segments(flow, order, count)
    assert 0 < len(cut) <= count
    assert [n for s in cut for n in s.nodes] == order
    assert [s.index for s in cut] == list(range(len(cut)))
    assert sum(s.weight for s in cut) == pytest.approx(1.0)
    for s in cut:
        assert s.nodes and flow.is_convex(s.mask)


def test_cuts_go_where_the_fewest_activations_cross(flow) -> None:  # type: ignore[no-untyped-def]
    order = list(range(len(flow)))
    crossing = _crossing(flow, order)
    fewest = min(crossing[1:len(order)])
    cut = segments(flow, order, 8)
    starts = [order.index(s.nodes[0]) for s in cut[1:]]
    assert starts and all(crossing[g] == fewest for g in starts)


def test_crossing_counts_values_alive_across_each_gap() -> None:
    flow = load_model(zoo.export("resnet-tiny")).dataflow
    order = list(range(len(flow)))
    crossing = _crossing(flow, order)
    for gap in (1, len(order) // 2, len(order) - 1):
        made_before = order[:gap]
        alive = sum(1 for n in made_before
                    if any(c in order[gap:] for c in flow.consumers[n]))
        assert crossing[gap] == alive
