"""Measuring on the nodes of a Ray cluster (measure=ray): a local cluster of one-CPU nodes
with labels, a custom resource and each its own machine fingerprint (TESSERA_MACHINE in the
node's environment), measuring the candidates of a small model."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera
from tessera.errors import MeasuringError
from tessera.placement import CostDB, ProgressEvent, Tools
from tessera.placement.record import Rival, RivalKind

from ..ir.models import mlp
from ..reliability import faulty_backends

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.timeout(600)
C6I = "tessera.machine=c6i"


def _node(cluster: Any, machine: str, *, labels: dict[str, str] | None = None,
          resources: dict[str, float] | None = None) -> Any:
    return cluster.add_node(num_cpus=1, labels=labels or {}, resources=resources or {},
                            env_vars={"TESSERA_MACHINE": machine})


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head without CPUs (the build machine's) and three measuring nodes: two labelled
    c6i, one with the custom resource tessera.machine=jetson."""
    from tessera.placement.measure._ray import disconnect

    made = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "env_vars": {"TESSERA_MACHINE": "head"}})
    for machine in ("c6i-a", "c6i-b"):
        _node(made, machine, labels={"tessera.machine": "c6i"})
    _node(made, "jetson-1", resources={"tessera.machine=jetson": 1})
    made.wait_for_nodes()
    try:
        yield made
    finally:
        disconnect()
        made.shutdown()


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CostDB:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    return CostDB(tmp_path / "costs.sqlite")


def _machines(db: CostDB) -> Counter[str]:
    return Counter(r.fingerprint.split(";")[0] for r in db.records())


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}


def _compile(cluster: Any, measure_on: str, **options: Any) -> Any:
    return tessera.compile(mlp(), "onnxruntime", partitioner="collage", measure="ray",
                           ray_address=cluster.address, measure_on=measure_on, **options)


