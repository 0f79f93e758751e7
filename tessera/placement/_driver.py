"""The placement decision, from the model to the plan kept, in one place, and the only module
that uses every part of placement:

1. the support table (every backend's answer per node, pins, bans: `search`);
2. greedy placement, or Collage: a remembered plan (`record`), else candidates,
   measurement (`measure`) and the search;
3. the end-to-end race of the searched plan against its rivals (`judge`, through a
   `Builder`);
4. calibration: when the searched chain lost because it cost more than its parts, the
   overhead it showed is charged per partition and the search runs again;
5. the numeric guard: a partition that fails to build is banned from its backend, and the
   smallest subgraph on which it disagrees with the consensus oracle is banned from it; the
   decision is then made again;
6. the precision search under the accuracy budget, and remembering the plan, so a warm
   compile repeats none of it.

`place` returns a `Placement`: the plan, its statistics, and the built plan when it built
one (so the runtime never compiles the winner twice)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tessera.config import CompilationConfig, MeasureOn, Partitioner
from tessera.errors import InterruptedCompile
from tessera.ir import Model, Samples
from tessera.oracle import Disagreement
from tessera.placement._context import PlacementContext, Tools
from tessera.placement._interrupted import keep_fp32, keep_interrupted, stopped
from tessera.placement.judge._guard import Finding, guard
from tessera.placement.judge._precision import search_precision
from tessera.placement.judge._precision_setup import precision_setup
from tessera.placement.judge._race import keep_fastest
from tessera.placement.judge._remote import RaceJob, race_request
from tessera.placement.measure._local import LocalMeasurer
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import Measurer
from tessera.placement.measure._ray import RayMeasurer  # Ray loads when it measures
from tessera.placement.record._builder import Built
from tessera.placement.record._costdb import CostDB
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Banned, Plan
from tessera.placement.record._progress import Reporter
from tessera.placement.record._records import PrecisionRecord, ShapesRecord
from tessera.placement.record._remembered import (
    overhead_key,
    recall,
    remember,
    remember_guard_passed,
    search_key,
)
from tessera.placement.record._rival import SEARCHED, Rival
from tessera.placement.record._stats import (
    GuardVerdict,
    RaceRecord,
    SearchStats,
    Timing,
)
from tessera.placement.record._trail import Finished, Kept
from tessera.placement.search._collage import UnmeasuredNodes, place_collage
from tessera.placement.search._device_targets import (
    assign_devices,
    config_devices,
    device_for,
)
from tessera.placement.search._greedy import place_greedy
from tessera.placement.search._pins import PinSpec, pinned_devices, resolve_pins
from tessera.placement.search._support import FALLBACK, SupportTable, served_targets
from tessera.placement.search._threads import base_target
from tessera.placement.search._verify import verify_plan
from tessera.target import Target

CALIBRATION_ROUNDS = 2  # searches again after the first; each costs one end-to-end timing


@dataclass(frozen=True)
class Placement:
    plan: Plan
    built: Built | None = None  # the plan's build, when `place` built it

    @property
    def stats(self) -> SearchStats:
        return self.plan.stats

    def with_plan(self, plan: Plan) -> Placement:
        return Placement(plan, replace(self.built, plan=plan) if self.built else None)


def place(model: Model, config: CompilationConfig, *, pins: PinSpec = None,
          tools: Tools | None = None, build: bool = False, samples: Samples | None = None
          ) -> Placement:
    """The plan for `model` on `config`'s targets, each partition with its device target
    (`assign_devices`). With a builder among the `tools`, Collage's plan is raced end to
    end against its rivals; with `build` too, the plan kept is built and passes the numeric
    guard (when the config asks for it) before it is returned, and, with `samples` and the
    config's accuracy budget, its precision variants are searched. An interrupt
    (KeyboardInterrupt) during the Collage search or the precision search keeps the best
    plan known so far (`_interrupted.py`); elsewhere it is an `InterruptedCompile`."""
    ctx = context_for(model, config, pins, tools)
    try:
        placed = _place(ctx, build, samples)
    except InterruptedCompile:
        raise
    except KeyboardInterrupt:
        raise stopped(ctx.progress) from None
    return placed.with_plan(assign_devices(placed.plan, config))


def context_for(model: Model, config: CompilationConfig, pins: PinSpec = None,
                tools: Tools | None = None) -> PlacementContext:
    """The context of one placement, each default settled: the pins resolved, the shape
    points, the config's measurer, and for Collage a fresh cost database."""
    tools = tools or Tools()
    collage = config.partitioner is Partitioner.COLLAGE
    db = tools.db if tools.db is not None or not collage else CostDB()
    return PlacementContext(model, config, resolve_pins(model.dataflow, pins, config),
                            Points.of(model, config), tools.measurer or measurer_for(config),
                            tools.builder, db, tools.clock, Reporter.of(tools.progress),
                            tools.clock() if tools.started is None else tools.started)


