"""The backend protocol on the real onnxruntime and reference backends."""

import pkgutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera import backends, load_model
from tessera.errors import (
    BackendUnavailableError,
    CompileError,
    InputError,
    RegistryError,
)
from tessera.ir import ValueType, bits

from ..ir.models import mlp


def test_registry() -> None:
    assert set(backends.names()) >= {"onnxruntime", "reference"}
    assert backends.get("ort") is backends.get("onnxruntime")
    # each backend module of tessera registers its backend (a declared kind alone stays out)
    modules = [m.name for m in pkgutil.iter_modules(backends.__path__) if m.name[0] != "_"]
    own = [name for name in modules if name in backends.names()]
    assert set(own) == set(modules) - {"tensorrt"}
    assert all(backends.get(name).kind.name == name for name in backends.names())
    with pytest.raises(BackendUnavailableError, match="no backend implementation"):
        backends.get("tensorrt")
    with pytest.raises(RegistryError, match="did you mean 'reference'"):
        backends.get("refernce")


AVAILABLE = [n for n in backends.names() if backends.get(n).is_available().ok]


@pytest.mark.parametrize("name", AVAILABLE)
def test_compiled_submodel_matches_the_reference(name: str) -> None:
    model = load_model(mlp())
    sub = model.extract(bits([0, 1, 2]))
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    compiled = backends.get(name).compile(sub)
    assert [s.name for s in compiled.inputs] == ["x"]
    assert compiled.inputs[0].dtype == "float32" and compiled.inputs[0].shape == (2, 8)
    assert [s.name for s in compiled.outputs] == ["h2"]
    out = compiled.run({"x": x})
    expected = np.maximum(x @ onnx.numpy_helper.to_array(model.proto.graph.initializer[0])
                          + onnx.numpy_helper.to_array(model.proto.graph.initializer[1]), 0)
    np.testing.assert_allclose(out["h2"], expected, rtol=1e-3, atol=1e-4)


def test_onnxruntime_honours_target_attributes() -> None:
    compiled = backends.get("onnxruntime").compile(
        mlp(), "onnxruntime -num-threads=1 -opt-level=basic -spinning")
    options = compiled.session.get_session_options()  # type: ignore[attr-defined]
    assert options.intra_op_num_threads == 1
    assert str(options.graph_optimization_level).endswith("ORT_ENABLE_BASIC")
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    default = backends.get("onnxruntime").compile(mlp())
    opts = default.session.get_session_options()  # type: ignore[attr-defined]
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_compile_rejects_a_target_of_another_kind() -> None:
    with pytest.raises(CompileError, match="cannot compile for target 'openvino'"):
        backends.get("onnxruntime").compile(mlp(), "openvino")


def test_supports_gives_reasons() -> None:
    ort, ref = backends.get("onnxruntime"), backends.get("reference")
    relu = helper.make_node("Relu", ["a"], ["b"], name="r")
    floats = {"a": ValueType(TensorProto.FLOAT, (2,))}
    strings = {"a": ValueType(TensorProto.STRING, (2,))}
    assert ort.supports(relu, 17, floats)
    assert "Relu-14" in ort.supports(relu, 17, floats).reason
    no = ort.supports(relu, 17, strings)
    assert not no and "tensor(string)" in no.reason
    unknown = helper.make_node("Frobnicate", ["a"], ["b"])
    assert not ort.supports(unknown, 17)
    assert ort.supports(unknown, 17).reason == "Frobnicate is not an ONNX op at opset 17"
    gelu = helper.make_node("Gelu", ["a"], ["b"])  # a newer op (opset 20)
    assert not ort.supports(gelu, 17) and "not an ONNX op at opset 17" in ort.supports(
        gelu, 17).reason
    assert ref.supports(relu, 17)
    assert not ref.supports(unknown, 17)
    assert "Frobnicate" in ref.supports(unknown, 17).reason
    fused = helper.make_node("FusedMatMul", ["a", "c"], ["b"], domain="com.microsoft")
    assert ort.supports(fused, 17)
    constant = helper.make_node("Constant", [], ["k"], value_float=1.0)
    assert "initializer" in ort.supports(constant, 17).reason
    castlike = helper.make_node("CastLike", ["a", "c"], ["b"])
    assert "expands the function op CastLike" in ort.supports(castlike, 17).reason


