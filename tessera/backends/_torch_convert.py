"""Build a runnable torch program from an ONNX graph with the converter table. Values known
at build time (initializers, constants, shapes of static tensors, and whatever is computed
from those only) are folded while building, so the program that runs is the tensor math."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from tessera.backends._torch_ops import DTYPES, OPS, Ctx
from tessera.ir import _dtypes as dtypes
from tessera.ir import constant_tensor

_SMALL = 64  # static inputs up to this size are also handed to converters as Python lists


@dataclass(frozen=True)
class Step:
    fn: Callable[..., Any]
    ctx: Ctx
    inputs: tuple[str, ...]  # '' for an omitted optional input
    outputs: tuple[str, ...]
    frees: tuple[str, ...]  # values whose last use is this step


class Program:
    """The steps of a graph, with its folded constants; `__call__` runs it on tensors."""

    def __init__(self, model: onnx.ModelProto, device: torch.device) -> None:
        graph = model.graph
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.device = device
        self.static: dict[str, torch.Tensor] = {}
        for tensor in graph.initializer:
            self.static[tensor.name] = _to_tensor(numpy_helper.to_array(tensor), device)
        weights = {t.name for t in graph.initializer}
        self.inputs = [v.name for v in graph.input if v.name not in weights]
        self.outputs = [v.name for v in graph.output]
        self.output_dtypes = [DTYPES.get(v.type.tensor_type.elem_type) for v in graph.output]
        shapes = _static_shapes(graph)
        steps: list[tuple[Callable[..., Any], Ctx, tuple[str, ...], tuple[str, ...]]] = []
        for node in graph.node:
            ctx = make_ctx(node, opset, self.static)
            names = tuple(node.input)
            if node.op_type == "Constant":
                self.static[node.output[0]] = _constant(node, device)
                continue
            fn = OPS.get(node.op_type).fn
            if node.op_type == "Shape" and names[0] in shapes:
                dims = shapes[names[0]][slice(ctx.get("start", 0), ctx.get("end"))]
                self.static[node.output[0]] = torch.tensor(dims, dtype=torch.int64,
                                                           device=device)
            elif all(not n or n in self.static for n in names):
                self._store(node, fn(ctx, *(self.static[n] if n else None for n in names)))
            else:
                steps.append((fn, ctx, names, tuple(node.output)))
        self.steps = _with_frees(steps, self.outputs)

    def _store(self, node: onnx.NodeProto, result: Any) -> None:
        results = result if isinstance(result, tuple) else (result,)
        for name, value in zip(node.output, results, strict=False):
            if name:
                self.static[name] = value

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[str, Any] = dict(zip(self.inputs, args, strict=True))
        static = self.static
        for step in self.steps:
            values = [env[n] if n in env else static[n] if n else None for n in step.inputs]
            result = step.fn(step.ctx, *values)
            if isinstance(result, tuple):
                env.update((n, v) for n, v in zip(step.outputs, result, strict=False) if n)
            else:
                env[step.outputs[0]] = result
            for name in step.frees:  # free intermediates as soon as nothing needs them
                env.pop(name, None)
        return tuple(env[n] if n in env else static[n] for n in self.outputs)


def make_ctx(node: onnx.NodeProto, opset: int, static: Mapping[str, torch.Tensor]) -> Ctx:
    schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    attrs = {a.name: _attribute(a) for a in node.attribute}
    small = {i: static[n].tolist() for i, n in enumerate(node.input)
             if n in static and static[n].numel() <= _SMALL}
    out_types = [dtypes.FLOAT] * len(list(node.output))
    while out_types and not node.output[len(out_types) - 1]:
        out_types.pop()
    return Ctx(node.op_type, schema.since_version, attrs, small, out_types)


def _attribute(attr: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return torch.from_numpy(np.array(numpy_helper.to_array(value)))
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def _constant(node: onnx.NodeProto, device: torch.device) -> torch.Tensor:
    tensor = constant_tensor(node)
    if tensor is None:
        names = ", ".join(a.name for a in node.attribute)
        raise ValueError(f"Constant with attribute(s) {names} is not handled")
    return _to_tensor(numpy_helper.to_array(tensor), device)


def _to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.array(array, copy=True)).to(device)


def _static_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    shapes = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[value.name] = [d.dim_value for d in tensor.shape.dim]
    return shapes


def _with_frees(
    steps: list[tuple[Callable[..., Any], Ctx, tuple[str, ...], tuple[str, ...]]],
    keep: list[str],
) -> list[Step]:
    last_use: dict[str, int] = {}
    for i, (_, _, inputs, _) in enumerate(steps):
        for name in inputs:
            if name:
                last_use[name] = i
    result = []
    for i, (fn, ctx, inputs, outputs) in enumerate(steps):
        frees = tuple(n for n in dict.fromkeys(inputs) if n and last_use.get(n) == i
                      and n not in keep)
        result.append(Step(fn, ctx, inputs, outputs, frees))
    return result
