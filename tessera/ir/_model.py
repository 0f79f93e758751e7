"""`Model`: a checked, shape-inferred ONNX model, its dataflow view, and submodel extraction."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tessera.errors import ModelError
from tessera.ir import _external, _filememo, _load, _loadmemo, _regions, _weights
from tessera.ir._dtypes import INTEGER_TYPES, UNDEFINED
from tessera.ir._graph import DataflowGraph, NodeSet, bits, members, outer_names, subgraph_inputs

if TYPE_CHECKING:
    from pathlib import Path

    import onnx

    from tessera.ir._weights import Weights

# Integer constants up to this size are structure (shapes, axes), not weights: they are hashed.
_STRUCTURAL_CONSTANT_LIMIT = 64


@dataclass(frozen=True, eq=False)
class Model:
    """A loaded model. `proto` is checked and shape-inferred; `dataflow` indexes its nodes.
    A loaded model's large weights live in `weights`, a file its initializers refer to as
    ONNX external data (`_weights`, `_external`): `proto` is a skeleton, and a submodel copies
    references, never weights."""

    proto: onnx.ModelProto
    opset: int
    source_digest: str | None = None  # sha1 of the file or bytes it was read from
    weights: Weights | None = None

    @cached_property
    def content_digest(self) -> str:
        """A digest of all the model computes with: what compiled caches are keyed on. The
        digest of the bytes it was read from where there are some (hashing those costs a
        fraction of serialising the model again); else of its skeleton and its weights'
        key (which names their content)."""
        if self.source_digest is not None:
            return self.source_digest
        if self.weights is None:
            data = self.proto.SerializeToString(deterministic=True)
            return hashlib.sha1(data, usedforsecurity=False).hexdigest()
        import onnx

        skeleton = onnx.ModelProto()
        skeleton.CopyFrom(self.proto)
        _external.mark(skeleton, None)  # where the weights are kept is not what they are
        digest = hashlib.sha1(skeleton.SerializeToString(deterministic=True),
                              usedforsecurity=False)
        digest.update(self.weights.key.encode())
        return digest.hexdigest()

    @cached_property
    def skeleton_file(self) -> Path | None:
        """The proto saved beside the weights (its references resolve there), for another
        process to open with `load_skeleton`; None for a model without a weights file."""
        return None if self.weights is None else self.weights.skeleton(self.proto)

    @cached_property
    def dataflow(self) -> DataflowGraph:
        return DataflowGraph(self.proto.graph)

    @property
    def input_names(self) -> list[str]:
        return self.dataflow.graph_inputs

    @property
    def output_names(self) -> list[str]:
        return self.dataflow.graph_outputs

    def node_set(self, names_or_indices: Iterable[str | int]) -> NodeSet:
        index = self.dataflow.index
        picked = []
        for item in names_or_indices:
            if isinstance(item, int):
                picked.append(item)
            elif item in index:
                picked.append(index[item])
            else:
                raise ModelError(f"no node named {item!r} in the model")
        return bits(picked)

    def extract(self, mask: NodeSet) -> onnx.ModelProto:
        return extract_submodel(self, mask)

    def structural_hash(self, mask: NodeSet | None = None) -> str:
        return structural_hash(self, self.dataflow.all_nodes() if mask is None else mask)

    @cached_property
    def symbols(self) -> tuple[str, ...]:
        """The symbolic dimensions of the model's inputs, in the order they first appear
        (a dimension with no name is named `input.axis` when the model loads)."""
        found: dict[str, None] = {}
        for name in self.input_names:
            value_type = self.dataflow.value_types.get(name)
            for dim in (value_type.shape or ()) if value_type is not None else ():
                if isinstance(dim, str):
                    found[dim] = None
        return tuple(found)

    @property
    def is_static(self) -> bool:
        return not self.symbols

    def at(self, sizes: Mapping[str, int]) -> Model:
        """The model with its symbolic dimensions at `sizes`: the same nodes, every value's
        shape inferred again. What placement measures a profile point on. A size the model
        does not allow (a Reshape to a constant, a table too short) is a ModelError naming
        it."""
        key = tuple(sorted((n, int(sizes[n])) for n in self.symbols if n in sizes))
        missing = [n for n in self.symbols if n not in sizes]
        if missing:
            raise ModelError(f"no size given for the symbolic dimension(s) {missing}")
        proto = _load.with_input_sizes(self.proto, dict(key))
        try:
            inferred = _load.check_and_infer(proto, weights_checked=True)
        except ModelError as err:
            point = ", ".join(f"{n}={v}" for n, v in key)
            raise ModelError(f"the model does not allow {point}: {err}") from None
        static = Model(inferred, self.opset, f"{self.content_digest}@" + ",".join(
            f"{n}={v}" for n, v in key), self.weights)
        wrong = _reshape_mismatch(static)
        if wrong:
            point = ", ".join(f"{n}={v}" for n, v in key)
            raise ModelError(f"the model does not allow {point}: {wrong}")
        return static  # not kept here: each view has a skeleton of its own

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of value `name` when every dimension is known, else None."""
        value_type = self.dataflow.value_types.get(name)
        if value_type is None or value_type.shape is None or not all(
                isinstance(d, int) for d in value_type.shape):
            return None
        return tuple(int(d) for d in value_type.shape)  # type: ignore[arg-type]


