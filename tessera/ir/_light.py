"""A weight-free copy of a model: what onnx.checker, shape inference and the IR verifier run on.
Large weights become graph inputs of the same type and shape, so none is copied (for BERT-base
that spares serialising 440 MB twice)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tessera.ir._dtypes import INTEGER_TYPES

if TYPE_CHECKING:
    import onnx

_KEPT_CONSTANT_ELEMENTS = 1024  # integer tensors up to this size feed data propagation


def weights_as_inputs(model: onnx.ModelProto,
                      keep: Callable[[onnx.TensorProto], bool] | None = None
                      ) -> tuple[onnx.ModelProto, list[Any]]:
    """The copy, and the initializers it left out. `keep` says which initializers stay (by
    default small integer tensors, which feed data propagation)."""
    import onnx

    light = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(light, field, value)
    graph = model.graph
    weights = []
    inputs = {value.name for value in graph.input}
    for field, value in graph.ListFields():
        if field.name != "initializer":
            _copy_field(light.graph, field, value)
    for tensor in graph.initializer:
        if (keep or _small_integers)(tensor):
            light.graph.initializer.append(tensor)
            continue
        weights.append(tensor)
        if tensor.name not in inputs:
            light.graph.input.append(onnx.helper.make_tensor_value_info(
                tensor.name, tensor.data_type, list(tensor.dims)))
    return light, weights


def _small_integers(tensor: onnx.TensorProto) -> bool:
    elements = 1
    for d in tensor.dims:
        elements *= d
    return tensor.data_type in INTEGER_TYPES and elements <= _KEPT_CONSTANT_ELEMENTS


def _copy_field(message: Any, field: Any, value: Any) -> None:
    if field.is_repeated:
        getattr(message, field.name).extend(value)
    elif field.type == field.TYPE_MESSAGE:
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)
