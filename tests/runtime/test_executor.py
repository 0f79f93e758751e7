"""The executor: the thread policy per plan, concurrent callers, device crossings only at
partition boundaries, and intermediates freed after their last consumer."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest

import tessera
from tessera import Target, backends, zoo
from tessera.backends._threads import ThreadPolicy, core_budget, prepare_environment
from tessera.placement import Partition, Plan
from tessera.runtime._compiled import Transfer, plan_devices

TARGETS = [t for t in ("onnxruntime", "openvino", "torch")
           if backends.get(t).is_available().ok]


@pytest.fixture(autouse=True)
def cost_db(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def test_a_one_partition_plan_keeps_the_backends_own_settings() -> None:
    native = ThreadPolicy.for_partitions(1)
    assert native.name == "native"
    assert native.apply(Target("onnxruntime")).attrs["spinning"] is True
    assert native.apply(Target("openvino")) == Target("openvino")


def test_a_mixed_plan_shares_one_budget_and_stops_spinning_between_partitions() -> None:
    shared = ThreadPolicy.for_partitions(3)
    assert shared.name == "shared" and shared.budget == core_budget()
    ort = shared.apply(Target("onnxruntime"))
    assert ort.attrs["num-threads"] == core_budget()
    assert ort.attrs["spinning"] is True and ort.attrs["spin-stop"] is True
    assert str(ort).endswith("-spinning -spin-stop")
    ov = shared.apply(Target("openvino"))
    assert ov.attrs["num-threads"] == core_budget() and ov.attrs["num-streams"] == 1
    assert ov.attrs["cpu-pinning"] is False
    assert shared.apply(Target("torch")).attrs["num-threads"] == core_budget()


def test_what_the_user_set_wins_over_the_policy() -> None:
    assert ThreadPolicy.for_partitions(1).apply(
        Target("onnxruntime -spinning=false")).attrs["spinning"] is False
    assert ThreadPolicy.for_partitions(2).apply(
        Target("onnxruntime -num-threads=1 -spinning=false")).attrs == {
        **Target("onnxruntime").attrs, "num-threads": 1, "spinning": False, "spin-stop": True}
    assert ThreadPolicy.for_partitions(1, "shared").name == "shared"
    assert ThreadPolicy.for_partitions(5, "native").name == "native"


def test_the_environment_is_prepared_only_for_mixed_plans(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    assert prepare_environment(1) == {}
    assert prepare_environment(2) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert prepare_environment(2) == {}  # never overrides the user


def test_compiled_partitions_run_under_the_plans_policy() -> None:
    single = tessera.compile(zoo.export("mlp", 1), "onnxruntime")
    assert single.policy.name == "native"
    assert single.parts[0].target.attrs["spinning"] is True
    if len(TARGETS) < 2:
        pytest.skip("needs two real backends")
    proto = onnx.load(zoo.export("mlp", 1))
    mixed = tessera.compile(proto, TARGETS, partitioner="greedy",
                            pins={"/Erf": TARGETS[1]})
    assert mixed.policy.name == "shared" and len(mixed.plan.partitions) > 1
    for part in mixed.parts:
        if part.backend == "onnxruntime":
            assert part.target.attrs["spin-stop"] is True


def test_concurrent_callers_get_their_own_results() -> None:
    if len(TARGETS) < 2:
        pytest.skip("needs two real backends")
    proto = onnx.load(zoo.export("mlp", 1))
    compiled = tessera.compile(proto, [*TARGETS, "reference"], partitioner="greedy",
                               pins={"/Erf": TARGETS[1], "/Softmax": "reference"})
    rng = np.random.default_rng(0)
    shape = compiled.inputs[0].shape
    batches = [{compiled.inputs[0].name: rng.standard_normal(shape).astype(np.float32)}
               for _ in range(16)]
    alone = [compiled.run(b) for b in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(compiled.run, batches * 4))
    for i, got in enumerate(together):
        for key, value in alone[i % 16].items():
            np.testing.assert_array_equal(got[key], value)


def _plan(*targets_and_io: tuple[str, tuple[str, ...], tuple[str, ...]]) -> Plan:
    parts = tuple(Partition(target, (f"n{i}",), inputs, outputs)
                  for i, (target, inputs, outputs) in enumerate(targets_and_io))
    return Plan(parts, "greedy")


def test_devices_change_only_at_partition_boundaries() -> None:
    plan = _plan(("onnxruntime", ("x",), ("a",)), ("tensorrt", ("a",), ("b",)),
                 ("openvino", ("a", "b"), ("y",)))  # tensorrt serves cuda only
    assert plan_devices(plan) == [Transfer("a", "cpu", "cuda", 1),
                                  Transfer("b", "cuda", "cpu", 2)]
    assert plan_devices(_plan(("onnxruntime", ("x",), ("a",)),
                              ("openvino", ("a",), ("y",)))) == []


def test_intermediates_are_freed_after_their_last_consumer() -> None:
    from tessera.runtime._executor import _last_uses

    plan = _plan(("onnxruntime", ("x",), ("a", "b")), ("openvino", ("a",), ("c",)),
                 ("torch", ("b", "c"), ("y",)))
    assert _last_uses(plan, ["y"]) == [["x"], ["a"], ["b", "c"]]


def test_the_config_names_the_executor_and_the_runtime_that_run_the_plan() -> None:
    """Executor and runtime are registered implementations the compiled model dispatches
    to, not names that are only validated."""
    from tessera.config import EXECUTORS, RUNTIMES
    from tessera.runtime import CompiledModel
    from tessera.runtime._executor import GraphExecutor

    model = zoo.export("mlp", 1)
    compiled = tessera.compile(model, "onnxruntime", executor="graph", runtime="python")
    assert type(compiled) is RUNTIMES.get("python").load() is CompiledModel
    assert isinstance(compiled.executor, GraphExecutor)
    assert EXECUTORS.get("graph").load() is GraphExecutor
    with pytest.raises(tessera.errors.ConfigError, match=r"unknown executor 'grpah'.*'graph'"):
        tessera.compile(model, "onnxruntime", executor="grpah")