def measurer_for(config: CompilationConfig) -> Measurer:
    """The measurer the config's flow options ask for: this machine's (`isolate`: in the
    worker process), or the nodes of a Ray cluster (`measure=ray`; it connects when it
    first measures, so a remembered plan needs no cluster)."""
    options = config.options
    devices = config_devices(config)
    if options.measure is MeasureOn.RAY:
        return RayMeasurer.connect(options.ray_address, options.measure_on,
                                   isolate=options.isolate, timeout_s=options.measure_timeout,
                                   devices=devices)
    return LocalMeasurer(options.isolate, options.measure_timeout, devices=devices)


@dataclass
class _Bans:
    """What the guard found over the rounds of one placement: the bans (node -> target ->
    why), every disagreement seen, and the first plan's kept rival and its time."""

    banned: dict[str, dict[str, str]] = field(default_factory=dict)
    seen: list[Disagreement] = field(default_factory=list)
    before: tuple[Rival, float] | None = None

    def ban(self, plan: Plan, verdicts: Mapping[int, Finding]) -> None:
        """Each finding's nodes leave their partition's target (the rest of it stays)."""
        if self.before is None:
            self.before = _kept_time(plan)
        for index, finding in verdicts.items():
            part = plan.partitions[index]
            if part.kind == FALLBACK.kind.name:
                continue
            for node in finding.nodes:  # a one-thread choice bans the target it came from
                for target in dict.fromkeys((str(part.target), base_target(str(part.target)))):
                    self.banned.setdefault(node, {})[target] = finding.reason


def _place(ctx: PlacementContext, build: bool, samples: Samples | None) -> Placement:
    served_targets(ctx.model.dataflow.names, ctx.config, ctx.pins)  # before a remembered plan
    if build and samples is not None:
        warm = _remembered_precision(ctx, samples)
        if warm is not None:
            return warm
    bans = _Bans()
    while True:  # each round bans at least one (node, target) pair: it ends
        requested = _requested_devices(ctx)
        if ctx.config.partitioner is Partitioner.COLLAGE:
            try:
                plan, built = _collage(ctx, bans.banned)
            except UnmeasuredNodes as err:  # what cannot be priced goes by priority
                plan, built = _greedy_instead(ctx, bans.banned, str(err)), None
            except KeyboardInterrupt:  # the best plan known so far, never remembered
                return Placement(*keep_interrupted(ctx, bans.banned, build, requested))
        else:
            plan, built = _greedy(ctx, bans.banned), None
        _verified(ctx, plan, "after placement")
        if requested:  # nodes pinned to a specialised device target: built for it
            plan, built = assign_devices(plan, ctx.config, requested), None
        if not build or ctx.builder is None:  # nothing to build with: the plan alone
            return Placement(plan, built)
        built = built if built is not None else ctx.builder.build(ctx.model, ctx.config, plan)
        verdicts = _verdicts(ctx, plan, built, bans)
        if not verdicts:
            return _accepted(ctx, Placement(plan, built), bans, samples)
        bans.ban(plan, verdicts)


