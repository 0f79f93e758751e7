"""The end-to-end race under an objective: percentiles of per-call latency, the throughput
timer, and which rival plan `keep_fastest` keeps for latency, for throughput and under a
latency budget, with the figures remembered apart per objective.

Every plan here is a TEST-ONLY fake (`FakeRunnable`, built by `FakeBuilder`) on a SYNTHETIC
clock: a test of the race's bookkeeping, not of real speed. The clock keeps one timeline per
calling thread, so concurrent callers run side by side, and each fake's calls take forged
times, given per plan for the number of callers raced (a plan whose callers queue is forged
with longer calls)."""

from __future__ import annotations

import functools
import statistics
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tessera._private.timing import percentile, time_throughput
from tessera.backends import TensorSpec
from tessera.backends._threads import ThreadPolicy
from tessera.cli._common import end_to_end_line
from tessera.config import CompilationConfig, Objective
from tessera.errors import ExecutionError
from tessera.ir import Model, load_model
from tessera.placement import CostDB, Plan
from tessera.placement.judge import Rounds, race, race_throughput
from tessera.placement.judge._race import RaceOutcome, keep_fastest
from tessera.placement.record._builder import Built
from tessera.placement.record._plan import Partition
from tessera.placement.record._remembered import latency_key
from tessera.placement.record._rival import Rival

from ..ir.models import mlp
from .context import context, ips_of, timings_of


