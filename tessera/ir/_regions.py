"""Regions kept whole. A value that is not a tensor (a sequence, an optional, a map) cannot be
a partition's boundary: most backends take tensors only, and a cut there would hand one
backend's list to another. So every node that makes or reads such a value is grouped, with
whatever lies on a path between them, into the smallest convex region, and that region is
wrapped in one model-local function (domain `tessera.region`). Placement then sees one node,
which only a backend that runs the whole region may take (`Backend.runs_whole_regions`), and
the function's `doc_string` says why it stayed whole."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from tessera.ir._graph import (
    DataflowGraph,
    NodeSet,
    members,
    subgraph_inputs,
    topological_order,
)

if TYPE_CHECKING:
    import onnx

REGION_DOMAIN = "tessera.region"


class ValueKind(StrEnum):
    """What a value is: a tensor, or one of the kinds a partition boundary cannot carry."""

    TENSOR = "tensor"
    SEQUENCE = "sequence"
    OPTIONAL = "optional"
    MAP = "map"
    SPARSE = "sparse tensor"
    UNKNOWN = ""  # declared without a type


_KINDS = {"tensor_type": ValueKind.TENSOR, "sequence_type": ValueKind.SEQUENCE,
          "optional_type": ValueKind.OPTIONAL, "map_type": ValueKind.MAP,
          "sparse_tensor_type": ValueKind.SPARSE}


@dataclass(frozen=True)
class Region:
    """A convex node set (indices in the dataflow order) and why it is kept whole."""

    mask: NodeSet
    why: str


def value_kind(value_type: onnx.TypeProto) -> ValueKind:
    return _KINDS.get(value_type.WhichOneof("value") or "", ValueKind.UNKNOWN)


def cuttable(kind: ValueKind) -> bool:
    """Whether a partition boundary may carry a value of this kind (an untyped one is
    left to shape inference and the backends)."""
    return kind in (ValueKind.TENSOR, ValueKind.UNKNOWN)


def uncuttable_values(graph: onnx.GraphProto) -> dict[str, ValueKind]:
    """Values of `graph` a partition boundary cannot carry, each with its kind."""
    found: dict[str, ValueKind] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        kind = value_kind(value.type)
        if not cuttable(kind):
            found.setdefault(value.name, kind)
    return found


def find_regions(flow: DataflowGraph, uncuttable: dict[str, ValueKind]) -> list[Region]:
    """The smallest convex regions holding every producer and reader of each uncuttable
    value, merged until no two regions reach each other both ways (so that contracting
    each to one node keeps the graph acyclic). In dataflow order; never a region node."""
    regions: list[tuple[NodeSet, list[str]]] = []
    for name, kind in uncuttable.items():  # insertion order: deterministic
        mask = 0
        if name in flow.producer_of:
            mask |= 1 << flow.producer_of[name]
        for reader in flow.value_consumers.get(name, []):
            mask |= 1 << reader
        if mask:
            regions.append((mask, [f"{kind} value {name!r}"]))
    merged = _merge(flow, regions)
    return sorted((Region(mask, "; ".join(dict.fromkeys(whys)))
                   for mask, whys in merged
                   if not all(flow.nodes[i].domain == REGION_DOMAIN for i in members(mask))),
                  key=lambda r: r.mask & -r.mask)


def _merge(flow: DataflowGraph, regions: list[tuple[NodeSet, list[str]]]
           ) -> list[tuple[NodeSet, list[str]]]:
    changed = True
    while changed:
        changed = False
        regions = [(_convex_closure(flow, m), whys) for m, whys in regions]
        for a in range(len(regions)):
            for b in range(a + 1, len(regions)):
                (ma, wa), (mb, wb) = regions[a], regions[b]
                if ma & mb or (_reaches(flow, ma, mb) and _reaches(flow, mb, ma)):
                    regions[a] = (ma | mb, wa + wb)
                    del regions[b]
                    changed = True
                    break
            if changed:
                break
    return regions


def _reaches(flow: DataflowGraph, source: NodeSet, sink: NodeSet) -> bool:
    return any(flow.descendants[i] & sink for i in members(source))


def _convex_closure(flow: DataflowGraph, mask: NodeSet) -> NodeSet:
    """`mask` with every node on a path between two of its members."""
    below = 0
    for i in members(mask):
        below |= flow.descendants[i]
    between = 0
    for j in members(below & ~mask):
        if flow.descendants[j] & mask:
            between |= 1 << j
    return mask | between


def contract(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each region wrapped in a model-local function called by one node (in
    place; the same message is returned). A model with no uncuttable value is left as is."""
    uncuttable = uncuttable_values(model.graph)
    if not uncuttable:
        return model
    flow = DataflowGraph(model.graph)
    regions = find_regions(flow, uncuttable)
    if not regions:
        return model
    from onnx import helper

    types = {v.name: v for v in (*model.graph.input, *model.graph.value_info,
                                 *model.graph.output)}
    first = {min(members(r.mask)): r for r in regions}
    inside = 0
    for region in regions:
        inside |= region.mask
    nodes: list[onnx.NodeProto] = []
    hidden: set[str] = set()  # values now inside a function
    imports = [o for o in model.opset_import if o.domain != REGION_DOMAIN]
    for i, node in enumerate(flow.nodes):
        if i in first:
            call, function = _wrap(flow, first[i], imports, types)
            nodes.append(call)
            model.functions.append(function)
            hidden.update(v.name for v in function.value_info)
        elif not inside >> i & 1:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes[i] for i in topological_order(nodes))
    kept = [v for v in model.graph.value_info if v.name not in hidden]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    if not any(o.domain == REGION_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(REGION_DOMAIN, 1))
    return model