@pytest.mark.parametrize(("feeds", "fragment"), [
    ({}, "missing ['x']"),
    ({"x": np.zeros((2, 8), np.float32), "z": np.zeros(1)}, "unexpected ['z']"),
    ({"x": np.zeros((2, 8), np.float64)}, "dtype float64, expected float32"),
    ({"x": np.zeros((3, 8), np.float32)}, "shape [3, 8], expected [2, 8]"),
    ({"x": np.zeros((2, 8, 1), np.float32)}, "shape [2, 8, 1]"),
])
def test_bad_inputs_raise_input_error(feeds: dict[str, np.ndarray], fragment: str) -> None:
    compiled = backends.get("onnxruntime").compile(mlp())
    with pytest.raises(InputError) as info:
        compiled.run(feeds)
    assert fragment in str(info.value) and "x: float32[2, 8]" in str(info.value)


def test_nan_and_inf_pass_through() -> None:
    compiled = backends.get("onnxruntime").compile(mlp())
    x = np.full((2, 8), np.nan, np.float32)
    assert np.isnan(compiled.run({"x": x})["y"]).all()


def test_compile_failure_names_backend_and_nodes() -> None:
    node = helper.make_node("Relu", ["a"], ["b"], name="bad_relu")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.STRING,
                                                                          [2])],
                              [helper.make_tensor_value_info("b", TensorProto.STRING, [2])])
    broken = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=r"onnxruntime failed to compile nodes \['bad_relu'\]"):
        backends.get("onnxruntime").compile(broken, check=False)  # past the support check


def test_onnxruntime_claims_float16_nodes_it_computes_in_float32() -> None:
    """ONNX Runtime's CPU provider has no float16 Mul; it inserts Casts and computes it in
    float32. So it is claimed, and the answer is float32's, rounded once."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "a"], ["y"])],
        "half", [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [64]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = load_model(proto)
    flow, ort = model.dataflow, backends.get("onnxruntime")
    mul = ort.supports(flow.nodes[0], model.opset, flow.value_types, flow.constants)
    assert mul and "in float32, between Casts it inserts" in mul.reason
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(64).astype(np.float16) for _ in range(2))
    got = ort.compile(proto).run({"a": a, "b": b})["y"]
    want = (a.astype(np.float32) * b.astype(np.float32) + a.astype(np.float32))
    np.testing.assert_array_equal(got, want.astype(np.float16))
    # other types it has no kernel for are not widened: bfloat16 stays refused
    brain = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["y"])], "bf16",
        [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [4]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [4])])
    other = load_model(helper.make_model(brain, opset_imports=[helper.make_opsetid("", 17)]))
    refused = ort.supports(other.dataflow.nodes[0], other.opset, other.dataflow.value_types,
                           other.dataflow.constants)
    assert not refused and "no Mul-14 kernel for tensor(bfloat16)" in refused.reason


def test_every_onnxruntime_session_that_runs_packs_its_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold compile writes ONNX Runtime's optimized graph for the warm cache from the very
    session it then runs, so that session packs its weights (unpacked, MatMulNBits unpacks
    them on every run); so do a warm compile's and a loaded artifact's. Only the session that
    writes an artifact's cache, and never runs, packs none."""
    import tessera

    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path / "cache"))
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)}

    def packing(compiled: "tessera.CompiledModel") -> list[str]:
        found = []
        for part in compiled.parts:
            options = part.session.get_session_options()  # type: ignore[attr-defined]
            try:
                found.append(options.get_session_config_entry("session.disable_prepacking"))
            except RuntimeError:  # not set: ONNX Runtime packs
                found.append("0")
        return found

    cold = tessera.compile(mlp(), "onnxruntime")
    warm = tessera.compile(mlp(), "onnxruntime")
    cold.save(tmp_path / "model.tess")
    loaded = tessera.load(tmp_path / "model.tess")
    for compiled in (cold, warm, loaded):
        assert packing(compiled) == ["0"]
        np.testing.assert_allclose(compiled.run(feeds)["y"], cold.run(feeds)["y"], rtol=1e-6)
