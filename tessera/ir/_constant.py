"""The value of a Constant node as a tensor: what graph cleanup folds into an initializer, what
support probes read as a known value, and what a backend folds while building."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.ir import _dtypes as dtypes

if TYPE_CHECKING:
    import onnx

# attribute -> (element type, whether it holds a list)
_NUMERIC_ATTRS = {"value_float": (dtypes.FLOAT, False), "value_floats": (dtypes.FLOAT, True),
                  "value_int": (dtypes.INT64, False), "value_ints": (dtypes.INT64, True)}


def is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


def constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a standard Constant node produces, named after its output; None when the
    node is no Constant, is malformed, or holds a sparse value or strings in a `value_string(s)`
    attribute (those stay nodes)."""
    import onnx

    if not is_constant(node) or len(node.attribute) != 1 or not node.output:
        return None
    attr = node.attribute[0]
    name = node.output[0]
    if attr.name == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = name
        return tensor
    if attr.name in _NUMERIC_ATTRS:
        elem, is_list = _NUMERIC_ATTRS[attr.name]
        value = onnx.helper.get_attribute_value(attr)
        values = list(value) if is_list else [value]
        return onnx.helper.make_tensor(name, elem, [len(values)] if is_list else [], values)
    return None