def test_candidates_go_only_to_matching_nodes_and_the_plan_uses_their_costs(
        cluster: Any, db: CostDB) -> None:
    import tempfile

    def scratch() -> set[str]:  # what a node may leave in the system's temporary directory
        return {p.name for p in Path(tempfile.gettempdir()).glob("tessera-*")}

    before = scratch()
    compiled = _compile(cluster, C6I)
    assert scratch() <= before  # the nodes keep what they write in tessera's cache
    stats = compiled.plan.stats.measuring
    assert stats is not None
    machines = _machines(db)
    assert stats.measurements and sum(machines.values()) == stats.measurements
    assert set(machines) <= {"c6i-a", "c6i-b"}  # never the jetson node, nor this machine
    expected = tessera.compile(mlp(), "reference").run(_feeds())["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], expected, rtol=1e-5, atol=1e-6)
    # searched again (the remembered plan forgotten): the nodes' records price it all, and
    # the plan's costs are theirs
    db.forget_plans()
    again = _compile(cluster, C6I).plan
    assert again.stats.measuring is not None
    assert again.stats.measuring.measurements == 0 and again.stats.measuring.cache_hits
    recorded = {r.cost.ms for r in db.records()}
    assert all(p.cost_ms in recorded for p in again.partitions)
    # this machine's own search has none of them: it measures here
    db.forget_plans()
    local = tessera.compile(mlp(), "onnxruntime", partitioner="collage").plan
    assert local.stats.measuring is not None
    assert local.stats.measuring.measurements == stats.measurements


@pytest.mark.parametrize("measure_on, machine", [("tessera.machine=jetson", "jetson-1"),
                                                 ("c6i-b", "c6i-b")])
def test_a_custom_resource_or_a_machine_fingerprint_selects_nodes(
        cluster: Any, db: CostDB, measure_on: str, machine: str) -> None:
    stats = _compile(cluster, measure_on).plan.stats.measuring
    assert stats is not None and _machines(db) == {machine: stats.measurements}


def test_no_matching_node_is_a_measuring_error(cluster: Any, db: CostDB) -> None:
    with pytest.raises(MeasuringError, match=r"tessera\.machine=graviton.*ray start"):
        _compile(cluster, "tessera.machine=graviton")


def test_measure_options_without_ray_measuring_are_a_config_error() -> None:
    with pytest.raises(tessera.errors.ConfigError, match="set measure=ray"):
        tessera.compile(mlp(), "onnxruntime", measure_on=C6I)


def _removing(cluster: Any, node: Any, after: int) -> Any:
    """A progress callback that takes `node` out of the cluster once `after` candidates
    are priced."""
    gone: list[bool] = []

    def progress(event: ProgressEvent) -> None:
        if event.phase == "measuring" and event.done >= after and not gone:
            gone.append(True)
            cluster.remove_node(node)

    return progress


def test_a_node_leaving_mid_search_loses_and_duplicates_no_record(cluster: Any,
                                                                  db: CostDB) -> None:
    edge = [_node(cluster, f"edge-{i}", labels={"tessera.machine": "edge"})
            for i in (1, 2)]
    cluster.wait_for_nodes()
    compiled = tessera.compile(mlp(), "onnxruntime", partitioner="collage", measure="ray",
                               ray_address=cluster.address, measure_on="tessera.machine=edge",
                               progress=_removing(cluster, edge[1], 3))
    stats = compiled.plan.stats.measuring
    records = list(db.records())
    assert stats is not None
    assert len(records) == stats.measurements  # each measured candidate kept once
    assert len({(r.tuning_key, r.structure) for r in records}) == len(records)
    assert {"edge-1"} <= set(_machines(db)) <= {"edge-1", "edge-2"}
    assert not any(r.cost.fault for r in records)  # moved, not failed
    # the last edge node leaving ends the search with what it measured kept
    db.forget_plans()
    with pytest.raises(MeasuringError, match=r"left the cluster.*kept in the cost database"):
        tessera.compile(mlp(), "onnxruntime", partitioner="collage", measure="ray",
                        ray_address=cluster.address, measure_on="tessera.machine=edge",
                        max_candidate_size=4, progress=_removing(cluster, edge[0], 1))


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TESSERA_PLUGINS", faulty_backends.__name__)
    faulty_backends.register()
    yield
    faulty_backends.unregister()


@pytest.mark.parametrize("isolate, reason", [(True, "SIGSEGV"),
                                             (False, "measuring actor on jetson-1")])
def test_a_crashing_backend_on_a_node_only_loses_its_candidates(
        cluster: Any, db: CostDB, faulty: None, isolate: bool, reason: str) -> None:
    compiled = tessera.compile(mlp(), "test-segfault,onnxruntime", partitioner="collage",
                               measure="ray", ray_address=cluster.address,
                               measure_on="tessera.machine=jetson", isolate=isolate)
    stats = compiled.plan.stats.measuring
    assert stats is not None
    assert any(reason in e.reason and "softmax" in e.nodes and e.fault == "crashed"
               for e in stats.invalid_examples), stats.invalid_examples
    softmax = next(p for p in compiled.plan.partitions if "softmax" in p.nodes)
    assert softmax.kind == "onnxruntime"
    assert set(_machines(db)) == {"jetson-1"}


def test_the_command_line_measures_on_the_nodes_it_names(cluster: Any, db: CostDB,
                                                         tmp_path: Path) -> None:
    import onnx
    from click.testing import CliRunner

    from tessera.cli import cli

    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(), str(model))
    result = CliRunner().invoke(cli, [
        "compile", str(model), "-t", "onnxruntime", "--partitioner", "collage",
        "--measure", "ray", "--ray-address", cluster.address, "--measure-on", C6I,
        "-o", str(tmp_path / "mlp.tess")], prog_name="tessera")
    assert result.exit_code == 0, result.output
    assert set(_machines(db)) <= {"c6i-a", "c6i-b"} and _machines(db)
    unasked = CliRunner().invoke(cli, ["compile", str(model), "-t", "onnxruntime",
                                       "--measure-on", C6I], prog_name="tessera")
    assert unasked.exit_code != 0 and "set measure=ray" in unasked.output


