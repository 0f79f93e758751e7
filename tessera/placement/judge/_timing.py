"""Timing whole runnable plans against each other, under an objective. A plan runs alone for
a block, so that another backend's spinning pool never slows its runs, and rounds of blocks
give every plan its share of the quiet moments: on a shared machine other work only ever
slows a block (blocks of one plan swung between 14 and 28 ms here), so a plan's quietest
block is the fairest to compare. The rounds are `tessera._private.timing.in_rounds`, which
`bench/` times with too."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tessera._private.timing import Clock, in_rounds, time_samples, time_throughput
from tessera._private.timing import percentile as percentile_of
from tessera.backends import random_inputs
from tessera.config import Objective
from tessera.ir import Model
from tessera.placement.measure._points import Points
from tessera.placement.record._builder import Runnable
from tessera.placement.record._phase import Phase
from tessera.placement.record._progress import ProgressLike, Reporter

CLOSE = 0.05  # a race this close gets more rounds
# a plan this many times slower than the fastest after two rounds is timed no more: blocks
# of one plan swing up to 2x on a shared machine, so past that more blocks would not change
# the winner (MobileNetV2: its bf16 and f16 forms, 3x its int8 ones, took a third of a race)
FAR = 2.0
PointShapes = Sequence[tuple[Mapping[str, Sequence[int]], float]]  # (input shapes, weight)
_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True)
class Rounds:
    """How plans are timed against each other: `rounds` rounds of one block of `seconds`
    per plan, a plan over `far` times the fastest after two rounds timed no more,
    `extra_rounds` more rounds of the plans within `close` of the fastest when the two
    fastest are that close; per call, the
    latency at `percentile`, with `concurrency` callers at once; at each of `points` (the
    input shapes of a shape profile's points, and their weights; None: the plan's own)."""

    rounds: int = 3
    seconds: float = 0.3
    close: float = CLOSE
    extra_rounds: int = 2
    far: float | None = FAR
    percentile: float = 50
    concurrency: int = 1
    clock: Clock = time.perf_counter
    points: PointShapes | None = None

    @classmethod
    def under(cls, objective: Objective, clock: Clock = time.perf_counter,
              points: PointShapes | None = None) -> Rounds:
        return cls(percentile=objective.percentile, concurrency=objective.concurrency,
                   clock=clock, points=points)

    @property
    def weights(self) -> list[float]:
        if not self.points:
            return [1.0]
        total = sum(w for _, w in self.points)
        return [w / total for _, w in self.points]


@dataclass(frozen=True)
class Served:
    """A plan's end-to-end throughput: the most inferences per second of its blocks, and
    the lowest latency per call (at the percentile) of its blocks."""

    per_second: float
    latency_ms: float


@dataclass(frozen=True)
class Figures(Generic[_K]):
    """Each plan's latency (ms) and, under a throughput objective, inferences per second."""

    latency_ms: Mapping[_K, float]
    per_second: Mapping[_K, float] = field(default_factory=dict)

    def cost(self, objective: Objective) -> dict[_K, float]:
        """Each plan's figure under the objective, lower is better: its latency, or under
        throughput the milliseconds per inference its callers achieve together (infinite
        over the latency budget, or where it could not be timed)."""
        if not objective.throughput:
            return dict(self.latency_ms)
        budget = objective.latency_budget_ms
        return {k: (math.inf if rate <= 0 or (budget is not None and self.latency_ms[k] >
                                               budget) else round(1000.0 / rate, 4))
                for k, rate in self.per_second.items()}


def timed(runnables: Mapping[_K, Runnable], objective: Objective, how: Rounds,
          progress: ProgressLike | None = None) -> Figures[_K]:
    """The runnables timed under `objective`: latency, or throughput from its callers."""
    if not objective.throughput:
        return Figures(race(runnables, how, progress))
    served = race_throughput(runnables, how, progress)
    return Figures({k: s.latency_ms for k, s in served.items()},
                   {k: s.per_second for k, s in served.items()})