def _greedy(ctx: PlacementContext, banned: Banned) -> Plan:
    table = SupportTable.build(ctx.model, ctx.config, banned, ctx.pins)
    plan = place_greedy(ctx.model, table, ctx.config.options.min_block_size)
    points = ctx.points
    if points.dynamic:
        plan = plan.with_stats(shapes=ShapesRecord(
            points.labels(), tuple(round(w, 4) for w in points.weights), points.defaulted))
    return plan


def _greedy_instead(ctx: PlacementContext, banned: Banned, why: str) -> Plan:
    """The greedy plan where Collage could not price every node, each decision saying so."""
    table = SupportTable.build(ctx.model, ctx.config, banned, ctx.pins)
    plan = place_greedy(ctx.model, table, ctx.config.options.min_block_size)
    note = f" (collage could not decide: {why})"
    return replace(plan, decisions={n: d + note for n, d in plan.decisions.items()})


def _verdicts(ctx: PlacementContext, plan: Plan, built: Built, bans: _Bans
              ) -> dict[int, Finding]:
    """What the plan gives back: partitions that failed to build, and, where the config
    asks for the numeric guard and the plan has not passed it, what the guard bans."""
    verdicts = {i: Finding(plan.partitions[i].nodes, why) for i, why in built.failures.items()}
    if ctx.config.options.numeric_guard and not plan.stats.guard_passed:
        report = guard(ctx, plan, built.parts)
        verdicts.update(report.findings)
        bans.seen += [d for d in report.seen if d not in bans.seen]
    return verdicts


def _accepted(ctx: PlacementContext, placed: Placement, bans: _Bans,
              samples: Samples | None) -> Placement:
    """The plan that built and passed: its guard record, then its precision search."""
    plan = placed.plan
    if bans.seen:
        plan = replace(plan, stats=plan.stats.with_guard(disagreements=tuple(bans.seen)))
    cost = _ban_cost(bans.before, plan, bans.seen)
    if cost is not None:
        plan = replace(plan, stats=plan.stats.with_guard(cost=cost))
    if ctx.config.options.numeric_guard and not plan.stats.guard_passed:
        plan = remember_guard_passed(ctx.db, plan) if ctx.db is not None else \
            replace(plan, stats=plan.stats.with_guard(verdict=GuardVerdict.PASSED))
    placed = placed.with_plan(plan)
    key = search_key(ctx.model, ctx.config, ctx.pins, bans.banned)
    try:
        return _with_precision(ctx, placed, samples, key)
    except KeyboardInterrupt:  # the fp32 plan, built and checked
        return Placement(*keep_fp32(placed.plan, placed.built, ctx.progress))


def _remembered_precision(ctx: PlacementContext, samples: Samples) -> Placement | None:
    """A warm compile with the user's samples: the precision search's plan remembered for
    a first round without bans (the fp32 plan it grew from passed the guard then), built
    alone. The fp32 plan is neither built nor judged again (OpenVINO's compile of it: 0.7 s
    of BERT-base's 2.2 s warm compile). None where nothing is remembered or builds."""
    if ctx.builder is None or _requested_devices(ctx):
        return None
    point = max(ctx.points.points, key=lambda p: p.weight)
    setup = precision_setup(ctx.model, ctx.config, samples, point.as_dict())
    if isinstance(setup, str):
        return None
    key = f"{search_key(ctx.model, ctx.config, ctx.pins, {})}:precision:{setup.samples.digest}"
    remembered = recall(ctx.db or CostDB(), key)  # where `_with_precision` remembers it
    if remembered is None:
        return None
    built = ctx.builder.build(ctx.model, setup.config, remembered, setup.samples)
    if built.failures or built.runnable is None:
        return None
    return Placement(remembered, built)


