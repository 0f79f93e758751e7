"""Placement of models with symbolic dimensions: the points measured (a profile's, or the
default), costs keyed by the shapes, the race and the guard at every point, static-only
backends left out; on real exports made here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera import backends
from tessera.config import CompilationConfig
from tessera.config._shapes import ShapeProfile
from tessera.errors import ConfigError, ModelError
from tessera.ir import load_model
from tessera.placement import Tools, place
from tessera.placement.measure._points import Points
from tessera.placement.search._support import SupportTable
from tessera.runtime._compiled import RuntimeBuilder

from ..ir.models import cache


def _mlp(tmp_path: Path) -> Path:
    torch = pytest.importorskip("torch")

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.b(torch.relu(self.a(x))), -1)

    path = tmp_path / "mlp.onnx"
    torch.onnx.export(Mlp().eval(), torch.zeros(2, 64), str(path), input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                      dynamo=False)
    return path


def test_points_are_the_profile_or_the_stated_default(tmp_path: Path) -> None:
    model = load_model(_mlp(tmp_path), require_static=False)
    assert model.symbols == ("batch",) and not model.is_static
    default = Points.of(model, CompilationConfig.create("onnxruntime"))
    assert default.defaulted and default.labels() == ("batch=1",)
    profiled = Points.of(model, CompilationConfig.create("onnxruntime",
                                                         shapes={"batch": {1: 1, 8: 3}}))
    assert profiled.labels() == ("batch=1", "batch=8") and not profiled.defaulted
    assert profiled.weights == [0.25, 0.75]
    assert profiled.shapes(1, ["x"]) == {"x": (8, 64)}
    # each point is a static view with its own shapes, so its costs are keyed apart
    (_, one), (_, eight) = profiled.views
    assert one.is_static and eight.static_shape("y") == (8, 10)
    mask = one.dataflow.all_nodes()
    assert one.structural_hash(mask) != eight.structural_hash(mask)
    with pytest.raises(ConfigError, match=r"'batchh'.*did you mean 'batch'"):
        Points.of(model, CompilationConfig.create("onnxruntime", shapes={"batchh": [1]}))


def test_a_sum_is_computed_at_every_point_and_zero_is_never_measured() -> None:
    model = load_model(cache(), require_static=False)
    assert model.symbols == ("batch", "past", "sequence", "total")
    points = Points.of(model, CompilationConfig.create(
        "onnxruntime", shapes="past=0,4@3,16;sequence=1:1:8;total=past+sequence+0"))
    assert points.labels() == ("batch=1,past=4,sequence=1,total=5",
                               "batch=1,past=16,sequence=1,total=17")
    assert points.weights == [0.75, 0.25]
    assert points.shapes(1, ["present"]) == {"present": (1, 17, 4)}
    # without a profile the defaults break the tie: the view says how to keep it
    default = Points.of(model, CompilationConfig.create("onnxruntime"))
    assert default.defaulted
    with pytest.raises(ModelError, match=r"does not allow batch=1, past=1, sequence=128, "
                                         r"total=1: .*without a shape profile.*"
                                         r"total=past\+sequence"):
        _ = default.views


def test_a_size_the_model_contradicts_is_a_model_error(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 4])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [x], [y], [shape])
    path = tmp_path / "fixed.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                    str(path))
    model = load_model(path, require_static=False)
    assert model.at({"batch": 2}).static_shape("y") == (2, 4)
    with pytest.raises(ModelError, match="does not allow batch=3"):
        model.at({"batch": 3})


@pytest.mark.parametrize("shapes", [None, {"batch": [1, 16]}])
def test_collage_measures_races_and_guards_every_point(tmp_path: Path, shapes: object) -> None:
    model = load_model(_mlp(tmp_path), require_static=False)
    config = CompilationConfig.create("openvino,onnxruntime", partitioner="collage",
                                      shapes=shapes)
    placed = place(model, config, tools=Tools(builder=RuntimeBuilder()), build=True)
    record = placed.stats.shapes
    assert record is not None
    points = ("batch=1",) if shapes is None else ("batch=1", "batch=16")
    assert record.points == points and record.defaulted == (shapes is None)
    assert all(len(row) == len(points) and all(c is not None and c > 0 for c in row)
               for row in record.partition_ms)
    assert placed.stats.guard_passed and placed.stats.race is not None
    assert any(t.ms is not None for t in placed.stats.race.timings.values())
    # the plan built runs other sizes, against the reference
    assert placed.built is not None and placed.built.runnable is not None
    reference = backends.get("reference").compile(model.proto, check=False)
    for batch in (3, 5):
        feed = {"x": np.random.default_rng(batch).standard_normal((batch, 64), np.float32)}
        got, want = placed.built.runnable.run(feed)["y"], reference.run(feed)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_static_only_backends_run_no_node_of_a_dynamic_model(tmp_path: Path) -> None:
    static_only = [name for name in ("tvm", "iree")
                   if backends.get(name).is_available().ok]
    assert not backends.get("tvm").dynamic_shapes and not backends.get("iree").dynamic_shapes
    assert backends.get("onnxruntime").dynamic_shapes
    if not static_only:
        pytest.skip("neither TVM nor IREE is installed here")
    model = load_model(_mlp(tmp_path), require_static=False)
    table = SupportTable.build(model, CompilationConfig.create(f"{static_only[0]},onnxruntime"))
    assert all(t.kind.name != static_only[0] for row in table.allowed for t in row)
    reason = next(iter(table.reasons.values()))[static_only[0]]
    assert "static shapes" in reason and "batch" in reason


def test_a_profile_round_trips_through_its_string() -> None:
    profile = ShapeProfile.parse({"batch": [1, 4], "sequence": (1, 128, 512)})
    assert str(profile) == "batch=1,4;sequence=1:128:512"
    assert ShapeProfile.parse(str(profile)) == profile
