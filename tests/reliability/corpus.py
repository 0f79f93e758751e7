"""A corpus of broken ONNX files, for `load_model`'s error paths.

    python -m tests.reliability.corpus OUT_DIR    # writes the files and an index.json

Each entry names the file, what is wrong with it, and a phrase the ModelError must contain.
The path-traversal entry points its external data at a file beside OUT_DIR (outside the
model's directory), which `load_model` must refuse without reading."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _valid() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                               helper.make_node("Relu", ["h"], ["y"], name="relu")],
                              "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _graph(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any],
           initializers: list[TensorProto] | None = None, ir: int | None = None,
           opsets: list[Any] | None = None) -> bytes:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializers),
                              opset_imports=opsets or [helper.make_opsetid("", 17)])
    if ir is not None:
        model.ir_version = ir
    return model.SerializeToString()


def _bad_initializer() -> TensorProto:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 2])
    tensor.float_data.extend([1.0, 2.0, 3.0])  # make_tensor would refuse this
    return tensor


def entries(secret_name: str) -> list[tuple[str, str, str, bytes]]:
    """(file, what is wrong, phrase the error must contain, content)."""
    valid = _valid().SerializeToString()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    rng = np.random.default_rng(0)
    entries: list[tuple[str, str, str, bytes]] = [
        ("truncated.onnx", "the first half of a valid model", "truncated",
         valid[: len(valid) // 2]),
        ("random.onnx", "4 KiB of random bytes", "not a valid ONNX",
         rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()),
        ("empty.onnx", "zero bytes", "empty", b""),
        ("ir_version.onnx", "IR version 999", "ir_version",
         _graph([helper.make_node("Relu", ["x"], ["y"])], [x], [y], ir=999)),
        ("unknown_domain.onnx", "an op from a domain the model does not import", "domain",
         _graph([helper.make_node("Mystery", ["x"], ["y"], domain="com.example.evil")],
                [x], [y])),
        ("cycle.onnx", "two nodes that feed each other", "cycle",
         _graph([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                 helper.make_node("Relu", ["a"], ["b"], name="second"),
                 helper.make_node("Identity", ["a"], ["y"], name="out")], [x], [y])),
        ("dangling.onnx", "a node reads a value that nothing produces", "ghost",
         _graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], [x], [y])),
        ("initializer_shape.onnx", "an initializer declaring 2x2 but holding 3 values",
         "declared shape",
         _graph([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y],
                [_bad_initializer()])),
        ("initializer_mismatch.onnx", "an initializer whose shape cannot broadcast with x",
         "shape inference",
         _graph([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y],
                [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])),
        ("huge_dim.onnx", "an input declaring a 2^40 dimension", "dimension",
         _graph([helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2**40])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2**40])])),
    ]
    traversal = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2**29])
    traversal.data_location = TensorProto.EXTERNAL
    for key, value in (("location", f"../{secret_name}"), ("offset", "0"),
                       ("length", str(2**31))):  # 2 GB
        traversal.external_data.add(key=key, value=value)
    entries.append(("traversal.onnx", "2 GB of external data at ../ (outside the directory)",
                    "outside", _graph([helper.make_node("Relu", ["x"], ["y"])], [x], [y],
                                      [traversal])))
    return entries


NAMES = [entry[0] for entry in entries("outside.bin")]


def build(out: Path) -> list[dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    secret = out.parent / f"{out.name}-outside.bin"
    secret.write_bytes(b"secret outside the model directory")
    index = []
    for name, what, phrase, data in entries(secret.name):
        (out / name).write_bytes(data)
        index.append({"file": name, "what": what, "expect": phrase})
    (out / "index.json").write_text(json.dumps(index, indent=1))
    return index


if __name__ == "__main__":
    for entry in build(Path(sys.argv[1] if len(sys.argv) > 1 else "broken-onnx")):
        print(f"{entry['file']:28} {entry['what']}")
