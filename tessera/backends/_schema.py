"""Helpers to resolve a node's ONNX schema and input types, shared by the support tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from tessera.backends._answer import Support
    from tessera.ir import ValueType


def schema_for(node: onnx.NodeProto, opset: int) -> Any | None:
    """The onnx OpSchema the node resolves to at `opset`, or None if there is none."""
    import onnx

    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None


def standard_schema(node: onnx.NodeProto, opset: int, folded: str
                    ) -> tuple[Any, Support | None]:
    """A standard ONNX node's schema at `opset`, or the answer that settles it before any
    kernel is looked up: not an ONNX op at this opset, or a Constant (`folded` says how the
    backend folds it)."""
    from tessera.backends._answer import Support

    schema = schema_for(node, opset)
    if schema is None:
        return None, Support(False, f"{node.op_type} is not an ONNX op at opset {opset}")
    if node.op_type == "Constant":
        return schema, Support(True, folded)
    return schema, None


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
