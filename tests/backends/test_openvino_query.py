"""OpenVINO's support for a whole model in one `Core.query_model` call, mapped back to the
ONNX nodes, and its proposal to Collage: on a zoo model and on small hand-built ones."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera import backends, load_model
from tessera.backends import Proposal
from tessera.ir import Model
from tessera.target import Target

from ..ir.models import through_double

pytest.importorskip("openvino")
pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="openvino is not available")

QUERIED = "(query_model on the whole model)"


@pytest.fixture(scope="module")
def mobilenet() -> Model:
    from tessera import zoo

    return load_model(zoo.export("mobilenetv2"))


def _chain(middle: onnx.NodeProto, *domains: str) -> onnx.ModelProto:
    """x -> Relu -> `middle` (a -> b) -> Sigmoid -> Gemm (with bias) -> y."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), middle,
             helper.make_node("Sigmoid", ["b"], ["c"], name="sigmoid"),
             helper.make_node("Gemm", ["c", "w", "bias"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[onnx.numpy_helper.from_array(rng.standard_normal((3, 4)).astype(
            np.float32), "w"), onnx.numpy_helper.from_array(np.ones(3, np.float32), "bias")],
        value_info=[helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])])
    imports = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=imports)


def test_one_query_answers_every_node_of_a_zoo_model(mobilenet: Model) -> None:
    ov = backends.get("openvino")
    answers = ov.supports_model(mobilenet)
    assert len(answers) == len(mobilenet.dataflow) == 100
    assert all(a.ok and a.reason.endswith(QUERIED) for a in answers)
    # its classifier Gemm becomes a MatMul and an Add named after the output tensor: found
    # by the tensor names, not by the node's name
    gemm = mobilenet.dataflow.names.index("/classifier/Gemm")
    assert answers[gemm].reason == f"OpenVINO's CPU plugin runs Gemm {QUERIED}"
    assert "/classifier/Gemm" not in ov.query(mobilenet).verdicts[gemm].ops


def test_the_zoo_model_is_proposed_whole_and_alike_on_every_load(mobilenet: Model) -> None:
    ov = backends.get("openvino")
    proposals = ov.propose(mobilenet, Target("openvino"))
    assert [(len(p.nodes), p.label) for p in proposals] == [(100, "query_model")]
    assert proposals[0].nodes == tuple(mobilenet.dataflow.names)  # the model's order
    again = load_model(mobilenet.proto)  # a model object of its own: asked again
    assert ov.propose(again, Target("openvino")) == proposals


def test_a_gemm_named_after_nothing_is_matched_by_its_tensors() -> None:
    model = load_model(_chain(helper.make_node("Neg", ["a"], ["b"], name="neg")))
    ov = backends.get("openvino")
    verdicts = ov.query(model).verdicts
    assert [v.runs for v in verdicts] == [True] * 4
    gemm = verdicts[model.dataflow.names.index("gemm")]
    assert "gemm/WithoutBiases" in gemm.ops and "gemm" not in gemm.ops  # Add is named 'y'
    assert [a.reason for a in ov.supports_model(model)] == [
        f"OpenVINO's CPU plugin runs {op} {QUERIED}" for op in ("Relu", "Neg", "Sigmoid", "Gemm")]
    assert ov.propose(model, Target("openvino")) == [Proposal(
        ("relu", "neg", "sigmoid", "gemm"),
        f"OpenVINO's CPU plugin runs these 4 connected nodes {QUERIED}", "query_model")]


def test_an_op_openvino_cannot_convert_leaves_the_rest_to_the_probes() -> None:
    custom = helper.make_node("Foo", ["a"], ["b"], name="foo", domain="com.example")
    model = load_model(_chain(custom, "com.example"))
    answers = dict(zip(model.dataflow.names, backends.get("openvino").supports_model(model),
                       strict=True))
    assert answers["relu"].ok and answers["relu"].reason.endswith(QUERIED)
    assert not answers["foo"]
    assert answers["foo"].reason.endswith(
        "(probed alone: OpenVINO's ONNX frontend has no converter for it)")
    # past the unconverted op query_model says no to everything: the probes decide instead
    for name in ("sigmoid", "gemm"):
        assert answers[name].ok and "probed with these input types" in answers[name].reason
        assert "(probed alone: query_model leaves out" in answers[name].reason
    assert backends.get("openvino").propose(model, Target("openvino")) == []  # relu alone


def test_string_tensors_and_control_flow_are_never_taken_from_the_query() -> None:
    equal = helper.make_node("Equal", ["s", "t"], ["y"], name="equal")
    graph = helper.make_graph(
        [equal], "strings", [helper.make_tensor_value_info(n, TensorProto.STRING, [2])
                             for n in ("s", "t")],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, [2])])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    ov = backends.get("openvino")
    assert ov.query(model).verdicts[0].note == "string tensors are left to the probes"
    (answer,) = ov.supports_model(model)
    assert not answer  # query_model would say yes; its Python runtime takes no strings
    assert "takes no string tensors" in answer.reason


def test_a_deviation_refuses_before_the_query_is_consulted() -> None:
    model = load_model(through_double())
    answers = backends.get("openvino").supports_model(model)
    assert [a.ok for a in answers] == [False, False, False]
    assert all("computes float64 as float32" in a.reason for a in answers)
    assert backends.get("openvino").propose(model, Target("openvino")) == []


def test_the_answers_match_the_per_node_probes_on_a_zoo_model(mobilenet: Model) -> None:
    """Where query_model answers, the one-node probes agree (they are what it replaces)."""
    ov = backends.get("openvino")
    flow = mobilenet.dataflow
    probed = [ov.supports(n, mobilenet.opset, flow.value_types, flow.constants)
              for n in flow.nodes]
    assert [a.ok for a in ov.supports_model(mobilenet)] == [p.ok for p in probed]


def test_an_input_of_unknown_rank_is_left_to_the_probes() -> None:
    """Inside the whole model OpenVINO infers the rank; as a partition's input it cannot."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["a"], name="reshape"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Reshape", ["b", "t"], ["y"], name="back")]
    graph = helper.make_graph(
        nodes, "ranks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                         helper.make_tensor_value_info("s", TensorProto.INT64, ["rank"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
        initializer=[helper.make_tensor("t", TensorProto.INT64, [1], [8])])
    model = load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                       require_static=False)
    assert model.dataflow.value_types["a"].shape is None
    notes = [v.note for v in backends.get("openvino").query(model).verdicts]
    assert notes[1:] == ["an input of unknown rank is left to the probes"] * 2
    relu = backends.get("openvino").supports_model(model)[1]
    assert not relu and relu.reason.endswith(
        "(probed alone: an input of unknown rank is left to the probes)")
