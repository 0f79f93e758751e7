"""Placement with real backends (onnxruntime, openvino, torch) on the bundled models: plans
run and match the reference, pins hold, costs persist, and the end-to-end guard keeps the
fastest of the searched, greedy and best single-target plans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import backends, zoo
from tessera.errors import PartitionError
from tessera.placement import METADATA_KEY, Plan
from tessera.placement.record import RivalKind

TARGETS = [t for t in ("onnxruntime", "openvino", "torch")
           if backends.get(t).is_available().ok]
pytestmark = pytest.mark.skipif(len(TARGETS) < 2, reason="needs two real backends")


@pytest.fixture(autouse=True)
def cost_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[Path]:
    path = tmp_path_factory.getbasetemp() / "costs.sqlite"  # shared by this module's tests
    monkeypatch.setenv("TESSERA_COST_DB", str(path))
    yield path


def reference_outputs(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    feeds = zoo.example_inputs(name)
    model = onnx.load(zoo.export(name, 1))
    return feeds, backends.get("reference").compile(model).run(feeds)


def assert_matches_reference(compiled: tessera.runtime.CompiledModel, name: str) -> None:
    feeds, want = reference_outputs(name)
    got = compiled.run(feeds)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["mlp", "resnet-tiny"])
def test_collage_plan_runs_and_matches_the_reference(name: str) -> None:
    compiled = tessera.compile(zoo.export(name, 1), TARGETS)
    plan = compiled.plan
    assert plan.partitioner == "collage"
    measuring, cover = plan.stats.measuring, plan.stats.cover
    assert measuring is not None and cover is not None and cover.seconds is not None
    assert measuring.candidates >= len(compiled.model.dataflow) * len(TARGETS) // 2
    assert all(p.cost_ms is not None and p.cost_ms > 0 for p in plan.partitions)
    assert_matches_reference(compiled, name)
    assert Plan.from_json(plan.to_json()) == plan


def test_second_compile_makes_no_measurements() -> None:
    path = zoo.export("mlp", 1)
    tessera.partition(path, TARGETS)
    again = tessera.partition(path, TARGETS)
    measuring = again.stats.measuring
    assert measuring is not None and measuring.measurements == 0
    assert measuring.cache_hits == measuring.candidates


def test_a_model_sharing_subgraphs_reuses_their_costs() -> None:
    proto = onnx.load(zoo.export("mlp", 1))
    tessera.partition(proto, TARGETS)
    out = proto.graph.output[0]
    proto.graph.node.append(onnx.helper.make_node("Relu", [out.name], ["extra"], name="extra"))
    proto.graph.output[0].name = "extra"
    plan = tessera.partition(proto, TARGETS)
    assert plan.stats.measuring is not None
    assert 0 < plan.stats.measuring.measurements < plan.stats.measuring.cache_hits


def test_the_guard_keeps_the_fastest_plan_end_to_end() -> None:
    plan = tessera.partition(zoo.export("mlp", 1), TARGETS)
    race = plan.stats.race
    assert race is not None
    timings = {r: t.ms for r, t in race.timings.items() if t.ms is not None}
    assert {r.kind for r in race.timings} >= {RivalKind.SEARCHED, RivalKind.GREEDY,
                                              RivalKind.SINGLE}
    assert timings[race.kept] == min(timings.values())


@pytest.mark.parametrize("partitioner", ["greedy", "collage"])
def test_pins_by_name_regex_and_metadata_hold(partitioner: str) -> None:
    proto = onnx.load(zoo.export("mlp", 1))
    meta = next(n for n in proto.graph.node if n.name == "/Softmax").metadata_props.add()
    meta.key, meta.value = METADATA_KEY, "reference"
    pins = {"/layers.1/Gemm": "torch" if "torch" in TARGETS else "openvino",
            "re:/Erf.*": "openvino" if "openvino" in TARGETS else "reference"}
    compiled = tessera.compile(proto, TARGETS, pins=pins, partitioner=partitioner)
    where = {n: str(p.target) for p in compiled.plan.partitions for n in p.nodes}
    assert where["/layers.1/Gemm"] == pins["/layers.1/Gemm"]
    assert where["/Erf"] == where["/Erf_1"] == pins["re:/Erf.*"]
    assert where["/Softmax"] == "reference"
    assert compiled.plan.decisions["/Softmax"].startswith("pinned to reference")
    assert_matches_reference(compiled, "mlp")


def test_bad_pins_are_partition_errors() -> None:
    path = zoo.export("mlp", 1)
    with pytest.raises(PartitionError, match=r"names no node; did you mean '/layers.0/Gemm'"):
        tessera.partition(path, TARGETS, pins={"/layers.0/Gem": "onnxruntime"})
    with pytest.raises(PartitionError, match="matches no node"):
        tessera.partition(path, TARGETS, pins={"re:nothing.*": "onnxruntime"})
    with pytest.raises(PartitionError, match="'no-such-backend' names no named target of the "
                                             "config, backend or device target"):
        tessera.partition(path, TARGETS, pins={"/Softmax": "no-such-backend"})


def test_greedy_follows_priority_on_a_real_model() -> None:
    plan = tessera.partition(zoo.export("resnet-tiny", 1), list(reversed(TARGETS)),
                             partitioner="greedy")
    assert [str(p.target) for p in plan.partitions] == [TARGETS[-1]]


def test_an_annotated_plan_handed_back_keeps_its_fixed_parts() -> None:
    from tessera.placement import annotate

    model = tessera.load_model(zoo.export("mlp", 1))
    first = tessera.partition(model, TARGETS, partitioner="greedy")
    fixed = ["/layers.0/Gemm", "/Erf"]
    edited = annotate(model, first, only=fixed)
    onnx.checker.check_model(edited)
    marks = {n.name: [(p.key, p.value) for p in n.metadata_props] for n in edited.graph.node}
    assert marks["/layers.0/Gemm"] == [(METADATA_KEY, str(first.partitions[0].target))]
    assert marks["/Div"] == []
    again = tessera.partition(edited, list(reversed(TARGETS)), partitioner="greedy")
    where = {n: str(p.target) for p in again.partitions for n in p.nodes}
    assert where["/layers.0/Gemm"] == where["/Erf"] == str(first.partitions[0].target)
    assert where["/Div"] == TARGETS[-1]  # the rest is placed afresh


def test_variants_of_one_backend_compete_per_partition() -> None:
    variants = ["onnxruntime -opt-level=all", "onnxruntime -opt-level=basic -num-threads=1"]
    plan = tessera.partition(zoo.export("mlp", 1), variants)
    assert plan.partitioner == "collage"
    # the search's own one-thread choice of the first may win a small partition too
    assert {str(p.target) for p in plan.partitions} <= {
        "onnxruntime", "onnxruntime -num-threads=1", variants[1]}
    assert plan.stats.measuring is not None and plan.stats.measuring.candidates >= 2 * 20
