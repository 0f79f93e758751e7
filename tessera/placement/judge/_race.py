"""The end-to-end race: the searched plan, the greedy plan and the single-target plans
modelled close to the best (with their runtime-settings choices, `search/_settings.py`) are
built and timed whole, and the best under the objective is kept (a percentile of per-call
latency, or inferences per second from several callers at once). The search's cost model
sums partitions measured alone; the race checks that sum against the chain, so a compile
never hands out a plan worse than those rivals, within the noise of the timing."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from tessera._private.memory import trim
from tessera._private.text import first_line
from tessera.backends import ThreadPolicy
from tessera.config import CompilationConfig, Objective
from tessera.placement._context import PlacementContext
from tessera.placement.judge._timing import Figures, Rounds, point_shapes, timed
from tessera.placement.record._builder import Built, Runnable
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Plan
from tessera.placement.record._remembered import latency_key
from tessera.placement.record._rival import GREEDY, SEARCHED, Rival, RivalKind
from tessera.placement.record._stats import RaceRecord, Timing
from tessera.placement.search._priority import RACE_TIE, within_noise
from tessera.placement.search._regions import NEAR_SINGLE
from tessera.placement.search._settings import settings_base, with_setting_choices

# Two backends often run a whole model within a few percent of each other (BERT-base:
# OpenVINO 141 ms, ONNX Runtime 146 ms), closer than the costs summed from partitions can
# tell apart: every single-target plan modelled that close to the best is raced as well.
MAX_SINGLES = 3
# Each build of a rival holds its backends' own copies of the weights (GPT-2-small: 0.5 GB
# on ONNX Runtime, 1.2 GB on OpenVINO with its mapped file): where every rival's build at
# once would hold more weights than this, they race two at a time (`_Duels`)
RACE_MEMORY_BYTES = 1 << 30


@dataclass(frozen=True)
class RaceOutcome:
    """The plan kept, its build when the race built it, and the race's record: every
    rival's timing under the objective (or why it was not timed) and the rival kept."""

    plan: Plan
    built: Built | None
    record: RaceRecord

    @property
    def kept(self) -> Rival:
        return self.record.kept

    @property
    def searched_ms(self) -> float | None:
        """The searched plan's latency, where it is the figure its partitions' costs are
        measured in (the median of single calls): what calibration compares them with."""
        objective = self.record.objective or Objective()
        return self.record.ms(SEARCHED) if objective.single_call_median else None


def rival_plans(searched: Plan, known: Mapping[Rival, Plan]) -> dict[Rival, Plan]:
    """The plans to race end to end: the searched plan, greedy, and the single-target plans
    modelled within `NEAR_SINGLE` of the best of them (at most `MAX_SINGLES`)."""
    rivals = {SEARCHED: searched, GREEDY: known[GREEDY]}
    singles = sorted((r for r in known if r.kind is RivalKind.SINGLE),
                     key=lambda r: (_modelled(known[r]), str(r)))
    if singles:
        best = _modelled(known[singles[0]])
        for rival in singles[:MAX_SINGLES]:
            if rival == singles[0] or _modelled(known[rival]) <= best * NEAR_SINGLE:
                rivals[rival] = known[rival]
    return rivals


def keep_fastest(ctx: PlacementContext, searched: Plan, known: Mapping[Rival, Plan],
                 memory_bytes: int = RACE_MEMORY_BYTES) -> RaceOutcome:
    """Time the rival plans end to end and keep the best under the config's objective (at
    every point of a shape profile, weighted). Each plan's figures are remembered too, so a
    warm compile times nothing and builds only the winner. Where the rivals' builds would
    hold more than `memory_bytes` of weights between them, two race at a time (`_Duels`)."""
    objective = ctx.objective
    rivals = with_setting_choices(rival_plans(searched, known), objective)
    judge = _Judge(objective, list(rivals), {r: _rank(p, ctx.config) for r, p in rivals.items()})
    field = _RivalRace(ctx, rivals, judge).run(memory_bytes)
    measured = {r: t.ms for r, t in field.timings.items()
                if t.ms is not None and r in field.contenders}
    if not measured:
        return RaceOutcome(searched, None, RaceRecord(field.timings, SEARCHED, objective,
                                                      field.per_second))
    winner, why = judge.decide(measured, field.per_second)
    record = RaceRecord(field.timings, winner, objective, field.per_second)
    chosen = rivals[winner]
    plan = replace(chosen, partitioner="collage", stats=searched.stats.merged(race=record),
                   decisions={**chosen.decisions, **(
                       {} if winner == SEARCHED else
                       {n: f"{d}; kept from the {winner} plan, {why}"
                        for n, d in chosen.decisions.items()})},
                   reasons=searched.reasons)
    kept = field.built.get(winner)
    return RaceOutcome(plan, replace(kept, plan=plan) if kept else None, record)