def _reshape_mismatch(model: Model) -> str | None:
    """Why a Reshape to a constant shape cannot hold its input at the model's static sizes
    (shape inference does not check the element counts), or None."""
    import numpy as np
    from onnx import numpy_helper

    flow = model.dataflow
    for name, node in zip(flow.names, flow.nodes, strict=True):
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        source, target = model.static_shape(node.input[0]), flow.constants.get(node.input[1])
        if source is None or target is None:
            continue
        dims = [int(d) for d in numpy_helper.to_array(target).ravel()]
        allow_zero = any(a.name == "allowzero" and a.i for a in node.attribute)
        dims = [source[i] if d == 0 and not allow_zero and i < len(source) else d
                for i, d in enumerate(dims)]
        have, known = int(np.prod(source, dtype=np.int64)), int(np.prod(
            [d for d in dims if d != -1], dtype=np.int64))
        if (-1 in dims and (known == 0 or have % known)) or (-1 not in dims and have != known):
            return (f"node {name!r} reshapes {list(source)} ({have} elements) to "
                    f"{[int(d) for d in dims]}")
    return None


def load_model(
    source: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    require_static: bool = True,
    verify: bool = False,
    clock: _filememo.WallClock = time.time_ns,
) -> Model:
    """Load from a path, bytes or ModelProto; check it, clean it up and infer shapes. Every
    problem is a `ModelError` naming the cause. `verify` (the flow option of that name) runs
    the IR verifier after each graph cleanup pass. `clock` tells how long ago a model file
    was written (`_filememo`: one written just now is not remembered). An unchanged file
    loaded before with the same options is not read again (`_loadmemo`)."""
    import onnx

    if not input_shapes:  # an unchanged file loaded before: its skeleton, not its bytes
        recalled = _loadmemo.recall(source, require_static, verify)
        if recalled is not None:
            return Model(recalled.proto, _load.check_opset(recalled.proto), recalled.digest,
                         recalled.weights)
    read = _load.read_model(source)
    proto, base, digest = read.proto, read.base, read.digest
    file, checked_before = read.file, read.checked
    del read  # what the file held goes once its weights are stored
    if not checked_before:
        _load.check_text(proto)
    external = _load.has_external_data(proto)
    # the digest of the bytes read names the model only where they are all it is
    source_digest = None if input_shapes or external else digest
    if isinstance(source, onnx.ModelProto):  # the caller's own: changed only in a copy
        proto = _copy(proto, onnx)
    stored = _external.directory_of(proto) if base is None else None
    if stored is not None:  # a loaded model's skeleton: its weights are where it says
        base = stored
    _load.load_external_data(proto, base, keep_initializers=True)
    material = f"entry {stored.name}" if stored is not None else \
        _load.external_digest(proto, base, digest, clock) if external and base else digest
    proto = _load.upgrade_opset(proto)
    opset = _load.check_opset(proto)
    _load.check_acyclic(proto)
    if input_shapes:
        _load.set_input_shapes(proto, input_shapes)
    _load.check_declared_sizes(proto)
    if require_static:
        _load.check_static_inputs(proto)
    else:
        _load.name_unknown_dims(proto)
    checked = checked_before and not external  # weights in other files may have changed
    proto = _load.check_and_infer(_load.simplify(proto, verify=verify, base=base),
                                  weights_checked=checked, base=base)
    proto = _regions.contract(proto)  # sequences, optionals, maps: each region one node
    weights = _weights.store(proto, base, material)
    if weights is not None:  # a fresh message: the one read holds every weight's bytes
        skeleton = onnx.ModelProto()
        skeleton.ParseFromString(proto.SerializeToString())
        proto = skeleton
    model = Model(proto, opset, source_digest, weights)
    if not external and file is not None and digest is not None:
        remembered = checked_before or _filememo.remember(*file, digest, clock)
        if remembered and not input_shapes and weights is not None:
            _loadmemo.remember(file[0], digest, require_static, verify, proto, weights)
    return model


