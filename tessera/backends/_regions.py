"""Support for a region kept whole (`tessera.ir` wraps the nodes around a non-tensor value in
one model-local function): a backend takes it when it runs such regions and every node
inside; the answer names the node it cannot run, or why the region stayed whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tessera.backends._answer import NodeJudge, Support
from tessera.ir import REGION_DOMAIN, region_function, value_type

if TYPE_CHECKING:
    import onnx

    from tessera.ir import ValueType
    from tessera.target import Target


def region_support(backend: NodeJudge, node: onnx.NodeProto,
                   functions: Sequence[onnx.FunctionProto], opset: int,
                   types: Mapping[str, ValueType] | None, target: Target | None
                   ) -> Support | None:
    """The answer for a region node, or None for any other node."""
    if node.domain != REGION_DOMAIN:  # every node of every support table passes here
        return None
    function = region_function(node, functions)
    if function is None:
        return None
    why = function.doc_string
    if not backend.runs_whole_regions:
        return Support(False, f"{backend.name} runs tensors only, and this region is {why}")
    inner = {**(types or {}), **{v.name: value_type(v) for v in function.value_info}}
    for body in function.node:
        answer = backend.supports(body, opset, inner, None, target=target)
        if not answer:
            return Support(False, f"{backend.name} cannot run {body.name or body.op_type} "
                                  f"inside the region: {answer.reason}")
    return Support(True, f"{backend.name} runs the region whole; {why}")


__all__ = ["region_support"]
