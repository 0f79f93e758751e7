"""A compiled plan is built for its partitions' device targets: `cpu -num-cores=1` gives every
backend one thread; artifacts record each partition's device target, and artifacts saved
before device targets still load (the config's are assigned)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends
from tessera.runtime._artifact import MANIFEST, read
from tessera.target import Target

from ..ir.models import mlp
from .test_artifact import rewrite

ONE = Target("cpu -num-cores=1")
FEEDS = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}
pytestmark = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="needs onnxruntime and openvino")


@pytest.fixture(autouse=True)
def cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))
    yield tmp_path


def one_core() -> tessera.runtime.CompiledModel:
    return tessera.compile(mlp(), "openvino,onnxruntime,cpu -num-cores=1", partitioner="greedy",
                           pins={"mm1": "onnxruntime", "relu": "openvino"})


def test_num_cores_gives_every_backend_of_the_plan_one_thread() -> None:
    compiled = one_core()
    assert [(p.kind, p.device) for p in compiled.plan.partitions] == [
        ("onnxruntime", ONE), ("openvino", ONE)]
    assert [(str(c.target), c.device_target) for c in compiled.parts] == [
        ("onnxruntime -num-threads=1 -spinning -spin-stop", ONE),
        ("openvino -num-threads=1 -cpu-pinning=false", ONE)]
    session, ov = compiled.parts[0].session, compiled.parts[1].compiled
    assert session.get_session_options().intra_op_num_threads == 1
    assert ov.get_property("INFERENCE_NUM_THREADS") == 1
    want = backends.get("reference").compile(mlp()).run(FEEDS)["y"]
    np.testing.assert_allclose(compiled.run(FEEDS)["y"], want, rtol=1e-5, atol=1e-6)


def test_the_artifact_records_each_partitions_device_target(tmp_path: Path) -> None:
    compiled = one_core()
    path = compiled.save(tmp_path / "mlp.tess")
    artifact = read(path)
    assert [r["device"] for r in artifact.manifest["partitions"]] == [str(ONE)] * 2
    assert [p.device for p in artifact.plan.partitions] == [ONE, ONE]
    loaded = tessera.load(path)
    assert loaded.plan == compiled.plan
    assert [str(c.target) for c in loaded.parts] == [str(c.target) for c in compiled.parts]
    assert loaded.sources == ["cache", "cache"]  # built as saved: the caches are reused


def test_an_artifact_saved_without_device_targets_loads_with_the_configs(tmp_path: Path
                                                                         ) -> None:
    path = one_core().save(tmp_path / "mlp.tess")
    artifact = read(path)
    plan = json.loads(artifact.files["plan.json"])
    manifest = {**artifact.manifest, "checksum": "re-signed below"}
    for part in plan["partitions"]:
        del part["device"]
    manifest["partitions"] = [{k: v for k, v in r.items() if k != "device"}
                              for r in manifest["partitions"]]
    rewrite(path, {"plan.json": json.dumps(plan).encode(),
                   MANIFEST: json.dumps(manifest).encode()}, fix_manifest=True)
    old = read(path)
    assert [p.device for p in old.plan.partitions] == [None, None]
    assert all("device" not in r for r in old.manifest["partitions"])
    loaded = tessera.load(path)
    assert [p.device for p in loaded.plan.partitions] == [ONE, ONE]
    assert [c.device_target for c in loaded.parts] == [ONE, ONE]
    assert loaded.parts[1].compiled.get_property("INFERENCE_NUM_THREADS") == 1
    want = backends.get("reference").compile(mlp()).run(FEEDS)["y"]
    np.testing.assert_allclose(loaded.run(FEEDS)["y"], want, rtol=1e-5, atol=1e-6)