def _with_precision(ctx: PlacementContext, placed: Placement, samples: Samples | None,
                    key: str) -> Placement:
    """`placed` or a plan with lower-precision segments that meets the accuracy budget,
    remembered under the fp32 plan's key and the samples, so a warm compile searches
    nothing and quantizes nothing its compile cache holds."""
    point = max(ctx.points.points, key=lambda p: p.weight)
    runnable = placed.built.runnable if placed.built is not None else None
    setup = precision_setup(ctx.model, ctx.config, samples, point.as_dict(),
                            runnable.run if runnable is not None else None)
    if isinstance(setup, str):
        return placed.with_plan(placed.plan.with_stats(
            precision=PrecisionRecord(f"not tried: {setup}")))
    ctx = replace(ctx.with_config(setup.config), db=ctx.db or CostDB())
    assert placed.built is not None and ctx.builder is not None and ctx.db is not None
    key = f"{key}:precision:{setup.samples.digest}"
    remembered = recall(ctx.db, key)
    if remembered is not None:
        built = ctx.builder.build(ctx.model, ctx.config, remembered, setup.samples)
        if not built.failures and built.runnable is not None:
            return Placement(remembered, built)
    plan, built = search_precision(ctx, placed.plan, placed.built, setup)
    precision = plan.stats.precision
    if precision is not None:  # which inputs judged it, and under which budget
        plan = plan.with_stats(precision=replace(
            precision, inputs=setup.inputs, budget=str(ctx.config.options.accuracy)))
    return Placement(*_remembered(ctx.db, key, plan, built))


def _remembered(db: CostDB, key: str, plan: Plan, built: Built) -> tuple[Plan, Built]:
    plan = remember(db, key, plan)
    return plan, replace(built, plan=plan)


def _collage(ctx: PlacementContext, banned: Banned) -> tuple[Plan, Built | None]:
    """Collage's plan: remembered, or searched, raced end to end and calibrated."""
    db = ctx.db
    assert db is not None
    key = search_key(ctx.model, ctx.config, ctx.pins, banned)
    remembered = recall(db, key)
    if remembered is not None:
        return remembered, None
    ctx.progress.begin(Phase.SUPPORT)
    table = SupportTable.build(ctx.model, ctx.config, banned, ctx.pins)
    backends_key = overhead_key(ctx.config)
    overhead = db.get_overhead(*backends_key) or 0.0
    rounds, first = 0, None
    while True:
        searched, known = place_collage(ctx, table, overhead)
        _verified(ctx, searched, "after the Collage search")
        # what an interrupt keeps, until a race ends
        ctx.progress.trail.keep(Kept(Finished.SEARCHED, SEARCHED, searched))
        rounds += 1
        first = first or searched.stats  # where the measuring happened
        if ctx.builder is None:  # nothing can time plans end to end: the search decides
            plan, built = searched, None
            break
        if not ctx.measurer.measures_here:
            # measured elsewhere: the race and the guard run where the costs came from
            plan, built = _raced_remotely(ctx, searched, known), None
            break
        outcome = keep_fastest(ctx, searched, known)
        plan, built = outcome.plan, outcome.built
        ctx.progress.trail.keep(Kept(Finished.RACED, outcome.kept, plan, built))
        _verified(ctx, plan, "after the end-to-end race")
        estimate = overhead_estimate(searched, outcome.searched_ms)
        if estimate is None:
            break
        db.put_overhead(*backends_key, estimate)
        # the searched plan lost end to end because its chain cost more than its parts:
        # search again, charging each partition what the chain showed it costs
        if outcome.kept == SEARCHED or rounds > CALIBRATION_ROUNDS or \
                estimate <= overhead * 1.25 + 1e-3:
            break
        overhead = estimate
    cover = plan.stats.cover
    cover = replace(cover, calibration_rounds=rounds) if cover is not None else None
    plan = plan.with_stats(measuring=first.measuring, proposals=first.proposals, cover=cover)
    # failed candidates are in the database as well, so a new search would find this plan
    plan = remember(db, key, plan)
    return plan, (replace(built, plan=plan) if built is not None else None)


