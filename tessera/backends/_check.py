"""The support check of `Backend.compile`: a model holding a node the backend's own
`supports()` refuses is refused before the backend sees it (a backend may accept such a node
and compute something other than ONNX). It asks `supports()` with the model's own value types,
so it costs a table lookup per node, or one probe per kind of node for probed backends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tessera.backends._answer import NodeJudge, Support
from tessera.backends._regions import region_support
from tessera.errors import CompileError, TesseraError

if TYPE_CHECKING:
    import onnx

    from tessera.ir import DataflowGraph, ValueType
    from tessera.target import Target


def refused_nodes(backend: NodeJudge, submodel: onnx.ModelProto, target: Target
                  ) -> list[tuple[str, str, str]]:
    """(node name, op type, reason) of each node of `submodel` that `backend` refuses."""
    from tessera.ir import DataflowGraph

    flow = DataflowGraph(submodel.graph)
    opset = _default_opset(submodel)
    types = _value_types(submodel, flow)
    constants = flow.constants
    refused = []
    for name, node in zip(flow.names, flow.nodes, strict=True):
        try:
            region = region_support(backend, node, submodel.functions, opset, types, target)
            # a refusal is a falsy Support: never `or` the two answers
            support = region if region is not None else \
                backend.supports(node, opset, types, constants, target=target)
        except TesseraError:
            raise
        except Exception as err:  # a plugin's own bug: that node is refused, and why
            support = Support(False, f"its supports() failed: {type(err).__name__}: {err}")
        if not support:
            refused.append((name, node.op_type, support.reason))
    return refused


def check_supported(backend: NodeJudge, submodel: onnx.ModelProto, target: Target) -> None:
    refused = refused_nodes(backend, submodel, target)
    if not refused:
        return
    lines = [f"  {name} ({op}): {reason}" for name, op, reason in refused]
    raise CompileError(
        f"{backend.name} refuses {len(refused)} node(s) of this model for {str(target)!r} "
        "(its supports() says no):\n" + "\n".join(lines) + "\nlet tessera.compile place "
        "them on another backend, or pass check=False to compile it anyway")


def _default_opset(model: onnx.ModelProto) -> int:
    import onnx

    versions = {o.domain: o.version for o in model.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    return int(version) if version else onnx.defs.onnx_opset_version()


def _value_types(model: onnx.ModelProto, flow: DataflowGraph) -> Mapping[str, ValueType]:
    """The declared types (inputs, value_info, outputs, weights); shape inference fills in
    what they leave unknown, run on a copy without the weights' data."""
    types = flow.value_types
    used = [n for node in flow.nodes for n in (*node.input, *node.output) if n]
    missing = [n for n in used if n not in types or not types[n].elem_type]
    if not missing:
        return types
    import onnx

    from tessera.ir import value_type
    from tessera.ir._light import weights_as_inputs

    try:
        light, _ = weights_as_inputs(model)
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception:  # a model inference cannot read: supports() sees unknown types
        return types
    found = dict(types)
    for value in (*inferred.graph.value_info, *inferred.graph.output):
        if value.name not in found or not found[value.name].elem_type:
            found[value.name] = value_type(value)
    return found
