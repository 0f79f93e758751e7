"""Collage on a model of more than `FINE_ALL` nodes: regions first, node by node only where a
mix of targets could win, and targets many times slower everywhere no longer measured. The
costs of the first tests are FAKE (`op_costs`): tests of the search's bookkeeping, not of
real speed; the last compiles a real model and checks it against the reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import backends
from tessera.ir import Model, NodeSet, load_model, members
from tessera.placement.measure import OneAtATime
from tessera.placement.record import Cost
from tessera.placement.search import SupportTable, place_collage
from tessera.placement.search._collage import FINE_ALL
from tessera.target import Target

from .context import context

BOTH = all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino"))
pytestmark = pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")


def _chain(ops: list[str]) -> onnx.ModelProto:
    nodes = [helper.make_node(op, [f"v{i}"], [f"v{i + 1}"], name=f"n{i}")
             for i, op in enumerate(ops)]
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info(f"v{len(ops)}", TensorProto.FLOAT,
                                                             [64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# 200 nodes, five regions of 40: the fourth all Sigmoid
OPS = ["Relu"] * 120 + ["Sigmoid"] * 40 + ["Relu"] * 40


class OpCosts(OneAtATime):
    """FAKE measurer: a node set costs the sum of its ops' figures on its target; every
    node set measured is recorded."""

    def __init__(self, per_op: dict[str, dict[str, float]]) -> None:
        self.per_op = per_op
        self.measured: list[tuple[NodeSet, str]] = []

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        self.measured.append((mask, str(target)))
        ops = [model.dataflow.nodes[i].op_type for i in members(mask)]
        return Cost(sum(self.per_op[str(target)][op] for op in ops), 0.0, 1)


def _place(targets: str, costs: OpCosts, ops: list[str] = OPS) -> tessera.placement.Plan:
    model = load_model(_chain(ops))
    config = tessera.CompilationConfig.create(targets)
    plan, _ = place_collage(context(model, config, measurer=costs),
                            SupportTable.build(model, config))
    return plan


def _on(plan: tessera.placement.Plan) -> dict[int, str]:
    return {int(n[1:]): str(p.target) for p in plan.partitions for n in p.nodes}


def test_when_no_mix_can_win_no_small_candidate_is_measured() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0, "Sigmoid": 1.0},
                     "openvino": {"Relu": 1.02, "Sigmoid": 1.02}})
    plan = _place("onnxruntime,openvino", costs)
    coarse = plan.stats.coarse
    assert len(OPS) > FINE_ALL
    assert coarse is not None and (coarse.regions, coarse.refined) == (5, 0)
    assert coarse.saving == 0.0
    assert set(_on(plan).values()) == {"onnxruntime"}
    sizes = sorted({bin(mask).count("1") for mask, _ in costs.measured})
    assert sizes[0] >= 40  # regions and whole models only
    assert len(costs.measured) <= 2 * 5 + 2 * 2  # regions, whole models (twice over)


def test_a_region_faster_elsewhere_is_searched_node_by_node_with_its_neighbours() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0, "Sigmoid": 3.0},
                     "openvino": {"Relu": 2.0, "Sigmoid": 1.0}})
    plan = _place("onnxruntime,openvino", costs)
    coarse = plan.stats.coarse
    assert coarse is not None and coarse.regions == 5 and coarse.refined == 3
    assert coarse.saving == pytest.approx(80 / 280, abs=1e-3)
    on = _on(plan)
    assert {on[i] for i in range(120, 160)} == {"openvino"}
    assert {on[i] for i in (*range(120), *range(160, 200))} == {"onnxruntime"}
    # node-by-node candidates only in regions 2 to 4 (nodes 80 to 199)
    small = [mask for mask, _ in costs.measured if bin(mask).count("1") <= 3]
    assert small and all(min(members(mask)) >= 80 for mask in small)
    assert plan.stats.cover is not None
    assert plan.stats.cover.modelled_ms == pytest.approx(160 + 40)


def test_a_target_many_times_slower_everywhere_stops_being_measured() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0, "Sigmoid": 1.0},
                     "openvino": {"Relu": 1.0, "Sigmoid": 1.0},
                     "torch": {"Relu": 9.0, "Sigmoid": 9.0}})
    plan = _place("onnxruntime,openvino,torch", costs)
    coarse = plan.stats.coarse
    assert coarse is not None
    assert coarse.slow == ("torch: at least 9.0x the best on each of 2 region(s)",)
    # its first two regions are the same 40 Relus, measured once; nothing after them
    assert [bin(m).count("1") for m, t in costs.measured if t == "torch"] == [40]
    assert all(max(members(m)) < 80 for m, t in costs.measured if t == "torch")
    assert "torch" not in set(_on(plan).values())


def test_a_target_far_slower_on_its_first_region_is_dropped_at_once() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0, "Sigmoid": 1.0},
                     "openvino": {"Relu": 1.0, "Sigmoid": 1.0},
                     "tvm": {"Relu": 80.0, "Sigmoid": 80.0}})
    plan = _place("onnxruntime,openvino,tvm", costs)
    assert plan.stats.coarse is not None
    assert plan.stats.coarse.slow == ("tvm: at least 80.0x the best on each of 1 region(s)",)


def test_a_candidate_far_over_the_bound_is_given_up_after_one_run() -> None:
    from tessera.placement.measure._local import LocalMeasurer

    model = load_model(_chain(["Relu"] * 4))
    whole = model.dataflow.all_nodes()
    patient = LocalMeasurer(isolate=False)(model, whole, Target("onnxruntime"))
    hasty = LocalMeasurer(isolate=False).bounded(1e-9)(model, whole, Target("onnxruntime"))
    assert patient.ok and patient.samples >= 5
    assert hasty.ok and hasty.samples == 1 and hasty.ms is not None and hasty.ms > 1e-9
    relaxed = LocalMeasurer(isolate=False).bounded(1e9)(model, whole, Target("onnxruntime"))
    assert relaxed.samples >= 5


def test_a_small_model_is_searched_node_by_node_everywhere() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0}, "openvino": {"Relu": 1.0}})
    plan = _place("onnxruntime,openvino", costs, ["Relu"] * FINE_ALL)
    assert plan.stats.coarse is None
    assert any(bin(mask).count("1") == 1 for mask, _ in costs.measured)


def test_a_real_compile_of_a_deep_model_measures_regions_and_agrees_with_the_reference(
) -> None:
    ops = ["Relu", "Sigmoid", "Tanh", "Abs"] * 30
    compiled = tessera.compile(_chain(ops), "openvino,onnxruntime")
    stats = compiled.plan.stats
    assert stats.coarse is not None and stats.coarse.regions == 3
    assert stats.measuring is not None and stats.measuring.candidates < 40
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    want = backends.get("reference").compile(compiled.model.proto, check=False).run({"v0": x})
    got = compiled.run({"v0": x})
    np.testing.assert_allclose(got[f"v{len(ops)}"], want[f"v{len(ops)}"], rtol=1e-5,
                               atol=1e-6)


def test_a_single_target_plan_bound_to_lose_is_not_priced() -> None:
    costs = OpCosts({"onnxruntime": {"Relu": 1.0, "Sigmoid": 1.0},
                     "openvino": {"Relu": 1.0, "Sigmoid": 1.0},
                     "torch": {"Relu": 2.0, "Sigmoid": 2.0}})  # slower, not hopeless
    plan = _place("onnxruntime,openvino,torch", costs)
    assert plan.stats.coarse is not None and plan.stats.coarse.slow == ()
    torch = [bin(m).count("1") for m, t in costs.measured if t == "torch"]
    assert torch and max(torch) == 40  # its regions, never its whole-model plan
    assert any(bin(m).count("1") == len(OPS) for m, t in costs.measured
               if t == "onnxruntime")
