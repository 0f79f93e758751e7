"""Constant folding at load: nodes of weights become weights, IR version 3 inputs that are
weights stop being inputs, and the values the model computes do not change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera.ir import load_model
from tessera.ir._fold import MAX_FOLDED_BYTES, fold_constants, initializers_not_inputs

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _weights_made_at_run_time(ir_version: int = 3) -> onnx.ModelProto:
    """A conv whose weight is made by ConstantOfShape and whose bias by Unsqueeze of a
    ConstantOfShape, written as an IR version 3 model lists its initializers as inputs."""
    shapes = [numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "w_shape"),
              numpy_helper.from_array(np.array([4], np.int64), "b_shape")]
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.02])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill, name="make_w"),
        helper.make_node("ConstantOfShape", ["b_shape"], ["b0"], value=fill, name="make_b"),
        helper.make_node("Unsqueeze", ["b0"], ["b1"], axes=[0], name="unsq"),
        helper.make_node("Squeeze", ["b1"], ["b"], axes=[0], name="sq"),
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["y"], ["z"], name="relu"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    if ir_version < 4:
        inputs += [helper.make_tensor_value_info(t.name, TensorProto.INT64, list(t.dims))
                   for t in shapes]
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT,
                                                             [1, 4, 8, 8])],
                              initializer=shapes)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = ir_version
    return model


def test_an_ir3_models_weights_leave_its_inputs_and_their_nodes_fold() -> None:
    original = _weights_made_at_run_time()
    model = load_model(original.SerializeToString())
    assert model.input_names == ["x"]
    assert model.proto.ir_version >= 4
    assert [n.op_type for n in model.proto.graph.node] == ["Conv", "Relu"]
    weights = {t.name: numpy_helper.to_array(t) for t in model.proto.graph.initializer}
    assert sorted(weights) == ["b", "w"]  # the shapes are used by nothing any more
    np.testing.assert_array_equal(weights["w"], np.full((4, 3, 3, 3), 0.02, np.float32))
    assert weights["b"].shape == (4,)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (want,) = ReferenceEvaluator(original).run(None, {"x": x})
    (got,) = ReferenceEvaluator(model.proto).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_an_input_a_caller_may_override_is_not_folded() -> None:
    model = _weights_made_at_run_time(ir_version=8)
    model.graph.input.append(helper.make_tensor_value_info("w_shape", TensorProto.INT64, [4]))
    assert not initializers_not_inputs(model)  # IR 8: an initializer listed as input is one
    assert fold_constants(model) == 3  # the bias chain; the weight's shape is an input
    assert [n.op_type for n in model.graph.node] == ["ConstantOfShape", "Conv", "Relu"]


def test_a_weight_larger_than_the_limit_stays_a_node() -> None:
    model = _weights_made_at_run_time(ir_version=8)
    huge = MAX_FOLDED_BYTES // 4 + 1
    model.graph.initializer[0].CopyFrom(
        numpy_helper.from_array(np.array([huge, 1, 1, 1], np.int64), "w_shape"))
    fold_constants(model)
    assert next(n.op_type for n in model.graph.node) == "ConstantOfShape"


@pytest.mark.skipif(not (LIGHT / "light_resnet50.onnx").is_file(),
                    reason="the onnx package ships no light models")
def test_a_published_cnn_whose_weights_are_made_at_run_time_loads_folded() -> None:
    original = onnx.load(str(LIGHT / "light_resnet50.onnx"))
    model = load_model(LIGHT / "light_resnet50.onnx")
    made = sum(1 for n in original.graph.node if n.op_type == "ConstantOfShape")
    assert (len(original.graph.node), made) == (415, 239)
    assert len(model.dataflow.names) == 415 - made
    assert model.input_names == ["gpu_0/data_0"]
    assert not any(n.op_type == "ConstantOfShape" for n in model.proto.graph.node)


_X = np.arange(24, dtype=np.float32).reshape(2, 1, 3, 4)
# (op, opset, extra constant inputs, attributes): each folded form, old and new
_FORMS = [
    ("Unsqueeze", 11, [], {"axes": [0, -1]}),
    ("Unsqueeze", 13, [np.array([0, -1], np.int64)], {}),
    ("Squeeze", 11, [], {"axes": [1]}),
    ("Squeeze", 13, [np.array([1], np.int64)], {}),
    ("Squeeze", 13, [], {}),
    ("Reshape", 13, [np.array([0, -1, 4], np.int64)], {}),
    ("Reshape", 14, [np.array([2, 0, 12], np.int64)], {"allowzero": 0}),
    ("Flatten", 13, [], {"axis": -2}),
    ("Transpose", 13, [], {"perm": [3, 1, 0, 2]}),
    ("Transpose", 13, [], {}),
    ("Concat", 13, [_X + 1], {"axis": -1}),
    ("Cast", 13, [], {"to": TensorProto.INT32}),
    ("Identity", 13, [], {}),
]


@pytest.mark.parametrize(("op", "opset", "extra", "attrs"), _FORMS,
                         ids=[f"{f[0]}-{f[1]}-{i}" for i, f in enumerate(_FORMS)])
def test_each_folded_form_matches_its_definition(op: str, opset: int, extra: list,  # type: ignore[type-arg]
                                                 attrs: dict) -> None:  # type: ignore[type-arg]
    names = ["x", *(f"c{i}" for i in range(len(extra)))]
    weights = [numpy_helper.from_array(a, n) for n, a in zip(names, [_X, *extra], strict=True)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["folded"], **attrs),
         helper.make_node("Identity", ["folded"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    want = ReferenceEvaluator(model).run(None, {})[0]
    assert fold_constants(model) == 2
    folded = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(folded["y"], want)
    assert folded["y"].dtype == want.dtype
