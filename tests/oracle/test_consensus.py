"""The consensus oracle: the majority of independent implementations decides; with no
majority the verdict is undecided and names who said what; the guard bans only where the
consensus is against a backend, narrowed to the smallest subgraph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import backends
from tessera.backends import Backend, Compiled, Support
from tessera.oracle import Oracle, Voter, answers, judge

from ..registering import registered


def _softmax9(channels: int = 100) -> onnx.ModelProto:
    """Conv 1x1 -> Relu -> Softmax at opset 9, the shape of SqueezeNet's head."""
    rng = np.random.default_rng(0)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [channels, 16, 1, 1],
                                rng.standard_normal((channels, 16, 1, 1)).astype(np.float32)
                                .ravel().tolist())
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax")]
    graph = helper.make_graph(nodes, "head",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 16, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, channels, 1, 1])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    return model


@pytest.fixture
def unfixed_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx.reference as it ships: opset 13's Softmax at every version."""
    monkeypatch.setattr("tessera.backends._reference_fixes.fixes_for", lambda opset: [])


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 16, 1, 1)).astype(np.float32)}


def test_the_majority_outvotes_a_wrong_reference(unfixed_reference: None) -> None:
    truth = Oracle().truth(_softmax9(), [_feeds()])
    assert truth.decided
    assert "onnx.reference" not in truth.majority
    assert truth.majority[0] == "onnxruntime (no graph optimisations)"
    assert [voter for voter, _ in truth.dissent] == ["onnx.reference"]
    assert float(np.asarray(truth.answers[0]["y"]).max()) < 0.9  # type: ignore[index]


def test_two_agreeing_voters_decide_without_a_third() -> None:
    truth = Oracle().truth(_softmax9(), [_feeds()])
    assert truth.majority == ("onnxruntime (no graph optimisations)", "onnx.reference")
    assert len(truth.votes) == 2


class ScaledBackend(Backend):
    """TEST-ONLY fake backend: onnx.reference's answer times `factor`."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def supports(self, node, opset, types=None, constants=None,  # type: ignore[no-untyped-def]
                 *, target=None):
        return Support(True, "test fake runs every op")

    def _compile(self, submodel, target):  # type: ignore[no-untyped-def]
        ref = backends.get("reference").compile(submodel, check=False)
        factor = self.factor

        class Run(Compiled):
            def _run(self, feeds):  # type: ignore[no-untyped-def]
                return {k: v * factor for k, v in ref.run(feeds).items()}
        return Run(self.name, submodel, target)


def test_no_majority_is_undecided_and_names_who_said_what() -> None:
    with registered("test-double", ScaledBackend(2.0)), \
            registered("test-triple", ScaledBackend(3.0)):
        oracle = Oracle(voters=(Voter("reference", "reference"), Voter("doubled", "test-double"),
                                Voter("tripled", "test-triple")))
        truth = oracle.truth(_softmax9(), [_feeds()])
        assert not truth.decided and truth.answers is None
        said = truth.who_said_what()
        for voter in ("reference", "doubled", "tripled"):
            assert f"{voter}: agrees with no other" in said
        got = backends.get("reference").compile(_softmax9(), check=False).run(_feeds())
        verdict = judge("reference", [got], truth)
        assert verdict.status == "undecided" and verdict.why == ""
        # an answer that sides with none of them: still no majority against it, and said so
        alone = judge("quintupled", [{k: v * 5 for k, v in got.items()}], truth)
        assert alone.status == "undecided" and not alone.disagreed
        assert alone.untrusted and not verdict.untrusted  # the guard trusts a shared answer
        assert "agrees with none of reference, doubled, tripled" in alone.why
        assert "undecided" in str(verdict) and "tripled" in str(verdict)
        # where no majority exists, an answer is never silently one of them
        picked = answers(_softmax9(), [_feeds()], oracle)
        assert picked.judges.startswith("reference alone (no majority: ")


def test_a_partition_stays_on_openvino_although_the_reference_disagrees(
        unfixed_reference: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openvino")
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path))
    compiled = tessera.compile(_softmax9(), "openvino", partitioner="greedy")
    assert [(p.target.kind.name, p.nodes) for p in compiled.plan.partitions] == \
        [("openvino", ("conv", "relu", "softmax"))]
    guard = compiled.plan.stats.guard
    assert compiled.plan.stats.guard_passed and guard is not None
    seen = guard.disagreements
    assert seen and seen[0].implementation == "onnx.reference"
    assert "Softmax" in seen[0].ops and seen[0].opset == 9
    want = answers(_softmax9(), [_feeds()]).outputs[0]["y"]
    np.testing.assert_allclose(compiled.run(_feeds())["y"], want, rtol=1e-4, atol=1e-6)


def test_bans_that_make_the_plan_slower_say_so_with_their_evidence() -> None:
    from tessera.oracle import Disagreement
    from tessera.placement import Plan
    from tessera.placement._driver import _ban_cost, _kept_time
    from tessera.placement.record import RaceRecord, SearchStats, Timing
    from tessera.placement.record._rival import GREEDY, SEARCHED

    def raced(searched: float, greedy: float | None = None) -> Plan:
        timings = {SEARCHED: Timing.measured(searched)}
        if greedy is not None:
            timings[GREEDY] = Timing.measured(greedy)
        return Plan((), "collage", stats=SearchStats(race=RaceRecord(timings, SEARCHED)))

    evidence = Disagreement("openvino", ("Softmax",), 11, ("sm",), (("x", (1, 4, 4)),),
                            "output 'y' differs", "onnxruntime and onnx.reference")
    banned, slower, same = raced(1.0, greedy=1.4), raced(1.5), raced(1.01)
    before = _kept_time(banned)
    assert before is not None and str(before[0]) == "collage" and before[1] == 1.0
    cost = _ban_cost(before, slower, [evidence])
    assert cost is not None and cost.startswith("the numeric guard's bans cost 0.500 ms")
    assert "the fastest plan before them (collage) 1.000 ms" in cost
    assert "openvino on Softmax (opset 11" in cost
    assert _ban_cost(before, same, [evidence]) is None  # within noise: nothing to say
    assert _ban_cost(None, slower, [evidence]) is None  # no race before the bans


def test_sequence_and_optional_outputs_are_compared_element_by_element() -> None:
    from tessera._private.numeric import agree

    a = [np.ones(3, np.float32), np.zeros(2, np.float32)]
    assert agree({"s": a}, {"s": [x.copy() for x in a]}).ok
    off = agree({"s": [a[0], a[1] + 1]}, {"s": a})
    assert not off.ok and "(element 1)" in off.why
    assert not agree({"s": a[:1]}, {"s": a}).ok  # a different length
    assert not agree({"s": a[0]}, {"s": a}).ok  # a tensor where a sequence is expected
    assert agree({"o": None}, {"o": None}).ok  # an empty optional on both sides