@dataclass
class _Field:
    """What the race found: each rival's timing (in the rivals' order), inferences per
    second under throughput, the builds kept, and the rivals still in contention (in duels,
    a rival that lost one is out, whatever its figure)."""

    timings: dict[Rival, Timing]
    per_second: dict[Rival, float]
    built: dict[Rival, Built]
    contenders: dict[Rival, None]


class _RivalRace:
    """The rivals' figures: remembered in the cost database, or built and raced (and then
    remembered)."""

    def __init__(self, ctx: PlacementContext, rivals: Mapping[Rival, Plan],
                 judge: _Judge) -> None:
        assert ctx.builder is not None
        self.ctx, self.rivals, self.judge, self.builder = ctx, rivals, judge, ctx.builder
        self.objective = judge.objective
        self.how = Rounds.under(self.objective, ctx.clock, point_shapes(ctx.model, ctx.points))
        self.timings: dict[Rival, Timing] = {}
        self.per_second: dict[Rival, float] = {}
        self.keys: dict[Rival, dict[str, tuple[str, str, str]]] = {}  # rival -> figure -> key
        self.remembered: dict[Rival, None] = {}

    def run(self, memory_bytes: int) -> _Field:
        pending = self._pending()
        weights = self.ctx.model.weights.size if self.ctx.model.weights is not None else 0
        if len(pending) > 2 and weights * len(pending) > memory_bytes:
            duels = _Duels(self.build, self.time, self.judge.decide,
                           solo=weights > memory_bytes)
            for rival in pending:
                duels.enter(rival)
            duels.finish()
            self.timings.update(duels.timings)
            self.per_second.update(duels.per_second)
            built = duels.kept
            contenders = {**self.remembered, **dict.fromkeys(built)}
        else:
            built = {}
            for rival in pending:
                result = self.build(rival)
                if isinstance(result, Built):
                    built[rival] = result
                else:
                    self.timings[rival] = result
            figures = self.time({r: b.runnable for r, b in built.items() if b.runnable})
            self._record(figures)
            contenders = {**self.remembered, **dict.fromkeys(figures.latency_ms)}
        self._remember(pending)
        return _Field({r: self.timings[r] for r in self.rivals},
                      {r: self.per_second[r] for r in self.rivals if r in self.per_second},
                      built, contenders)

    def _pending(self) -> list[Rival]:
        """The rivals to build and time: not a copy of another, not failed when measured,
        and not remembered."""
        figures = ("latency", "throughput") if self.objective.throughput else ("latency",)
        points = self.ctx.points
        where = "@" + ";".join(points.labels()) if points.dynamic else ""
        seen: dict[tuple[object, ...], Rival] = {}
        pending: list[Rival] = []
        self.ctx.progress.begin(Phase.RACE, detail="building the rival plans")
        for rival, plan in self.rivals.items():
            shape = tuple((p.target, p.nodes) for p in plan.partitions)
            if shape in seen:  # the same plan: time it once
                self.timings[rival] = Timing.not_timed(f"same plan as {seen[shape]}")
                continue
            seen[shape] = rival
            if rival != SEARCHED and plan.cost_ms is None:  # never run what failed measuring
                self.timings[rival] = Timing.not_timed(
                    "skipped: one of its partitions failed when measured")
                continue
            policy = ThreadPolicy.for_partitions(len(plan.partitions),
                                                 self.ctx.config.options.threads)
            self.keys[rival] = {f: latency_key(self.ctx.model, plan, policy,
                                               self.objective.figure_key(f) + where)
                                for f in figures}
            if not self._recalled(rival):
                pending.append(rival)
        return pending

    def _recalled(self, rival: Rival) -> bool:
        db = self.ctx.db
        found = {f: db.get_latency(*key) for f, key in self.keys[rival].items()} \
            if db is not None else {}
        if not found or any(v is None for v in found.values()):
            return False
        self.timings[rival] = Timing.measured(float(found["latency"] or 0.0))
        if self.objective.throughput:
            self.per_second[rival] = float(found["throughput"] or 0.0)
        self.remembered[rival] = None
        return True

    def build(self, rival: Rival) -> Built | Timing:
        result = self.builder.build(self.ctx.model, self.ctx.config, self.rivals[rival])
        if result.failures or result.runnable is None:
            return Timing.not_timed("failed to build: " + first_line(
                "; ".join(result.failures.values())))
        return result

    def time(self, runnables: Mapping[Rival, Runnable]) -> Figures[Rival]:
        return timed(runnables, self.objective, self.how, self.ctx.progress)

    def _record(self, figures: Figures[Rival]) -> None:
        self.timings.update({r: Timing.measured(ms) for r, ms in figures.latency_ms.items()})
        self.per_second.update(figures.per_second)

    def _remember(self, pending: list[Rival]) -> None:
        db = self.ctx.db
        if db is None:
            return
        for rival in pending:
            ms = self.timings[rival].ms
            if ms is not None and math.isfinite(ms):
                db.put_latency(*self.keys[rival]["latency"], ms)
                if self.objective.throughput:
                    db.put_latency(*self.keys[rival]["throughput"], self.per_second[rival])


