"""The end-to-end race: the searched plan, the greedy plan and the single-target plans
modelled close to the best are built and timed whole, and the fastest is kept. The search's
cost model sums partitions measured alone; the race checks that sum against the chain, so a
compile never hands out a plan slower than those rivals, within the noise of the timing."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera._private.text import first_line
from tessera._private.timing import Clock, time_block
from tessera.backends._inputs import random_inputs
from tessera.backends._threads import ThreadPolicy
from tessera.config import CompilationConfig
from tessera.ir import Model
from tessera.placement._builder import Builder, Built, Runnable
from tessera.placement._costdb import CostDB
from tessera.placement._memory import latency_key
from tessera.placement._plan import Plan
from tessera.placement._stats import Timing

# Two backends often run a whole model within a few percent of each other (BERT-base:
# OpenVINO 141 ms, ONNX Runtime 146 ms), closer than the costs summed from partitions can
# tell apart: every single-target plan modelled that close to the best is raced as well.
NEAR_SINGLE = 1.15
MAX_SINGLES = 3
CLOSE = 0.05  # a race this close gets more rounds
SEARCHED = "collage"  # the searched plan's name among the rivals


@dataclass(frozen=True)
class RaceOutcome:
    """The plan kept, its build when the race built it, and every rival's timing."""

    plan: Plan
    built: Built | None
    kept: str
    timings: Mapping[str, Timing]

    @property
    def searched_ms(self) -> float | None:
        timing = self.timings.get(SEARCHED)
        return timing if isinstance(timing, float) else None


def rival_plans(searched: Plan, known: Mapping[str, Plan]) -> dict[str, Plan]:
    """The plans to race end to end: the searched plan, greedy, and the single-target plans
    modelled within `NEAR_SINGLE` of the best of them (at most `MAX_SINGLES`)."""
    rivals = {SEARCHED: searched, "greedy": known["greedy"]}
    singles = sorted((n for n in known if n.startswith("only ")),
                     key=lambda n: (_modelled(known[n]), n))
    if singles:
        best = _modelled(known[singles[0]])
        for name in singles[:MAX_SINGLES]:
            if name == singles[0] or _modelled(known[name]) <= best * NEAR_SINGLE:
                rivals[name] = known[name]
    return rivals


def keep_fastest(model: Model, config: CompilationConfig, searched: Plan,
                 known: Mapping[str, Plan], builder: Builder, db: CostDB | None = None,
                 clock: Clock = time.perf_counter) -> RaceOutcome:
    """Time the rival plans end to end and keep the fastest. Each plan's latency is
    remembered too, so a warm compile times nothing and builds only the winner."""
    rivals = rival_plans(searched, known)
    timings: dict[str, Timing] = {}
    built: dict[str, Built] = {}
    keys: dict[str, tuple[str, str, str]] = {}
    seen: dict[tuple[object, ...], str] = {}
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
        keys[name] = latency_key(model, plan, policy)
        remembered = db.get_latency(*keys[name]) if db is not None else None
        if remembered is not None:
            timings[name] = remembered
            continue
        result = builder.build(model, config, plan)
        if result.failures or result.runnable is None:
            timings[name] = "failed to build: " + first_line(
                "; ".join(result.failures.values()))
            continue
        built[name] = result
    for name, latency in race({n: b.runnable for n, b in built.items() if b.runnable},
                              clock=clock).items():
        timings[name] = latency
        if db is not None and latency != float("inf"):
            db.put_latency(*keys[name], latency)
    measured = {n: t for n, t in timings.items() if isinstance(t, float)}
    if not measured:
        return RaceOutcome(searched, None, SEARCHED, timings)
    # ties favour the search's plan, then greedy: the order of `rivals`
    winner = min(measured, key=lambda n: (measured[n], list(rivals).index(n)))
    chosen = rivals[winner]
    plan = replace(chosen, partitioner="collage", stats=searched.stats.merged(
                       end_to_end_ms=timings, kept=winner),
                   decisions={**chosen.decisions, **(
                       {} if winner == SEARCHED else
                       {n: f"{d}; kept from the {winner} plan, faster end to end"
                        for n, d in chosen.decisions.items()})},
                   reasons=searched.reasons)
    kept = built.get(winner)
    return RaceOutcome(plan, replace(kept, plan=plan) if kept else None, winner, timings)


def race(compiled: Mapping[str, Runnable], rounds: int = 3, seconds: float = 0.3,
         close: float = CLOSE, extra_rounds: int = 2, clock: Clock = time.perf_counter
         ) -> dict[str, float]:
    """Each compiled plan's latency (ms): the lowest of its block medians over `rounds`
    rounds, and `extra_rounds` more when the two fastest are within `close` of each other.
    A plan runs alone for a block, so that another backend's spinning pool never slows its
    runs, and the rounds give every plan its share of the quiet moments: on a shared
    machine other work only ever slows a block (blocks of one plan swung between 14 and
    28 ms here), so a plan's quietest block is the fairest to compare."""
    feeds = {name: f for name, c in compiled.items() if (f := random_inputs(c)) is not None}
    medians: dict[str, list[float]] = {name: [] for name in feeds}

    def one_round(first: bool) -> None:
        for name in medians:
            run = functools.partial(compiled[name].run, feeds[name])
            medians[name].append(time_block(run, warmup=2 if first else 1, min_runs=2,
                                            seconds=seconds, clock=clock).median_ms)

    for round_index in range(rounds):
        one_round(round_index == 0)
    best = sorted(min(m) for m in medians.values() if m)
    if len(best) > 1 and best[1] <= best[0] * (1 + close):
        for _ in range(extra_rounds):
            one_round(False)
    return {name: (round(min(medians[name]), 4) if medians.get(name)
                   else float("inf")) for name in compiled}


def _modelled(plan: Plan) -> float:
    cost = plan.cost_ms
    return float("inf") if cost is None else cost


__all__ = ["CLOSE", "RaceOutcome", "keep_fastest", "race", "rival_plans"]
