"""The per-partition chain overhead: the search charges it to every partition, so a plan of
many small partitions that only wins on parts measured alone loses to a coarse one; and the
estimate comes from the end-to-end timing of the chain. Costs here are SYNTHETIC (a test of
the search), not measurements."""

from __future__ import annotations

from pathlib import Path

import pytest

import tessera
from tessera.ir import NodeSet, load_model
from tessera.placement import Cost, CostDB, Partition, Plan, SupportTable, place_collage
from tessera.runtime._place import _overhead_estimate
from tessera.target import Target

from ..ir.models import mlp


def _alternating(m: object, mask: NodeSet, target: Target) -> Cost:  # SYNTHETIC costs
    """onnxruntime is cheap on even nodes, torch on odd ones; any node set costs the sum,
    so the cheapest plan without overhead alternates node by node."""
    nodes = [i for i in range(mask.bit_length()) if mask >> i & 1]
    cheap = 0 if str(target).startswith("onnxruntime") else 1
    return Cost(sum(1.0 if i % 2 == cheap else 1.5 for i in nodes), 0.0, 1)


@pytest.mark.parametrize("overhead, most", [(0.0, 6), (0.2, 6), (2.0, 1)])
def test_the_overhead_coarsens_the_plan(tmp_path: Path, overhead: float, most: int) -> None:
    model = load_model(mlp())
    config = tessera.CompilationConfig.create(["onnxruntime", "torch"])
    table = SupportTable.build(model, config)
    plan, _ = place_collage(model, table, db=CostDB(tmp_path / "c.sqlite"),
                            measurer=_alternating, partition_overhead_ms=overhead)
    assert len(plan.partitions) == most
    assert plan.stats["partition_overhead_ms"] == overhead
    modelled = sum(float(p.cost_ms or 0) for p in plan.partitions) + overhead * most
    assert plan.stats["modelled_ms"] == pytest.approx(modelled)


def test_the_estimate_is_the_chain_minus_its_parts_per_partition() -> None:
    parts = tuple(Partition("onnxruntime", (f"n{i}",), (), (), 1.0) for i in range(4))
    searched = Plan(parts, "collage")
    assert _overhead_estimate(searched, 6.0) == 0.5
    assert _overhead_estimate(searched, 3.0) == 0.0  # faster than its parts: no overhead
    assert _overhead_estimate(searched, "same plan as greedy") is None
    assert _overhead_estimate(Plan(parts[:1], "collage"), 9.0) is None  # no chain


def test_a_chain_slower_than_its_parts_is_searched_again_with_the_overhead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-to-end timing is SYNTHETIC too: every partition of a chain costs 1 ms more
    than alone. The first search alternates; the chain loses; the second search, charged
    the estimated overhead, keeps one partition, and the estimate is remembered."""
    from dataclasses import replace

    from tessera.runtime import _place

    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "c.sqlite"))
    searched_with: list[float] = []

    def synthetic_search(*args: object, **kwargs: object) -> object:
        searched_with.append(float(kwargs["partition_overhead_ms"]))  # type: ignore[arg-type]
        return place_collage(*args, **{**kwargs, "measurer": _alternating,  # type: ignore
                                       "isolate": False})

    def synthetic_end_to_end(model: object, config: object, searched: Plan, known: object,
                             db: object) -> tuple[Plan, None]:
        alone = sum(float(p.cost_ms or 0) for p in searched.partitions)
        chain = alone + 1.0 * len(searched.partitions) if len(searched.partitions) > 1 \
            else alone
        kept = "collage" if len(searched.partitions) == 1 else "greedy"
        return replace(searched, stats={**searched.stats, "kept": kept,
                                        "end_to_end_ms": {"collage": chain}}), None

    monkeypatch.setattr(_place, "place_collage", synthetic_search)
    monkeypatch.setattr(_place, "_keep_fastest", synthetic_end_to_end)
    config = tessera.CompilationConfig.create(["onnxruntime", "torch"], partitioner="collage")
    plan, _ = _place.place(load_model(mlp()), config)
    assert searched_with == [0.0, 1.0]
    assert len(plan.partitions) == 1 and plan.stats["calibration_rounds"] == 2
    assert plan.stats["measurements"] > 0  # counted where they happened: the first search
    remembered = CostDB().get(*_place._overhead_key(config))
    assert remembered is not None and remembered.ms == 1.0
    searched_with.clear()
    _place.place(load_model(mlp(names="b_")), config)  # another model starts from it
    assert searched_with == [1.0]
