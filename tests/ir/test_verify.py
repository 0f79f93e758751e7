"""The IR verifier, the `verify` load option, element type names, Constant node tensors,
cycles, and strings that are not UTF-8."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera import load_model
from tessera.errors import ModelError
from tessera.ir import DataflowGraph
from tessera.ir import _dtypes as dtypes
from tessera.ir._constant import constant_tensor
from tessera.ir._verify import verify_model

from .models import diamond, mlp, random_dag
from .test_model import _constants_and_identities


def test_element_type_names_are_onnx_s() -> None:
    named = {name: value for name, value in vars(dtypes).items()
             if name.isupper() and isinstance(value, int)}
    assert named == {name: value for name, value in TensorProto.DataType.items()
                     if value <= dtypes.INT2}
    integers = {TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16,
                TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL, TensorProto.UINT32,
                TensorProto.UINT64}
    assert integers == dtypes.INTEGER_TYPES


@pytest.mark.parametrize(("attrs", "expected"), [
    ({"value": numpy_helper.from_array(np.eye(2, dtype=np.float16))},
     np.eye(2, dtype=np.float16)),
    ({"value_float": 0.5}, np.array(0.5, np.float32)),
    ({"value_floats": [1.0, 2.0]}, np.array([1.0, 2.0], np.float32)),
    ({"value_int": 3}, np.array(3, np.int64)),
    ({"value_ints": [3, 2]}, np.array([3, 2], np.int64)),
])
def test_constant_tensor(attrs: dict[str, object], expected: np.ndarray) -> None:
    node = helper.make_node("Constant", [], ["c"], **attrs)
    tensor = constant_tensor(node)
    assert tensor is not None and tensor.name == "c"
    value = numpy_helper.to_array(tensor)
    assert value.dtype == expected.dtype and value.shape == expected.shape
    np.testing.assert_array_equal(value, expected)
    # the dataflow view knows the same value before any cleanup
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", 0, None)])
    np.testing.assert_array_equal(numpy_helper.to_array(DataflowGraph(graph).constants["c"]),
                                  expected)


def test_strings_sparse_and_other_ops_are_no_constant_tensors() -> None:
    assert constant_tensor(helper.make_node("Constant", [], ["s"], value_string="a")) is None
    assert constant_tensor(helper.make_node("Constant", [], ["s"], value_strings=["a"])) is None
    assert constant_tensor(helper.make_node("Relu", ["x"], ["y"])) is None
    assert constant_tensor(helper.make_node("Constant", [], ["c"], domain="custom",
                                            value_int=1)) is None


def test_a_cycle_names_its_nodes_in_the_dataflow_view_too() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["x"], ["c"], name="fine")]
    graph = helper.make_graph(nodes, "cycle", [], [])
    with pytest.raises(ModelError, match=r"cycle through nodes \['first', 'second'\]"):
        DataflowGraph(graph)


# -- the IR verifier ------------------------------------------------------------------------
@given(data=st.data(), n=st.integers(1, 8))
def test_loaded_models_verify(data: st.DataObject, n: int) -> None:
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=10)) if pairs \
        else []
    verify_model(load_model(random_dag(edges, n)))


@pytest.mark.parametrize("build", [mlp, diamond, _constants_and_identities])
def test_good_models_verify(build: object) -> None:
    proto = build()  # type: ignore[operator]
    verify_model(proto)
    verify_model(load_model(proto))


def _broken(change: str) -> onnx.ModelProto:
    proto = mlp()
    nodes = proto.graph.node
    if change == "two producers":
        nodes[2].output[0] = "h0"
    elif change == "order":
        relu = onnx.NodeProto()
        relu.CopyFrom(nodes[2])
        del nodes[2]
        nodes.append(relu)
    elif change == "names":
        nodes[3].name = "relu"
    elif change == "unproduced":
        nodes[3].input[0] = "nowhere"
    elif change == "output":
        proto.graph.output[0].name = "gone"
    elif change == "checker":
        nodes[5].attribute[0].name = "axes"
    return proto


@pytest.mark.parametrize(("change", "fragment"), [
    ("two producers", "value 'h0' has two producers: node 'mm1' and node 'relu'"),
    ("order", "nodes are not in topological order: node 'mm2' reads 'h2', produced later by "
              "node 'relu'"),
    ("names", r"node name 'relu' is used twice \(nodes #2 and #3\)"),
    ("unproduced", "node 'mm2' reads 'nowhere', which no node, graph input or initializer"),
    ("output", "graph output 'gone' is produced by nothing"),
    ("checker", "onnx.checker rejects the model: .*axes"),
])
def test_broken_models_name_the_invariant(change: str, fragment: str) -> None:
    with pytest.raises(ModelError, match=f"IR verifier after pass p: {fragment}"):
        verify_model(_broken(change), when="after pass p")


def test_weights_stay_out_of_the_checker_copy() -> None:
    proto = mlp()
    proto.graph.initializer[0].raw_data = proto.graph.initializer[0].raw_data[:-4]
    verify_model(proto)  # sizes are the loader's check, not an IR invariant


def test_verify_option_runs_the_verifier_through_the_cleanups() -> None:
    proto = _constants_and_identities()
    plain, verified = load_model(proto), load_model(proto, verify=True)
    assert verified.proto.SerializeToString() == plain.proto.SerializeToString()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ReferenceEvaluator(proto).run(None, {"x": x})
    for expected, actual in zip(want, ReferenceEvaluator(verified.proto).run(None, {"x": x}),
                                strict=True):
        np.testing.assert_array_equal(actual, expected)


def test_verify_leaves_an_input_s_own_problems_to_the_loader() -> None:
    proto = _broken("checker")
    with pytest.raises(ModelError, match=r"the model fails onnx\.checker"):
        load_model(proto, verify=True)
    with pytest.raises(ModelError, match=r"the model fails onnx\.checker"):
        load_model(proto)


# -- strings that are not UTF-8 -------------------------------------------------------------
_MARK = "MARKERXYZ"


@pytest.mark.parametrize(("field", "path"), [
    ("node name", r"graph.node\[2\].name"),
    ("node doc_string", r"graph.node\[2\].doc_string"),
    ("op_type", r"graph.node\[2\].op_type"),
    ("graph name", "graph.name"),
    ("producer", "producer_name"),
    ("initializer", r"graph.initializer\[0\].name"),
    ("attribute", r"graph.node\[5\].attribute\[0\].doc_string"),
])
def test_invalid_utf8_is_a_model_error_naming_the_field(field: str, path: str) -> None:
    proto = mlp()
    node = proto.graph.node[2]
    if field == "node name":
        node.name = _MARK
    elif field == "node doc_string":
        node.doc_string = _MARK
    elif field == "op_type":
        node.op_type = _MARK
    elif field == "graph name":
        proto.graph.name = _MARK
    elif field == "producer":
        proto.producer_name = _MARK
    elif field == "initializer":
        proto.graph.initializer[0].name = _MARK
    else:
        proto.graph.node[5].attribute[0].doc_string = _MARK
    data = proto.SerializeToString().replace(_MARK.encode(), b"MARK\xff\xfeXYZ")
    with pytest.raises(ModelError, match=f"the model's field {path} is not valid UTF-8 "
                                         r"\(b'MARK\\xff\\xfeXYZ'\).*re-export the model"):
        load_model(data)


def _renamed_by_cleanup() -> onnx.ModelProto:
    """Unnamed nodes are named by position; folding the Constant node shifts the positions,
    so the unnamed Relu becomes 'Relu_0', the name another node has."""
    nodes = [helper.make_node("Constant", [], ["c"], value_float=1.0),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "c"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="Relu_0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_verify_catches_a_cleanup_that_breaks_an_invariant() -> None:
    proto = _renamed_by_cleanup()
    verify_model(proto)
    assert load_model(proto).dataflow.names == ["Relu_0", "add", "Relu_0"]  # unnoticed
    with pytest.raises(ModelError, match="IR verifier after the graph cleanup 'Constant nodes "
                                         "to initializers': node name 'Relu_0' is used twice"):
        load_model(proto, verify=True)


def test_the_verify_flow_option_reaches_the_loader() -> None:
    with pytest.raises(ModelError, match="IR verifier after the graph cleanup"):
        tessera.partition(_renamed_by_cleanup(), "reference", verify=True)
    assert tessera.partition(_renamed_by_cleanup(), "reference").partitions
