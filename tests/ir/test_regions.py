"""Regions kept whole: the nodes around a sequence, optional or map become one node, which
only a backend that runs the whole region takes; the rest of the model is placed around it.
Every answer is checked against ONNX Runtime running the original model alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tessera
from tessera.backends._protocol import InputCheck, TensorSpec
from tessera.errors import InputError
from tessera.ir import REGION_DOMAIN, ValueKind, load_model, region_function


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[object]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def sequence_model() -> onnx.ModelProto:
    """Tensors on either side of a sequence region: SplitToSequence, SequenceMap, and a Loop
    over the sequence's items."""
    square = h.make_graph([h.make_node("Mul", ["e", "e"], ["sq"])], "square",
                          [h.make_tensor_value_info("e", T.FLOAT, None)],
                          [h.make_tensor_value_info("sq", T.FLOAT, None)])
    body = h.make_graph(
        [h.make_node("SequenceAt", ["squares", "i"], ["item"]),
         h.make_node("Add", ["acc_in", "item"], ["acc_out"]),
         h.make_node("Identity", ["cond_in"], ["cond_out"])], "sum",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("acc_out", T.FLOAT, None)])
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Mul", ["r", "two"], ["r2"], name="double"),
        h.make_node("SplitToSequence", ["r2"], ["rows"], axis=0, keepdims=0, name="split"),
        h.make_node("SequenceMap", ["rows"], ["squares"], body=square, name="square"),
        h.make_node("SequenceLength", ["squares"], ["n"], name="length"),
        h.make_node("ReduceSum", ["r2", "axis0"], ["column"], keepdims=0, name="column"),
        h.make_node("Mul", ["column", "zero"], ["start"], name="start"),
        h.make_node("Loop", ["n", "", "start"], ["total"], body=body, name="loop"),
        h.make_node("Sigmoid", ["total"], ["gate"], name="gate"),
        h.make_node("MatMul", ["gate", "w"], ["y"], name="head")]
    weights = [h.make_tensor("axis0", T.INT64, [1], [0]), h.make_tensor("two", T.FLOAT, [], [2]),
               h.make_tensor("zero", T.FLOAT, [], [0]),
               onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal(
                   (64, 16)).astype(np.float32), "w")]
    graph = h.make_graph(nodes, "sequences", [h.make_tensor_value_info("x", T.FLOAT,
                                                                        ["batch", 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, [16])], initializer=weights)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def tabular_model() -> onnx.ModelProto:
    """A scikit-learn-style classifier in ai.onnx.ml alone (no default opset import): string
    labels, and probabilities as a sequence of maps (ZipMap)."""
    labels = ["cat", "dog"]
    nodes = [
        h.make_node("Scaler", ["x"], ["scaled"], domain="ai.onnx.ml", name="scaler",
                    offset=[0.5, 0.1, 0.2], scale=[2.0, 1.0, 0.5]),
        h.make_node("LinearClassifier", ["scaled"], ["label", "scores"], domain="ai.onnx.ml",
                    name="classifier", classlabels_strings=labels,
                    coefficients=[0.1, 0.2, 0.3, -0.1, -0.2, 0.4], intercepts=[0.0, 0.1],
                    post_transform="LOGISTIC"),
        h.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml",
                    name="zipmap", classlabels_strings=labels)]
    maps = h.make_sequence_type_proto(h.make_map_type_proto(
        T.STRING, h.make_tensor_type_proto(T.FLOAT, [])))
    graph = h.make_graph(nodes, "tabular", [h.make_tensor_value_info("x", T.FLOAT, [None, 3])],
                         [h.make_tensor_value_info("label", T.STRING, [None]),
                          h.make_value_info("probabilities", maps)])
    return h.make_model(graph, opset_imports=[h.make_opsetid("ai.onnx.ml", 3)], ir_version=9)


def test_the_region_is_the_smallest_convex_set_around_the_sequences() -> None:
    model = load_model(sequence_model(), require_static=False)
    flow = model.dataflow
    [region] = [n for n in flow.nodes if n.domain == REGION_DOMAIN]
    function = region_function(region, list(model.proto.functions))
    assert function is not None
    assert [n.name for n in function.node] == ["split", "square", "length", "loop"]
    assert list(function.input) == ["r2", "start"] and list(function.output) == ["total"]
    assert "sequence value 'rows'" in function.doc_string
    assert flow.names == ["relu", "double", "column", "start", "region:split", "gate", "head"]
    again = load_model(model.proto, require_static=False)  # loading twice changes nothing
    assert again.dataflow.names == flow.names and len(again.proto.functions) == 1


def test_only_a_backend_that_runs_the_whole_region_may_take_it() -> None:
    model = load_model(sequence_model(), require_static=False)
    plan = tessera.partition(model.proto, "openvino,onnxruntime,cpu", partitioner="greedy")
    reasons = plan.reasons["region:split"]
    assert reasons["openvino"].startswith("openvino runs tensors only")
    assert "kept whole: split, square, length, loop" in reasons["openvino"]
    assert reasons["onnxruntime"].startswith("onnxruntime runs the region whole")
    assert "region:split" in {n for p in plan.partitions if str(p.target) == "onnxruntime"
                              for n in p.nodes}


