"""Measuring and building a model whose weights live in its weights file: the measuring worker
is sent the skeleton's path and a node mask (no weight crosses the pipe), and a plan built on
several backends from references into the file computes what the reference computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import backends
from tessera.ir import load_model
from tessera.placement.measure import LocalMeasurer
from tessera.placement.measure._protocol import MeasureSettings
from tessera.placement.measure._worker import shared_worker
from tessera.target import Target

from ..ir.models import mlp

needs_both = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="needs onnxruntime and openvino")
QUICK = MeasureSettings(warmup=1, min_runs=2, max_runs=3, budget_s=0.01)
ISOLATED = LocalMeasurer(isolate=True, settings=QUICK)
HERE = LocalMeasurer(isolate=False, settings=QUICK)


def _weights_bytes(proto: onnx.ModelProto) -> int:
    return sum(len(t.raw_data) for t in proto.graph.initializer)


def test_the_worker_is_sent_a_path_and_a_mask_not_the_weights() -> None:
    proto = mlp(hidden=2048)  # 96 KiB of weights
    model = load_model(proto)
    assert model.weights is not None and model.skeleton_file is not None
    worker = shared_worker()
    for nodes in (["mm1", "add1", "relu"], ["mm2", "add2", "softmax"]):
        before = worker.sent_bytes
        cost = ISOLATED(model, model.node_set(nodes), Target("onnxruntime"))
        assert cost.ok and cost.ms is not None and cost.ms > 0
        sent = worker.sent_bytes - before
        assert 0 < sent < 2048 < _weights_bytes(proto) // 40
    # the same candidate measured in this process: the same kind of answer
    assert HERE(model, model.node_set(["mm1"]), Target("onnxruntime")).ok


def test_a_candidate_the_worker_cannot_extract_costs_only_itself() -> None:
    model = load_model(mlp(hidden=2048))
    worker = shared_worker()
    restarts = worker.restarts
    not_convex = model.node_set(["mm1", "mm2"])  # leaves through add1 and comes back
    cost = ISOLATED(model, not_convex, Target("onnxruntime"))
    assert not cost.ok and "not convex" in (cost.invalid or "")
    assert ISOLATED(model, model.node_set(["mm1"]), Target("onnxruntime")).ok
    assert worker.restarts == restarts


@needs_both
def test_a_plan_on_several_backends_built_from_the_file_matches_the_reference(
        tmp_path: Path) -> None:
    proto = mlp(hidden=512)
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, path)
    compiled = tessera.compile(path, "openvino,onnxruntime,cpu", partitioner="greedy",
                               pins={"mm1": "openvino", "add1": "openvino",
                                     "relu": "onnxruntime", "mm2": "onnxruntime",
                                     "softmax": "reference"})
    assert compiled.model.weights is not None
    assert {p.kind for p in compiled.plan.partitions} == {"openvino", "onnxruntime",
                                                          "reference"}
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    expected = backends.get("reference").compile(proto).run({"x": x})["y"]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
    saved = compiled.save(tmp_path / "mlp.tess")  # the artifact holds the weights itself
    loaded = tessera.load(saved)
    np.testing.assert_allclose(loaded.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