class CallerClock:
    """SYNTHETIC time with one timeline per calling thread, each from 0 (the throughput
    timer starts a thread per caller for every block, and compares times within a block)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __call__(self) -> float:
        now: float = getattr(self._local, "now", 0.0)
        return now

    def advance(self, seconds: float) -> None:
        self._local.now = self() + seconds


class FakeRunnable:
    """TEST-ONLY stand-in for a built plan: a calling thread's n-th call takes
    `steps[n % len(steps)]` seconds of its own timeline."""

    def __init__(self, clock: CallerClock, steps: Sequence[float]) -> None:
        self.clock, self.steps = clock, tuple(steps)
        self.inputs = [TensorSpec("x", "float32", (2,))]
        self.calls = 0
        self.threads: set[int] = set()
        self.fail_after: int | None = None
        self._lock = threading.Lock()
        self._mine = threading.local()

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            self.threads.add(threading.get_ident())
            if self.fail_after is not None and self.calls > self.fail_after:
                raise ExecutionError("fake plan failed")
        count = getattr(self._mine, "count", 0)
        self._mine.count = count + 1
        self.clock.advance(self.steps[count % len(self.steps)])
        return {}


Speeds = Mapping[int, Mapping[str, Sequence[float]]]  # callers -> plan -> call times


class FakeBuilder:
    """TEST-ONLY builder: a plan 'built' is a FakeRunnable with the call times forged for
    it (named by its partitions' targets, 'onnxruntime + openvino') at the number of callers
    raced; any other plan (a settings variant) is slow."""

    def __init__(self, clock: CallerClock, speeds: Speeds, callers: int) -> None:
        self.clock, self.speeds, self.callers = clock, speeds[callers], callers
        self.built: list[str] = []

    def build(self, model: Model, config: CompilationConfig, plan: Plan) -> Built:
        name = " + ".join(str(p.target) for p in plan.partitions)
        self.built.append(name)
        runnable = FakeRunnable(self.clock, self.speeds.get(name, (2.0 ** -5,)))
        return Built(plan, (None,) * len(plan.partitions), {}, runnable)

    def release(self) -> None:
        """Nothing is kept between builds."""


MODEL = load_model(mlp())
TAIL = (2.0 ** -12,) * 15 + (2.0 ** -7,)  # 0.24 ms a call, and every 16th 7.8 ms
SPEEDS: Speeds = {
    1: {"onnxruntime + openvino": (2.0 ** -9,), "onnxruntime": (2.0 ** -10,),
        "openvino": (2.0 ** -11,)},  # alone, OpenVINO is fastest
    # four callers: ONNX Runtime serves the most, with a tail; OpenVINO's calls queue
    4: {"onnxruntime + openvino": (2.0 ** -8,), "onnxruntime": TAIL, "openvino": (2.0 ** -10,)},
}


def _plan(*targets: str) -> Plan:
    parts = tuple(Partition(t, (f"n{i}",), ("x",) if i == 0 else (f"v{i}",),
                            (f"v{i + 1}",), 0.1) for i, t in enumerate(targets))
    return Plan(parts, "greedy", decisions={"n0": "first in priority"})


SEARCHED = _plan("onnxruntime", "openvino")
KNOWN = {Rival.parse(name): plan for name, plan in (
    ("greedy", _plan("openvino")), ("only onnxruntime", _plan("onnxruntime")),
    ("only openvino", _plan("openvino")))}


def _race(db: CostDB | None = None, **options: Any) -> tuple[RaceOutcome, FakeBuilder]:
    config = CompilationConfig.create("onnxruntime,openvino", **options)
    builder = FakeBuilder(CallerClock(), SPEEDS, config.options.concurrency)
    outcome = keep_fastest(context(MODEL, config, builder=builder, db=db, clock=builder.clock),
                           SEARCHED, KNOWN)
    return outcome, builder


# -- percentiles and the throughput timer --------------------------------------------------
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=50),
       st.floats(0, 100, exclude_min=True), st.floats(0, 100, exclude_min=True))
def test_a_percentile_lies_between_the_samples_and_grows_with_q(
        samples: list[float], q1: float, q2: float) -> None:
    low, high = sorted((q1, q2))
    assert min(samples) <= percentile(samples, low) <= percentile(samples, high) \
        <= max(samples)
    assert percentile(samples, 50) == statistics.median(samples)
    assert percentile(samples, 100) == max(samples)


def test_the_throughput_timer_counts_the_calls_of_every_caller() -> None:
    clock = CallerClock()
    fake = FakeRunnable(clock, (2.0 ** -10,))
    served = time_throughput(functools.partial(fake.run, {}), concurrency=4, warmup=1,
                             min_calls=3, seconds=0.0, clock=clock)
    assert (served.calls, served.concurrency, len(served.latencies_ms)) == (12, 4, 12)
    assert fake.calls == 4 + 12 and len(fake.threads) == 4  # a warm-up call each, then 3
    assert served.per_second == 4 * 1024  # four callers side by side, 1/1024 s a call
    assert set(served.latencies_ms) == {1000 / 1024}

    uneven = FakeRunnable(clock, (2.0 ** -10, 3 * 2.0 ** -10))
    served = time_throughput(functools.partial(uneven.run, {}), concurrency=2, warmup=0,
                             min_calls=1, seconds=2.0 ** -6, clock=clock)
    assert served.calls == 2 * 8  # each caller's calls until 1/64 s passed: 4 pairs
    assert served.per_second == 1024 and served.latency_ms(50) == 2000 / 1024
    assert served.latency_ms(100) == 3000 / 1024


def test_a_caller_that_fails_fails_the_timer_without_hanging_the_others() -> None:
    fake = FakeRunnable(CallerClock(), (2.0 ** -10,))
    fake.fail_after = 5
    with pytest.raises(ExecutionError, match="fake plan failed"):
        time_throughput(functools.partial(fake.run, {}), concurrency=3, warmup=1,
                        min_calls=100, seconds=0.0, clock=fake.clock)


def test_the_throughput_race_ranks_by_inferences_per_second() -> None:
    clock = CallerClock()
    fast, tail = FakeRunnable(clock, (2.0 ** -10,)), FakeRunnable(clock, TAIL)
    served = race_throughput({"fast": fast, "tail": tail}, Rounds(
        rounds=2, seconds=0.05, percentile=99, concurrency=4, clock=clock))
    assert served["fast"].per_second == 4096 and served["fast"].latency_ms == \
        pytest.approx(0.9766)
    assert served["tail"].per_second == pytest.approx(4 * 16 / (47 * 2.0 ** -12), rel=0.02)
    assert served["tail"].latency_ms == pytest.approx(7.8125)  # p99: the tail
    alone = race({"fast": fast, "tail": tail}, Rounds(rounds=1, seconds=0.05, clock=clock))
    assert alone == {"fast": pytest.approx(0.9766), "tail": pytest.approx(0.2441)}


# -- keep_fastest under each objective -----------------------------------------------------
def test_latency_keeps_the_fastest_alone_and_throughput_the_most_served() -> None:
    latency, _ = _race()
    assert str(latency.kept) == "greedy"  # OpenVINO alone: 0.49 ms a call
    assert latency.record.objective == Objective() and ips_of(latency) == {}
    assert latency.plan.stats.race is not None
    assert latency.plan.stats.race.objective == Objective()
    assert not latency.plan.stats.race.throughput_ips

    served, _ = _race(objective="throughput", concurrency=4)
    assert str(served.kept) == "only onnxruntime"
    ips = ips_of(served)
    assert ips["only onnxruntime"] > ips["greedy"] == 4096 > ips["collage"] == 1024
    assert timings_of(served)["greedy"] == pytest.approx(0.9766)  # ms a call, the median
    assert timings_of(served)["only openvino"] == "same plan as greedy"
    raced = served.plan.stats.race
    assert raced is not None and raced.objective == Objective("throughput", 50, 4)
    assert str(raced.kept) == "only onnxruntime"
    assert {str(r): v for r, v in raced.throughput_ips.items()} == ips
    assert served.plan.decisions["n0"].endswith(
        "kept from the only onnxruntime plan, most inferences per second end to end "
        "(throughput at concurrency 4)")
    assert served.searched_ms is None  # calibration compares single calls only
    again = Plan.from_json(served.plan.to_json())
    assert again.stats.race is not None
    assert again.stats.race.objective == raced.objective
    assert again.stats.race.throughput_ips == raced.throughput_ips


def test_a_plan_over_the_latency_budget_is_not_kept() -> None:
    free, _ = _race(objective="throughput", concurrency=4, latency_percentile=99)
    assert str(free.kept) == "only onnxruntime"
    within, _ = _race(objective="throughput", concurrency=4, latency_percentile=99,
                      latency_budget=2)
    assert str(within.kept) == "greedy"  # ONNX Runtime serves more, with a 7.8 ms tail
    assert "most inferences per second" in within.plan.decisions["n0"]
    line = end_to_end_line(within.plan.stats)
    assert line is not None
    assert line.startswith("end to end (throughput at concurrency 4, p99 latency <= 2 ms): "
                           "collage 1024.0/s at 3.906 ms (over the budget), greedy 4096.0/s "
                           "at 0.977 ms, only onnxruntime ")
    assert "at 7.812 ms (over the budget), only openvino: same plan as greedy" in line
    assert line.endswith("; kept greedy")

    none_within, _ = _race(objective="throughput", concurrency=4, latency_percentile=99,
                           latency_budget=0.5)
    assert str(none_within.kept) == "greedy"  # the lowest latency of all, though over
    assert "though over the latency budget" in none_within.plan.decisions["n0"]


def test_a_latency_percentile_names_the_figure_compared() -> None:
    tail, _ = _race(latency_percentile=99)
    assert str(tail.kept) == "greedy" and tail.searched_ms is None
    line = end_to_end_line(tail.plan.stats)
    assert line is not None and line.startswith("end to end (p99 latency): collage ")
    median, _ = _race()
    assert median.searched_ms == timings_of(median)["collage"] == pytest.approx(1.9531)
    line = end_to_end_line(median.plan.stats)
    assert line is not None and line.startswith("end to end (median latency): collage 1.953 ms")


# -- remembered figures --------------------------------------------------------------------
def test_latency_keys_differ_per_objective_percentile_and_concurrency() -> None:
    plan, policy = _plan("onnxruntime"), ThreadPolicy("native", 4)
    objectives = [Objective(), Objective(percentile=99), Objective(concurrency=2),
                  Objective("throughput", 50, 2), Objective("throughput", 99, 2),
                  Objective("throughput", 50, 4)]
    latency = [latency_key(MODEL, plan, policy, o.figure_key("latency")) for o in objectives]
    assert len(set(latency)) == len(objectives)
    served = [latency_key(MODEL, plan, policy, o.figure_key("throughput"))
              for o in objectives if o.throughput]
    assert len(set(served)) == 2 and not set(served) & set(latency)
    # inferences per second do not depend on the percentile, nor anything on the budget
    assert served[0] == served[1]
    assert Objective("throughput", 50, 2, 5.0).figure_key("latency") == \
        Objective("throughput", 50, 2).figure_key("latency")


def test_a_warm_race_recalls_the_figures_of_its_own_objective_only(tmp_path: Path) -> None:
    db = CostDB(tmp_path / "costs.sqlite")
    cold, builder = _race(db, objective="throughput", concurrency=4)
    assert "onnxruntime" in builder.built  # every rival built and timed
    warm, builder = _race(db, objective="throughput", concurrency=4)
    assert builder.built == [] and warm.built is None
    assert ips_of(warm) == ips_of(cold) and timings_of(warm) == timings_of(cold)
    assert str(warm.kept) == str(cold.kept)
    latency, builder = _race(db)  # a latency race never reads throughput figures
    assert "onnxruntime" in builder.built and str(latency.kept) == "greedy"