def test_a_node_without_the_weights_gets_them_once_through_the_object_store(
        cluster: Any, db: CostDB, tmp_path: Path) -> None:
    own = tmp_path / "remote-cache"  # the node's own caches: it holds none of this model
    cluster.add_node(num_cpus=1, labels={"tessera.machine": "remote"},
                     env_vars={"TESSERA_MACHINE": "remote-1", "TESSERA_CACHE": str(own)})
    cluster.wait_for_nodes()
    model = mlp(hidden=64)  # weights large enough to live in a weights file
    compiled = tessera.compile(model, "onnxruntime", partitioner="collage", measure="ray",
                               ray_address=cluster.address,
                               measure_on="tessera.machine=remote")
    stats = compiled.plan.stats.measuring
    assert stats is not None and stats.measurements and not stats.invalid
    assert _machines(db) == {"remote-1": stats.measurements}
    entries = [p for p in (own / "weights").iterdir() if (p / "weights.bin").is_file()]
    assert len(entries) == 1  # received once, for every candidate


def test_the_race_and_the_guard_run_on_the_measuring_node(cluster: Any, db: CostDB) -> None:
    compiled = tessera.compile(mlp(), "onnxruntime,openvino", partitioner="collage",
                               measure="ray", ray_address=cluster.address, measure_on="c6i-b")
    stats = compiled.plan.stats
    race = stats.race
    assert race is not None
    assert race.raced_on == "c6i-b"  # the node the costs came from, not this machine
    assert race.kept in race.timings
    assert race.ms(Rival(RivalKind.SEARCHED)) is not None
    assert stats.guard_passed  # checked there, so not here again
    assert set(_machines(db)) == {"c6i-b"}
    expected = tessera.compile(mlp(), "reference").run(_feeds())["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], expected, rtol=1e-5, atol=1e-6)
    from tessera.cli._common import end_to_end_line

    assert " on c6i-b: " in (end_to_end_line(stats) or "")


class CrashingOnNodes:
    """TEST-ONLY builder: on a measuring node (TESSERA_MACHINE c6i-*) building kills the
    process, as a backend crashing in the race would; here it is the runtime's builder."""

    def __init__(self) -> None:
        from tessera.runtime import RuntimeBuilder

        self.here = RuntimeBuilder()

    def build(self, *args: Any, **kwargs: Any) -> Any:
        import os

        if os.environ.get("TESSERA_MACHINE", "").startswith("c6i"):
            os._exit(3)
        return self.here.build(*args, **kwargs)

    def release(self) -> None:
        self.here.release()


def test_a_race_whose_node_dies_keeps_the_searched_plan_and_says_why(
        cluster: Any, db: CostDB) -> None:
    from tessera.config import CompilationConfig
    from tessera.ir import load_model
    from tessera.placement import place

    model = load_model(mlp())
    config = CompilationConfig.create("onnxruntime,openvino", partitioner="collage",
                                      measure="ray", ray_address=cluster.address,
                                      measure_on=C6I)
    placed = place(model, config, tools=Tools(builder=CrashingOnNodes()), build=True)
    stats = placed.plan.stats
    race = stats.race
    searched = Rival(RivalKind.SEARCHED)
    assert race is not None and race.kept == searched and race.raced_on is None
    why = race.timings[searched].reason
    assert why is not None and why.startswith("not raced: the race on the measuring "
                                              "nodes failed (c6i-")
    assert stats.guard_passed  # the guard ran here instead
    assert placed.built is not None and placed.built.runnable is not None
    expected = tessera.compile(mlp(), "reference").run(_feeds())["y"]
    np.testing.assert_allclose(placed.built.runnable.run(_feeds())["y"], expected,
                               rtol=1e-5, atol=1e-6)
    assert stats.measuring is not None
    assert sum(_machines(db).values()) == stats.measuring.measurements  # none lost to the crash