def _raced_remotely(ctx: PlacementContext, searched: Plan, known: Mapping[Rival, Plan]
                    ) -> Plan:
    """The plan the measuring node's race kept, marked guard-passed where its guard passed
    every partition there (a partition it gives back is checked here again, and banned);
    the searched plan, saying why, where no node could race."""
    ctx.progress.begin(Phase.RACE, detail="on the measuring node")
    guarded = ctx.config.options.numeric_guard
    assert ctx.builder is not None
    job = RaceJob(race_request(ctx.config, searched, known), type(ctx.builder), guarded)
    answer = ctx.measurer.run_on_node(ctx.model, job)
    if isinstance(answer, str):
        return searched.with_stats(race=RaceRecord(
            {SEARCHED: Timing.not_timed(f"not raced: the race on {answer}")}, SEARCHED))
    outcome = answer.outcome()
    plan = outcome.plan
    ctx.progress.trail.keep(Kept(Finished.RACED, outcome.kept, plan))
    if guarded and answer.guard is not None and not answer.guard:
        plan = replace(plan, stats=plan.stats.with_guard(verdict=GuardVerdict.PASSED))
    return plan


def overhead_estimate(searched: Plan, measured: float | None) -> float | None:
    """What each partition of the searched plan cost beyond its part measured alone."""
    parts = searched.partitions
    if len(parts) < 2 or measured is None or any(p.cost_ms is None for p in parts):
        return None
    alone = sum(float(p.cost_ms or 0.0) for p in parts)
    return round(max(0.0, (measured - alone) / len(parts)), 4)


def _requested_devices(ctx: PlacementContext) -> dict[str, Target]:
    """Node name -> the device target its pin asks for, where that is not the one its
    partition would get anyway (the config's least specialised for the device)."""
    names = ctx.model.dataflow.names
    return {names[i]: t for i, t in sorted(pinned_devices(ctx.pins).items())
            if t != device_for(ctx.config, t.device_type)}


def _kept_time(plan: Plan) -> tuple[Rival, float] | None:
    """The plan's kept rival and its end-to-end time, where a race timed it."""
    race = plan.stats.race
    ms = race.ms(race.kept) if race is not None else None
    return (race.kept, ms) if race is not None and ms is not None else None


def _ban_cost(before: tuple[Rival, float] | None, plan: Plan,
              seen: list[Disagreement]) -> str | None:
    """Where the guard's bans made the plan slower than the best plan they banned, by how
    much and on what evidence (None where they cost nothing measurable)."""
    after = _kept_time(plan)
    if before is None or after is None or after[1] <= before[1] * 1.02:
        return None
    evidence = "; ".join(str(d) for d in seen[:3])
    return (f"the numeric guard's bans cost {after[1] - before[1]:.3f} ms: the plan kept "
            f"runs {after[1]:.3f} ms, the fastest plan before them ({before[0]}) "
            f"{before[1]:.3f} ms; evidence: {evidence}")


def _verified(ctx: PlacementContext, plan: Plan, when: str) -> None:
    """The plan verifier after a placement step, with the `verify` option (debug mode)."""
    if ctx.config.options.verify:
        verify_plan(ctx.model, plan, ctx.config, ctx.pins, when=when)


def replace_lost(model: Model, config: CompilationConfig, plan: Plan,
                 lost: list[str]) -> Plan:
    """`plan` with the partitions of the `lost` backends placed again (greedy, on the
    remaining targets and the reference); the other partitions are pinned where they were.
    How an artifact is loaded when a backend it was saved with is missing here."""
    kept = [p for p in plan.partitions if p.kind not in lost]
    remaining = [str(t) for t in config.priority if t.kind.name not in lost] or ["reference"]
    fallback_config = CompilationConfig.create(
        remaining, config.host,
        **{**config.options.to_dict(), "fallback": True, "partitioner": "greedy"})
    pins = {node: p.target for p in kept for node in p.nodes}
    table = SupportTable.build(model, fallback_config, None,
                               resolve_pins(model.dataflow, pins or None))
    placed = place_greedy(model, table, 1)
    return placed.with_stats(fallback_from=tuple(sorted(lost)))


__all__ = ["CALIBRATION_ROUNDS", "Placement", "context_for", "measurer_for", "overhead_estimate",
           "place", "replace_lost"]
