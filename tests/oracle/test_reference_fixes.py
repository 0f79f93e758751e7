"""onnx.reference computes opset 13's meaning for older Softmax/LogSoftmax/Hardmax and takes
BatchNormalization-9's `momentum` for training: tessera's reference backend corrects both.
The oracle here is the numpy formula of each op's own version, and ONNX Runtime beside it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tessera import backends


def _model(node: onnx.NodeProto, shape: list[int], opset: int,
           initializers: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _both(model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ours = backends.get("reference").compile(model, check=False).run({"x": x})["y"]
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return ours, session.run(None, {"x": x})[0]


def _flat_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


@pytest.mark.parametrize("opset", [9, 11])
def test_softmax_before_13_coerces_to_2d_at_axis_1(opset: int) -> None:
    x = np.random.default_rng(0).standard_normal((1, 1000, 1, 1)).astype(np.float32)
    ours, ort_out = _both(_model(helper.make_node("Softmax", ["x"], ["y"]), [1, 1000, 1, 1],
                                 opset), x)
    want = _flat_softmax(x, 1)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ort_out, want, rtol=1e-5, atol=1e-7)
    assert float(ours.max()) < 0.05  # not 1.0 everywhere, as opset 13's meaning gives


def test_log_softmax_and_hardmax_before_13_flatten_the_tail() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    ours, ort_out = _both(_model(helper.make_node("LogSoftmax", ["x"], ["y"], axis=1),
                                 [2, 3, 4], 11), x)
    np.testing.assert_allclose(ours, np.log(_flat_softmax(x, 1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ort_out, ours, rtol=1e-5, atol=1e-6)
    ours, ort_out = _both(_model(helper.make_node("Hardmax", ["x"], ["y"]), [2, 3, 4], 11), x)
    want = np.zeros((2, 12), np.float32)
    want[np.arange(2), x.reshape(2, 12).argmax(axis=1)] = 1
    np.testing.assert_array_equal(ours, want.reshape(2, 3, 4))
    np.testing.assert_array_equal(ort_out, ours)


def test_softmax_13_keeps_its_own_meaning() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    ours, ort_out = _both(_model(helper.make_node("Softmax", ["x"], ["y"]), [2, 3, 4], 13), x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(ours, e / e.sum(axis=-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(ort_out, ours, rtol=1e-5)


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_normalization_with_momentum_is_inference(opset: int) -> None:
    values = {"s": [1.0, 2.0, 3.0], "b": [0.0, 1.0, 0.0], "m": [5.0, 6.0, 7.0],
              "v": [1.0, 2.0, 3.0]}
    initializers = [helper.make_tensor(n, TensorProto.FLOAT, [3], v) for n, v in values.items()]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                            momentum=0.9, epsilon=1e-5)
    x = (np.random.default_rng(3).standard_normal((2, 3, 4, 4)) * 50 + 300).astype(np.float32)
    ours, ort_out = _both(_model(node, [2, 3, 4, 4], opset, initializers), x)
    s, b, m, v = (np.asarray(values[k], np.float64).reshape(1, 3, 1, 1) for k in "sbmv")
    want = s * (x - m) / np.sqrt(v + 1e-5) + b  # the running statistics, not the batch's
    np.testing.assert_allclose(ours, want, rtol=1e-5)
    np.testing.assert_allclose(ort_out, want, rtol=1e-4)
