"""Constant folding before placement: nodes whose every input is a weight compute a weight,
so they are evaluated once and become initializers, as ONNX Runtime and OpenVINO do when they
load a model. Without it, the placement search sees hundreds of nodes that compute nothing
at run time (ONNX's `light_inception_v2` makes its 69 convolutions' weights with 407
ConstantOfShape and 138 Unsqueeze nodes), and a partition boundary can cut a weight off
from the node that uses it, so its backend could no longer pre-pack it.

Only shape and layout operators are folded (their results are exact), and no result larger
than `MAX_FOLDED_BYTES`: a folded weight is memory the model keeps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import onnx

FOLDABLE = ("ConstantOfShape", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose",
            "Cast", "Concat", "Identity")
MAX_FOLDED_BYTES = 64 << 20


def initializers_not_inputs(model: onnx.ModelProto) -> bool:
    """An IR version 3 model lists every initializer as a graph input too (the format asked
    for it); such inputs are weights, not inputs a caller feeds, as ONNX Runtime also
    treats them. They leave the inputs and the model becomes IR version 4. True if changed."""
    if model.ir_version >= 4:
        return False
    weights = {t.name for t in model.graph.initializer}
    kept = [v for v in model.graph.input if v.name not in weights]
    if len(kept) != len(model.graph.input):
        del model.graph.input[:]
        model.graph.input.extend(kept)
    model.ir_version = 4
    return True


def fold_constants(model: onnx.ModelProto, base: Path | None = None) -> int:
    """Nodes of `FOLDABLE` operators whose inputs are all initializers (not graph inputs,
    which a caller may override) replaced by the initializers they compute, in one pass in
    graph order so chains fold; initializers no longer used are dropped. The count folded.
    External data resolves in `base`."""
    from onnx import numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    inputs = {v.name for v in graph.input}
    constant = {t.name: t for t in graph.initializer if t.name not in inputs}
    arrays: dict[str, Any] = {}
    kept, folded = [], 0
    for node in graph.node:
        values = _folded(node, constant, arrays, opset, base)
        if values is None:
            kept.append(node)
            continue
        folded += 1
        for name, value in zip(node.output, values, strict=True):
            arrays[name] = value
            tensor = numpy_helper.from_array(value, name)
            constant[name] = tensor
            graph.initializer.append(tensor)
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
        _drop_unused_initializers(graph)
    return folded


def _folded(node: onnx.NodeProto, constant: dict[str, onnx.TensorProto],
            arrays: dict[str, Any], opset: int, base: Path | None = None) -> list[Any] | None:
    """The node's outputs computed, or None when it is not folded."""
    import numpy as np
    from onnx import numpy_helper

    if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
        return None
    if not node.input or any(name and name not in constant for name in node.input):
        return None
    if any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute) or len(node.output) != 1:
        return None
    feeds: list[Any] = []
    for name in node.input:
        if not name:
            feeds.append(None)
            continue
        if name not in arrays:
            arrays[name] = numpy_helper.to_array(constant[name],
                                                 base_dir=str(base) if base else "")
        feeds.append(arrays[name])
    if node.op_type == "ConstantOfShape":
        shape = np.asarray(feeds[0], dtype=np.int64).reshape(-1)
        if (shape < 0).any() or int(np.prod(shape)) * 8 > MAX_FOLDED_BYTES:
            return None
    try:
        value = _evaluate(node, feeds, opset)
    except Exception:  # an operator the evaluator rejects stays a node for its backend
        return None
    if not isinstance(value, np.ndarray) or value.nbytes > MAX_FOLDED_BYTES or \
            value.dtype == object:
        return None
    return [value]


def _evaluate(node: onnx.NodeProto, feeds: list[Any], opset: int) -> Any:
    """The node on its constant inputs, by each data-movement operator's definition at the
    model's opset (attributes that became inputs included). Raises where it does not apply:
    that node stays a node for its backend."""
    import numpy as np
    from onnx import helper, numpy_helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    op, x = node.op_type, (np.asarray(feeds[0]) if feeds and feeds[0] is not None else None)
    if op == "ConstantOfShape":
        fill = numpy_helper.to_array(attrs["value"]).reshape(-1) if "value" in attrs \
            else np.zeros(1, np.float32)
        shape = tuple(int(d) for d in np.asarray(feeds[0]).reshape(-1))
        return np.full(shape, fill[0], dtype=fill.dtype)
    assert x is not None
    if op == "Identity":
        return x
    if op in ("Unsqueeze", "Squeeze"):
        axes = list(attrs.get("axes", ())) if opset < 13 else (
            [int(a) for a in np.asarray(feeds[1]).reshape(-1)] if len(feeds) > 1
            and feeds[1] is not None else [])
        if op == "Unsqueeze":
            rank = x.ndim + len(axes)
            for axis in sorted(a + rank if a < 0 else a for a in axes):
                x = np.expand_dims(x, axis)
            return x
        if not axes:
            return np.squeeze(x)
        return np.squeeze(x, axis=tuple(a + x.ndim if a < 0 else a for a in axes))
    if op == "Reshape":
        dims = [int(d) for d in np.asarray(feeds[1]).reshape(-1)]
        if not attrs.get("allowzero", 0):  # 0 copies the input's dimension
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return x.reshape(dims)
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        axis = axis + x.ndim if axis < 0 else axis
        return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
    if op == "Transpose":
        return np.transpose(x, attrs.get("perm") or None)
    if op == "Concat":
        return np.concatenate([np.asarray(f) for f in feeds], axis=int(attrs["axis"]))
    if op == "Cast":
        target = helper.tensor_dtype_to_np_dtype(int(attrs["to"]))
        if target.kind not in "biuf" or x.dtype.kind not in "biuf":
            raise ValueError("only plain numeric casts fold")  # strings, bfloat16, float8
        return x.astype(target)
    raise ValueError(f"{op} does not fold")


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    used = {value.name for value in graph.output}
    _collect_inputs(graph, used)
    # deleted in place: rebuilding the list copies every weight kept (0.74 s for ViT-B/16)
    for index in reversed([i for i, t in enumerate(graph.initializer) if t.name not in used]):
        del graph.initializer[index]


def _collect_inputs(graph: onnx.GraphProto, used: set[str]) -> None:
    """Every value name a node reads, also inside subgraphs (which read outer values)."""
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                _collect_inputs(sub, used)


__all__ = ["FOLDABLE", "MAX_FOLDED_BYTES", "fold_constants", "initializers_not_inputs"]
