"""Priority order, the order a config lists its targets in: greedy placement's order, and,
under Collage and in the end-to-end race, the tie-break within noise (a tie goes to the
earlier-listed target). Collage and race costs here are FAKE (`fake_costs`, and the race's
`FakeBuilder` on a synthetic clock): tests of the search's and the race's bookkeeping, not of
real speed; the greedy tests ask the real backends."""

from __future__ import annotations

import pytest

import tessera
from tessera import backends
from tessera.ir import NodeSet, load_model
from tessera.placement.judge._race import keep_fastest
from tessera.placement.measure import FunctionMeasurer
from tessera.placement.record import Cost
from tessera.placement.record._rival import SEARCHED, Rival
from tessera.placement.search import SupportTable, place_collage
from tessera.placement.search._priority import TIE, tie_broken, within_noise
from tessera.target import Target

from ..ir.models import mlp
from .context import context
from .test_race_objective import CallerClock, FakeBuilder, _plan

BOTH = all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino"))
MODEL = load_model(mlp())


def _targets(plan: tessera.placement.Plan) -> dict[str, str]:
    return {n: str(p.target) for p in plan.partitions for n in p.nodes}


# -- greedy --------------------------------------------------------------------------------
@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
@pytest.mark.parametrize("order", [["onnxruntime", "openvino"], ["openvino", "onnxruntime"]])
def test_greedy_gives_every_node_to_the_first_listed_target_that_runs_it(order: list[str]
                                                                         ) -> None:
    plan = tessera.partition(mlp(), ",".join(order), partitioner="greedy")
    assert set(_targets(plan).values()) == {order[0]}
    assert plan.decisions["relu"] == (f"greedy: {order[0]} is the first target in priority "
                                      "order that runs it")


# -- the tie-break rule ----------------------------------------------------------------------
def test_within_noise_is_at_most_tie_slower() -> None:
    assert TIE == 0.05
    assert within_noise(1.0, 1.0) and within_noise(1.04, 1.0) and within_noise(0.5, 1.0)
    assert not within_noise(1.06, 1.0)


def test_a_later_target_keeps_a_node_set_only_when_faster_beyond_noise() -> None:
    a, b, c = Target("onnxruntime"), Target("openvino"), Target("torch")
    fake = [(0b01, b, 0.97, "b:01"), (0b01, a, 1.00, "a:01"), (0b01, c, 0.90, "c:01"),
            (0b10, b, 0.90, "b:10"), (0b10, a, 1.00, "a:10"), (0b11, c, 2.0, "c:11")]
    assert tie_broken(fake, [a, b, c]) == ["a:01", "c:01", "b:10", "a:10", "c:11"]
    # listed the other way round, the tie on 0b01 goes to openvino
    assert tie_broken(fake, [b, a, c]) == ["b:01", "c:01", "b:10", "c:11"]


# -- Collage ---------------------------------------------------------------------------------
def fake_costs(per_node: dict[str, float]):  # type: ignore[no-untyped-def]
    """FAKE measurer: any node set costs its size times its target's per-node figure."""
    def cost(model: object, mask: NodeSet, target: Target) -> Cost:
        return Cost(per_node[str(target)] * bin(mask).count("1"), 0.0, 1)
    return cost


def _collage(targets: str, per_node: dict[str, float]) -> tessera.placement.Plan:
    config = tessera.CompilationConfig.create(targets)
    ctx = context(MODEL, config, measurer=FunctionMeasurer(fake_costs(per_node)))
    plan, _ = place_collage(ctx, SupportTable.build(MODEL, config))
    return plan


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_collage_gives_a_tie_within_noise_to_the_earlier_listed_target() -> None:
    close = {"onnxruntime": 1.0, "openvino": 0.97}  # openvino 3% faster: within noise
    plan = _collage("onnxruntime,openvino", close)
    assert set(_targets(plan).values()) == {"onnxruntime"}
    assert ("; openvino is 0.180 ms faster on these nodes alone, within noise (5%): the "
            "earlier-listed target keeps them") in plan.decisions["relu"]
    assert plan.stats.cover is not None and plan.stats.cover.modelled_ms == pytest.approx(6.0)
    assert set(_targets(_collage("openvino,onnxruntime", close)).values()) == {"openvino"}


@pytest.mark.skipif(not BOTH, reason="needs onnxruntime and openvino")
def test_collage_takes_a_later_target_faster_beyond_noise() -> None:
    plan = _collage("onnxruntime,openvino", {"onnxruntime": 1.0, "openvino": 0.9})
    assert set(_targets(plan).values()) == {"openvino"}
    assert "; cheaper than onnxruntime by 0.600 ms" in plan.decisions["relu"]


# -- the end-to-end race ---------------------------------------------------------------------
def _race(targets: str, onnxruntime_s: float, openvino_s: float) -> str:
    """Which rival the race keeps; FAKE plans whose calls take the given (synthetic) time."""
    clock = CallerClock()
    speeds = {1: {"onnxruntime": (onnxruntime_s,), "openvino": (openvino_s,),
                  "onnxruntime + openvino": (0.02,)}}
    known = {Rival.parse(name): plan for name, plan in (
        ("greedy", _plan(targets.split(",")[0])), ("only onnxruntime", _plan("onnxruntime")),
        ("only openvino", _plan("openvino")))}
    config = tessera.CompilationConfig.create(targets)
    ctx = context(MODEL, config, builder=FakeBuilder(clock, speeds, 1), clock=clock)
    outcome = keep_fastest(ctx, _plan("onnxruntime", "openvino"), known)
    if outcome.kept != SEARCHED:
        assert outcome.plan.decisions["n0"].startswith("first in priority; kept from the ")
    return f"{outcome.kept}: {outcome.plan.decisions['n0']}"


def test_the_race_gives_a_tie_within_noise_to_the_earlier_listed_target() -> None:
    kept = _race("onnxruntime,openvino", 0.0100, 0.0099)
    assert kept == ("greedy: first in priority; kept from the greedy plan, faster end to end, "
                    "within noise (2%) of only openvino, whose target is listed later")
    assert _race("openvino,onnxruntime", 0.0100, 0.0099).startswith("greedy: ")
    assert _race("onnxruntime,openvino", 0.0100, 0.0097) == (  # 3% faster: a gain
        "only openvino: first in priority; kept from the only openvino plan, faster end to "
        "end")
