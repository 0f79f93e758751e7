"""The end-to-end race: the searched plan, the greedy plan and the single-target plans
modelled close to the best (with variants of their runtime settings, `_settings`) are built
and timed whole, and the best under the objective is kept (`_objective`: a percentile of
per-call latency, or inferences per second from several callers at once). The search's
cost model sums partitions measured alone; the race checks that sum against the chain, so a
compile never hands out a plan worse than those rivals, within the noise of the timing."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tessera._private.memory import trim
from tessera._private.text import first_line
from tessera._private.timing import Clock, time_samples, time_throughput
from tessera._private.timing import percentile as percentile_of
from tessera.backends._inputs import random_inputs
from tessera.backends._threads import ThreadPolicy
from tessera.config import CompilationConfig
from tessera.config._objective import Objective
from tessera.ir import Model
from tessera.placement.measure._points import Points
from tessera.placement.record._builder import Builder, Built, Runnable
from tessera.placement.record._costdb import CostDB
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import GREEDY_RIVAL, Plan
from tessera.placement.record._progress import ProgressLike, Reporter
from tessera.placement.record._remembered import latency_key
from tessera.placement.record._stats import Timing
from tessera.placement.search._priority import RACE_TIE, within_noise
from tessera.placement.search._regions import NEAR_SINGLE
from tessera.placement.search._settings import settings_base, with_setting_variants

# Two backends often run a whole model within a few percent of each other (BERT-base:
# OpenVINO 141 ms, ONNX Runtime 146 ms), closer than the costs summed from partitions can
# tell apart: every single-target plan modelled that close to the best is raced as well.
MAX_SINGLES = 3
CLOSE = 0.05  # a race this close gets more rounds
# Each build of a rival holds its backends' own copies of the weights (GPT-2-small: 0.5 GB
# on ONNX Runtime, 1.2 GB on OpenVINO with its mapped file): where every rival's build at
# once would hold more weights than this, they race two at a time (`_Duels`)
RACE_MEMORY_BYTES = 1 << 30
SEARCHED = "collage"  # the searched plan's name among the rivals
_B = TypeVar("_B")


@dataclass(frozen=True)
class RaceOutcome:
    """The plan kept, its build when the race built it, and every rival's timing: `timings`
    holds the latency at the objective's percentile and concurrency (or why a rival was not
    timed), and with objective=throughput, `throughput_ips` the inferences per second."""

    plan: Plan
    built: Built | None
    kept: str
    timings: Mapping[str, Timing]
    objective: Objective = field(default_factory=Objective)
    throughput_ips: Mapping[str, float] = field(default_factory=dict)

    @property
    def searched_ms(self) -> float | None:
        """The searched plan's latency, where it is the figure its partitions' costs are
        measured in (the median of single calls): what calibration compares them with."""
        timing = self.timings.get(SEARCHED)
        return timing if isinstance(timing, float) and self.objective.single_call_median \
            else None


@dataclass(frozen=True)
class Served:
    """A plan's end-to-end throughput: the most inferences per second of its blocks, and
    the lowest latency per call (at the percentile) of its blocks."""

    per_second: float
    latency_ms: float


def rival_plans(searched: Plan, known: Mapping[str, Plan]) -> dict[str, Plan]:
    """The plans to race end to end: the searched plan, greedy, and the single-target plans
    modelled within `NEAR_SINGLE` of the best of them (at most `MAX_SINGLES`)."""
    rivals = {SEARCHED: searched, GREEDY_RIVAL: known[GREEDY_RIVAL]}
    # the known plans are greedy's and one per single target (`known_plans`)
    singles = sorted((n for n in known if n != GREEDY_RIVAL),
                     key=lambda n: (_modelled(known[n]), n))
    if singles:
        best = _modelled(known[singles[0]])
        for name in singles[:MAX_SINGLES]:
            if name == singles[0] or _modelled(known[name]) <= best * NEAR_SINGLE:
                rivals[name] = known[name]
    return rivals


def keep_fastest(model: Model, config: CompilationConfig, searched: Plan,
                 known: Mapping[str, Plan], builder: Builder, db: CostDB | None = None,
                 clock: Clock = time.perf_counter, points: Points | None = None,
                 memory_bytes: int = RACE_MEMORY_BYTES,
                 progress: ProgressLike | None = None) -> RaceOutcome:
    """Time the rival plans end to end and keep the best under the config's objective (at
    every point of a shape profile, weighted). Each plan's figures are remembered too, so a
    warm compile times nothing and builds only the winner. Where the rivals' builds would
    hold more than `memory_bytes` of weights between them, two race at a time (`_Duels`)."""
    objective = Objective.of(config.options)
    rivals = with_setting_variants(rival_plans(searched, known), objective)
    ranks = {n: _rank(plan, config) for n, plan in rivals.items()}

    def decide(latency: Mapping[str, float], per_second: Mapping[str, float]
               ) -> tuple[str, str]:
        return _best(latency, per_second, objective, list(rivals), ranks)

    timings, per_second, built, contenders = _timed(
        model, config, rivals, builder, db, objective, clock, points, decide, memory_bytes,
        progress)
    measured = {n: t for n, t in timings.items() if isinstance(t, float) and n in contenders}
    if not measured:
        return RaceOutcome(searched, None, SEARCHED, timings, objective, per_second)
    winner, why = decide(measured, per_second)
    chosen = rivals[winner]
    plan = replace(chosen, partitioner="collage", stats=searched.stats.merged(
                       end_to_end_ms=timings, kept=winner, objective=objective,
                       throughput_ips=per_second or None),
                   decisions={**chosen.decisions, **(
                       {} if winner == SEARCHED else
                       {n: f"{d}; kept from the {winner} plan, {why}"
                        for n, d in chosen.decisions.items()})},
                   reasons=searched.reasons)
    kept = built.get(winner)
    return RaceOutcome(plan, replace(kept, plan=plan) if kept else None, winner, timings,
                       objective, per_second)


Decide = Callable[[Mapping[str, float], Mapping[str, float]], tuple[str, str]]


def _timed(model: Model, config: CompilationConfig, rivals: Mapping[str, Plan],
           builder: Builder, db: CostDB | None, objective: Objective, clock: Clock,
           points: Points | None, decide: Decide, memory_bytes: int,
           progress: ProgressLike | None = None
           ) -> tuple[dict[str, Timing], dict[str, float], dict[str, Built], set[str]]:
    """Each rival's latency (or why it has none) and, for throughput, its inferences per
    second, in the rivals' order: remembered, or built and raced (and then remembered); the
    builds kept; and the rivals still in contention (in duels, a rival that lost one is
    out, whatever its figure)."""
    timings: dict[str, Timing] = {}
    per_second: dict[str, float] = {}
    keys: dict[str, dict[str, tuple[str, str, str]]] = {}  # name -> figure -> key
    seen: dict[tuple[object, ...], str] = {}
    figures = ("latency", "throughput") if objective.throughput else ("latency",)
    at = point_shapes(model, points)
    where = "@" + ";".join(points.labels()) if points is not None and points.dynamic else ""
    remembered_names: set[str] = set()
    pending: list[str] = []
    report = Reporter.of(progress)
    report.begin(Phase.RACE, detail="building the rival plans")
    for name, plan in rivals.items():
        shape = tuple((p.target, p.nodes) for p in plan.partitions)
        if shape in seen:  # the same plan: time it once
            timings[name] = f"same plan as {seen[shape]}"
            continue
        seen[shape] = name
        if name != SEARCHED and plan.cost_ms is None:  # never run what failed measuring
            timings[name] = "skipped: one of its partitions failed when measured"
            continue
        policy = ThreadPolicy.for_partitions(len(plan.partitions), config.options.threads)
        keys[name] = {f: latency_key(model, plan, policy, objective.figure_key(f) + where)
                      for f in figures}
        remembered = {f: db.get_latency(*key) for f, key in keys[name].items()} \
            if db is not None else {}
        if remembered and all(v is not None for v in remembered.values()):
            timings[name] = float(remembered["latency"] or 0.0)
            if objective.throughput:
                per_second[name] = float(remembered["throughput"] or 0.0)
            remembered_names.add(name)
            continue
        pending.append(name)

    def build(name: str) -> Built | str:
        result = builder.build(model, config, rivals[name])
        if result.failures or result.runnable is None:
            return "failed to build: " + first_line("; ".join(result.failures.values()))
        return result

    def time_them(runnables: Mapping[str, Runnable]
                  ) -> tuple[dict[str, float], dict[str, float]]:
        if objective.throughput:
            served = race_throughput(runnables, objective.concurrency, objective.percentile,
                                     clock=clock, points=at, progress=report)
            return ({n: s.latency_ms for n, s in served.items()},
                    {n: s.per_second for n, s in served.items()})
        return race(runnables, clock=clock, percentile=objective.percentile,
                    concurrency=objective.concurrency, points=at, progress=report), {}

    weights = model.weights.size if model.weights is not None else 0
    if len(pending) > 2 and weights * len(pending) > memory_bytes:
        duels = _Duels(build, time_them, decide, solo=weights > memory_bytes)
        for name in pending:
            duels.enter(name)
        duels.finish()
        timings.update(duels.timings)
        per_second.update(duels.per_second)
        built = duels.kept
        contenders = remembered_names | set(built)
    else:
        built = {}
        for name in pending:
            result = build(name)
            if isinstance(result, str):
                timings[name] = result
            else:
                built[name] = result
        latency, served = time_them({n: b.runnable for n, b in built.items() if b.runnable})
        timings.update(latency)
        per_second.update(served)
        contenders = remembered_names | set(latency)
    for name in pending:
        figure = timings.get(name)
        if db is not None and isinstance(figure, float) and math.isfinite(figure):
            db.put_latency(*keys[name]["latency"], figure)
            if objective.throughput:
                db.put_latency(*keys[name]["throughput"], per_second[name])
    return ({name: timings[name] for name in rivals},
            {name: per_second[name] for name in rivals if name in per_second}, built,
            contenders)


class _Duels:
    """The race two builds at a time, for a model whose rival builds would not all fit in
    memory at once (each holds its backends' own copies of the weights): each rival is built
    and raced against the best so far (blocks in rounds, as `race`), and the loser's build
    goes before the next rival is built. A rival's figure is its best over the duels it ran
    in; the decision is the chain of duels'.

    `solo`, for a model whose weights alone exceed the budget: one build at a time. Each
    rival is timed alone and judged on its figure against the best so far; the best's
    build goes before the next is built, and the winner is built again at the end unless
    it came last (a second build of one plan, against a third copy of the weights)."""

    def __init__(self, build: Callable[[str], Built | str],
                 time_them: Callable[[Mapping[str, Runnable]],
                                     tuple[dict[str, float], dict[str, float]]],
                 decide: Decide, solo: bool = False) -> None:
        self._build, self._time, self._decide = build, time_them, decide
        self.solo = solo
        self.timings: dict[str, Timing] = {}
        self.per_second: dict[str, float] = {}
        self.kept: dict[str, Built] = {}  # the best so far
        self.best: str | None = None  # solo: the best so far, built or not

    def enter(self, name: str) -> None:
        if self.solo:
            self._alone(name)
            return
        result = self._build(name)
        if isinstance(result, str):
            self.timings[name] = result
            return
        if not self.kept:
            self.kept = {name: result}
            return
        (champion, held), = self.kept.items()
        assert held.runnable is not None and result.runnable is not None
        latency, served = self._time({champion: held.runnable, name: result.runnable})
        for n in (champion, name):
            before = self.timings.get(n)
            self.timings[n] = min(latency[n], before) if isinstance(before, float) \
                else latency[n]
            if n in served:
                self.per_second[n] = max(served[n], self.per_second.get(n, 0.0))
        winner, _ = self._decide(latency, served)
        if winner == name:
            self.kept = {name: result}
        del held, result  # the loser's build goes before the next one is built
        trim()

    def _alone(self, name: str) -> None:
        self.kept = {}  # the best so far goes before this one is built
        trim()
        result = self._build(name)
        if isinstance(result, str):
            self.timings[name] = result
            return
        assert result.runnable is not None
        latency, served = self._time({name: result.runnable})
        self.timings[name] = latency[name]
        self.per_second.update(served)
        best = self.best
        if best is not None:
            figures = {best: self._figure(best), name: latency[name]}
            rates = {n: self.per_second[n] for n in (best, name) if n in self.per_second}
            best, _ = self._decide(figures, rates)
        if best is None or best == name:
            self.best, self.kept = name, {name: result}
        del result

    def _figure(self, name: str) -> float:
        figure = self.timings[name]
        assert isinstance(figure, float)  # the best so far was timed
        return figure

    def finish(self) -> None:
        """A rival left without a duel (the only one built) is timed alone; solo, the
        winner is built again if its build went."""
        if self.solo:
            if self.best is not None and self.best not in self.kept:
                trim()
                result = self._build(self.best)
                if not isinstance(result, str):
                    self.kept = {self.best: result}
            return
        for name, held in self.kept.items():
            if name not in self.timings and held.runnable is not None:
                latency, served = self._time({name: held.runnable})
                self.timings[name] = latency[name]
                self.per_second.update(served)


def point_shapes(model: Model, points: Points | None) -> PointShapes | None:
    """The model's input shapes at each point of a dynamic model's profile, weighted."""
    if points is None or not points.dynamic:
        return None
    return [(points.shapes(i, model.input_names), w) for i, w in enumerate(points.weights)]


def _best(latency: Mapping[str, float], per_second: Mapping[str, float],
          objective: Objective, order: list[str],
          ranks: Mapping[str, int | None] | None = None) -> tuple[str, str]:
    """The rival kept, and why, in words. Ties favour the search's plan, then greedy: the
    order of the rivals; and between plans running the whole model on one target each, a
    tie within noise favours the earlier-listed target (`ranks`: each rival's target's place
    in the config's priority order, None for other plans)."""
    ranks = ranks or {}

    def earlier(best: str, names: list[str], cost: Mapping[str, float]) -> tuple[str, str]:
        mine = ranks.get(best)
        tied = [(rank, order.index(n), n) for n in names
                if mine is not None and (rank := ranks.get(n)) is not None and rank < mine
                and within_noise(cost[n], cost[best], RACE_TIE)]
        if not tied:
            return best, ""
        chosen = min(tied)[2]
        return chosen, (f", within noise ({RACE_TIE:.0%}) of {best}, whose target is listed "
                        "later")

    def lowest(names: list[str]) -> tuple[str, str]:
        best = min(names, key=lambda n: (latency[n], order.index(n)))
        return earlier(best, names, latency)

    if not objective.throughput:
        told = "" if objective.single_call_median else f" ({objective})"
        kept, tie = lowest(list(latency))
        return kept, f"faster end to end{told}{tie}"
    budget = objective.latency_budget_ms
    within = [n for n in latency if n in per_second and (budget is None or latency[n] <= budget)]
    if not within:  # none keeps the budget: the one closest to it
        kept, tie = lowest(list(latency))
        return kept, (f"the lowest latency end to end, though over the latency budget "
                      f"({objective}){tie}")
    best = max(within, key=lambda n: (per_second[n], -order.index(n)))
    per_call = {n: 1 / per_second[n] if per_second[n] > 0 else math.inf for n in within}
    kept, tie = earlier(best, within, per_call)
    return kept, f"most inferences per second end to end ({objective}){tie}"


def _rank(plan: Plan, config: CompilationConfig) -> int | None:
    """Where the target of a plan of one partition (a settings variant: the target it came
    from) stands in the config's priority order; None for other plans."""
    if len(plan.partitions) != 1:
        return None
    base = settings_base(plan.partitions[0].target)
    return next((r for r, t in enumerate(config.priority) if t == base), None)


PointShapes = Sequence[tuple[Mapping[str, Sequence[int]], float]]  # (input shapes, weight)


def _feeds(compiled: Mapping[str, Runnable], points: PointShapes | None
           ) -> dict[str, list[dict[str, Any]]]:
    """Each plan's inputs at each point (one point, its own shapes, without `points`); a
    plan with an input no point gives a shape is left out."""
    feeds: dict[str, list[dict[str, Any]]] = {}
    for name, c in compiled.items():
        at = [random_inputs(c, shapes=shapes) for shapes, _ in (points or [({}, 1.0)])]
        if all(f is not None for f in at):
            feeds[name] = [f for f in at if f is not None]
    return feeds


def race(compiled: Mapping[str, Runnable], rounds: int = 3, seconds: float = 0.3,
         close: float = CLOSE, extra_rounds: int = 2, clock: Clock = time.perf_counter,
         *, percentile: float = 50, concurrency: int = 1,
         points: PointShapes | None = None, progress: ProgressLike | None = None
         ) -> dict[str, float]:
    """Each compiled plan's latency (ms): the lowest of its blocks' `percentile` (the
    median by default) of per-call latencies over `rounds` rounds, and `extra_rounds` more
    when the two fastest are within `close` of each other. With `concurrency` > 1, that
    many threads call the plan at once in each block, and every call's latency counts.
    A plan runs alone for a block, so that another backend's spinning pool never slows its
    runs, and the rounds give every plan its share of the quiet moments: on a shared
    machine other work only ever slows a block (blocks of one plan swung between 14 and
    28 ms here), so a plan's quietest block is the fairest to compare. With `points` (the
    input shapes of a shape profile's points, and their weights), a block times each point
    in turn and its figure is the points' weighted mean."""
    feeds = _feeds(compiled, points)
    weights = _weights(points)

    def block(name: str, first: bool) -> float:
        total = 0.0
        for feed, weight in zip(feeds[name], weights, strict=True):
            run = functools.partial(compiled[name].run, feed)
            warmup = 2 if first else 1
            share = seconds / len(weights)
            if concurrency == 1:
                ms = percentile_of(time_samples(run, warmup=warmup, min_runs=2,
                                                seconds=share, clock=clock), percentile)
            else:
                ms = time_throughput(run, concurrency=concurrency, warmup=warmup,
                                     min_calls=2, seconds=share,
                                     clock=clock).latency_ms(percentile)
            total += weight * ms
        return total

    blocks = _in_rounds(list(feeds), block, lambda ms: ms, rounds, close, extra_rounds,
                        Reporter.of(progress))
    return {name: (round(min(blocks[name]), 4) if blocks.get(name) else float("inf"))
            for name in compiled}


def race_throughput(compiled: Mapping[str, Runnable], concurrency: int,
                    percentile: float = 50, rounds: int = 3, seconds: float = 0.3,
                    close: float = CLOSE, extra_rounds: int = 2,
                    clock: Clock = time.perf_counter, *, points: PointShapes | None = None,
                    progress: ProgressLike | None = None) -> dict[str, Served]:
    """Each compiled plan's throughput with `concurrency` threads calling it at once in a
    loop, in blocks and rounds as `race` times latency: the most inferences per second of
    its blocks, and the lowest latency per call at `percentile`. A plan without static
    input shapes serves nothing. With `points`, a block serves each point in turn: its
    inferences per second are the inverse of the points' weighted mean time per inference."""
    feeds = _feeds(compiled, points)
    weights = _weights(points)

    def block(name: str, first: bool) -> tuple[float, float]:
        per_inference = latency = 0.0
        for feed, weight in zip(feeds[name], weights, strict=True):
            served = time_throughput(functools.partial(compiled[name].run, feed),
                                     concurrency=concurrency, warmup=2 if first else 1,
                                     min_calls=2, seconds=seconds / len(weights), clock=clock)
            if served.per_second <= 0:
                return 0.0, math.inf
            per_inference += weight / served.per_second
            latency += weight * served.latency_ms(percentile)
        return 1.0 / per_inference, latency

    blocks = _in_rounds(list(feeds), block, lambda b: 1 / b[0] if b[0] > 0 else math.inf,
                        rounds, close, extra_rounds, Reporter.of(progress))
    return {name: (Served(round(max(b[0] for b in blocks[name]), 2),
                          round(min(b[1] for b in blocks[name]), 4))
                   if blocks.get(name) else Served(0.0, float("inf")))
            for name in compiled}


def _weights(points: PointShapes | None) -> list[float]:
    if not points:
        return [1.0]
    total = sum(w for _, w in points)
    return [w / total for _, w in points]


def _in_rounds(names: list[str], block: Callable[[str, bool], _B], cost: Callable[[_B], float],
               rounds: int, close: float, extra_rounds: int, report: Reporter | None = None
               ) -> dict[str, list[_B]]:
    """Each plan's blocks: a round times one block of each plan in turn (never two plans
    at once); `extra_rounds` more when the two lowest costs are within `close`."""
    blocks: dict[str, list[_B]] = {name: [] for name in names}
    report = report or Reporter()
    report.begin(Phase.RACE, rounds * len(names))

    def one_round(first: bool) -> None:
        for name in blocks:
            blocks[name].append(block(name, first))
            report.advance(Phase.RACE, name)

    for round_index in range(rounds):
        one_round(round_index == 0)
    best = sorted(min(cost(b) for b in timed) for timed in blocks.values() if timed)
    if len(best) > 1 and best[1] <= best[0] * (1 + close):
        done, total = report.counted(Phase.RACE)
        report.step(Phase.RACE, done, (total or 0) + extra_rounds * len(names),
                    "close: more rounds")
        for _ in range(extra_rounds):
            one_round(False)
    return blocks


def _modelled(plan: Plan) -> float:
    cost = plan.cost_ms
    return float("inf") if cost is None else cost


__all__ = ["CLOSE", "RaceOutcome", "Served", "keep_fastest", "race", "race_throughput",
           "rival_plans"]
