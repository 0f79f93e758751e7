"""PlanDevices: every partition of a plan gets a device target from the config (the least
specialised for its device, or the one placement chose), the plan shows and round-trips it,
and Collage measures and keeps each candidate's cost for what is built on that device."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera.backends._threads import core_budget
from tessera.config import CompilationConfig
from tessera.errors import PartitionError
from tessera.ir import Model, NodeSet, load_model
from tessera.placement import CostDB, LocalMeasurer, Partition, Plan, place
from tessera.placement.measure import OneAtATime
from tessera.placement.record import Cost, make_partitions
from tessera.placement.search import SupportTable, place_collage
from tessera.placement.search._device_targets import assign_devices, config_devices, device_for
from tessera.target import Target

from ..ir.models import mlp
from .context import context

ONE = Target("cpu -num-cores=1")
SKYLAKE = Target("cpu -mcpu=skylake -num-cores=1")
CONFIG = "onnxruntime,reference,cpu -num-cores=1,cpu -mcpu=skylake -num-cores=1"


def test_every_partition_gets_the_least_specialised_device_target_of_its_device() -> None:
    config = CompilationConfig.create(CONFIG, partitioner="greedy")
    plan = place(load_model(mlp()), config, pins={"softmax": "reference"}).plan
    assert [(str(p.target), p.device) for p in plan.partitions] == [
        ("onnxruntime", ONE), ("reference", ONE)]
    assert config_devices(config) == (ONE,)


def test_a_device_target_placement_chose_is_kept() -> None:
    model = load_model(mlp())
    flow = model.dataflow
    first, rest = model.node_set(flow.names[:3]), model.node_set(flow.names[3:])
    parts = make_partitions(flow, [(first, "onnxruntime", None), (rest, "reference", None)],
                            devices=[SKYLAKE, None])
    plan = assign_devices(Plan(parts, "greedy"), CompilationConfig.create(CONFIG))
    assert [p.device for p in plan.partitions] == [SKYLAKE, ONE]
    assert assign_devices(plan, CompilationConfig.create("onnxruntime")) is plan


def test_a_device_the_config_has_no_target_for_gets_the_host_or_the_plain_kind() -> None:
    config = CompilationConfig.create("cuda -arch=sm_80", host="cpu -mcpu=znver3")
    assert device_for(config, "cuda") == Target("cuda -arch=sm_80")
    assert device_for(config, "cpu") == Target("cpu -mcpu=znver3")  # the reference's
    assert config_devices(config) == (Target("cuda -arch=sm_80"), Target("cpu -mcpu=znver3"))
    assert device_for(CompilationConfig.create("onnxruntime"), "cuda") == Target("cuda")


@pytest.mark.parametrize(("target", "device"), [
    ("openvino", "cuda -arch=sm_80"), ("onnxruntime", "openvino"), ("reference", "composite "
                                                                    "-devices=cpu")])
def test_a_partition_refuses_a_device_target_it_cannot_run_on(target: str, device: str) -> None:
    with pytest.raises(PartitionError, match=f"a partition of '{target}' cannot run on"):
        Partition(target, ("a",), ("x",), ("y",), device=device)


devices = st.builds(
    lambda cores, cpu, mattr: Target({"kind": "cpu", **({"num-cores": cores} if cores else {}),
                                      **({"mcpu": cpu} if cpu else {}),
                                      **({"mattr": mattr} if mattr else {})}),
    st.none() | st.integers(1, 256), st.none() | st.sampled_from(["skylake", "cortex-a72"]),
    st.lists(st.sampled_from(["+avx2", "-fma", "+neon"]), unique=True, max_size=2))


@given(device=devices, cost=st.none() | st.floats(0, 10, allow_nan=False))
def test_the_device_target_round_trips_through_the_plans_json(device: Target,
                                                             cost: float | None) -> None:
    plan = Plan((Partition("onnxruntime", ("a",), ("x",), ("y",), cost, device),), "greedy")
    again = Plan.from_json(plan.to_json())
    assert again == plan and again.partitions[0].device == device
    assert json.loads(plan.to_json())["partitions"][0]["device"] == str(device)


def test_a_plan_saved_without_device_targets_loads_and_gets_them() -> None:
    plan = Plan((Partition("onnxruntime", ("a",), ("x",), ("y",), 0.5, ONE),), "greedy")
    data = plan.to_dict()
    del data["partitions"][0]["device"]
    old = Plan.from_json(json.dumps(data))
    assert old.partitions[0].device is None
    assert old.summary() == "1 partition(s), partitioner greedy, 0.500 ms measured\n" \
                            "  [0] onnxruntime: 1 node(s), 0.500 ms (a)"
    assigned = assign_devices(old, CompilationConfig.create("onnxruntime,cpu -num-cores=1"))
    assert assigned == plan
    assert assigned.summary().splitlines()[1] == \
        "  [0] onnxruntime on cpu -num-cores=1: 1 node(s), 0.500 ms (a)"


# -- Collage: a candidate is measured, and its cost kept, as built for its device ------------
def test_the_measurer_builds_each_candidate_for_its_device_target() -> None:
    measurer = LocalMeasurer(isolate=False, devices=(ONE,))
    assert measurer.device(Target("onnxruntime")) == ONE
    assert measurer.device(Target("onnxruntime -device=cuda")) is None
    assert measurer.built_for(Target("onnxruntime")) == (
        Target("onnxruntime -num-threads=1") if core_budget() > 1 else Target("onnxruntime"))
    assert measurer.built_for(Target("openvino -num-threads=4")) == \
        Target("openvino -num-threads=1")


@dataclass(frozen=True)
class _Flat(OneAtATime):
    """TEST-ONLY measurer: every candidate costs 1 ms; built for a one-core device."""

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        return Cost(1.0, 0.0, 1)

    def built_for(self, target: Target) -> Target:
        return target.with_attrs(**{"num-threads": 1})


def test_collage_keeps_each_cost_under_the_key_of_what_was_built(tmp_path: Path) -> None:
    model = load_model(mlp())
    config = CompilationConfig.create("onnxruntime,openvino,cpu -num-cores=1")
    db = CostDB(tmp_path / "costs.sqlite")
    place_collage(context(model, config, db=db, measurer=_Flat()),
                  SupportTable.build(model, config))
    keys = {r.tuning_key for r in db.records()}
    assert keys == {Target(f"{name} -num-threads=1").tuning_key()
                    for name in ("onnxruntime", "openvino")}

