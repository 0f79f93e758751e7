"""The per-partition chain overhead: the search charges it to every partition, so a plan of
many small partitions that only wins on parts measured alone loses to a coarse one; and the
estimate comes from the end-to-end timing of the chain. Costs here are SYNTHETIC (a test of
the search), not measurements."""

from __future__ import annotations

from pathlib import Path

import pytest

import tessera
from tessera.backends import TensorSpec
from tessera.ir import NodeSet, load_model
from tessera.placement import Built, CostDB, Partition, Plan, Tools, place
from tessera.placement._driver import overhead_estimate
from tessera.placement.measure import FunctionMeasurer
from tessera.placement.record import Cost
from tessera.placement.record._remembered import overhead_key
from tessera.placement.search import SupportTable, place_collage
from tessera.target import Target

from ..ir.models import mlp
from .context import context


def _alternating(m: object, mask: NodeSet, target: Target) -> Cost:  # SYNTHETIC costs
    """onnxruntime is cheap on even nodes, torch on odd ones; any node set costs the sum,
    so the cheapest plan without overhead alternates node by node."""
    nodes = [i for i in range(mask.bit_length()) if mask >> i & 1]
    cheap = 0 if str(target).startswith("onnxruntime") else 1
    return Cost(sum(1.0 if i % 2 == cheap else 1.5 for i in nodes), 0.0, 1)


ALTERNATING = FunctionMeasurer(_alternating)


@pytest.mark.parametrize("overhead, most", [(0.0, 6), (0.2, 6), (2.0, 1)])
def test_the_overhead_coarsens_the_plan(tmp_path: Path, overhead: float, most: int) -> None:
    model = load_model(mlp())
    config = tessera.CompilationConfig.create(["onnxruntime", "torch"])
    table = SupportTable.build(model, config)
    ctx = context(model, config, db=CostDB(tmp_path / "c.sqlite"), measurer=ALTERNATING)
    plan, _ = place_collage(ctx, table, overhead)
    assert len(plan.partitions) == most
    cover = plan.stats.cover
    assert cover is not None and cover.partition_overhead_ms == overhead
    modelled = sum(float(p.cost_ms or 0) for p in plan.partitions) + overhead * most
    assert cover.modelled_ms == pytest.approx(modelled)


def test_the_estimate_is_the_chain_minus_its_parts_per_partition() -> None:
    parts = tuple(Partition("onnxruntime", (f"n{i}",), (), (), 1.0) for i in range(4))
    searched = Plan(parts, "collage")
    assert overhead_estimate(searched, 6.0) == 0.5
    assert overhead_estimate(searched, 3.0) == 0.0  # faster than its parts: no overhead
    assert overhead_estimate(searched, None) is None  # not timed
    assert overhead_estimate(Plan(parts[:1], "collage"), 9.0) is None  # no chain


class _Clock:
    """SYNTHETIC time: it moves only when a stand-in plan runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _SyntheticChain:
    """A built plan whose run takes its partitions' costs plus 1 ms per partition when
    there are several: SYNTHETIC, the chain overhead this test calibrates."""

    def __init__(self, plan: Plan, clock: _Clock) -> None:
        self.inputs = [TensorSpec("x", "float32", (2, 8))]
        parts = plan.partitions
        self.ms = sum(float(p.cost_ms or 0.0) for p in parts) + (len(parts) if len(parts) > 1
                                                                 else 0)
        self.clock = clock

    def run(self, inputs: object) -> dict[str, object]:
        self.clock.now += self.ms / 1e3
        return {}


class _SyntheticBuilder:
    """Builds nothing: each plan becomes a `_SyntheticChain` on the shared clock."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.built: list[int] = []  # partitions per plan built

    def build(self, model: object, config: object, plan: Plan) -> Built:
        self.built.append(len(plan.partitions))
        return Built(plan, (), {}, _SyntheticChain(plan, self.clock))

    def release(self) -> None:
        """Nothing is kept between builds."""


def test_a_chain_slower_than_its_parts_is_searched_again_with_the_overhead(
        tmp_path: Path) -> None:
    """The first search alternates backends node by node; its chain loses end to end to the
    one-partition plans; the second search, charged the estimated overhead, keeps one
    partition, and the estimate is remembered for the next model."""
    db = CostDB(tmp_path / "c.sqlite")
    config = tessera.CompilationConfig.create(["onnxruntime", "torch"], partitioner="collage")
    builder = _SyntheticBuilder(_Clock())
    tools = Tools(builder=builder, measurer=ALTERNATING, db=db, clock=builder.clock)
    placed = place(load_model(mlp()), config, tools=tools)
    plan = placed.plan
    cover, measuring = plan.stats.cover, plan.stats.measuring
    assert cover is not None and measuring is not None
    assert len(plan.partitions) == 1 and cover.calibration_rounds == 2
    assert cover.partition_overhead_ms == 1.0  # (12 ms chain - 6 ms parts) / 6 parts
    assert measuring.measurements > 0
    assert db.get_overhead(*overhead_key(config)) == 1.0
    again = place(load_model(mlp(names="b_")), config, tools=tools).plan
    assert again.stats.cover is not None
    assert again.stats.cover.partition_overhead_ms == 1.0
    assert again.stats.cover.calibration_rounds == 1
