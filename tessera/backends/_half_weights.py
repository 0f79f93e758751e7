"""OpenVINO's f16 form as an artifact keeps it: the weights of matrix products and
convolutions become float16 initializers, each read through a Cast back to float. The CPU
plugin keeps such weights in f16 (with `-precision=f16` it computes in f16 anyway, so the
answers are the same): the form holds half the bytes, and loading it never reads the fp32
weights (OpenVINO alone on a 0.5B decoder at f16: a peak of 3.3 GB from f32 weights, 1.7 GB
from these). A search's builds compile from the fp32 weights, mapped from the model's file,
and make no such copy."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

__all__ = ["half_weights"]

MIN_ELEMENTS = 1024  # smaller weights stay as they are: nothing to save


def half_weights(model: onnx.ModelProto, dot_ops: tuple[str, ...]) -> onnx.ModelProto:
    """A copy of `model` whose float32 weights read only by `dot_ops` (at least
    `MIN_ELEMENTS` each) are float16, cast back to float where read; `model` itself where
    there are none. Its other weights stay where they are (the copy keeps the model's mark
    naming its weights file)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    from tessera.ir._external import inline_weights_of

    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    halved = [t for t in model.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) >= MIN_ELEMENTS
              and readers.get(t.name) and readers[t.name] <= set(dot_ops)]
    if not halved:
        return model
    chosen = {t.name for t in halved}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    kept = [t for t in graph.initializer if t.name not in chosen]
    half, casts = [], []
    for tensor in inline_weights_of(model, halved):
        values = numpy_helper.to_array(tensor).astype(np.float16)
        half.append(numpy_helper.from_array(values, f"{tensor.name}.f16"))
        casts.append(helper.make_node("Cast", [f"{tensor.name}.f16"], [tensor.name],
                                      name=f"{tensor.name}.cast", to=onnx.TensorProto.FLOAT))
    del graph.initializer[:]
    graph.initializer.extend([*kept, *half])
    nodes = [*casts, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    return copy
