"""int8 precision as a target attribute: ONNX Runtime's dynamic and static (QDQ) recipes and
OpenVINO running the static QDQ form compile, run and agree with the reference; static needs
calibration data; the int8 form is kept in the warm cache, keyed on the calibration data.

Tolerance: int8 with one scale per tensor rounds each value to within half a step of a
256-step range, about 0.5% of the range per layer; over the three to four quantized layers of
these nets (He-scaled weights, so activations neither vanish nor blow up) the outputs carry a
few per cent of relative noise, which keeps their cosine similarity with the float outputs
above 0.999. 0.99 leaves room for calibration on few samples while still failing on a wrong
result (a wrong input order, a mis-scaled layer, zeros all give far lower cosines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tessera import backends
from tessera.backends._quantize import DigestedCalibration, calibration_digest
from tessera.errors import CompileError, TargetError
from tessera.ir import load_model
from tessera.runtime import _warm
from tessera.target import Target

_COSINE = 0.99


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def conv_net(seed: int = 0) -> onnx.ModelProto:
    """x[1,3,16,16] -> Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(_he(rng, (8, 3, 3, 3), 27), "w1"),
             numpy_helper.from_array(np.full(8, 0.1, np.float32), "b1"),
             numpy_helper.from_array(_he(rng, (16, 8, 3, 3), 72), "w2"),
             numpy_helper.from_array(np.full(16, 0.1, np.float32), "b2"),
             numpy_helper.from_array(_he(rng, (16, 10), 16), "w3"),
             numpy_helper.from_array(np.zeros(10, np.float32), "b3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="fc")]
    graph = helper.make_graph(
        nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def matmul_net(seed: int = 0) -> onnx.ModelProto:
    """x[4,32] -> MatMul -> Add -> Relu -> MatMul -> Add -> Relu -> MatMul."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(_he(rng, (32, 64), 32), "w1"),
             numpy_helper.from_array(np.full(64, 0.1, np.float32), "b1"),
             numpy_helper.from_array(_he(rng, (64, 64), 64), "w2"),
             numpy_helper.from_array(np.full(64, 0.1, np.float32), "b2"),
             numpy_helper.from_array(_he(rng, (64, 8), 64), "w3")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "b2"], ["a2"], name="add2"),
             helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
             helper.make_node("MatMul", ["r2", "w3"], ["y"], name="mm3")]
    graph = helper.make_graph(
        nodes, "matmul_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _samples(model: onnx.ModelProto, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    (value,) = model.graph.input
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return [{value.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def _needs(name: str) -> None:
    if not backends.get(name).is_available().ok:
        pytest.skip(f"{name} is not installed")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _op_types(compiled: object) -> set[str]:
    model = getattr(compiled, "model", None)
    assert isinstance(model, onnx.ModelProto)
    return {n.op_type for n in model.graph.node}


_CASES = [("onnxruntime -precision=int8 -int8-recipe=dynamic", "matmul", "MatMulInteger"),
          ("onnxruntime -precision=int8 -int8-recipe=dynamic", "conv", "ConvInteger"),
          ("onnxruntime -precision=int8 -int8-recipe=static", "conv", "QuantizeLinear"),
          ("onnxruntime -precision=int8 -int8-recipe=static", "matmul", "QuantizeLinear"),
          ("openvino -precision=int8", "conv", None),
          ("openvino -precision=int8", "matmul", None)]


@pytest.mark.parametrize(("target", "net", "op"), _CASES)
def test_int8_compiles_runs_and_agrees_with_the_reference(target: str, net: str,
                                                          op: str | None) -> None:
    backend = backends.get(Target(target).kind.name)
    _needs(backend.name)
    model = conv_net() if net == "conv" else matmul_net()
    calibration = _samples(model, 8, seed=1) if backend.calibrated(Target(target)) else None
    compiled = backend.compile(model, target, calibration=calibration)
    reference = backends.get("reference").compile(model)
    for feeds in _samples(model, 3, seed=2):
        got, want = compiled.run(feeds)["y"], reference.run(feeds)["y"]
        assert got.shape == want.shape and got.dtype == np.float32
        assert _cosine(got, want) >= _COSINE
        assert not np.array_equal(got, want)  # the int8 form ran, not the float one
    if op is not None:  # ONNX Runtime's compiled model is the quantized one
        assert op in _op_types(compiled)


@pytest.mark.parametrize("target", ["onnxruntime -precision=int8 -int8-recipe=static",
                                    "openvino -precision=int8"])
def test_static_int8_without_calibration_is_a_clear_compile_error(target: str) -> None:
    backend = backends.get(Target(target).kind.name)
    _needs(backend.name)
    with pytest.raises(CompileError, match=r"needs calibration data.*samples.*"
                                           r"calibration=.*int8-recipe=dynamic"):
        backend.compile(conv_net(), target)


def test_calibration_for_other_inputs_is_a_clear_compile_error() -> None:
    _needs("onnxruntime")
    with pytest.raises(CompileError, match=r"sample 0 .*missing \['x'\], unexpected \['z'\]"):
        backends.get("onnxruntime").compile(
            conv_net(), "onnxruntime -precision=int8", calibration=[{"z": np.zeros(3)}])


def test_the_attributes_round_trip_and_enter_the_tuning_key() -> None:
    for text in ("onnxruntime -precision=int8 -int8-recipe=static",
                 "onnxruntime -precision=int8 -int8-recipe=dynamic", "openvino -precision=int8"):
        assert str(Target(text)) == text and Target(str(Target(text))) == Target(text)
    # int8 names its recipe; fp32 is the unset precision
    assert str(Target("ort -precision=int8")) == "onnxruntime -precision=int8 -int8-recipe=static"
    assert Target("onnxruntime -precision=fp32") == Target("onnxruntime")
    keys = {Target(t).tuning_key() for t in (
        "onnxruntime", "onnxruntime -precision=int8 -int8-recipe=static",
        "onnxruntime -precision=int8 -int8-recipe=dynamic")}
    assert len(keys) == 3
    assert Target("openvino -precision=int8").tuning_key() != Target("openvino").tuning_key()
    assert Target("onnxruntime -int8-recipe=dynamic") == Target("onnxruntime")  # no effect
    with pytest.raises(TargetError, match="int16"):
        Target("onnxruntime -precision=int16")


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(f.relative_to(root)): (f.stat().st_ino, f.stat().st_mtime_ns)
            for f in sorted(root.rglob("*")) if f.is_file() and f.name != "entry.json"}


@pytest.mark.parametrize(("target", "form"), [
    ("onnxruntime -precision=int8 -int8-recipe=static", "optimized.onnx"),
    ("openvino -precision=int8", "model.xml")])
def test_the_int8_form_is_kept_and_keyed_on_the_calibration_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, form: str) -> None:
    chosen = Target(target)
    _needs(chosen.kind.name)
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root = tmp_path / "compiled"
    model = load_model(conv_net())
    mask = model.dataflow.all_nodes()
    samples = _samples(conv_net(), 4, seed=1)
    feeds = _samples(conv_net(), 1, seed=2)[0]
    first = _warm.compile_partition(model, mask, conv_net(), chosen, calibration=samples)
    (entry,) = root.iterdir()
    assert (entry / form).is_file()
    written = _files(root)
    again = _warm.compile_partition(model, mask, conv_net(), chosen,
                                    calibration=[dict(s) for s in samples])
    assert _files(root) == written  # reloaded: nothing quantized or written again
    np.testing.assert_array_equal(again.run(feeds)["y"], first.run(feeds)["y"])
    if chosen.kind.name == "onnxruntime":  # the reloaded form is the int8 one
        exported = onnx.load_model_from_string(backends.get("onnxruntime").export_cache(again))
        assert any("QuantizeLinear" in n.op_type or "QLinear" in n.op_type
                   for n in exported.graph.node)
    _warm.compile_partition(model, mask, conv_net(), chosen,
                            calibration=_samples(conv_net(), 4, seed=3))
    assert len(list(root.iterdir())) == 2  # other calibration data: another int8 form
    assert list((tmp_path / "tmp").iterdir()) == []  # no quantizer files left behind


def test_the_quantizer_memo_digest_follows_the_graph_and_every_weight_byte() -> None:
    from tessera.backends._quantize import model_digest

    base = matmul_net()
    assert model_digest(base) == model_digest(matmul_net())  # the same model, rebuilt
    assert model_digest(base) != model_digest(matmul_net(seed=1))  # other weights
    one_byte = matmul_net()
    raw = bytearray(one_byte.graph.initializer[2].raw_data)
    raw[-1] ^= 1
    one_byte.graph.initializer[2].raw_data = bytes(raw)
    assert model_digest(one_byte) != model_digest(base)
    renamed = matmul_net()
    renamed.graph.node[2].name = "relu_renamed"
    assert model_digest(renamed) != model_digest(base)
    typed = matmul_net()  # a weight in a typed field rather than raw bytes
    typed.graph.initializer[4].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(base.graph.initializer[4]), "w3"))
    typed.graph.initializer[4].ClearField("raw_data")
    typed.graph.initializer[4].float_data.extend(
        numpy_helper.to_array(base.graph.initializer[4]).ravel().tolist())
    assert model_digest(typed) != model_digest(base)
    assert model_digest(typed) == model_digest(typed)


class _Named(DigestedCalibration):
    """Samples that would be costly to compute, named without computing them."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:  # type: ignore[override]
        raise AssertionError("a carried digest is used without reading the samples")


def test_a_calibration_digest_is_of_the_samples_or_the_one_they_carry() -> None:
    samples = _samples(conv_net(), 2, seed=0)
    assert calibration_digest(samples) == calibration_digest([dict(s) for s in samples])
    assert calibration_digest(samples) != calibration_digest(_samples(conv_net(), 2, seed=1))
    assert calibration_digest(_Named("model|samples|x")) == "model|samples|x"
