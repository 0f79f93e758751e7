"""The reference backend's faster ops (`tessera.backends._reference_fast`) against
onnx.reference's own, on generated shapes and attributes: the same values, the same shapes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tessera import backends


def _max_pool_model(rank: int, attrs: dict[str, Any], dtype: int, outputs: int = 1
                    ) -> onnx.ModelProto:
    names = ["y", "i"][:outputs]
    node = helper.make_node("MaxPool", ["x"], names, **attrs)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", dtype, None)],
        [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "i" else dtype, None)
         for n in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@st.composite
def _pools(draw: st.DrawFn) -> tuple[np.ndarray, dict[str, Any]]:
    rank = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    if max(strides + dilations) == 1:  # onnx.reference's other path, which it keeps
        strides[draw(st.integers(0, rank - 1))] = 2
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": strides,
                             "dilations": dilations, "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        # onnx.reference's windows ignore pads as wide as the kernel's reach
        attrs["pads"] = [draw(st.integers(0, k - 1)) for k in kernel] * 2
        attrs["ceil_mode"] = draw(st.integers(0, 1))
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    shape = [draw(st.integers(1, 2)), draw(st.integers(1, 3)),
             *(draw(st.integers(r, r + 6)) for r in reach)]
    integer = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = (rng.integers(-128, 128, shape).astype(np.int8) if integer
         else rng.standard_normal(shape).astype(np.float32))
    return x, attrs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pools())
def test_max_pool_matches_onnx_references_own(case: tuple[np.ndarray, dict[str, Any]]) -> None:
    x, attrs = case
    dtype = TensorProto.INT8 if x.dtype == np.int8 else TensorProto.FLOAT
    model = _max_pool_model(x.ndim - 2, attrs, dtype)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = backends.get("reference").compile(model, "reference").run({"x": x})["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_max_pool_with_its_indices_nan_or_unit_strides_is_onnx_references_own() -> None:
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    x[0, 1, 2, 3] = np.nan
    strided = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    # onnx.reference's path for unit strides sizes this 2 (ONNX says 3); it keeps its own
    unit = {"kernel_shape": [2], "pads": [1, 1], "ceil_mode": 1}
    row = np.array([[[0.5, -0.5]]], dtype=np.float32)
    for outputs, attrs, feed in [(1, strided, x), (2, strided, x), (1, unit, row)]:
        model = _max_pool_model(feed.ndim - 2, attrs, TensorProto.FLOAT, outputs)
        want = ReferenceEvaluator(model).run(None, {"x": feed})
        got = backends.get("reference").compile(model, "reference").run({"x": feed})
        assert [got[n].shape for n in ["y", "i"][:outputs]] == [w.shape for w in want]
        for name, expected in zip(["y", "i"], want, strict=False):
            np.testing.assert_array_equal(got[name], expected)
    assert want[0].shape == (1, 1, 2)


@pytest.mark.parametrize("shape", [(1, 64, 112, 112)])
def test_resnets_stem_pool_agrees_and_picks_each_windows_largest(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    got = backends.get("reference").compile(
        _max_pool_model(2, attrs, TensorProto.FLOAT), "reference").run({"x": x})["y"]
    assert got.shape == (1, 64, 56, 56)
    # output (5, 7) covers rows 9..11 and columns 13..15
    assert got[0, 3, 5, 7] == x[0, 3, 9:12, 13:16].max()
    assert got[0, 3, 0, 0] == x[0, 3, :2, :2].max()  # the padding never wins
