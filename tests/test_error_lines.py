"""Backend errors keep their cause: native libraries open their messages with where they
raised (OpenVINO's 'Exception from src/...cpp:117:', 'Check ... failed at ...'), and the
line that says why comes later. Every one-line form tessera shows is that line."""

from __future__ import annotations

from tessera._private.text import first_line, informative_lines, typed_line
from tessera.backends import Compiled

OPENVINO = ("Exception from src/inference/src/cpp/infer_request.cpp:189:\n"
            "Check '::getPort(port, name, {_impl->get_inputs(), _impl->get_outputs()})' "
            "failed at src/inference/src/cpp/infer_request.cpp:191:\n"
            "Port for tensor name x was not found.\n")
CORE = """Exception from src/inference/src/cpp/core.cpp:117:
Exception from src/frontends/onnx/frontend/src/core/graph.cpp:220:
[ONNX Frontend] Unsupported operator: Foo
"""


def test_the_informative_line_comes_first() -> None:
    assert first_line(OPENVINO) == "Port for tensor name x was not found."
    assert first_line(CORE) == "[ONNX Frontend] Unsupported operator: Foo"
    assert typed_line(RuntimeError(OPENVINO)) == \
        "RuntimeError: Port for tensor name x was not found."
    assert informative_lines("plain message") == ["plain message"]
    assert first_line("Exception from src/a.cpp:1:") == "Exception from src/a.cpp:1:"  # all
    assert first_line(ValueError()) == "ValueError"


def test_a_backend_failure_names_its_nodes_and_the_cause_first() -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model: onnx.ModelProto = helper.make_model(graph)
    failure = Compiled("openvino", model, None).failure(RuntimeError(OPENVINO))  # type: ignore[arg-type]
    assert str(failure).startswith("openvino failed running nodes ['r']: RuntimeError: Port "
                                   "for tensor name x was not found.")