Decide = Callable[[Mapping[Rival, float], Mapping[Rival, float]], tuple[Rival, str]]


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

    def __init__(self, build: Callable[[Rival], Built | Timing],
                 time_them: Callable[[Mapping[Rival, Runnable]], Figures[Rival]],
                 decide: Decide, solo: bool = False) -> None:
        self._build, self._time, self._decide = build, time_them, decide
        self.solo = solo
        self.timings: dict[Rival, Timing] = {}
        self.per_second: dict[Rival, float] = {}
        self.kept: dict[Rival, Built] = {}  # the best so far
        self.best: Rival | None = None  # solo: the best so far, built or not

    def enter(self, rival: Rival) -> None:
        if self.solo:
            self._alone(rival)
            return
        result = self._build(rival)
        if isinstance(result, Timing):
            self.timings[rival] = result
            return
        if not self.kept:
            self.kept = {rival: result}
            return
        (champion, held), = self.kept.items()
        assert held.runnable is not None and result.runnable is not None
        figures = self._time({champion: held.runnable, rival: result.runnable})
        for r in (champion, rival):
            self._best_of(r, figures)
        winner, _ = self._decide(figures.latency_ms, figures.per_second)
        if winner == rival:
            self.kept = {rival: result}
        del held, result  # the loser's build goes before the next one is built
        trim()

    def _best_of(self, rival: Rival, figures: Figures[Rival]) -> None:
        before = self.timings.get(rival)
        ms = figures.latency_ms[rival]
        self.timings[rival] = Timing.measured(
            min(ms, before.ms) if before is not None and before.ms is not None else ms)
        if rival in figures.per_second:
            self.per_second[rival] = max(figures.per_second[rival],
                                         self.per_second.get(rival, 0.0))

    def _alone(self, rival: Rival) -> None:
        self.kept = {}  # the best so far goes before this one is built
        trim()
        result = self._build(rival)
        if isinstance(result, Timing):
            self.timings[rival] = result
            return
        assert result.runnable is not None
        figures = self._time({rival: result.runnable})
        self.timings[rival] = Timing.measured(figures.latency_ms[rival])
        self.per_second.update(figures.per_second)
        best = self.best
        if best is not None:
            latency = {best: self._figure(best), rival: figures.latency_ms[rival]}
            rates = {r: self.per_second[r] for r in (best, rival) if r in self.per_second}
            best, _ = self._decide(latency, rates)
        if best is None or best == rival:
            self.best, self.kept = rival, {rival: result}
        del result

    def _figure(self, rival: Rival) -> float:
        ms = self.timings[rival].ms
        assert ms is not None  # the best so far was timed
        return ms

    def finish(self) -> None:
        """A rival left without a duel (the only one built) is timed alone; solo, the
        winner is built again if its build went."""
        if self.solo:
            if self.best is not None and self.best not in self.kept:
                trim()
                result = self._build(self.best)
                if isinstance(result, Built):
                    self.kept = {self.best: result}
            return
        for rival, held in self.kept.items():
            if rival not in self.timings and held.runnable is not None:
                figures = self._time({rival: held.runnable})
                self.timings[rival] = Timing.measured(figures.latency_ms[rival])
                self.per_second.update(figures.per_second)


