"""Fused projections split into one matrix product per piece (`_ov_projections`): every
spelling of the Split (sizes as an input, as an attribute, equal pieces), with and without a
bias, on float weights and on int8 weights dequantized per tensor or per column, gives the
same outputs as the fused form; the oracle is numpy's product of the dequantized weights.
What only looks like a fused projection is left alone, and OpenVINO runs a static int8 form
without a Split."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tessera import backends
from tessera.backends._ov_projections import split_projections

ROWS, K = 5, 12


def projection(sizes: list[int], *, bias: bool, quantized: str | None, spelling: str,
               axis: int = -1, seed: int = 0, quantize_pieces: bool = False
               ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x [1, ROWS, K] @ W [K, sum(sizes)] (+ b), split on `axis` into `sizes`; W in float, or
    int8 dequantized per `quantized` ("tensor" or "column"). The oracle's values of the
    weights and bias ride along."""
    rng = np.random.default_rng(seed)
    columns = sum(sizes)
    nodes, inits = [], []
    oracle: dict[str, np.ndarray] = {}
    if quantized is None:
        weight = rng.standard_normal((K, columns)).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, "W"))
        oracle["W"] = weight
    else:
        q = rng.integers(-127, 128, (K, columns)).astype(np.int8)
        shape: tuple[int, ...] = () if quantized == "tensor" else (columns,)
        scale = (rng.random(shape) * 0.02 + 0.01).astype(np.float32)
        zero = rng.integers(-3, 4, shape).astype(np.int8)
        inits += [numpy_helper.from_array(q, "Wq"), numpy_helper.from_array(scale, "Ws"),
                  numpy_helper.from_array(zero, "Wz")]
        nodes.append(helper.make_node("DequantizeLinear", ["Wq", "Ws", "Wz"], ["W"], axis=1))
        oracle["W"] = (q.astype(np.float32) - zero.astype(np.float32)) * scale
    nodes.append(helper.make_node("MatMul", ["x", "W"], ["xw"], name="proj"))
    fused = "xw"
    if bias:
        b = rng.standard_normal(columns).astype(np.float32)
        inits.append(numpy_helper.from_array(b, "b"))
        nodes.append(helper.make_node("Add", ["b", "xw"], ["xwb"], name="bias"))
        fused, oracle["b"] = "xwb", b
    outs = [f"piece{i}" for i in range(len(sizes))]
    split_outs = [f"{o}_f" for o in outs] if quantize_pieces else outs
    if spelling == "input":
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        nodes.append(helper.make_node("Split", [fused, "sizes"], split_outs, axis=axis))
    elif spelling == "constant":
        nodes.append(helper.make_node("Constant", [], ["sizes"], value=numpy_helper.from_array(
            np.array(sizes, np.int64))))
        nodes.append(helper.make_node("Split", [fused, "sizes"], split_outs, axis=axis))
    else:  # equal pieces, as many as the outputs
        nodes.append(helper.make_node("Split", [fused], split_outs, axis=axis))
    if quantize_pieces:  # each piece quantized apart, as a static int8 form has it
        inits += [numpy_helper.from_array(np.float32(0.05), "s"),
                  numpy_helper.from_array(np.uint8(128), "z")]
        for f, o in zip(split_outs, outs, strict=True):
            nodes += [helper.make_node("QuantizeLinear", [f, "s", "z"], [f"{o}_q"]),
                      helper.make_node("DequantizeLinear", [f"{o}_q", "s", "z"], [o])]
    graph = helper.make_graph(
        nodes, "projection", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [1, ROWS, K])],
        [output(o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model)
    return model, oracle


def output(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, None, None])


def run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {"x": x})]


def count(model: onnx.ModelProto, op: str) -> int:
    return sum(node.op_type == op for node in model.graph.node)


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       bias=st.booleans(), quantized=st.sampled_from([None, "tensor", "column"]),
       spelling=st.sampled_from(["input", "constant", "equal"]), seed=st.integers(0, 99))
def test_a_split_projection_computes_what_the_fused_one_did(
        sizes: list[int], bias: bool, quantized: str | None, spelling: str, seed: int) -> None:
    if spelling == "equal":
        sizes = [sizes[0]] * len(sizes)
    model, oracle = projection(sizes, bias=bias, quantized=quantized, spelling=spelling,
                               seed=seed)
    before = onnx.ModelProto()
    before.CopyFrom(model)
    split = split_projections(model)
    assert model == before  # the model given is left as it was
    assert count(split, "Split") == 0 and count(split, "MatMul") == len(sizes)
    onnx.checker.check_model(split)
    x = np.random.default_rng(seed + 1).standard_normal((1, ROWS, K)).astype(np.float32)
    want = x @ oracle["W"] + oracle.get("b", 0)
    edges = np.cumsum([0, *sizes])
    for got, start, stop in zip(run(split, x), edges, edges[1:], strict=False):
        np.testing.assert_allclose(got, want[..., start:stop], rtol=1e-5, atol=1e-5)
    # no weight left that nothing reads, and no piece of one kept twice
    read = {i for node in split.graph.node for i in node.input}
    assert all(t.name in read for t in split.graph.initializer)


@pytest.mark.parametrize("case", ["weight read twice", "split on axis 1", "sum exposed",
                                  "external weight"])
def test_what_only_looks_like_a_fused_projection_is_left_alone(case: str) -> None:
    model, _ = projection([4, 4], bias=True, quantized=None, spelling="input",
                          axis=1 if case == "split on axis 1" else -1)
    graph = model.graph
    if case == "weight read twice":
        graph.node.append(helper.make_node("MatMul", ["x", "W"], ["again"]))
        graph.output.append(output("again"))
    elif case == "sum exposed":
        graph.output.append(output("xwb"))
    elif case == "external weight":
        weight = next(t for t in graph.initializer if t.name == "W")
        weight.ClearField("raw_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value="weights.bin")
    assert split_projections(model) is model


def test_a_static_int8_form_runs_on_openvino_without_a_split() -> None:
    if not backends.get("openvino").is_available().ok:
        pytest.skip("needs openvino")
    from tessera.backends.openvino import _core, _read

    model, oracle = projection([8, 8, 8], bias=True, quantized="column", spelling="input",
                               quantize_pieces=True)
    core = _core()
    compiled: Any = core.compile_model(_read(core, model), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    kinds = [op.get_rt_info()["layerType"].astype(str)
             for op in compiled.get_runtime_model().get_ordered_ops()]
    assert not any("Split" in kind for kind in kinds), kinds
    x = np.random.default_rng(3).standard_normal((1, ROWS, K)).astype(np.float32)
    got = compiled.create_infer_request().infer({"x": x})
    # the oracle: numpy's product, each piece then quantized at the pieces' step (0.05)
    want = np.clip(np.round((x @ oracle["W"] + oracle["b"]) / 0.05) + 128, 0, 255) - 128
    for index in range(3):
        np.testing.assert_allclose(got[index] / 0.05, want[..., 8 * index:8 * index + 8],
                                   atol=1.01)
