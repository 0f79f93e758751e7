"""The end-to-end race of rival plans: which single-target plans enter it, and how it times
them (blocks in rounds). The workload and the clock are SYNTHETIC: a test of the race's
bookkeeping, not of real speed; each run advances the clock by its plan's latency."""

from __future__ import annotations

from typing import Any

from tessera.backends import TensorSpec
from tessera.placement import Plan
from tessera.placement.judge import Rounds, race
from tessera.placement.judge._race import rival_plans
from tessera.placement.record._plan import Partition
from tessera.placement.record._rival import GREEDY, Rival
from tessera.target import Target


def _only(target: str) -> Rival:
    return Rival.single(Target(target))


def _plan(target: str, ms: float | None) -> Plan:
    return Plan((Partition(target, ("a", "b"), ("x",), ("y",), ms),), "greedy")


def test_single_plans_modelled_near_the_best_are_raced_too() -> None:
    known = {GREEDY: _plan("onnxruntime", 100.0),
             _only("openvino"): _plan("openvino", 110.0),  # within 15% of the best single
             _only("onnxruntime"): _plan("onnxruntime", 100.0),
             _only("torch"): _plan("torch", 130.0)}  # too slow to be worth timing
    rivals = rival_plans(_plan("openvino", 104.0), known)
    assert [str(r) for r in rivals] == ["collage", "greedy", "only onnxruntime",
                                        "only openvino"]


def test_at_most_three_single_plans_and_failed_ones_last() -> None:
    known = {GREEDY: _plan("onnxruntime", 1.0),
             **{_only(f"onnxruntime -num-threads={i + 1}"): _plan(
                 f"onnxruntime -num-threads={i + 1}", 1.0 + i / 100) for i in range(5)},
             _only("torch"): _plan("torch", None)}
    assert [str(r) for r in list(rival_plans(_plan("onnxruntime", 1.0), known))[2:]] == [
        f"only onnxruntime -num-threads={i}" for i in (1, 2, 3)]


class _Clock:
    """SYNTHETIC time: it moves only when a stand-in plan runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CLOCK = _Clock()


class _Sleeper:
    """A stand-in compiled model whose run takes a fixed (synthetic) time and counts its
    calls."""

    def __init__(self, seconds: float, shape: tuple[int, ...] | None = (2,)) -> None:
        self.seconds, self.calls = seconds, []
        self.inputs = [TensorSpec("x", "float32", shape)]

    first_calls_slow = 0  # these first calls take 4x as long (other work on the machine)

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(CLOCK.now)
        slowed = len(self.calls) <= self.first_calls_slow
        CLOCK.now += self.seconds * (4 if slowed else 1)
        return {}


def test_the_race_times_blocks_in_rounds_and_ranks_by_latency() -> None:
    fast, slow = _Sleeper(0.002), _Sleeper(0.006)
    timings = race({"fast": fast, "slow": slow}, Rounds(rounds=3, seconds=0.02, clock=CLOCK))
    assert timings == {"fast": 2.0, "slow": 6.0}
    # blocks: in each round every call of one plan comes before any of the next one's
    rounds = []
    for start, end in zip(fast.calls, fast.calls[1:], strict=False):
        between = [t for t in slow.calls if start < t < end]
        if between:
            rounds.append(len(between))
    assert len(rounds) == 2  # the slow plan's blocks sit between the fast one's rounds


def test_a_close_race_gets_more_rounds_and_a_slowed_block_is_not_held_against_a_plan(
) -> None:
    far, slow = _Sleeper(0.002), _Sleeper(0.006)
    race({"far": far, "slow": slow}, Rounds(rounds=3, seconds=0.0, clock=CLOCK))
    assert len(far.calls) == 4 + 3 + 3  # warm-up 2 then 1, 2 runs each
    assert len(slow.calls) == 4 + 3  # 3x the fastest after two rounds: timed no more
    far, slow = _Sleeper(0.002), _Sleeper(0.006)
    race({"far": far, "slow": slow}, Rounds(rounds=3, seconds=0.0, clock=CLOCK, far=None))
    assert len(far.calls) == len(slow.calls) == 4 + 3 + 3

    # "interrupted" is as fast as "steady" but other work slowed its whole first block
    steady, interrupted = _Sleeper(0.003), _Sleeper(0.003)
    interrupted.first_calls_slow = 4  # its first block 4x: two blocks each before a drop
    timings = race({"steady": steady, "interrupted": interrupted},
                   Rounds(rounds=3, seconds=0.0, clock=CLOCK))
    assert len(steady.calls) == len(interrupted.calls) == 4 + 3 * 4  # close: two more rounds
    assert timings["interrupted"] == 3.0  # its quiet blocks count, not the slowed one


def test_a_plan_without_static_inputs_is_never_fastest() -> None:
    dynamic = _Sleeper(0.0, shape=None)
    timings = race({"dynamic": dynamic, "static": _Sleeper(0.001)},
                   Rounds(rounds=1, seconds=0.0, clock=CLOCK))
    assert timings["dynamic"] == float("inf") and not dynamic.calls
    assert timings["static"] == 1.0

