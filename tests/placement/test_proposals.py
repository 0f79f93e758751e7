"""Proposed subgraphs: the public registration of a proposer for an existing backend, how
Collage judges each proposal against the support table (a candidate, split into convex
parts, or refused with the reason), determinism, and what a plan and `explain` keep of it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tessera import CompilationConfig, backends, load_model, zoo
from tessera.backends import PROPOSERS, Proposal, register_proposer
from tessera.errors import ModelError, RegistryError
from tessera.ir import Model, NodeSet
from tessera.placement import CostDB, Plan
from tessera.placement.measure import FunctionMeasurer
from tessera.placement.record import Cost
from tessera.placement.search import SupportTable, place_collage
from tessera.placement.search._candidates import Candidate, generate
from tessera.placement.search._proposed import proposed_candidates
from tessera.target import Target

from ..ir.models import diamond, through_double
from .context import context

ORT = Target("onnxruntime")
GELU = ("/Div", "/Erf", "/Add", "/Mul", "/Mul_1")  # the first GELU of the zoo's mlp


@pytest.fixture(scope="module")
def mlp() -> Model:
    return load_model(zoo.export("mlp"))


def _gelus(model: Model, target: Target) -> list[Proposal]:
    """A pattern table of one entry: x / c -> Erf -> + 1 -> * x -> * 0.5, found by op types."""
    flow = model.dataflow
    found = []
    for erf in (i for i, n in enumerate(flow.nodes) if n.op_type == "Erf"):
        (div,), (add,) = flow.producers[erf], flow.consumers[erf]
        (mul,) = flow.consumers[add]
        (half,) = flow.consumers[mul]
        found.append(Proposal(tuple(flow.names[i] for i in (div, erf, add, mul, half)),
                              "GELU as one fused kernel", "gelu"))
    return found


@contextlib.contextmanager
def proposer(name: str, backend: str, propose: Callable[[Model, Target], Sequence[Proposal]]
             ) -> Iterator[None]:
    register_proposer(name, backend=backend, propose=propose)
    try:
        yield
    finally:
        PROPOSERS.unregister(name)


def _table(model: Model, *targets: str, **options: object) -> SupportTable:
    return SupportTable.build(model, CompilationConfig.create(list(targets), **options))


def _mask(model: Model, names: Sequence[str]) -> NodeSet:
    return model.node_set(names)


# -- registration ----------------------------------------------------------------------------
def test_a_proposer_registered_for_onnxruntime_becomes_collage_candidates(mlp: Model) -> None:
    with proposer("gelu-fusion", "ort", _gelus):  # an alias names the backend too
        assert "gelu-fusion" in PROPOSERS.names()
        assert PROPOSERS.get("gelu-fusion").backend == "onnxruntime"
        table = _table(mlp, "onnxruntime")
        proposed, records = proposed_candidates(mlp, table)
        candidates = generate(mlp.dataflow, table, 3, (), proposed)
    first = Candidate(_mask(mlp, GELU), ORT)
    assert first in candidates and first not in generate(mlp.dataflow, table, 3)
    found = candidates[candidates.index(first)]
    assert found.origin == "gelu-fusion (gelu)"
    assert [(r.source, r.label, r.status, r.parts, len(r.nodes)) for r in records] == [
        ("gelu-fusion", "gelu", "candidate", 1, 5)] * 2
    assert records[0].nodes == GELU and records[0].reason == "GELU as one fused kernel"


def test_a_measured_search_keeps_the_record_and_names_the_proposer(mlp: Model,
                                                                  tmp_path: Path) -> None:
    """Real backends measure every candidate, the proposed ones like the rest."""
    with proposer("gelu-fusion", "onnxruntime", _gelus):
        plan, _ = place_collage(context(mlp, db=CostDB(tmp_path / "costs.sqlite")),
                                _table(mlp, "onnxruntime"))
    records = plan.stats.proposals
    assert records is not None and [r.status for r in records] == ["candidate"] * 2
    assert sum(len(p.nodes) for p in plan.partitions) == len(mlp.dataflow)
    again = Plan.from_json(plan.to_json())  # remembered plans and artifacts keep the records
    assert again.stats.proposals == records
    from tessera.cli._explain import render

    text = render(plan, mlp, "mlp.onnx")
    assert "proposals: 2" in text
    assert "gelu-fusion (gelu) for onnxruntime, 5 node(s): candidate: GELU as one fused " \
           "kernel" in text


def test_the_decision_names_the_proposer_of_the_partition_it_kept(mlp: Model,
                                                                  tmp_path: Path) -> None:
    gelu = _mask(mlp, GELU)

    def synthetic(model: Model, mask: NodeSet, target: Target) -> Cost:  # SYNTHETIC costs
        return Cost(0.01 if mask == gelu else 1.0 * bin(mask).count("1"), 0.0, 5)

    SYNTHETIC = FunctionMeasurer(synthetic)

    with proposer("gelu-fusion", "onnxruntime", _gelus):
        ctx = context(mlp, measurer=SYNTHETIC, db=CostDB(tmp_path / "costs.sqlite"))
        plan, _ = place_collage(ctx, _table(mlp, "onnxruntime"))
    assert any(set(p.nodes) == set(GELU) for p in plan.partitions)
    for name in GELU:
        assert plan.decisions[name].endswith("; a candidate proposed by gelu-fusion (gelu)")
    assert "proposed" not in plan.decisions["/layers.0/Gemm"]


def test_registration_errors_name_what_is_wrong() -> None:
    with pytest.raises(RegistryError, match=r"unknown backend 'onnxruntme'.*did you mean "
                                            r"'onnxruntime'"):
        register_proposer("typo", backend="onnxruntme", propose=_gelus)
    with proposer("gelu-fusion", "onnxruntime", _gelus):
        with pytest.raises(RegistryError, match="proposer 'gelu-fusion' is already registered"):
            register_proposer("gelu-fusion", backend="onnxruntime", propose=_gelus)
        with pytest.raises(RegistryError, match="did you mean 'gelu-fusion'"):
            PROPOSERS.get("gelu-fusoin")
    with pytest.raises(RegistryError, match="must be a function"):
        register_proposer("not-callable", backend="onnxruntime",
                          propose="gelu")  # type: ignore[arg-type]
    assert "typo" not in PROPOSERS and "not-callable" not in PROPOSERS


def test_register_proposer_is_a_decorator_too(mlp: Model) -> None:
    @register_proposer("decorated", backend="onnxruntime")
    def whole(model: Model, target: Target) -> list[Proposal]:
        return [Proposal(model.dataflow.names, "everything")]

    try:
        assert whole(mlp, ORT)[0].nodes == tuple(mlp.dataflow.names)  # still the function
        _, records = proposed_candidates(mlp, _table(mlp, "onnxruntime"))
        assert [(r.source, r.status) for r in records] == [("decorated", "candidate")]
    finally:
        PROPOSERS.unregister("decorated")


def test_the_backends_own_proposals_come_before_registered_ones(mlp: Model) -> None:
    pytest.importorskip("openvino")
    with proposer("gelu-fusion", "openvino", _gelus):
        _, records = proposed_candidates(mlp, _table(mlp, "openvino", "onnxruntime"))
    assert [(r.source, r.target, r.label) for r in records] == [
        ("openvino", "openvino", "query_model"), ("gelu-fusion", "openvino", "gelu"),
        ("gelu-fusion", "openvino", "gelu")]


# -- what Collage makes of a proposal -------------------------------------------------------
def _judge(model: Model, table: SupportTable, *proposals: Proposal
           ) -> tuple[list[Candidate], list[tuple[str, str, int]]]:
    with proposer("test-proposer", "onnxruntime", lambda m, t: list(proposals)):
        made, records = proposed_candidates(model, table)
    return made, [(r.status, r.reason, r.parts) for r in records]


def test_unknown_nodes_are_refused_with_a_suggestion(mlp: Model) -> None:
    made, records = _judge(mlp, _table(mlp, "onnxruntime"),
                           Proposal(("/Erf", "/Eff_1"), "typo"), Proposal((), "empty"))
    assert made == []
    assert records == [
        ("refused", "typo; refused: no node named '/Eff_1' in the model; did you mean "
                    "'/Erf_1' or '/Erf'?", 0),
        ("refused", "empty; refused: it names no node", 0)]


def test_nodes_the_target_may_not_run_are_refused_with_the_support_tables_reason() -> None:
    pytest.importorskip("openvino")
    model = load_model(through_double(relu_first=True))
    table = _table(model, "openvino", "onnxruntime")
    everything = Proposal(("relu", "to_double", "neg", "to_float"), "all of it", "all")
    with proposer("greedy-ov", "openvino", lambda m, t: [everything]):
        made, records = proposed_candidates(model, table)
    assert made == []
    ((record),) = [r for r in records if r.source == "greedy-ov"]
    assert record.status == "refused" and record.target == "openvino"
    assert record.reason == (
        "all of it; refused: openvino may not run to_double (Cast): OpenVINO deviates from ONNX "
        "on Cast here: the CPU plugin computes float64 as float32 (infinities saturate) "
        "(and 2 more node(s))")


def test_a_pinned_node_refuses_a_proposal_for_another_target(mlp: Model) -> None:
    table = SupportTable.build(mlp, CompilationConfig.create(["onnxruntime"]),
                               pins={mlp.dataflow.names.index("/Erf"): Target("reference")})
    made, records = _judge(mlp, table, Proposal(GELU, "GELU"))
    assert made == [] and records == [
        ("refused", "GELU; refused: onnxruntime may not run /Erf (Erf): it is pinned to "
                    "reference", 0)]


def test_a_non_convex_proposal_is_split_into_convex_parts_or_dropped() -> None:
    model = load_model(diamond())  # a -> (b, c) -> d
    table = _table(model, "onnxruntime")
    made, records = _judge(model, table, Proposal(("a", "b", "d"), "abd"),
                           Proposal(("a", "d"), "ad"))
    assert made == [Candidate(_mask(model, ["a", "b"]), ORT)]
    assert made[0].origin == "test-proposer, split"
    assert records == [
        ("split", "abd; not convex: a path from a leaves it through c and comes back to d", 1),
        ("refused", "ad; refused: not convex: a path from a leaves it through b and comes back "
                    "to d, and no convex part of it has more than one node", 0)]


def test_a_failing_proposer_is_recorded_and_placement_goes_on(mlp: Model) -> None:
    def broken(model: Model, target: Target) -> list[Proposal]:
        raise RuntimeError("no pattern table today")

    table = _table(mlp, "onnxruntime")
    with proposer("broken", "onnxruntime", broken), \
            proposer("odd", "onnxruntime", lambda m, t: "gelu"):  # type: ignore[arg-type,return-value]
        made, records = proposed_candidates(mlp, table)
    assert made == []
    assert [(r.source, r.status, r.reason) for r in records] == [
        ("broken", "refused", "the proposer failed: RuntimeError: no pattern table today"),
        ("odd", "refused", "the proposer returned str, not a list of Proposal")]


# -- determinism and the value itself --------------------------------------------------------
def test_the_same_nodes_in_any_order_make_the_same_candidate(mlp: Model) -> None:
    table = _table(mlp, "onnxruntime")
    forward, _ = _judge(mlp, table, Proposal(GELU, "GELU"))
    backward, backward_records = _judge(mlp, table, Proposal(tuple(reversed(GELU)), "GELU"))
    assert forward == backward and [c.mask for c in forward] == [_mask(mlp, GELU)]
    assert backward_records == [("candidate", "GELU", 1)]
    with proposer("gelu-fusion", "onnxruntime", _gelus):
        first = proposed_candidates(mlp, table)
        second = proposed_candidates(load_model(mlp.proto), table)
    assert first == second and first[1][0].nodes == GELU  # in the model's order


def test_a_proposal_takes_one_name_or_any_iterable_and_refuses_anything_else() -> None:
    assert Proposal("relu", "one").nodes == ("relu",)
    assert Proposal(iter(["a", "b", "a"]), "dup").nodes == ("a", "b")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="names its nodes by their names"):
        Proposal((1, 2), "indices")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="names its nodes by their names"):
        Proposal(7, "int")  # type: ignore[arg-type]


def test_backends_propose_nothing_by_default(mlp: Model) -> None:
    ort = backends.get("onnxruntime")
    assert ort.propose(mlp, ORT) == []
    flow = mlp.dataflow  # and judge a whole model node by node
    assert ort.supports_model(mlp, ORT) == [
        ort.supports(n, mlp.opset, flow.value_types, flow.constants, target=ORT)
        for n in flow.nodes]
    _, records = proposed_candidates(mlp, _table(mlp, "onnxruntime"))
    assert records == ()
