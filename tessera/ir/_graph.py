"""A dataflow view over an ONNX graph: topological order, index sets, convexity, boundaries.

Node sets are Python ints used as bitsets over topological indices: hashable, cheap to union,
and iterated in index order, so graph code never depends on set iteration order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from tessera.errors import ModelError
from tessera.ir._constant import constant_tensor
from tessera.ir._dtypes import UNDEFINED

if TYPE_CHECKING:
    import onnx

NodeSet = int


def bits(indices: Iterable[int]) -> NodeSet:
    mask = 0
    for i in indices:
        mask |= 1 << i
    return mask


def members(mask: NodeSet) -> Iterator[int]:
    """Indices in a bitset, ascending."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


@dataclass(frozen=True)
class ValueType:
    elem_type: int  # an ONNX element type (see _dtypes); UNDEFINED (0) when unknown
    shape: tuple[int | str | None, ...] | None  # None: unknown rank

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


def subgraph_inputs(node: onnx.NodeProto) -> list[str]:
    """Names a node reads: its inputs plus outer-scope names used inside its subgraphs."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
            names += outer_names(graph)
    return list(dict.fromkeys(names))


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names `graph` (a Loop, If or Scan body) reads from the scopes around it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    used: list[str] = []
    for node in graph.node:
        used += [n for n in subgraph_inputs(node) if n not in defined]
        defined.update(node.output)
    return used


class DataflowGraph:
    """Nodes in a deterministic topological order (ties broken by file order), with their
    producers and consumers as index lists."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        raw = list(graph.node)
        self.nodes: list[onnx.NodeProto] = [raw[i] for i in topological_order(raw)]
        self.producer_of: dict[str, int] = {
            out: i for i, node in enumerate(self.nodes) for out in node.output if out
        }
        made = self.producer_of
        self.producers: list[list[int]] = [
            sorted({made[n] for n in subgraph_inputs(node) if n in made}) for node in self.nodes]
        self.consumers: list[list[int]] = [[] for _ in self.nodes]
        for i, plist in enumerate(self.producers):
            for p in plist:
                self.consumers[p].append(i)
        self.initializers: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
        self.graph_inputs = [v.name for v in graph.input if v.name not in self.initializers]
        self.graph_outputs = [v.name for v in graph.output]
        self.names = [node.name or f"{node.op_type}_{i}" for i, node in enumerate(self.nodes)]

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> its position."""
        return {name: i for i, name in enumerate(self.names)}

    def node_set(self, names: Iterable[str]) -> NodeSet:
        """The bitmask of the nodes named: a plan names its nodes, the search works on
        bitmasks."""
        index = self.index
        return bits(index[name] for name in names)

    @cached_property
    def declared(self) -> dict[str, onnx.ValueInfoProto]:
        """The graph's own declarations of its values (inputs, value_info, outputs)."""
        return {v.name: v for v in (*self.graph.input, *self.graph.value_info,
                                    *self.graph.output)}

    @cached_property
    def value_types(self) -> dict[str, ValueType]:
        types: dict[str, ValueType] = {}
        for value in (*self.graph.input, *self.graph.value_info, *self.graph.output):
            types[value.name] = value_type_of(value)
        for tensor in self.graph.initializer:
            types.setdefault(tensor.name, ValueType(tensor.data_type, tuple(tensor.dims)))
        return types

    @cached_property
    def constants(self) -> dict[str, onnx.TensorProto]:
        """Values known before running: initializers and the outputs of Constant nodes.
        Support probes use them, since some backends need shapes and axes to be constant."""
        found = dict(self.initializers)
        for node in self.nodes:
            tensor = constant_tensor(node)
            if tensor is not None:
                found[tensor.name] = tensor
        return found

    @cached_property
    def value_consumers(self) -> dict[str, list[int]]:
        uses: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in subgraph_inputs(node):
                uses.setdefault(name, []).append(i)
        return uses

    @cached_property
    def descendants(self) -> list[NodeSet]:
        """For each node, the bitset of nodes reachable from it (itself excluded)."""
        reach = [0] * len(self.nodes)
        for i in reversed(range(len(self.nodes))):
            mask = 0
            for c in self.consumers[i]:
                mask |= (1 << c) | reach[c]
            reach[i] = mask
        return reach

    def all_nodes(self) -> NodeSet:
        return (1 << len(self.nodes)) - 1

    def is_convex(self, mask: NodeSet) -> bool:
        """No path leaves the set and comes back into it."""
        desc = self.descendants
        for i in members(mask):
            for c in self.consumers[i]:
                if not mask >> c & 1 and desc[c] & mask:
                    return False
        return True

    def boundary(self, mask: NodeSet) -> tuple[list[str], list[str]]:
        """(inputs, outputs) of a node set: values read from outside (weights excluded) in
        first-use order, and values used outside or by the graph, in production order."""
        inputs: list[str] = []
        outputs: list[str] = []
        graph_outputs = set(self.graph_outputs)
        inside: set[str] = set()
        for i in members(mask):
            node = self.nodes[i]
            for name in subgraph_inputs(node):
                if name not in inside and name not in self.initializers and name not in inputs:
                    inputs.append(name)
            inside.update(o for o in node.output if o)
        for i in members(mask):
            for out in self.nodes[i].output:
                if not out:
                    continue
                users = self.value_consumers.get(out, [])
                if out in graph_outputs or any(not mask >> u & 1 for u in users):
                    outputs.append(out)
        return inputs, outputs


def topological_order(nodes: Sequence[onnx.NodeProto]) -> list[int]:
    """Indices of `nodes` in a deterministic topological order (ties broken by position),
    following every name a node reads, inside its subgraphs too; a cycle is a ModelError
    naming the nodes on or after it."""
    made = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    preds = [sorted({made[n] for n in subgraph_inputs(node) if n in made}) for node in nodes]
    order = _topological(preds)
    if len(order) != len(nodes):
        placed = set(order)
        stuck = [nodes[i].name or f"#{i} {nodes[i].op_type}"
                 for i in range(len(nodes)) if i not in placed]
        raise ModelError(f"the graph has a cycle through nodes {stuck[:8]}")
    return order


def _topological(preds: list[list[int]]) -> list[int]:
    """Kahn's algorithm, smallest ready index first; shorter than `preds` on a cycle."""
    succ: list[list[int]] = [[] for _ in preds]
    indegree = [len(p) for p in preds]
    for i, plist in enumerate(preds):
        for p in plist:
            succ[p].append(i)
    heap = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(heap, j)
    return order


def value_type_of(value: onnx.ValueInfoProto) -> ValueType:
    """The tensor type of a declared value; a sequence, optional or map is UNDEFINED."""
    if not value.type.HasField("tensor_type"):
        return ValueType(UNDEFINED, None)
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return ValueType(tensor.elem_type, None)
    dims: list[int | str | None] = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        else:
            dims.append(d.dim_param or None)
    return ValueType(tensor.elem_type, tuple(dims))
