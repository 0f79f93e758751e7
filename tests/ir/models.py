"""Small ONNX models built in code for model-layer tests."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(seed: int = 0, names: str = "", hidden: int = 16) -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul -> Add -> Softmax; `names` prefixes every value."""
    rng = np.random.default_rng(seed)
    p = names
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, hidden)).astype(np.float32), p + "w1"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), p + "b1"),
        numpy_helper.from_array(rng.standard_normal((hidden, 4)).astype(np.float32), p + "w2"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), p + "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", [p + "x", p + "w1"], [p + "h0"], name=p + "mm1"),
        helper.make_node("Add", [p + "h0", p + "b1"], [p + "h1"], name=p + "add1"),
        helper.make_node("Relu", [p + "h1"], [p + "h2"], name=p + "relu"),
        helper.make_node("MatMul", [p + "h2", p + "w2"], [p + "h3"], name=p + "mm2"),
        helper.make_node("Add", [p + "h3", p + "b2"], [p + "h4"], name=p + "add2"),
        helper.make_node("Softmax", [p + "h4"], [p + "y"], name=p + "softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info(p + "x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(p + "y", TensorProto.FLOAT, [2, 4])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def diamond() -> onnx.ModelProto:
    """a -> (b, c) -> d: the smallest graph with a non-convex pair {a, d}."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["a"], ["b"], name="b"),
        helper.make_node("Exp", ["a"], ["c"], name="c"),
        helper.make_node("Add", ["b", "c"], ["y"], name="d"),
    ]
    graph = helper.make_graph(
        nodes, "diamond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def random_dag(edges: list[tuple[int, int]], n: int) -> onnx.ModelProto:
    """n Sum nodes; node j reads node i's output for each edge (i, j) with i < j."""
    nodes = []
    for j in range(n):
        inputs = [f"v{i}" for i, k in edges if k == j] or ["x"]
        nodes.append(helper.make_node("Sum", inputs, [f"v{j}"], name=f"n{j}"))
    sinks = [j for j in range(n) if not any(i == j for i, _ in edges)]
    graph = helper.make_graph(
        nodes, "dag", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(f"v{j}", TensorProto.FLOAT, [2]) for j in sinks])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def two_inputs() -> onnx.ModelProto:
    """y = (a + b) * w, a and b both [batch, 8]."""
    weight = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "w")
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Mul", ["s", "w"], ["y"], name="mul")]
    graph = helper.make_graph(
        nodes, "pair", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 8])
                        for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def table() -> onnx.ModelProto:
    """x [batch, 8] plus a constant [2, 8]: batch 1 or 2 only."""
    constant = numpy_helper.from_array(np.ones((2, 8), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "table"], ["y"], name="add")], "table",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[constant])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reshape_to_constant() -> onnx.ModelProto:
    """x [batch, 8] reshaped to the constant [2, 8]: batch 2 only."""
    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], initializer=[shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cache() -> onnx.ModelProto:
    """A cache grown by the new rows: past [batch, past, 4] and new [batch, sequence, 4]
    concatenated, scaled by mask [batch, total]: total = past + sequence, or the shapes
    contradict each other."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["both"], axis=1, name="concat"),
             helper.make_node("Unsqueeze", ["mask", "last"], ["scale"], name="unsqueeze"),
             helper.make_node("Mul", ["both", "scale"], ["present"], name="mul")]
    graph = helper.make_graph(
        nodes, "cache",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past", 4]),
         helper.make_tensor_value_info("new", TensorProto.FLOAT, ["batch", "sequence", 4]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "total"])],
        [helper.make_tensor_value_info("present", TensorProto.FLOAT, ["batch", "total", 4])],
        initializer=[numpy_helper.from_array(np.array([2], np.int64), "last")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def through_double(relu_first: bool = False) -> onnx.ModelProto:
    """x[2] -> (Relu ->) Cast to double -> Neg -> Cast to float: a float64 stretch, which
    OpenVINO computes in float32 (a deviation)."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu")] if relu_first else []
    nodes += [helper.make_node("Cast", ["a" if relu_first else "x"], ["d"], name="to_double",
                               to=TensorProto.DOUBLE),
              helper.make_node("Neg", ["d"], ["e"], name="neg"),
              helper.make_node("Cast", ["e"], ["y"], name="to_float", to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "f64", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