def race(compiled: Mapping[_K, Runnable], how: Rounds = Rounds(),
         progress: ProgressLike | None = None) -> dict[_K, float]:
    """Each compiled plan's latency (ms): the lowest of its blocks' percentile of per-call
    latencies. With concurrency > 1, that many threads call the plan at once in each block,
    and every call's latency counts. At several points, a block times each point in turn
    and its figure is the points' weighted mean."""
    feeds = _feeds(compiled, how.points)

    def block(key: _K, first: bool) -> float:
        total = 0.0
        for feed, weight in zip(feeds[key], how.weights, strict=True):
            run = functools.partial(compiled[key].run, feed)
            warmup, share = (2 if first else 1), how.seconds / len(how.weights)
            if how.concurrency == 1:
                ms = percentile_of(time_samples(run, warmup=warmup, min_runs=2, seconds=share,
                                                clock=how.clock), how.percentile)
            else:
                ms = time_throughput(run, concurrency=how.concurrency, warmup=warmup,
                                     min_calls=2, seconds=share,
                                     clock=how.clock).latency_ms(how.percentile)
            total += weight * ms
        return total

    blocks = _rounds(list(feeds), block, lambda ms: ms, how, Reporter.of(progress))
    return {k: (round(min(blocks[k]), 4) if blocks.get(k) else math.inf) for k in compiled}


def race_throughput(compiled: Mapping[_K, Runnable], how: Rounds,
                    progress: ProgressLike | None = None) -> dict[_K, Served]:
    """Each compiled plan's throughput with `how.concurrency` threads calling it at once in
    a loop, in blocks and rounds as `race` times latency: the most inferences per second of
    its blocks, and the lowest latency per call at the percentile. A plan without static
    input shapes serves nothing. At several points, a block serves each point in turn: its
    inferences per second are the inverse of the points' weighted mean time per inference."""
    feeds = _feeds(compiled, how.points)

    def block(key: _K, first: bool) -> tuple[float, float]:
        per_inference = latency = 0.0
        for feed, weight in zip(feeds[key], how.weights, strict=True):
            served = time_throughput(functools.partial(compiled[key].run, feed),
                                     concurrency=how.concurrency, warmup=2 if first else 1,
                                     min_calls=2, seconds=how.seconds / len(how.weights),
                                     clock=how.clock)
            if served.per_second <= 0:
                return 0.0, math.inf
            per_inference += weight / served.per_second
            latency += weight * served.latency_ms(how.percentile)
        return 1.0 / per_inference, latency

    blocks = _rounds(list(feeds), block, lambda b: 1 / b[0] if b[0] > 0 else math.inf, how,
                     Reporter.of(progress))
    return {k: (Served(round(max(b[0] for b in blocks[k]), 2),
                       round(min(b[1] for b in blocks[k]), 4))
                if blocks.get(k) else Served(0.0, math.inf)) for k in compiled}


def point_shapes(model: Model, points: Points) -> PointShapes | None:
    """The model's input shapes at each point of a dynamic model's profile, weighted."""
    if not points.dynamic:
        return None
    return [(points.shapes(i, model.input_names), w) for i, w in enumerate(points.weights)]


def _feeds(compiled: Mapping[_K, Runnable], points: PointShapes | None
           ) -> dict[_K, list[dict[str, Any]]]:
    """Each plan's inputs at each point (one point, its own shapes, without `points`); a
    plan with an input no point gives a shape is left out."""
    feeds: dict[_K, list[dict[str, Any]]] = {}
    for key, c in compiled.items():
        at = [random_inputs(c, shapes=shapes) for shapes, _ in (points or [({}, 1.0)])]
        if all(f is not None for f in at):
            feeds[key] = [f for f in at if f is not None]
    return feeds


_B = TypeVar("_B")


def _rounds(keys: list[_K], block: Callable[[_K, bool], _B], cost: Callable[[_B], float],
            how: Rounds, report: Reporter) -> dict[_K, list[_B]]:
    """The shared round timer, reporting each block as a step of the race."""

    def recount(added: int, why: str) -> None:
        done, total = report.counted(Phase.RACE)
        report.step(Phase.RACE, done, (total or 0) + added, why)

    blocks: dict[_K, list[_B]] = in_rounds(
        keys, block, cost, how.rounds, how.close, how.extra_rounds, far=how.far,
        on_start=lambda total: report.begin(Phase.RACE, total),
        on_block=lambda key: report.advance(Phase.RACE, str(key)),
        on_extra=lambda added: recount(added, "close: more rounds"),
        on_drop=lambda dropped: recount(-dropped, f"over {how.far:g}x the fastest: "
                                                  "timed no more"))
    return blocks


__all__ = ["CLOSE", "FAR", "Figures", "PointShapes", "Rounds", "Served", "point_shapes", "race",
           "race_throughput", "timed"]
