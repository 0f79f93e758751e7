"""Greedy placement on generated ONNX DAGs with SYNTHETIC support tables (which target may run
which node is drawn at random; no backend is asked): priority semantics, acyclic partitions,
maximal regions, min_block_size."""

from __future__ import annotations

import onnx
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tessera.ir import load_model
from tessera.placement import Plan
from tessera.placement.search import FALLBACK, SupportTable, place_greedy
from tessera.target import Target

ORT, OV = Target("onnxruntime"), Target("openvino")
TARGETS = (ORT, OV, FALLBACK)


def dag_model(edges: list[list[int]]) -> onnx.ModelProto:
    """Node i adds the outputs of its chosen predecessors (or the graph input)."""
    nodes, used = [], set()
    for i, preds in enumerate(edges):
        ins = [f"v{p}" for p in preds] or ["x"]
        used.update(preds)
        if len(ins) == 1:
            nodes.append(helper.make_node("Relu", ins, [f"v{i}"], name=f"n{i}"))
        else:
            nodes.append(helper.make_node("Sum", ins, [f"v{i}"], name=f"n{i}"))
    outs = [helper.make_tensor_value_info(f"v{i}", TensorProto.FLOAT, [2])
            for i in range(len(edges)) if i not in used]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@st.composite
def placements(draw: st.DrawFn) -> tuple[onnx.ModelProto, list[tuple[Target, ...]]]:
    n = draw(st.integers(1, 9))
    edges = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
             for i in range(n)]
    allowed = []
    for _ in range(n):
        subset = draw(st.sets(st.sampled_from([ORT, OV]), max_size=2))
        allowed.append(tuple(t for t in TARGETS if t in subset or t == FALLBACK))
    return dag_model(edges), allowed


def synthetic_table(allowed: list[tuple[Target, ...]]) -> SupportTable:
    return SupportTable(TARGETS, tuple(allowed), {}, {})


def schedule_ok(plan: Plan, model: onnx.ModelProto) -> bool:
    ready = {i.name for i in model.graph.input}
    for part in plan.partitions:
        if not set(part.inputs) <= ready:
            return False
        ready |= set(part.outputs)
    return True


def quotient_acyclic(parts: list[set[str]], model: onnx.ModelProto) -> bool:
    producer = {o: n.name for n in model.graph.node for o in n.output}
    inputs = {n.name: [producer[i] for i in n.input if i in producer] for n in model.graph.node}
    done: set[str] = set()
    left = list(parts)
    while left:
        for part in left:
            if all(p in done or p in part for n in part for p in inputs[n]):
                done |= part
                left.remove(part)
                break
        else:
            return False
    return True


@given(placements())
def test_each_node_goes_to_the_first_target_in_priority_that_runs_it(case) -> None:
    proto, allowed = case
    model = load_model(proto)
    plan = place_greedy(model, synthetic_table(allowed))
    where = {n: str(p.target) for p in plan.partitions for n in p.nodes}
    index = {name: i for i, name in enumerate(model.dataflow.names)}
    assert sorted(where) == sorted(index)
    for name, target in where.items():
        assert target == str(allowed[index[name]][0])
    assert schedule_ok(plan, proto)


@given(placements())
def test_regions_are_maximal(case) -> None:
    proto, allowed = case
    model = load_model(proto)
    plan = place_greedy(model, synthetic_table(allowed))
    parts = [set(p.nodes) for p in plan.partitions]
    for a in range(len(parts)):
        for b in range(a + 1, len(parts)):
            if str(plan.partitions[a].target) == str(plan.partitions[b].target):
                merged = [p for k, p in enumerate(parts) if k not in (a, b)]
                assert not quotient_acyclic([*merged, parts[a] | parts[b]], proto)


@given(placements(), st.integers(2, 4))
def test_min_block_size_leaves_small_regions_to_later_targets(case, size) -> None:
    proto, allowed = case
    model = load_model(proto)
    plan = place_greedy(model, synthetic_table(allowed), min_block_size=size)
    index = {name: i for i, name in enumerate(model.dataflow.names)}
    assert schedule_ok(plan, proto)
    for part in plan.partitions:
        if str(part.target) == str(FALLBACK) or len(part.nodes) >= size:
            continue
        rank = [str(t) for t in TARGETS].index(str(part.target))
        # small regions stay only where some node has no later target to go to
        assert any(all(TARGETS.index(t) <= rank for t in allowed[index[n]])
                   for n in part.nodes)


def test_independent_branches_of_one_backend_share_a_partition() -> None:
    proto = dag_model([[], [0], [0], [1, 2]])  # a diamond: two branches between n0 and n3
    model = load_model(proto)
    allowed = [(ORT, FALLBACK), (ORT, FALLBACK), (ORT, FALLBACK), (FALLBACK,)]
    plan = place_greedy(model, synthetic_table(allowed))
    assert [(str(p.target), p.nodes) for p in plan.partitions] == [
        ("onnxruntime", ("n0", "n1", "n2")), ("reference", ("n3",))]


def test_a_cycle_through_another_backend_splits_the_region() -> None:
    # n0 -> n1 -> n2 and n0 -> n2; n1 is not ORT's: {n0, n2} on ORT would need n1 in between
    proto = dag_model([[], [0], [0, 1]])
    model = load_model(proto)
    plan = place_greedy(model, synthetic_table([(ORT, FALLBACK), (OV, FALLBACK),
                                                (ORT, FALLBACK)]))
    assert [(str(p.target), p.nodes) for p in plan.partitions] == [
        ("onnxruntime", ("n0",)), ("openvino", ("n1",)), ("onnxruntime", ("n2",))]
