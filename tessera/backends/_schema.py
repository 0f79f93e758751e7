"""Helpers to resolve a node's ONNX schema and input types, shared by the support tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from tessera.ir import ValueType


def schema_for(node: onnx.NodeProto, opset: int) -> Any | None:
    """The onnx OpSchema the node resolves to at `opset`, or None if there is none."""
    import onnx

    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None


def input_type_strings(
    node: onnx.NodeProto, types: Mapping[str, ValueType] | None
) -> dict[int, str]:
    """Input position -> 'tensor(float)' style type, where known."""
    import onnx

    found = {}
    for i, name in enumerate(node.input):
        value_type = (types or {}).get(name) if name else None
        if value_type is not None and value_type.elem_type:
            dtype = onnx.helper.tensor_dtype_to_string(value_type.elem_type)
            found[i] = "tensor(" + dtype.removeprefix("TensorProto.").lower() + ")"
    return found
