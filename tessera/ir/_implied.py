"""Inputs in the ranges a model implies, for judging it when the user gave no samples: token
ids inside the embedding table they index, masks of ones, type ids of zero, floats drawn
from a standard normal. What a value means is read from where it flows: an integer input
that reaches a Gather's indices (through casts and reshapes) over a table of V rows is drawn
from [0, V)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tessera.config._shapes import default_size
from tessera.errors import ModelError
from tessera.ir._model import Model

if TYPE_CHECKING:
    import numpy as np

# ops that pass their first input's values on unchanged (in value, not shape)
_TRANSPARENT = ("Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand",
                "Transpose")
_MASK = re.compile(r"mask", re.IGNORECASE)
_TYPE_IDS = re.compile(r"token_type|segment", re.IGNORECASE)


def index_bound(model: Model, name: str) -> int | None:
    """The number of rows of the smallest table `name` indexes (a Gather's indices over a
    weight), following it through value-preserving ops; None where it indexes none."""
    consumers: dict[str, list[Any]] = {}
    for node in model.proto.graph.node:
        for position, value in enumerate(node.input):
            consumers.setdefault(value, []).append((node, position))
    weights = {t.name: tuple(t.dims) for t in model.proto.graph.initializer}
    bounds: list[int] = []
    frontier, seen = [name], [name]
    while frontier:
        value = frontier.pop()
        for node, position in consumers.get(value, ()):
            if node.op_type == "Gather" and position == 1 and node.input[0] in weights:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                dims = weights[node.input[0]]
                if dims:
                    bounds.append(int(dims[axis % len(dims)]))
            elif node.op_type in _TRANSPARENT and position == 0:
                for out in node.output:
                    if out and out not in seen:
                        seen.append(out)
                        frontier.append(out)
    return min(bounds) if bounds else None


def non_tensor_input(model: Model) -> str | None:
    """The first graph input that is a sequence, optional or map: no inputs are implied."""
    weights = {t.name for t in model.proto.graph.initializer}
    return next((v.name for v in model.proto.graph.input
                 if v.name not in weights and not v.type.HasField("tensor_type")), None)


def implied_inputs(model: Model, count: int, seed: int = 0,
                   sizes: Mapping[str, int] | None = None) -> list[dict[str, np.ndarray]]:
    """`count` input dicts for `model`, symbolic dimensions at `sizes` (else their default
    sizes: 128 for a sequence-like name, else 1)."""
    import numpy as np
    import onnx

    not_tensor = non_tensor_input(model)
    if not_tensor:
        raise ModelError(f"input {not_tensor!r} is not a tensor, and tessera implies only "
                         "tensor inputs: pass samples (a list of input dicts)")
    rng = np.random.default_rng(seed)
    weights = {t.name for t in model.proto.graph.initializer}
    specs = []
    for value in model.proto.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else
                int((sizes or {}).get(d.dim_param, default_size(d.dim_param or "")))
                for d in tensor.shape.dim]
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        specs.append((value.name, tuple(dims), dtype, index_bound(model, value.name)))
    samples = []
    for _ in range(count):
        feeds = {}
        for name, shape, dtype, bound in specs:
            if _MASK.search(name):
                feeds[name] = np.ones(shape, dtype)
            elif dtype.kind in "iu":
                if bound is not None:
                    feeds[name] = rng.integers(0, bound, shape).astype(dtype)
                else:  # type ids, lengths, indices of unknown range: the safest value
                    feeds[name] = (np.zeros if _TYPE_IDS.search(name) else np.ones)(
                        shape, dtype)
            elif dtype.kind == "b":
                feeds[name] = np.ones(shape, bool)
            else:
                feeds[name] = rng.standard_normal(shape).astype(dtype)
        samples.append(feeds)
    return samples


__all__ = ["implied_inputs", "index_bound", "non_tensor_input"]
