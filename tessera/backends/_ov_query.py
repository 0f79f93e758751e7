"""OpenVINO's `Core.query_model` on a whole model, mapped back to its ONNX nodes.

One call reads the model (weights as inputs, as the one-node probes have them) and asks the
CPU plugin which of its ops it runs. The answer names OpenVINO ops, so each ONNX node is
matched to the ops its conversion made: the ops carrying its output tensors, and the ops
behind them up to tensors of other ONNX values. A node is answered only where that match is
exact; anything else (an op no name leads to, an op claimed twice, a friendly name used by
two ops, a node the converter folded into another's op) keeps a note, and the caller probes
that node alone instead."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.backends._probe import is_structural
from tessera.ir._light import weights_as_inputs

if TYPE_CHECKING:
    import onnx

    from tessera.ir import Model


_STRING = 8  # onnx.TensorProto.STRING
# what a partial conversion leaves in place of a node it has no converter for
_UNCONVERTED = ("NotSupportedONNXNode", "ONNXFrameworkNode", "FrameworkNode")


@dataclass(frozen=True)
class Verdict:
    """query_model's answer for one ONNX node: `runs` when every op converted from it is
    supported; otherwise `note` says why this answer is not to be taken (the node is probed
    alone)."""

    runs: bool
    ops: tuple[str, ...] = ()  # the OpenVINO ops it was matched to (friendly names)
    note: str = ""


@dataclass(frozen=True)
class QueryAnswer:
    verdicts: tuple[Verdict, ...]  # per node of the model's dataflow, in its order
    partial: bool = False  # the converter left some nodes unconverted (framework nodes)


def query_model(model: Model, core: Any, device: str = "CPU") -> QueryAnswer:
    """Each node's verdict. A model OpenVINO cannot read at all gets the same note for every
    node; one it can read only in part (an op with no converter) is read partially, and its
    unconverted nodes are left to the probes."""
    data = light_copy(model.proto).SerializeToString()
    partial = False
    try:
        converted = core.read_model(data)
    except Exception as err:
        try:
            converted = _read_partially(data)
            partial = True
        except Exception:
            return _everywhere(model, f"OpenVINO could not read the whole model "
                                      f"({_first_line(err)})")
    try:
        supported = core.query_model(converted, device)
    except Exception as err:
        return _everywhere(model, f"query_model failed ({_first_line(err)})")
    return QueryAnswer(match(model, converted, supported.__contains__), partial)


def light_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` with its large constants as graph inputs, which the probes treat alike: nothing
    is copied for weights, and answers do not depend on their values."""
    return weights_as_inputs(proto, keep=is_structural)[0]


def match(model: Model, converted: Any, supported: Callable[[str], bool]) -> tuple[Verdict, ...]:
    """Each node's verdict from the converted model's ops and `supported(friendly name)`."""
    flow = model.dataflow
    ops = list(converted.get_ordered_ops())
    named: dict[str, int] = {}
    for op in ops:
        named[op.get_friendly_name()] = named.get(op.get_friendly_name(), 0) + 1
    carrier: dict[str, Any] = {}  # tensor name -> the op whose output carries it
    for op in ops:
        if op.get_type_name() in ("Result", "Parameter"):
            continue
        for output in op.outputs():
            for name in output.get_names():
                carrier.setdefault(name, op)
    onnx_values = dict.fromkeys([*flow.graph_inputs, *flow.initializers,
                                 *(v for node in flow.nodes for v in (*node.input, *node.output)
                                   if v)])
    claims: dict[str, list[int]] = {}  # an op's unique name -> the nodes claiming it
    found: list[Verdict | list[Any]] = []
    types, constants = flow.value_types, flow.constants
    for node in flow.nodes:
        if any(types[v].elem_type == _STRING for v in (*node.input, *node.output)
               if v in types):  # query_model does not check element types: compiling does
            found.append(Verdict(False, note="string tensors are left to the probes"))
            continue
        if any(v not in constants and (v not in types or types[v].shape is None)
               for v in node.input if v):  # fine inside the model, but as a partition's
            # input the CPU plugin refuses a tensor of unknown rank: asked alone instead
            found.append(Verdict(False, note="an input of unknown rank is left to the probes"))
            continue
        found.append(_ops_of(node, carrier, onnx_values, flow.value_consumers,
                             flow.graph_outputs))
    for i, item in enumerate(found):
        if isinstance(item, list):
            for op in item:
                claims.setdefault(op.get_name(), []).append(i)
    verdicts = []
    for item in found:
        if isinstance(item, Verdict):
            verdicts.append(item)
            continue
        names = tuple(op.get_friendly_name() for op in item)
        if any(len(claims[op.get_name()]) > 1 for op in item):
            verdicts.append(Verdict(False, names, "its OpenVINO ops are shared with another "
                                                  "node's"))
        elif any(named[n] > 1 for n in names):
            verdicts.append(Verdict(False, names, "an OpenVINO op made from it has a name "
                                                  "another op has too"))
        elif all(supported(n) for n in names):
            verdicts.append(Verdict(True, names))
        elif any(op.get_type_name() in _UNCONVERTED for op in item):
            verdicts.append(Verdict(False, names, "OpenVINO's ONNX frontend has no converter "
                                                  "for it"))
        else:
            left = [n for n in names if not supported(n)]
            verdicts.append(Verdict(False, names, f"query_model leaves out {left[0]!r}"))
    return tuple(verdicts)


def _ops_of(node: onnx.NodeProto, carrier: dict[str, Any], onnx_values: dict[str, None],
            consumers: dict[str, list[int]], graph_outputs: Sequence[str]
            ) -> Verdict | list[Any]:
    """The OpenVINO ops converted from `node` (in the order found), or why they are unclear."""
    if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
        return Verdict(False, note="control flow is left to the probes")
    outputs = [o for o in node.output if o]
    used = [o for o in outputs if o in consumers or o in graph_outputs]
    heads = [carrier[o] for o in outputs if o in carrier]
    if not heads or any(o not in carrier for o in used):
        return Verdict(False, note="no OpenVINO op carries its outputs")
    mine = set(outputs)
    for head in heads:
        for output in head.outputs():
            other = [n for n in output.get_names() if n in onnx_values and n not in mine]
            if other:  # an op carrying another value too: folded (Identity) or fused
                return Verdict(False, note=f"its output shares an OpenVINO op with {other[0]!r}")
    found: dict[str, Any] = {}  # by the op's unique name
    stack = list(reversed(heads))
    while stack:
        op = stack.pop()
        if op.get_name() in found:
            continue
        found[op.get_name()] = op
        for value in op.input_values():
            source = value.get_node()
            if source.get_type_name() == "Parameter" or \
                    any(n in onnx_values and n not in mine for n in value.get_names()):
                continue  # a graph input, a weight or another node's output: its boundary
            stack.append(source)
    return list(found.values())


def _read_partially(data: bytes) -> Any:
    from openvino.frontend import FrontEndManager

    frontend = FrontEndManager().load_by_framework("onnx")
    return frontend.convert_partially(frontend.load(io.BytesIO(data)))


def _everywhere(model: Model, note: str) -> QueryAnswer:
    return QueryAnswer(tuple(Verdict(False, note=note) for _ in model.dataflow.nodes))


def _first_line(err: Exception) -> str:
    from tessera._private.text import typed_line

    return typed_line(err, 160)
