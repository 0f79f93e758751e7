"""The model layer: loading and its errors, dataflow, convexity, extraction, hashing."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera import load_model
from tessera.errors import ModelError
from tessera.ir import bits, members

from .models import diamond, mlp, random_dag, table


def test_load_from_path_bytes_and_proto(tmp_path: Path) -> None:
    proto = mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, path)
    before = proto.SerializeToString()
    for source in (path, str(path), path.read_bytes(), proto):
        model = load_model(source)
        assert model.input_names == ["x"] and model.output_names == ["y"]
        assert model.opset == 17
        assert [n.op_type for n in model.dataflow.nodes] == [
            "MatMul", "Add", "Relu", "MatMul", "Add", "Softmax"]
    assert proto.SerializeToString() == before  # the caller's proto is not changed


def test_shape_inference_fills_intermediate_types() -> None:
    types = load_model(mlp()).dataflow.value_types
    assert types["h2"].shape == (2, 16) and types["h2"].elem_type == TensorProto.FLOAT


@pytest.mark.parametrize(("source", "fragment"), [
    (b"\x08\x07\x12", "unreadable or truncated"),
    (bytes(range(256)) * 4, "unreadable or truncated"),
    (b"", "empty"),
    (3.5, "cannot load a model from float"),
])
def test_unreadable_models(source: object, fragment: str) -> None:
    with pytest.raises(ModelError, match=fragment):
        load_model(source)


def test_truncated_file_and_missing_file(tmp_path: Path) -> None:
    data = mlp().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"unreadable or truncated|fails onnx.checker|no graph"):
        load_model(path)
    with pytest.raises(ModelError, match="cannot read model file"):
        load_model(tmp_path / "missing.onnx")


def test_checker_failure_names_the_node() -> None:
    proto = mlp()
    proto.graph.node[2].op_type = "Rleu"
    with pytest.raises(ModelError, match="relu"):
        load_model(proto)


def test_unsupported_opset() -> None:
    proto = mlp()
    proto.opset_import[0].version = 3
    with pytest.raises(ModelError, match="unsupported opset 3"):
        load_model(proto)


def test_cycle_is_reported() -> None:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    graph = helper.make_graph(nodes, "cycle",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"cycle through nodes \['first', 'second'\]"):
        load_model(proto)


def test_dynamic_input_needs_a_shape() -> None:
    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(ModelError, match=r"--input-shape x=1,8"):
        load_model(proto)
    model = load_model(proto, input_shapes={"x": [5, 8]})
    assert model.dataflow.value_types["y"].shape == (5, 4)
    assert load_model(proto, require_static=False).dataflow.value_types["x"].shape == ("batch", 8)
    with pytest.raises(ModelError, match="not a model input"):
        load_model(proto, input_shapes={"z": [1]})


def test_a_static_view_infers_every_shape_at_the_sizes() -> None:
    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model = load_model(proto, require_static=False)
    assert model.symbols == ("batch",) and not model.is_static
    assert model.static_shape("y") is None
    view = model.at({"batch": 5})
    assert view.is_static and view.static_shape("h2") == (5, 16)
    assert view.static_shape("y") == (5, 4)
    assert model.at({"batch": 5}) is not view  # not kept: a view copies the weights
    with pytest.raises(ModelError, match=r"no size given .*\['batch'\]"):
        model.at({})


def test_an_unnamed_dimension_is_named_by_its_input_and_axis() -> None:
    proto = mlp()
    proto.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    proto.graph.output[0].type.tensor_type.shape.dim[0].Clear()
    model = load_model(proto, require_static=False)
    assert model.symbols == ("x.0",)
    assert model.at({"x.0": 3}).static_shape("y") == (3, 4)


def test_a_size_the_model_contradicts_is_a_model_error_naming_it() -> None:
    model = load_model(table(), require_static=False)
    assert model.at({"batch": 1}).static_shape("y") == (2, 8)  # broadcast
    with pytest.raises(ModelError, match=r"does not allow batch=4: .*Add"):
        model.at({"batch": 4})


def test_external_data_outside_the_model_directory_is_refused(tmp_path: Path) -> None:
    proto = mlp()
    tensor = proto.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../etc/passwd")
    path = tmp_path / "evil.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelError, match="outside the model's directory"):
        load_model(path)


def test_diamond_convexity() -> None:
    flow = load_model(diamond()).dataflow
    a, b, c, d = range(4)
    assert flow.names == ["a", "b", "c", "d"]
    assert flow.producers[d] == [b, c] and flow.consumers[a] == [b, c]
    assert not flow.is_convex(bits([a, d]))
    assert flow.is_convex(bits([a, b])) and flow.is_convex(bits([b, c]))
    assert flow.is_convex(bits([a, b, c, d]))


def _reachable(edges: list[tuple[int, int]], start: int) -> set[int]:
    seen, stack = set(), [start]
    while stack:
        i = stack.pop()
        for p, q in edges:
            if p == i and q not in seen:
                seen.add(q)
                stack.append(q)
    return seen


@given(data=st.data(), n=st.integers(2, 9))
def test_convexity_matches_brute_force(data: st.DataObject, n: int) -> None:
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=12))
    flow = load_model(random_dag(edges, n)).dataflow
    chosen = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    positions = {name: i for i, name in enumerate(flow.names)}
    members_mask = bits(positions[f"n{j}"] for j in chosen)
    outside = set(range(n)) - chosen
    expected = not any(
        (_reachable(edges, s) & outside) and any(
            t in _reachable(edges, o) for o in _reachable(edges, s) & outside for t in chosen)
        for s in chosen)
    assert flow.is_convex(members_mask) == expected


def test_extracted_parts_stitch_back_to_the_original() -> None:
    model = load_model(mlp())
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model.proto).run(None, {"x": x})
    values = {"x": x}
    for part in ([0, 1], [2, 3], [4, 5]):
        sub = model.extract(bits(part))
        onnx.checker.check_model(sub, full_check=True)
        names = [v.name for v in sub.graph.input]
        outputs = ReferenceEvaluator(sub).run(None, {n: values[n] for n in names})
        values.update(zip([v.name for v in sub.graph.output], outputs, strict=True))
    np.testing.assert_allclose(values["y"], expected, rtol=1e-6)
    first = model.extract(bits([0, 1]))
    assert [v.name for v in first.graph.input] == ["x"]
    assert [v.name for v in first.graph.output] == ["h1"]
    assert sorted(t.name for t in first.graph.initializer) == ["b1", "w1"]


def test_extract_rejects_non_convex_and_empty_sets() -> None:
    model = load_model(diamond())
    with pytest.raises(ModelError, match="not convex"):
        model.extract(bits([0, 3]))
    with pytest.raises(ModelError, match="empty"):
        model.extract(0)


def test_structural_hash_ignores_names_and_weights() -> None:
    a, b = load_model(mlp(seed=0)), load_model(mlp(seed=1, names="other_"))
    assert a.structural_hash() == b.structural_hash()
    assert a.structural_hash(bits([0, 1])) == b.structural_hash(bits([0, 1]))
    assert a.structural_hash(bits([0, 1])) != a.structural_hash(bits([1, 2]))
    assert load_model(mlp(hidden=32)).structural_hash() != a.structural_hash()
    # The two MatMul+Add pairs differ in shape, so they hash differently.
    assert a.structural_hash(bits([0, 1])) != a.structural_hash(bits([3, 4]))
    assert list(members(bits([3, 1]))) == [1, 3]


def test_structural_hash_is_stable_across_processes() -> None:
    code = ("from tests.ir.models import mlp; from tessera import load_model; "
            "print(load_model(mlp()).structural_hash())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == load_model(mlp()).structural_hash()


def _constants_and_identities() -> onnx.ModelProto:
    """x -> Identity -> Mul(Constant value) -> Add(Constant value_float) -> Reshape(Constant
    value_ints) -> Identity -> y, and a second output through an Identity of the input."""
    nodes = [
        helper.make_node("Identity", ["x"], ["x1"], name="id_in"),
        helper.make_node("Constant", [], ["scale"], name="c_scale",
                         value=numpy_helper.from_array(np.full((2, 3), 2.0, np.float32))),
        helper.make_node("Mul", ["x1", "scale"], ["m"], name="mul"),
        helper.make_node("Constant", [], ["shift"], name="c_shift", value_float=0.5),
        helper.make_node("Add", ["m", "shift"], ["a"], name="add"),
        helper.make_node("Constant", [], ["shape"], name="c_shape", value_ints=[3, 2]),
        helper.make_node("Identity", ["shape"], ["shape2"], name="id_shape"),
        helper.make_node("Reshape", ["a", "shape2"], ["r"], name="reshape"),
        helper.make_node("Identity", ["r"], ["y"], name="id_out"),
        helper.make_node("Identity", ["x"], ["z"], name="id_z"),
    ]
    graph = helper.make_graph(
        nodes, "consts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_nodes_become_initializers_and_identities_go() -> None:
    proto = _constants_and_identities()
    model = load_model(proto)
    assert [n.name for n in model.dataflow.nodes] == ["mul", "add", "reshape", "id_out", "id_z"]
    assert sorted(model.dataflow.initializers) == ["scale", "shape", "shift"]
    assert model.output_names == ["y", "z"]  # graph outputs keep their names
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ReferenceEvaluator(proto).run(None, {"x": x})
    got = ReferenceEvaluator(model.proto).run(None, {"x": x})
    for expected, actual in zip(want, got, strict=True):
        np.testing.assert_array_equal(actual, expected)


def test_unused_initializers_are_dropped_and_the_rest_keep_their_order() -> None:
    weights = [numpy_helper.from_array(np.full((2, 3), i, np.float32), f"w{i}")
               for i in range(5)]
    nodes = [helper.make_node("Add", ["x", "w1"], ["a"], name="a"),
             helper.make_node("Mul", ["a", "w3"], ["y"], name="m")]
    graph = helper.make_graph(
        nodes, "unused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=weights)
    from tessera.ir._fold import _drop_unused_initializers  # after constants fold

    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _drop_unused_initializers(proto.graph)
    assert [t.name for t in proto.graph.initializer] == ["w1", "w3"]
    x = np.ones((2, 3), np.float32)
    (got,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_array_equal(got, (x + 1) * 3)


def test_small_integer_initializers_are_structure() -> None:
    """Reshape targets decide what a subgraph computes: equal op lists with other target
    shapes must not share cost records."""
    first = _constants_and_identities()
    second = _constants_and_identities()
    second.graph.node[5].attribute[0].ints[:] = [6, 1]
    second.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 6
    second.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
    assert load_model(first).structural_hash() != load_model(second).structural_hash()


def test_a_model_strict_shape_inference_rejects_in_onnx_s_own_function_body_loads() -> None:
    """MeanVarianceNormalization's function body fails onnx's strict inference (a Constant
    with no value for the default axes); runtimes never expand it, so the model loads with
    what inference could find, and runs as ONNX Runtime runs it."""
    import onnxruntime as ort

    graph = helper.make_graph(
        [helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], "mvn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3, 3, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3, 3, 1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    model = load_model(proto)
    x = np.random.default_rng(0).standard_normal((3, 3, 3, 1)).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    import tessera

    got = tessera.compile(model, "onnxruntime").run({"x": x})["y"]
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    # and independently of both: normalised over axes 0, 2, 3
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(got, (x - mean) / std, rtol=1e-4, atol=1e-4)


def test_a_model_that_fails_shape_inference_either_way_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "z"], ["y"])], "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="shape inference failed"):
        load_model(proto)


def _half_chain() -> onnx.ModelProto:
    """float16 in and out, three steps whose intermediate values ONNX rounds to float16."""
    half = TensorProto.FLOAT16
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
         helper.make_node("Div", ["sq", "three"], ["third"], name="third"),
         helper.make_node("Mul", ["third", "three"], ["y"], name="back")], "half",
        [helper.make_tensor_value_info("x", half, [256])],
        [helper.make_tensor_value_info("y", half, [256])],
        initializer=[numpy_helper.from_array(np.array(3.0, np.float16), "three")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_float16_between_partitions_can_cross_as_float32() -> None:
    from tessera.ir import extract_submodel

    model = load_model(_half_chain())
    middle = model.node_set(["third"])
    plain = extract_submodel(model, middle)
    assert [v.type.tensor_type.elem_type for v in (*plain.graph.input, *plain.graph.output)] \
        == [TensorProto.FLOAT16, TensorProto.FLOAT16]
    wide = extract_submodel(model, middle, widen_float16=True)
    assert [(v.name, v.type.tensor_type.elem_type) for v in wide.graph.input] == \
        [("sq", TensorProto.FLOAT)]
    assert [(v.name, v.type.tensor_type.elem_type) for v in wide.graph.output] == \
        [("third", TensorProto.FLOAT)]
    assert [n.op_type for n in wide.graph.node] == ["Cast", "Div", "Cast"]
    onnx.checker.check_model(wide, full_check=True)
    # the model's own inputs and outputs keep their type
    first = extract_submodel(model, model.node_set(["square"]), widen_float16=True)
    assert first.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert first.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    # and the Casts are exact: the reference gives the float16 answer unchanged
    x = np.random.default_rng(0).standard_normal(256).astype(np.float16)
    sq = x * x
    got = ReferenceEvaluator(wide).run(None, {"sq": sq.astype(np.float32)})[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (sq / np.float16(3)).astype(np.float32))


def test_a_float16_model_split_across_backends_rounds_no_more_than_one_backend() -> None:
    """ONNX Runtime computes float16 in float32 between Casts it inserts; split between
    OpenVINO and ONNX Runtime, the chain carries float32 between them and agrees with ONNX
    Runtime alone, not with a chain that rounds at each boundary."""
    import onnxruntime as ort

    import tessera

    proto = _half_chain()
    x = np.random.default_rng(1).standard_normal(256).astype(np.float16)
    alone = ort.InferenceSession(proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    compiled = tessera.compile(proto, "openvino,onnxruntime", partitioner="greedy",
                               pins={"third": "onnxruntime"})
    assert [str(p.target) for p in compiled.plan.partitions] == \
        ["openvino", "onnxruntime", "openvino"]
    got = compiled.run({"x": x})["y"]
    np.testing.assert_array_equal(got, alone)
    rounded = ((x * x) / np.float16(3)) * np.float16(3)  # numpy rounds every step
    assert not np.array_equal(alone, rounded)  # the model tells the two apart


def test_a_float16_value_a_subgraph_reads_from_outside_keeps_its_type() -> None:
    from tessera.ir import extract_submodel

    half = TensorProto.FLOAT16
    branch = helper.make_graph([helper.make_node("Identity", ["h"], ["out"])], "branch", [],
                               [helper.make_tensor_value_info("out", half, [4])])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["h"], name="square"),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch,
                          name="choose")], "nested",
        [helper.make_tensor_value_info("x", half, [4]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", half, [4])])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    sub = extract_submodel(model, model.node_set(["choose"]), widen_float16=True)
    assert {v.name: v.type.tensor_type.elem_type for v in sub.graph.input} == \
        {"c": TensorProto.BOOL, "h": half}
    assert [n.op_type for n in sub.graph.node] == ["If"]