def _copy(proto: onnx.ModelProto, onnx_module: Any) -> onnx.ModelProto:
    copy: onnx.ModelProto = onnx_module.ModelProto()
    copy.CopyFrom(proto)
    return copy


def extract_submodel(model: Model, mask: NodeSet, *, widen_float16: bool = False
                     ) -> onnx.ModelProto:
    """A standalone, valid ONNX model computing the nodes in `mask` (which must be convex),
    with original value names, the initializers it uses and the model's opset imports.

    `widen_float16`: float16 values passed between partitions (neither a model input nor a
    model output) cross the boundary as float32, through a Cast on each side. Backends that
    compute float16 in float32 (ONNX Runtime between the Casts it inserts, OpenVINO at f32)
    fold the pair away, so a value is rounded to float16 no more often than when one backend
    runs the whole model; for every other backend the Casts are exact."""
    import onnx

    flow = model.dataflow
    if not mask:
        raise ModelError("cannot extract an empty node set")
    if not flow.is_convex(mask):
        raise ModelError(f"nodes {_names(flow, mask)} are not convex: a path leaves and re-enters")
    inputs, outputs = flow.boundary(mask)
    if mask == flow.all_nodes() and list(inputs) == model.input_names and \
            list(outputs) == model.output_names:  # the whole model: no copy at all
        return model.proto
    nodes = [flow.nodes[i] for i in members(mask)]
    used = {n for node in nodes for n in subgraph_inputs(node)}
    types = flow.value_types
    declared = flow.declared  # a sequence, optional or map keeps its own type

    def info(name: str) -> onnx.ValueInfoProto:
        value = declared.get(name)
        if value is not None and not _regions.cuttable(_regions.value_kind(value.type)):
            return value
        return _value_info(name, types)

    graph = onnx.helper.make_graph(
        nodes,
        f"{model.proto.graph.name or 'graph'}_part",
        [info(name) for name in inputs],
        [info(name) for name in outputs],
        initializer=[t for name, t in flow.initializers.items() if name in used],
        value_info=[
            info(o) for node in nodes for o in node.output
            if o and o in types and o not in outputs
        ],
    )
    if widen_float16:
        _widen_float16(model, graph)
    sub = onnx.helper.make_model(
        graph, opset_imports=list(model.proto.opset_import), ir_version=model.proto.ir_version,
        producer_name="tessera",
    )
    domains = {node.domain for node in nodes}
    sub.functions.extend(f for f in model.proto.functions if f.domain in domains)
    _external.mark(sub, _external.directory_of(model.proto))  # its references resolve there
    return sub


NARROW_SUFFIX = "/float16"  # a widened boundary value's float16 form inside a partition


def _widen_float16(model: Model, graph: onnx.GraphProto) -> None:
    """The float16 boundary values of `graph` that pass between partitions, carried as
    float32 (`extract_submodel(widen_float16=True)`); nodes are copied before renaming."""
    import onnx

    fixed = {*model.input_names, *model.output_names}
    direct = {name for node in graph.node for name in (*node.input, *node.output)}

    def widened(values: Any) -> list[str]:
        return [v.name for v in values
                if v.name not in fixed and v.name in direct
                and v.type.HasField("tensor_type")
                and v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16]

    ins, outs = widened(graph.input), widened(graph.output)
    # a value a subgraph reads from the outer scope keeps its name: left as it is
    nested = {n for node in graph.node for attr in node.attribute
              for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs)
              for n in outer_names(sub)}
    ins, outs = [n for n in ins if n not in nested], [n for n in outs if n not in nested]
    if not ins and not outs:
        return
    rename = {name: name + NARROW_SUFFIX for name in (*ins, *outs)}
    nodes = []
    for node in graph.node:
        if any(n in rename for n in (*node.input, *node.output)):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = [rename.get(n, n) for n in node.input]
            copy.output[:] = [rename.get(n, n) for n in node.output]
            node = copy
        nodes.append(node)
    to_half = [onnx.helper.make_node("Cast", [n], [rename[n]], to=onnx.TensorProto.FLOAT16,
                                     name=f"tessera.narrow/{n}") for n in ins]
    to_float = [onnx.helper.make_node("Cast", [rename[n]], [n], to=onnx.TensorProto.FLOAT,
                                      name=f"tessera.widen/{n}") for n in outs]
    del graph.node[:]
    graph.node.extend([*to_half, *nodes, *to_float])
    for value in (*graph.input, *graph.output):
        if value.name in rename:
            value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for value in graph.value_info:
        if value.name in rename:
            value.name = rename[value.name]