@dataclass(frozen=True)
class _Judge:
    """Which rival is kept, and why, in words. Ties favour the search's plan, then greedy:
    the order of the rivals; and between plans running the whole model on one target each,
    a tie within noise favours the earlier-listed target (`ranks`: each rival's target's
    place in the config's priority order, None for other plans)."""

    objective: Objective
    order: list[Rival]
    ranks: Mapping[Rival, int | None]

    def decide(self, latency: Mapping[Rival, float], per_second: Mapping[Rival, float]
               ) -> tuple[Rival, str]:
        objective = self.objective
        if not objective.throughput:
            told = "" if objective.single_call_median else f" ({objective})"
            kept, tie = self._lowest(list(latency), latency)
            return kept, f"faster end to end{told}{tie}"
        budget = objective.latency_budget_ms
        within = [r for r in latency
                  if r in per_second and (budget is None or latency[r] <= budget)]
        if not within:  # none keeps the budget: the one closest to it
            kept, tie = self._lowest(list(latency), latency)
            return kept, (f"the lowest latency end to end, though over the latency budget "
                          f"({objective}){tie}")
        best = max(within, key=lambda r: (per_second[r], -self.order.index(r)))
        per_call = {r: 1 / per_second[r] if per_second[r] > 0 else math.inf for r in within}
        kept, tie = self._earlier(best, within, per_call)
        return kept, f"most inferences per second end to end ({objective}){tie}"

    def _lowest(self, rivals: list[Rival], cost: Mapping[Rival, float]) -> tuple[Rival, str]:
        best = min(rivals, key=lambda r: (cost[r], self.order.index(r)))
        return self._earlier(best, rivals, cost)

    def _earlier(self, best: Rival, rivals: list[Rival], cost: Mapping[Rival, float]
                 ) -> tuple[Rival, str]:
        mine = self.ranks.get(best)
        tied = [(rank, self.order.index(r), r) for r in rivals
                if mine is not None and (rank := self.ranks.get(r)) is not None
                and rank < mine and within_noise(cost[r], cost[best], RACE_TIE)]
        if not tied:
            return best, ""
        chosen = min(tied, key=lambda t: (t[0], t[1]))[2]
        return chosen, (f", within noise ({RACE_TIE:.0%}) of {best}, whose target is listed "
                        "later")


def _rank(plan: Plan, config: CompilationConfig) -> int | None:
    """Where the target of a plan of one partition (a settings choice: the target it came
    from) stands in the config's priority order; None for other plans."""
    if len(plan.partitions) != 1:
        return None
    base = settings_base(plan.partitions[0].target)
    return next((r for r, t in enumerate(config.priority) if t == base), None)


def _modelled(plan: Plan) -> float:
    cost = plan.cost_ms
    return float("inf") if cost is None else cost


__all__ = ["MAX_SINGLES", "RACE_MEMORY_BYTES", "RaceOutcome", "keep_fastest", "rival_plans"]
