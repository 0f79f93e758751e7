"""The race of a model whose rivals' builds would not fit in memory at once: two at a time,
each rival against the best so far, the loser's build dropped before the next is built.

The plans are the TEST-ONLY fakes of test_race_objective (`FakeRunnable`) on its SYNTHETIC
clock: a test of the race's bookkeeping, not of real speed."""

from __future__ import annotations

import weakref
from typing import Any

from tessera.config import CompilationConfig
from tessera.ir import Model, load_model
from tessera.placement.judge._race import keep_fastest
from tessera.placement.record._builder import Built
from tessera.placement.record._plan import Plan

from ..ir.models import mlp
from .context import context, timings_of
from .test_race_objective import KNOWN, SEARCHED, SPEEDS, CallerClock, FakeBuilder

MODEL = load_model(mlp(hidden=64))  # a weights file of 3 KiB
assert MODEL.weights is not None
ONE = MODEL.weights.size  # a budget one build's weights fit in, two do not


class CountingBuilder(FakeBuilder):
    """A FakeBuilder that counts the builds alive at once (a build lives while anything
    holds its runnable)."""

    def __init__(self) -> None:
        super().__init__(CallerClock(), SPEEDS, 1)
        self.alive = 0
        self.most_alive = 0

    def build(self, model: Model, config: CompilationConfig, plan: Plan) -> Built:
        built = super().build(model, config, plan)
        self.alive += 1
        self.most_alive = max(self.most_alive, self.alive)
        weakref.finalize(built.runnable, self._gone)
        return built

    def _gone(self) -> None:
        self.alive -= 1


def _race(memory_bytes: int) -> tuple[Any, CountingBuilder]:
    config = CompilationConfig.create("onnxruntime,openvino")
    builder = CountingBuilder()
    outcome = keep_fastest(context(MODEL, config, builder=builder, clock=builder.clock),
                           SEARCHED, KNOWN, memory_bytes=memory_bytes)
    return outcome, builder


def test_rivals_too_large_for_memory_race_two_at_a_time() -> None:
    assert MODEL.weights is not None and MODEL.weights.size > 0
    everything, together = _race(memory_bytes=1 << 40)
    bounded, in_duels = _race(memory_bytes=ONE)
    # the same rivals built, and the same plan kept with its build
    assert in_duels.built == together.built and len(in_duels.built) == 4
    assert together.most_alive == 4 and in_duels.most_alive == 2
    assert str(bounded.kept) == str(everything.kept) == "greedy"  # OpenVINO alone is fastest
    assert bounded.built is not None and bounded.built.plan == bounded.plan
    assert in_duels.alive == 1  # only the kept build is left
    # every rival has its figure, and the plan says which was kept
    timings = timings_of(bounded)
    assert timings["only openvino"] == "same plan as greedy"
    assert all(isinstance(timings[n], float) for n in timings if n != "only openvino")
    assert timings["greedy"] == min(t for t in timings.values() if isinstance(t, float))
    assert bounded.plan.stats.race is not None
    assert str(bounded.plan.stats.race.kept) == "greedy"


def test_a_rival_that_fails_to_build_drops_out_of_the_duels() -> None:
    class Failing(CountingBuilder):
        def build(self, model: Model, config: CompilationConfig, plan: Plan) -> Built:
            if len(plan.partitions) == 2:  # the searched plan fails
                self.built.append("failed")
                return Built(plan, (None, None), {0: "compile failed: boom"}, None)
            return super().build(model, config, plan)

    config = CompilationConfig.create("onnxruntime,openvino")
    builder = Failing()
    outcome = keep_fastest(context(MODEL, config, builder=builder, clock=builder.clock),
                           SEARCHED, KNOWN, memory_bytes=ONE)
    assert timings_of(outcome)["collage"] == "failed to build: compile failed: boom"
    assert str(outcome.kept) == "greedy" and builder.most_alive == 2


def test_rivals_whose_weights_alone_exceed_the_budget_are_built_one_at_a_time() -> None:
    everything, together = _race(memory_bytes=1 << 40)
    alone, solo = _race(memory_bytes=0)
    assert solo.most_alive == 1  # never two builds at once
    assert str(alone.kept) == str(everything.kept) == "greedy"
    assert alone.built is not None and alone.built.plan == alone.plan
    assert solo.alive == 1  # the winner's build, and nothing else
    # each rival built once to be timed, and the winner (not the last built) once more
    assert solo.built[:4] == together.built == [
        "onnxruntime + openvino", "openvino", "onnxruntime",
        "onnxruntime -execution-mode=parallel"]
    assert solo.built[4:] == ["openvino"]  # greedy: OpenVINO alone
    timings = timings_of(alone)
    assert all(isinstance(timings[n], float) for n in timings if n != "only openvino")
    assert timings["greedy"] == min(t for t in timings.values() if isinstance(t, float))
