"""Support by probing: build a one-node model with the node's real input types and its constant
inputs, and ask the backend's own converter and compiler whether it takes it for the target
asked about. The answer is cached per node signature and the probed target's tuning key, so a
model with many alike nodes pays once per kind of node."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tessera._private.text import first_line
from tessera.backends._deviations import Deviation, first_deviation
from tessera.backends._protocol import Backend, Constants, Support, ValueTypes
from tessera.backends._schema import schema_for
from tessera.ir._dtypes import INTEGER_TYPES, UNDEFINED
from tessera.target import Target

if TYPE_CHECKING:
    import onnx

    from tessera.ir import ValueType

# Integer constants up to this size stay constants in the probe (shapes, axes, pads); other
# constants, weights above all, become probe inputs so that alike nodes share one probe.
_CONSTANT_LIMIT = 4096
_FLOAT_CONSTANT_LIMIT = 16


class Prober:
    """`check(model, target)` raises when the backend cannot take the one-node model for
    `target`; the message of the exception becomes the reason."""

    def __init__(self, backend: str, check: Callable[[onnx.ModelProto, Target], None]) -> None:
        self.backend = backend
        self._check = check
        self._cache: dict[tuple[str, str], Support] = {}
        self._lock = threading.Lock()

    def refusal(self, node: onnx.NodeProto, opset: int) -> Support | None:
        """Why `node` is refused without probing (not an ONNX op, control flow), or None."""
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        if not domain and schema_for(node, opset) is None:
            return Support(False, f"{node.op_type} is not an ONNX op at opset {opset}")
        if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
            return Support(False, f"{self.backend}: control flow ({node.op_type} with a "
                                  "subgraph) is not probed; it stays on another backend")
        return None

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None,
                 constants: Constants | None, target: Target) -> Support:
        refused = self.refusal(node, opset)
        if refused is not None:
            return refused
        model = single_node_model(node, opset, types or {}, constants or {})
        key = (_signature(model), target.tuning_key())
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        try:
            self._check(model, target)
            answer = Support(True, f"{self.backend} converts and compiles {node.op_type} "
                                   "(probed with these input types)")
        except Exception as err:  # any failure of the backend's own tools means "no"
            first = first_line(err, 160)
            answer = Support(False, f"{self.backend} cannot take {node.op_type} with these "
                                    f"inputs: {first}")
        with self._lock:
            self._cache[key] = answer
        return answer


def single_node_model(
    node: onnx.NodeProto,
    opset: int,
    types: Mapping[str, ValueType],
    constants: Mapping[str, onnx.TensorProto],
) -> onnx.ModelProto:
    import onnx
    from onnx import helper

    inputs, initializers = [], []
    for name in dict.fromkeys(n for n in node.input if n):
        tensor = constants.get(name)
        if tensor is not None and is_structural(tensor):
            initializers.append(tensor)
        else:
            inputs.append(_info(name, types))
    outputs = [_info(name, types) for name in node.output if name]
    graph = helper.make_graph([node], "probe", inputs, outputs, initializer=initializers)
    imports = [helper.make_opsetid("", opset)]
    if node.domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(node.domain, 1))
    model = helper.make_model(graph, opset_imports=imports,
                              ir_version=min(onnx.IR_VERSION, 10))
    try:  # fill in output types the caller did not know
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # the backend's own probe will report the problem
        return model


def _info(name: str, types: Mapping[str, ValueType]) -> onnx.ValueInfoProto:
    from onnx import helper

    value_type = types.get(name)
    if value_type is None:
        return helper.make_tensor_value_info(name, UNDEFINED, None)
    return helper.make_tensor_value_info(name, value_type.elem_type, value_type.shape)


def is_structural(tensor: onnx.TensorProto) -> bool:
    limit = _CONSTANT_LIMIT if tensor.data_type in INTEGER_TYPES else _FLOAT_CONSTANT_LIMIT
    return _size(tensor) <= limit


def _size(tensor: onnx.TensorProto) -> int:
    size = 1
    for d in tensor.dims:
        size *= d
    return size


def _rank_type(value: onnx.ValueInfoProto) -> tuple[int, int | None]:
    tensor = value.type.tensor_type
    return tensor.elem_type, len(tensor.shape.dim) if tensor.HasField("shape") else None


def _signature(model: onnx.ModelProto) -> str:
    """The probe model without names and dimension sizes: nodes with equal attributes, dtypes,
    ranks and constant inputs share one answer (probed with the first one's shapes)."""
    graph = model.graph
    parts = [model.opset_import[0].version, graph.node[0].op_type, graph.node[0].domain,
             [a.SerializeToString(deterministic=True) for a in graph.node[0].attribute],
             [(t.data_type, list(t.dims), t.raw_data or t.SerializeToString())
              for t in graph.initializer],
             [_rank_type(v) for v in (*graph.input, *graph.output)],
             [list(graph.node[0].input).index(i) if i in graph.node[0].input else -1
              for i in [t.name for t in graph.initializer]],
             len(graph.node[0].input), len(graph.node[0].output)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class ProbedBackend(Backend):
    """A backend whose support table is its own tools' verdict on one-node models, after its
    known deviations from ONNX (which a probe cannot see: it only asks "does it compile").
    The probe compiles for the target asked about, reduced to `probe_attrs` (the attributes
    that can change what compiles: a target CPU, say), so that targets differing only in
    thread counts or optimisation hints share their answers."""

    probe_label: str
    probe_attrs: tuple[str, ...] = ()
    deviations: tuple[Deviation, ...] = ()

    def __init__(self) -> None:
        self._prober = Prober(self.probe_label, self._probe)

    def _probe(self, model: onnx.ModelProto, target: Target) -> None:
        raise NotImplementedError

    def probe_target(self, target: Target | None) -> Target:
        """The target a probe compiles for: `target`'s device and `probe_attrs`."""
        chosen = target if target is not None else Target(self.name)
        explicit = chosen.explicit_attrs
        kept = {k: v for k, v in explicit.items() if k == "device" or k in self.probe_attrs}
        return chosen if kept == explicit else Target(self.name).with_attrs(**kept)

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        refusal = first_deviation(self.deviations, self.probe_label, node, opset, types,
                                  constants)
        if refusal is not None:  # a Support is falsy when refused: no `or` here
            return refusal
        return self._prober.supports(node, opset, types, constants, self.probe_target(target))
