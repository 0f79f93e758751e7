"""The plan verifier: greedy plans on generated DAGs pass it, and each deliberately broken plan
fails it with a PartitionError naming the invariant."""

from __future__ import annotations

import dataclasses

import onnx
import pytest
from hypothesis import given, settings

from tessera.config import CompilationConfig
from tessera.errors import PartitionError
from tessera.ir import Model, bits, load_model
from tessera.placement import Plan
from tessera.placement.record import make_partitions
from tessera.placement.search import FALLBACK, SupportTable, place_greedy
from tessera.placement.search._verify import verify_plan
from tessera.target import Target

from ..ir.models import diamond
from .test_greedy import placements, synthetic_table

ORT = Target("onnxruntime")
CONFIG = CompilationConfig.create("onnxruntime")


@settings(max_examples=60, deadline=None)
@given(case=placements())
def test_greedy_plans_pass(case: tuple[onnx.ModelProto, list[tuple[Target, ...]]]) -> None:
    proto, allowed = case
    model = load_model(proto)
    table = synthetic_table(allowed)
    verify_plan(model, place_greedy(model, table, 1), table)


def _plan(model: Model, groups: list[tuple[list[int], str]]) -> Plan:
    return Plan(make_partitions(model.dataflow, [(bits(nodes), target, None)
                                                 for nodes, target in groups]), "greedy")


def _replace_part(plan: Plan, index: int, **changes: object) -> Plan:
    parts = list(plan.partitions)
    parts[index] = dataclasses.replace(parts[index], **changes)
    return dataclasses.replace(plan, partitions=tuple(parts))


def test_good_plans_pass_against_a_config_and_a_table() -> None:
    model = load_model(diamond())  # a -> (b, c) -> d
    table = SupportTable((ORT, FALLBACK), ((ORT,),) * 4, {}, {})
    for groups in ([([0, 1, 2, 3], "onnxruntime")],
                   [([0], "onnxruntime"), ([1, 2], "reference"), ([3], "onnxruntime")],
                   [([0, 2], "reference"), ([1], "onnxruntime"), ([3], "reference")]):
        plan = _plan(model, groups)
        verify_plan(model, plan, CONFIG)
        verify_plan(model, plan, table)


@pytest.mark.parametrize(("groups", "fragment"), [
    ([([0, 1, 2], "onnxruntime")], r"1 node\(s\) are in no partition: \['d'\]"),
    ([([0, 3], "onnxruntime"), ([1, 2], "reference")], "partition 0 .* is not convex"),
    ([([1, 2, 3], "onnxruntime"), ([0], "reference")],
     "not in execution order: partition 0 .* reads 'a', which partition 1 .* produces later"),
    ([([0, 1, 2, 3], "tensorrt")], "runs on tensorrt, which the config does not offer"),
    ([([0, 1, 2, 3], "onnxruntime -device=cuda")], "runs on device 'cuda'"),
])
def test_broken_plans_name_the_invariant(groups: list[tuple[list[int], str]],
                                         fragment: str) -> None:
    model = load_model(diamond())
    plan = Plan(tuple(part for nodes, target in groups
                      for part in make_partitions(model.dataflow, [(bits(nodes), target, None)])),
                "greedy")
    with pytest.raises(PartitionError, match=f"plan verifier after step x: .*{fragment}"):
        verify_plan(model, plan, CONFIG, when="after step x")


def test_a_node_twice_or_unknown_is_named() -> None:
    model = load_model(diamond())
    plan = _plan(model, [([0, 1], "onnxruntime"), ([2, 3], "onnxruntime")])
    twice = _replace_part(plan, 1, nodes=("b", "c", "d"))
    with pytest.raises(PartitionError, match="node 'b' is in two partitions"):
        verify_plan(model, twice, CONFIG)
    unknown = _replace_part(plan, 1, nodes=("c", "d", "zz"))
    with pytest.raises(PartitionError, match="lists node 'zz', which the model does not have"):
        verify_plan(model, unknown, CONFIG)
    shuffled = _replace_part(plan, 1, nodes=("d", "c"))
    with pytest.raises(PartitionError, match="out of topological order"):
        verify_plan(model, shuffled, CONFIG)


def test_boundaries_must_match_the_dataflow_graph() -> None:
    model = load_model(diamond())
    plan = _plan(model, [([0, 1], "onnxruntime"), ([2, 3], "onnxruntime")])
    assert plan.partitions[0].outputs == ("a", "b")
    dropped = _replace_part(plan, 0, outputs=("b",))
    with pytest.raises(PartitionError, match=r"records outputs .* \['a'\] outputs but not"):
        verify_plan(model, dropped, CONFIG)
    invented = _replace_part(plan, 1, inputs=("a", "b", "x"))
    with pytest.raises(PartitionError, match=r"records inputs .* \['x'\] recorded but not"):
        verify_plan(model, invented, CONFIG)


def test_pins_must_hold() -> None:
    model = load_model(diamond())
    plan = _plan(model, [([0, 1, 2, 3], "onnxruntime")])
    verify_plan(model, plan, CONFIG, {0: ORT})
    with pytest.raises(PartitionError, match="node 'c' is pinned to 'reference' but runs on "
                                             "'onnxruntime'"):
        verify_plan(model, plan, CONFIG, {2: FALLBACK})
    table = SupportTable((ORT, FALLBACK), ((ORT,),) * 4, {}, {3: FALLBACK})
    with pytest.raises(PartitionError, match="node 'd' is pinned"):
        verify_plan(model, plan, table)  # the table's pins by default


def test_a_device_pin_holds_on_any_backend_of_that_device() -> None:
    model = load_model(diamond())
    plan = _plan(model, [([0, 1, 2, 3], "onnxruntime")])
    verify_plan(model, plan, CONFIG, {1: Target("cpu")})
    table = SupportTable((ORT, FALLBACK), ((ORT,),) * 4, {}, {}, {1: Target("cuda")})
    with pytest.raises(PartitionError, match="node 'b' is pinned to 'cuda' but runs on "
                                             "'onnxruntime'"):
        verify_plan(model, plan, table)  # the table's device pins by default


def test_the_fallback_is_offered_only_when_it_is_on() -> None:
    model = load_model(diamond())
    plan = _plan(model, [([0, 1, 2, 3], "reference")])
    verify_plan(model, plan, CONFIG)
    with pytest.raises(PartitionError, match="runs on reference, which the config does not"):
        verify_plan(model, plan, CompilationConfig.create("onnxruntime", fallback=False))


def test_the_verify_option_runs_the_plan_verifier_after_each_placement_step() -> None:
    """A real compile with verify on: every step's plan passes (the verifier raises on a
    broken one, as the tests above show) and the compiled model is right."""
    import numpy as np
    import onnx

    import tessera
    from tessera import backends, zoo

    model = zoo.export("mlp", 1)
    checked = tessera.compile(model, ["onnxruntime", "reference"], partitioner="collage",
                              verify=True)
    assert checked.plan.kinds == ["onnxruntime"]  # the reference is far slower
    feeds = zoo.example_inputs("mlp", 1)
    want = backends.get("reference").compile(onnx.load(model)).run(feeds)
    for name, value in checked.run(feeds).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5)