def load_skeleton(path: str | Path) -> Model:
    """A model's skeleton saved by another process (`Model.skeleton_file`), with the weights
    it names attached; nothing is checked again (that process loaded and checked it)."""
    import onnx

    try:
        proto = onnx.load_model(str(path), load_external_data=False)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the model skeleton {str(path)!r}: {err}") from None
    directory = _external.directory_of(proto)
    weights = _weights.attach(directory) if directory is not None else None
    versions = {op.domain: op.version for op in proto.opset_import}
    return Model(proto, int(versions.get("", versions.get("ai.onnx", 0))), None, weights)


def _value_info(name: str, types: Mapping[str, Any]) -> onnx.ValueInfoProto:
    import onnx

    value_type = types.get(name)
    if value_type is None or value_type.shape is None:
        return onnx.helper.make_tensor_value_info(
            name, value_type.elem_type if value_type else UNDEFINED, None
        )
    return onnx.helper.make_tensor_value_info(name, value_type.elem_type, list(value_type.shape))


def _names(flow: DataflowGraph, mask: NodeSet) -> list[str]:
    return [flow.names[i] for i in members(mask)][:8]


def structural_hash(model: Model, mask: NodeSet) -> str:
    """Digest of ops, attributes, boundary and intermediate types, and topology; value names
    and weight values are left out, so equal structures share cost records."""
    flow = model.dataflow
    types = flow.value_types
    inputs, outputs = flow.boundary(mask)
    local: dict[str, Any] = {name: ["in", k] for k, name in enumerate(inputs)}
    records = []
    for position, i in enumerate(members(mask)):
        node = flow.nodes[i]
        refs: list[Any] = []
        for name in node.input:
            if not name:
                refs.append(None)
            elif name in local:
                refs.append(local[name])
            elif name in flow.initializers:
                refs.append(["w", *_tensor_record(flow.initializers[name])])
            else:
                refs.append(["outer", _type_record(types.get(name))])
        records.append({
            "op": [node.domain, node.op_type],
            "attrs": [_attr_record(a) for a in sorted(node.attribute, key=lambda a: a.name)],
            "in": refs,
            "out": [_type_record(types.get(o)) if o else None for o in node.output],
        })
        for slot, out in enumerate(node.output):
            if out:
                local[out] = ["n", position, slot]
    payload = {
        "opset": model.opset,
        "inputs": [_type_record(types.get(n)) for n in inputs],
        "nodes": records,
        "outputs": [local[n] for n in outputs],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _type_record(value_type: Any) -> Any:
    if value_type is None:
        return None
    return [value_type.elem_type, None if value_type.shape is None else list(value_type.shape)]


def _attr_record(attr: onnx.AttributeProto) -> Any:
    import onnx

    if attr.type == onnx.AttributeProto.TENSOR:
        return [attr.name, "t", _tensor_record(attr.t)]
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.name, "g", _graph_record(attr.g)]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return [attr.name, "gs", [_graph_record(g) for g in attr.graphs]]
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif isinstance(value, list):
        value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return [attr.name, value]


def _tensor_record(tensor: onnx.TensorProto) -> Any:
    import numpy as np
    import onnx.numpy_helper

    size = int(np.prod(tensor.dims)) if tensor.dims else 1
    if size <= _STRUCTURAL_CONSTANT_LIMIT and tensor.data_type in INTEGER_TYPES:
        return [tensor.data_type, list(tensor.dims), onnx.numpy_helper.to_array(tensor).tolist()]
    return [tensor.data_type, list(tensor.dims)]


def _graph_record(graph: onnx.GraphProto) -> Any:
    return [[n.domain, n.op_type, [_attr_record(a) for a in n.attribute]] for n in graph.node]