def _wrap(flow: DataflowGraph, region: Region, imports: list[onnx.OperatorSetIdProto],
          types: dict[str, onnx.ValueInfoProto]) -> tuple[onnx.NodeProto, onnx.FunctionProto]:
    from onnx import helper

    body = [flow.nodes[i] for i in members(region.mask)]
    made = {o for node in body for o in node.output if o}
    inputs = list(dict.fromkeys(n for node in body for n in subgraph_inputs(node)
                                if n not in made))
    graph_outputs = set(flow.graph_outputs)
    outputs = [o for i in members(region.mask) for o in flow.nodes[i].output if o and (
        o in graph_outputs or any(not region.mask >> u & 1
                                  for u in flow.value_consumers.get(o, [])))]
    names = [flow.names[i] for i in members(region.mask)]
    digest = hashlib.sha256(b"".join(n.SerializeToString(deterministic=True)
                                     for n in body)).hexdigest()[:12]
    function = helper.make_function(REGION_DOMAIN, f"region_{digest}", inputs, outputs, body,
                                    list(imports))
    why = (f"kept whole: {', '.join(names[:4])}{', ...' if len(names) > 4 else ''} "
           f"({len(names)} node(s)) make or read {region.why}, which no partition boundary "
           "carries")
    function.doc_string = why
    function.value_info.extend(types[n] for node in body for n in node.output
                               if n in types and n not in outputs)
    call = helper.make_node(function.name, inputs, outputs, name=f"region:{names[0]}",
                            domain=REGION_DOMAIN, doc_string=why)
    return call, function


def region_function(node: onnx.NodeProto, functions: Iterable[onnx.FunctionProto]
                    ) -> onnx.FunctionProto | None:
    """The function a region node calls, or None for any other node."""
    if node.domain != REGION_DOMAIN:
        return None
    return next((f for f in functions
                 if f.domain == REGION_DOMAIN and f.name == node.op_type), None)


__all__ = ["REGION_DOMAIN", "Region", "ValueKind", "contract", "cuttable", "find_regions",
           "region_function", "uncuttable_values", "value_kind"]
