"""One-thread variants of small chosen partitions: measured after the search, kept only when
faster, never for a target whose thread count the user set or for a backend whose count is
process-wide. Costs in the first tests are SYNTHETIC (a test of the search's bookkeeping),
not measurements; the last test compiles with the real backends."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends
from tessera.ir import NodeSet, load_model
from tessera.placement import CostDB
from tessera.placement.measure import FunctionMeasurer
from tessera.placement.record import Cost
from tessera.placement.search import SupportTable, place_collage
from tessera.placement.search._threads import SMALL_MS, base_target, one_thread
from tessera.target import Target

from ..ir.models import mlp
from .context import context


def _synthetic(base_ms: float, one_thread_ms: float):  # type: ignore[no-untyped-def]
    """SYNTHETIC costs: every node set costs `base_ms` per node, or `one_thread_ms` per node
    on one thread; the pool's cost does not depend on which backend it is."""
    def cost(m: object, mask: NodeSet, target: Target) -> Cost:
        per_node = one_thread_ms if target.attrs.get("num-threads") == 1 else base_ms
        return Cost(per_node * bin(mask).count("1"), 0.0, 1)
    return cost


def _place(tmp_path: Path, targets: list[str], base_ms: float, one_ms: float,  # type: ignore[no-untyped-def]
           pins: dict[str, str] | None = None):
    from tessera.placement.search._pins import resolve_pins

    model = load_model(mlp())
    config = tessera.CompilationConfig.create(targets)
    table = SupportTable.build(model, config, None, resolve_pins(model.dataflow, pins))
    ctx = context(model, config, db=CostDB(tmp_path / "c.sqlite"),
                  measurer=FunctionMeasurer(_synthetic(base_ms, one_ms)))
    plan, _ = place_collage(ctx, table)
    return plan


def test_a_small_partition_faster_on_one_thread_keeps_that_variant(tmp_path: Path) -> None:
    plan = _place(tmp_path, ["onnxruntime"], 0.01, 0.005)
    assert [str(p.target) for p in plan.partitions] == ["onnxruntime -num-threads=1"]
    cover = plan.stats.cover
    assert cover is not None and cover.one_thread_partitions == 1
    assert "cheaper than onnxruntime" in next(iter(plan.decisions.values()))
    # the modelled cost is the plan's as kept, not the search's before the variant
    assert cover.partition_overhead_ms is not None
    overhead = cover.partition_overhead_ms
    assert cover.modelled_ms == pytest.approx(
        sum(float(p.cost_ms) for p in plan.partitions) + overhead * len(plan.partitions))


def test_the_variant_is_dropped_when_it_measures_slower(tmp_path: Path) -> None:
    plan = _place(tmp_path, ["onnxruntime"], 0.01, 0.02)
    assert [str(p.target) for p in plan.partitions] == ["onnxruntime"]
    assert plan.stats.cover is not None and plan.stats.cover.one_thread_partitions == 0


def test_large_partitions_and_user_thread_counts_are_left_alone(tmp_path: Path) -> None:
    large = _place(tmp_path, ["onnxruntime"], SMALL_MS, 0.001)
    assert [str(p.target) for p in large.partitions] == ["onnxruntime"]
    assert large.stats.cover is None or large.stats.cover.one_thread_partitions is None
    assert one_thread(Target("onnxruntime -num-threads=2")) is None
    assert one_thread(Target("torch")) is None  # torch's count is process-wide


def test_in_a_chain_a_variant_slightly_slower_alone_is_still_kept() -> None:
    from tessera.placement.search._candidates import Candidate
    from tessera.placement.search._threads import CHAIN_TOLERANCE, keep_faster, prefer_one_thread

    # alone on one thread 5% slower: kept in a chain (pools wake cold there), not alone
    assert prefer_one_thread(0.105, 0.100, partitions=3)
    assert not prefer_one_thread(0.105, 0.100, partitions=1)
    assert not prefer_one_thread(0.100 * CHAIN_TOLERANCE + 0.001, 0.100, partitions=3)
    ort, ov = Target("onnxruntime"), Target("openvino")
    chosen = [(Candidate(0b01, ort), Cost(0.100, 0.0, 5)),
              (Candidate(0b10, ov), Cost(0.100, 0.0, 5))]
    tried = [(0, Candidate(0b01, one_thread(ort))), (1, Candidate(0b10, one_thread(ov)))]
    kept, count = keep_faster(chosen, tried, [Cost(0.105, 0.0, 5), Cost(0.150, 0.0, 5)])
    assert count == 1
    assert [str(c.target) for c, _ in kept] == ["onnxruntime -num-threads=1", "openvino"]


def test_a_partition_with_pinned_nodes_keeps_the_pinned_target(tmp_path: Path) -> None:
    plan = _place(tmp_path, ["onnxruntime"], 0.01, 0.005, pins={"softmax": "onnxruntime"})
    assert [str(p.target) for p in plan.partitions] == ["onnxruntime"]


def test_a_variant_is_banned_under_the_target_it_came_from() -> None:
    assert base_target("onnxruntime -num-threads=1") == "onnxruntime"
    assert base_target("openvino -num-threads=1") == "openvino"
    assert base_target("onnxruntime -opt-level=basic") == "onnxruntime -opt-level=basic"


@pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                    reason="onnxruntime is not installed")
def test_a_real_compile_tries_the_variant_and_matches_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "c.sqlite"))
    compiled = tessera.compile(mlp(), ["onnxruntime"], partitioner="collage")
    cover = compiled.plan.stats.cover
    assert cover is not None and cover.one_thread_partitions is not None  # far below SMALL_MS
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}
    want = backends.get("reference").compile(mlp()).run(feeds)["y"]
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-5, atol=1e-6)