def test_a_sequence_model_runs_in_a_mixed_plan_and_agrees_with_onnxruntime(
        tmp_path: Path) -> None:
    proto = sequence_model()
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    [want] = _ort(proto, {"x": x})
    compiled = tessera.compile(proto, "openvino,onnxruntime,cpu", partitioner="greedy",
                               shapes={"batch": (1, 4, 8)})
    assert {str(p.target) for p in compiled.plan.partitions} == {"openvino", "onnxruntime"}
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    compiled.save(tmp_path / "sequences.tess")
    again = tessera.load(tmp_path / "sequences.tess")
    np.testing.assert_allclose(again.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_a_tabular_model_without_a_default_opset_runs_and_agrees_exactly(
        tmp_path: Path) -> None:
    proto = tabular_model()
    x = np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32)
    want_labels, want_maps = _ort(proto, {"x": x})
    compiled = tessera.compile(proto, "openvino,onnxruntime,cpu")  # collage, measured
    assert [p.target.kind.name for p in compiled.plan.partitions] == ["onnxruntime"]
    got = compiled.run({"x": x})
    assert got["label"].tolist() == want_labels.tolist()  # type: ignore[attr-defined]
    assert got["probabilities"] == want_maps
    compiled.save(tmp_path / "tabular.tess")
    assert tessera.load(tmp_path / "tabular.tess").run({"x": x})["probabilities"] == want_maps


def test_explain_says_why_the_region_stayed_whole(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tessera.cli import cli

    path = tmp_path / "tabular.onnx"
    onnx.save(tabular_model(), path)
    result = CliRunner().invoke(cli, ["explain", str(path), "-t", "openvino,onnxruntime,cpu"],
                                env={"COLUMNS": "200"}, prog_name="tessera")
    assert result.exit_code == 0, result.output
    assert "region:zipmap" in result.output
    assert ("openvino runs tensors only, and this region is kept whole: zipmap (1 node(s)) "
            "make or read sequence value 'probabilities'") in result.output


def test_the_input_check_takes_sequences_optionals_and_maps_as_onnxruntime_does() -> None:
    check = InputCheck([TensorSpec("x", "float32", (2,)),
                        TensorSpec("items", "object", None, ValueKind.SEQUENCE),
                        TensorSpec("maybe", "object", None, ValueKind.OPTIONAL),
                        TensorSpec("table", "object", None, ValueKind.MAP)])
    feeds = check({"x": np.zeros(2, np.float32), "items": [[1.0, 2.0], np.ones(3)],
                   "maybe": None, "table": {"a": 1.0}})
    assert isinstance(feeds["items"], list) and feeds["items"][0].shape == (2,)
    assert feeds["maybe"] is None and feeds["table"] == {"a": 1.0}
    assert check.seen is None  # never the fast path: a list is checked every call
    with pytest.raises(InputError, match="'items' is a sequence: give a list of arrays"):
        check({"x": np.zeros(2, np.float32), "items": np.ones(3), "maybe": None,
               "table": {}})
    with pytest.raises(InputError, match="missing"):
        check({"x": np.zeros(2, np.float32), "maybe": None, "table": {}})


def test_regions_of_different_bodies_never_share_a_cost_record() -> None:
    one = load_model(sequence_model(), require_static=False)
    other_proto = sequence_model()
    other_proto.graph.node[3].attribute[0].g.node[0].op_type = "Add"  # e + e, not e * e
    other = load_model(other_proto, require_static=False)
    index = one.dataflow.names.index("region:split")
    assert one.structural_hash(1 << index) != other.structural_hash(1 << index)


def test_compiling_a_region_on_a_backend_that_runs_tensors_only_is_refused() -> None:
    from tessera.backends import get
    from tessera.errors import CompileError
    from tessera.ir import extract_submodel

    model = load_model(sequence_model(), require_static=False)
    index = model.dataflow.names.index("region:split")
    submodel = extract_submodel(model, 1 << index)
    with pytest.raises(CompileError, match="openvino runs tensors only"):
        get("openvino").compile(submodel, "openvino")


def test_the_reference_gives_sequences_as_lists_even_ragged_ones() -> None:
    """SplitToSequence into parts of unequal length: a list of arrays, as ONNX Runtime gives
    it (an array of them cannot be made)."""
    graph = h.make_graph(
        [h.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=0)], "ragged",
        [h.make_tensor_value_info("x", T.FLOAT, [5])],
        [h.make_value_info("parts", h.make_sequence_type_proto(
            h.make_tensor_type_proto(T.FLOAT, None)))],
        initializer=[h.make_tensor("split", T.INT64, [2], [2, 3])])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    x = np.arange(5, dtype=np.float32)
    [want] = _ort(proto, {"x": x})
    got = tessera.compile(proto, "reference").run({"x": x})["parts"]
    assert isinstance(got, list) and [p.tolist() for p in got] == [w.tolist() for w in want]


def test_no_inputs_are_implied_for_a_sequence_input_and_precision_says_why() -> None:
    from tessera.config import CompilationConfig
    from tessera.errors import ModelError
    from tessera.ir._implied import implied_inputs
    from tessera.placement.judge._precision_setup import precision_setup

    graph = h.make_graph(
        [h.make_node("ConcatFromSequence", ["items"], ["y"], axis=0)], "takes a sequence",
        [h.make_value_info("items", h.make_sequence_type_proto(
            h.make_tensor_type_proto(T.FLOAT, [2])))],
        [h.make_tensor_value_info("y", T.FLOAT, [None])])
    model = load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)],
                                    ir_version=8), require_static=False)
    with pytest.raises(ModelError, match=r"'items' is not a tensor.*pass samples"):
        implied_inputs(model, 2)
    why = precision_setup(model, CompilationConfig.create("openvino,onnxruntime"), None)
    # where this CPU has a float form below fp32, the sequence input is why none is tried
    assert isinstance(why, str)
    assert "'items' is not a tensor" in why or "no target computes a float form" in why
