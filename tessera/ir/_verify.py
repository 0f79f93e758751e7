"""The IR verifier: the invariants every pass over a model must keep. Run after each graph
cleanup pass with the `verify` flow option (debug mode); each broken invariant is a
ModelError naming it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tessera.errors import ModelError
from tessera.ir._graph import subgraph_inputs
from tessera.ir._light import weights_as_inputs

if TYPE_CHECKING:
    import onnx


class HasProto(Protocol):
    """A model as the verifier reads it (`tessera.ir.Model`, which loads through here)."""

    @property
    def proto(self) -> onnx.ModelProto: ...


def verify_model(model: HasProto | onnx.ModelProto, *, when: str = "") -> None:
    """Every value has one producer (a node, a graph input or an initializer), nodes are in
    topological order, node names (as plans name them) are unique, and onnx.checker accepts
    a weight-free copy. `when` says where in the flow the check ran, for the message."""
    import onnx

    proto = model if isinstance(model, onnx.ModelProto) else model.proto
    where = f" {when}" if when else ""
    graph = proto.graph
    _check_single_producers(graph, where)
    _check_topological(graph, where)
    _check_unique_names(graph, where)
    try:
        onnx.checker.check_model(weights_as_inputs(proto)[0])
    except (onnx.checker.ValidationError, UnicodeDecodeError) as err:
        first = " ".join(line.strip() for line in str(err).strip().splitlines()[:4])
        raise _broken(where, f"onnx.checker rejects the model: {first}") from None


def _check_single_producers(graph: onnx.GraphProto, where: str) -> None:
    producer: dict[str, str] = {}
    for value in graph.input:
        _claim(producer, value.name, "a graph input", where)
    for tensor in graph.initializer:
        if producer.get(tensor.name) == "a graph input":  # the input's default value
            producer[tensor.name] = "a graph input with an initializer"
        else:
            _claim(producer, tensor.name, "an initializer", where)
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                _claim(producer, out, f"node {_label(node, i)}", where)


def _claim(producer: dict[str, str], name: str, by: str, where: str) -> None:
    if name in producer:
        raise _broken(where, f"value {name!r} has two producers: {producer[name]} and {by}")
    producer[name] = by


def _check_topological(graph: onnx.GraphProto, where: str) -> None:
    known = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    made = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    for i, node in enumerate(graph.node):
        for name in subgraph_inputs(node):
            if name in known:
                continue
            if name in made:
                later = made[name]
                raise _broken(where, f"nodes are not in topological order: node "
                                     f"{_label(node, i)} reads {name!r}, produced later by "
                                     f"node {_label(graph.node[later], later)}")
            raise _broken(where, f"node {_label(node, i)} reads {name!r}, which no node, "
                                 "graph input or initializer produces")
        known.update(out for out in node.output if out)
    for value in graph.output:
        if value.name not in known:
            raise _broken(where, f"graph output {value.name!r} is produced by nothing")


def _check_unique_names(graph: onnx.GraphProto, where: str) -> None:
    seen: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{i}"  # as DataflowGraph names it
        if name in seen:
            raise _broken(where, f"node name {name!r} is used twice (nodes #{seen[name]} and "
                                 f"#{i}); plans and pins name nodes, so each needs its own")
        seen[name] = i


def _label(node: onnx.NodeProto, index: int) -> str:
    return repr(node.name) if node.name else f"#{index} {node.op_type}"


def _broken(where: str, what: str) -> ModelError:
    return ModelError(f"IR verifier{where}: {what}")
