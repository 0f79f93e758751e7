"""tessera.compile: priority placement, fallback, the numeric guard, the ONNX backend API."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper

import tessera
from tessera import backends
from tessera.backends import Backend, Compiled, Support
from tessera.errors import InputError, PartitionError
from tessera.placement import Plan

from .ir.models import mlp
from .registering import registered


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


def _remembered(plan: Plan) -> bool:
    """Whether the plan was remembered rather than searched."""
    return plan.stats.source is not None and plan.stats.source.cache is not None


def _reference() -> np.ndarray:
    return backends.get("reference").compile(mlp()).run(_feeds())["y"]


def test_one_backend_runs_the_whole_model() -> None:
    compiled = tessera.compile(mlp(), "onnxruntime")
    assert [str(p.target) for p in compiled.plan.partitions] == ["onnxruntime"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], _reference(), rtol=1e-5)
    with pytest.raises(InputError, match="missing"):
        compiled.run({})


class WrongBackend(Backend):
    """TEST-ONLY fake backend: claims Relu and MatMul, and computes Relu wrongly."""

    def supports(self, node, opset, types=None, constants=None,  # type: ignore[no-untyped-def]
                 *, target=None):
        ok = node.op_type in ("Relu", "MatMul")
        return Support(ok, "test fake claims it" if ok else "test fake does not")

    def _compile(self, submodel, target):  # type: ignore[no-untyped-def]
        ref = backends.get("reference").compile(submodel)
        wrong = any(n.op_type == "Relu" for n in submodel.graph.node)

        class Run(Compiled):
            def _run(self, feeds):  # type: ignore[no-untyped-def]
                out = ref.run(feeds)
                return {k: v * 2.0 if wrong else v for k, v in out.items()}
        return Run(self.name, submodel, target)


@pytest.fixture
def wrong_backend():  # type: ignore[no-untyped-def]
    with registered("test-wrong", WrongBackend()) as backend:
        yield backend


def test_mixed_plan_with_fallback_and_the_numeric_guard(wrong_backend: Backend) -> None:
    compiled = tessera.compile(mlp(), "test-wrong,onnxruntime", partitioner="greedy")
    targets = [(str(p.target), p.nodes) for p in compiled.plan.partitions]
    # the guard caught the partition (relu, mm2) computing wrongly and bisected it: only
    # relu left test-wrong; mm2, which it computes right, stayed
    assert targets == [("test-wrong", ("mm1",)), ("onnxruntime", ("add1", "relu")),
                       ("test-wrong", ("mm2",)), ("onnxruntime", ("add2", "softmax"))]
    assert "numeric guard" in compiled.plan.reasons["relu"]["test-wrong"]
    assert "numeric guard" not in compiled.plan.reasons["mm2"]["test-wrong"]
    assert compiled.plan.stats.guard is not None
    evidence = compiled.plan.stats.guard.disagreements
    assert evidence and evidence[0].implementation == "test-wrong"
    assert (evidence[0].ops, evidence[0].nodes) == (("Relu",), ("relu",))
    assert "onnx.reference" in evidence[0].judges and "onnxruntime" in evidence[0].judges
    np.testing.assert_allclose(compiled.run(_feeds())["y"], _reference(), rtol=1e-5)
    unguarded = tessera.compile(mlp(), "test-wrong,onnxruntime", partitioner="greedy",
                                numeric_guard=False)
    assert not np.allclose(unguarded.run(_feeds())["y"], _reference())


def test_fallback_off_lists_each_unsupported_node_and_every_reason(wrong_backend: Backend
                                                                   ) -> None:
    with pytest.raises(PartitionError) as error:
        tessera.compile(mlp(), "test-wrong", fallback=False)
    message = str(error.value)
    assert "3 node(s) have no backend (fallback is off" in message
    assert "add1 (Add): test-wrong: test fake does not" in message
    assert "softmax (Softmax): test-wrong: test fake does not" in message
    placed = tessera.compile(mlp(), "test-wrong")  # fallback on: the reference takes the rest
    assert {str(p.target) for p in placed.plan.partitions} == {"test-wrong", "reference"}


def test_plan_json_round_trip() -> None:
    plan = tessera.compile(mlp(), "onnxruntime").plan
    assert Plan.from_json(plan.to_json()) == plan


def test_onnx_backend_api() -> None:
    import tessera.onnx_backend as backend

    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    outputs = backend.run_model(mlp(), [_feeds()["x"]])
    np.testing.assert_allclose(outputs[0], _reference(), rtol=1e-5)
    np.testing.assert_allclose(outputs.y, _reference(), rtol=1e-5)
    rep = backend.TesseraBackend.configured("openvino", fallback=False).prepare(mlp())
    assert [str(p.target) for p in rep.compiled.plan.partitions] == ["openvino"]


def test_onnx_backend_test_runs_over_tessera() -> None:
    """onnx.backend.test.BackendTest over tessera, on the wheel's `simple` and
    `pytorch-operator` model directories."""
    import unittest

    import onnx.backend.test

    import tessera.onnx_backend as backend

    suite_builder = onnx.backend.test.BackendTest(backend.TesseraBackend, __name__)
    suite_builder.include(r"^test_(sign_model|single_relu_model|"
                          r"Conv2d|Linear|ReLU|Softmax|BatchNorm|MaxPool|AvgPool|Embedding|"
                          r"operator_(add|conv|relu|maxpool|mm|exp|flatten|index|pad|view))")
    suite = unittest.TestSuite()
    for case in suite_builder.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    with open(os.devnull, "w") as sink:
        result = unittest.TextTestRunner(verbosity=0, stream=sink).run(suite)
    ran = result.testsRun - len(result.skipped)
    problems = result.failures + result.errors
    assert not problems, problems[:1]  # opset-6 models are upgraded on load
    assert ran >= 30


def test_model_error_surfaces_from_compile() -> None:
    with pytest.raises(tessera.errors.ModelError):
        tessera.compile(b"not a model", "onnxruntime")
    graph = helper.make_graph([], "empty", [], [])
    assert isinstance(helper.make_model(graph), onnx.ModelProto)


def test_a_warm_compile_measures_nothing_and_reuses_the_end_to_end_verdict(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", os.path.join(tmp_path, "costs.sqlite"))
    targets = [t for t in ("onnxruntime", "openvino", "torch")
               if backends.get(t).is_available().ok]
    if len(targets) < 2:
        pytest.skip("needs two real backends")
    cold = tessera.compile(mlp(), targets, partitioner="collage")
    warm = tessera.compile(mlp(), targets, partitioner="collage")
    cold_stats, warm_stats = cold.plan.stats, warm.plan.stats
    assert cold_stats.measuring is not None and cold_stats.measuring.measurements > 0
    assert warm_stats.measuring is not None and warm_stats.measuring.measurements == 0
    assert warm_stats.cover is not None
    assert warm_stats.measuring.seconds == warm_stats.cover.seconds == 0.0
    # the rivals' end-to-end latencies come back from the database, not from new timings
    assert warm_stats.race is not None and cold_stats.race is not None
    assert warm_stats.race.timings == cold_stats.race.timings
    assert warm.plan == cold.plan and warm_stats.race.kept == cold_stats.race.kept
    assert warm.plan.decisions == cold.plan.decisions and warm.plan.reasons == cold.plan.reasons
    # the search itself was skipped
    assert warm_stats.source is not None and warm_stats.source.cache is not None
    assert warm_stats.source.cache.startswith("hit")
    assert cold_stats.source is None or cold_stats.source.cache is None
    # the guard checked the cold compile's partitions; the warm compile trusts that verdict
    assert cold_stats.guard_passed and warm_stats.guard_passed
    np.testing.assert_allclose(warm.run(_feeds())["y"], _reference(), rtol=1e-5, atol=1e-6)


def test_the_remembered_plan_depends_on_names_config_and_imported_costs(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    from tessera.placement import CostDB

    db_path = os.path.join(tmp_path, "costs.sqlite")
    monkeypatch.setenv("TESSERA_COST_DB", db_path)
    targets = ["onnxruntime", "reference"]
    tessera.compile(mlp(), targets, partitioner="collage")
    assert CostDB(db_path).describe()["plans"] == 1
    renamed = tessera.compile(mlp(names="other_"), targets, partitioner="collage")
    assert not _remembered(renamed.plan)  # other node names: another plan
    assert all(n.startswith("other_") for p in renamed.plan.partitions for n in p.nodes)
    # a cache-key option changed (and larger candidates were measured: costs a fresh
    # database lacks, for the import below)
    more = tessera.compile(mlp(), targets, partitioner="collage", max_candidate_size=4)
    assert not _remembered(more.plan)
    assert _remembered(tessera.compile(mlp(), targets, partitioner="collage").plan)
    exported = os.path.join(tmp_path, "records.jsonl")
    CostDB(db_path).export(exported)
    fresh = os.path.join(tmp_path, "fresh.sqlite")
    monkeypatch.setenv("TESSERA_COST_DB", fresh)
    tessera.compile(mlp(), targets, partitioner="collage")
    assert CostDB(fresh).import_(exported) > 0  # new costs: the plans made without them go
    assert CostDB(fresh).describe()["plans"] == 0


def test_models_of_one_structure_with_other_value_names_do_not_share_a_plan(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    """Two expansions of one function differ only in their values' names (node names are
    generated alike): each gets its own plan, and runs."""
    monkeypatch.setenv("TESSERA_COST_DB", os.path.join(tmp_path, "costs.sqlite"))

    def softmax(hidden: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            [helper.make_node("ReduceMax", ["x"], [hidden], axes=[1], name="max"),
             helper.make_node("Sub", ["x", hidden], ["y"], name="sub")], "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for hidden in ("first_max", "second_max"):
        compiled = tessera.compile(softmax(hidden), ["onnxruntime", "reference"],
                                   partitioner="collage")
        assert not _remembered(compiled.plan)
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], x - x.max(1, keepdims=True))
