"""The placement decision, from the model to the plan kept, in one place:

1. the support table (every backend's answer per node, pins, bans);
2. greedy placement, or Collage: a remembered plan, else candidates, measurement and the
   search;
3. the end-to-end race of the searched plan against its rivals (through a `Builder`);
4. calibration: when the searched chain lost because it cost more than its parts, the
   overhead it showed is charged per partition and the search runs again;
5. the numeric guard: a partition that fails to build is banned from its backend, and the
   smallest subgraph on which it disagrees with the consensus oracle is banned from it; the
   decision is then made again;
6. remembering the plan, so a warm compile repeats none of it.

`place` returns a `Placement`: the plan, its statistics, and the built plan when it built
one (so the runtime never compiles the winner twice)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera._private.timing import Clock
from tessera.config import CompilationConfig
from tessera.config._objective import Objective
from tessera.errors import InterruptedCompile
from tessera.ir import Model, Samples
from tessera.oracle import Disagreement
from tessera.placement._interrupted import keep_fp32, keep_interrupted, stopped
from tessera.placement.judge._guard import Finding, guard
from tessera.placement.judge._precision import precision_setup, search_precision
from tessera.placement.judge._race import SEARCHED, keep_fastest
from tessera.placement.judge._remote import RaceJob, race_request
from tessera.placement.measure._local import LocalMeasurer
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import Measurer
from tessera.placement.record._builder import Builder, Built
from tessera.placement.record._costdb import CostDB
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Plan
from tessera.placement.record._progress import ProgressLike, Reporter
from tessera.placement.record._remembered import (
    overhead_key,
    recall,
    remember,
    remember_guard_passed,
    search_key,
)
from tessera.placement.record._stats import GUARD_PASSED, PrecisionRecord, SearchStats, ShapesRecord
from tessera.placement.record._trail import Finished, Kept
from tessera.placement.search._collage import UnmeasuredNodes, place_collage
from tessera.placement.search._device_targets import assign_devices, config_devices, device_for
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


def place(model: Model, config: CompilationConfig, *, pins: PinSpec = None,
          builder: Builder | None = None, build: bool = False,
          measurer: Measurer | None = None, progress: ProgressLike | None = None,
          db: CostDB | None = None, clock: Clock = time.perf_counter,
          samples: Samples | None = None) -> Placement:
    """The plan for `model` on `config`'s targets, each partition with its device target
    (`assign_devices`). With a `builder`, Collage's plan is raced end to end against its
    rivals; with `build` too, the plan kept is built and passes the numeric guard (when the
    config asks for it) before it is returned, and, with `samples` and the config's accuracy
    budget, its precision variants are searched (`_precision.py`). `progress` follows each
    phase (`_progress.py`). An interrupt (KeyboardInterrupt) during the Collage search or the
    precision search keeps the best plan known so far (`_interrupted.py`); elsewhere it is
    an `InterruptedCompile`."""
    report = Reporter.of(progress)
    try:
        placed = _place(model, config, pins=pins, builder=builder, build=build,
                        measurer=measurer or measurer_for(config),
                        progress=report, db=db, clock=clock, samples=samples)
    except InterruptedCompile:
        raise
    except KeyboardInterrupt:
        raise stopped(report) from None
    plan = assign_devices(placed.plan, config)
    return Placement(plan, replace(placed.built, plan=plan) if placed.built else None)


def measurer_for(config: CompilationConfig) -> Measurer:
    """The measurer the config's flow options ask for: this machine's (`isolate`: in the
    worker process), or the nodes of a Ray cluster (`measure=ray`; it connects when it
    first measures, so a remembered plan needs no cluster)."""
    options = config.options
    devices = config_devices(config)
    if options.measure == "ray":
        from tessera.placement.measure._ray import RayMeasurer  # Ray itself loads when it measures

        return RayMeasurer.connect(options.ray_address, options.measure_on,
                                   isolate=options.isolate, timeout_s=options.measure_timeout,
                                   devices=devices)
    return LocalMeasurer(options.isolate, options.measure_timeout, devices=devices)


def _requested_devices(model: Model, config: CompilationConfig,
                       pins: Mapping[int, Target]) -> dict[str, Target]:
    """Node name -> the device target its pin asks for, where that is not the one its
    partition would get anyway (the config's least specialised for the device)."""
    names = model.dataflow.names
    return {names[i]: t for i, t in sorted(pinned_devices(pins).items())
            if t != device_for(config, t.device_type)}


def _greedy_instead(model: Model, config: CompilationConfig,
                    banned: Mapping[str, Mapping[str, str]], pins: Mapping[int, Target],
                    why: str) -> Plan:
    """The greedy plan where Collage could not price every node, each decision saying so."""
    table = SupportTable.build(model, config, dict(banned), pins)
    plan = place_greedy(model, table, config.options.min_block_size)
    note = f" (collage could not decide: {why})"
    return replace(plan, decisions={n: d + note for n, d in plan.decisions.items()})


def _place(model: Model, config: CompilationConfig, *, pins: PinSpec,
           builder: Builder | None, build: bool, measurer: Measurer,
           progress: Reporter, db: CostDB | None, clock: Clock,
           samples: Samples | None) -> Placement:
    resolved = resolve_pins(model.dataflow, pins, config)
    served_targets(model.dataflow.names, config, resolved)  # before any remembered plan
    points = Points.of(model, config)
    collage = config.partitioner == "collage"
    db = db if db is not None or not collage else CostDB()
    banned: dict[str, dict[str, str]] = {}
    seen: list[Disagreement] = []  # what the guard found, over every round
    before_bans: tuple[str, float] | None = None  # the first plan's kept rival and its time
    while True:
        if collage:
            assert db is not None
            try:
                plan, built = _collage(model, config, resolved, banned, builder, measurer,
                                       progress, db, clock, points)
            except UnmeasuredNodes as err:  # what cannot be priced goes by priority
                plan, built = _greedy_instead(model, config, banned, resolved, str(err)), None
            except KeyboardInterrupt:  # the best plan known so far, never remembered
                return Placement(*keep_interrupted(
                    model, config, resolved, banned, builder if build else None, points,
                    progress, _requested_devices(model, config, resolved)))
        else:
            table = SupportTable.build(model, config, banned, resolved)
            plan, built = place_greedy(model, table, config.options.min_block_size), None
            if points.dynamic:
                plan = plan.with_stats(shapes=ShapesRecord(
                    points.labels(), tuple(round(w, 4) for w in points.weights),
                    points.defaulted))
        _verified(model, config, plan, resolved, "after placement")
        requested = _requested_devices(model, config, resolved)
        if requested:  # nodes pinned to a specialised device target: built for it
            plan, built = assign_devices(plan, config, requested), None
        if not build or builder is None:  # nothing to build with: the plan alone
            return Placement(plan, built)
        guarded = config.options.numeric_guard and not plan.stats.guard_passed
        if built is None:
            built = builder.build(model, config, plan)
        verdicts = {i: Finding(plan.partitions[i].nodes, why)
                    for i, why in built.failures.items()}
        if guarded:
            report = guard(model, plan, built.parts, points, progress)
            verdicts.update(report.findings)
            seen += [d for d in report.seen if d not in seen]
        if not verdicts:
            if seen:
                plan = plan.with_stats(disagreements=tuple(seen))
            cost = _ban_cost(before_bans, plan, seen)
            if cost is not None:
                plan = plan.with_stats(guard_cost=cost)
            if guarded:
                plan = remember_guard_passed(db, plan) if db is not None else \
                    plan.with_stats(numeric_guard=GUARD_PASSED)
            placed = Placement(plan, replace(built, plan=plan))
            key = search_key(model, config, resolved, banned)
            try:
                return _with_precision(model, config, placed, builder, samples, db, key,
                                       clock, resolved, progress)
            except KeyboardInterrupt:  # the fp32 plan, built and checked
                return Placement(*keep_fp32(placed.plan, placed.built, progress))
        if before_bans is None:
            before_bans = _kept_time(plan)
        _ban(plan, verdicts, banned)  # each round bans at least one pair: it ends


def _with_precision(model: Model, config: CompilationConfig, placed: Placement,
                    builder: Builder, samples: Samples | None, db: CostDB | None, key: str,
                    clock: Clock, pins: Mapping[int, Target], progress: Reporter
                    ) -> Placement:
    """`placed` or a plan with lower-precision segments that meets the accuracy budget,
    remembered under the fp32 plan's key and the samples, so a warm compile searches
    nothing and quantizes nothing its compile cache holds."""
    point = max(Points.of(model, config).points, key=lambda p: p.weight)
    setup = precision_setup(model, config, samples, point.as_dict())
    if isinstance(setup, str):
        plan = placed.plan.with_stats(precision=PrecisionRecord(f"not tried: {setup}"))
        return Placement(plan, replace(placed.built, plan=plan) if placed.built else None)
    assert placed.built is not None
    config, samples = setup.config, setup.samples
    db = db if db is not None else CostDB()
    key = f"{key}:precision:{samples.digest}"
    remembered = recall(db, key)
    if remembered is not None:
        built = builder.build(model, config, remembered, samples)
        if not built.failures and built.runnable is not None:
            return Placement(remembered, built)
    plan, built = search_precision(model, config, placed.plan, placed.built, builder, samples,
                                   clock, pins, progress, float_only=setup.float_only)
    precision = plan.stats.precision
    if precision is not None:  # which inputs judged it, and under which budget
        judged = (f"{len(samples)} inputs generated in the ranges the model implies"
                  if setup.generated else f"your {len(samples)} samples")
        plan = plan.with_stats(precision=replace(
            precision, inputs=judged, budget=str(config.options.accuracy)))
    plan = remember(db, key, plan)
    return Placement(plan, replace(built, plan=plan))


def _collage(model: Model, config: CompilationConfig, pins: Mapping[int, Target],
             banned: Mapping[str, Mapping[str, str]], builder: Builder | None,
             measurer: Measurer, progress: Reporter, db: CostDB, clock: Clock,
             points: Points) -> tuple[Plan, Built | None]:
    key = search_key(model, config, pins, banned)
    remembered = recall(db, key)
    if remembered is not None:
        return remembered, None
    progress.begin(Phase.SUPPORT)
    table = SupportTable.build(model, config, banned, pins)
    backends_key = overhead_key(config)
    overhead = db.get_overhead(*backends_key) or 0.0
    options = config.options
    rounds, first = 0, None
    while True:
        searched, known = place_collage(
            model, table, db=db, max_candidate_size=options.max_candidate_size,
            fine_everywhere=options.fine_search == "everywhere",
            min_block_size=options.min_block_size, foreign_costs=options.foreign_costs,
            measurer=measurer, progress=progress, partition_overhead_ms=overhead,
            points=points)
        _verified(model, config, searched, pins, "after the Collage search")
        # what an interrupt keeps, until a race ends
        progress.trail.keep(Kept(Finished.SEARCHED, SEARCHED, searched))
        rounds += 1
        first = first or searched.stats  # where the measuring happened
        if builder is None:  # nothing can time plans end to end: the search decides
            plan, built = searched, None
            break
        if not measurer.measures_here:
            # measured elsewhere: the race and the guard run where the costs came from
            plan = _raced_remotely(model, config, searched, known, builder, measurer,
                                   progress)
            built = None
            break
        outcome = keep_fastest(model, config, searched, known, builder, db, clock=clock,
                               points=points, progress=progress)
        plan, built = outcome.plan, outcome.built
        progress.trail.keep(Kept(Finished.RACED, outcome.kept, plan, built))
        _verified(model, config, plan, pins, "after the end-to-end race")
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
    plan = plan.with_stats(candidates=first.candidates, measurements=first.measurements,
                           cache_hits=first.cache_hits, measure_seconds=first.measure_seconds,
                           invalid=first.invalid, invalid_examples=first.invalid_examples,
                           proposals=first.proposals, calibration_rounds=rounds)
    # failed candidates are in the database as well, so a new search would find this plan
    plan = remember(db, key, plan)
    return plan, (replace(built, plan=plan) if built is not None else None)


def _raced_remotely(model: Model, config: CompilationConfig, searched: Plan,
                    known: Mapping[str, Plan], builder: Builder, measurer: Measurer,
                    progress: Reporter) -> Plan:
    """The plan the measuring node's race kept, marked guard-passed where its guard passed
    every partition there (a partition it gives back is checked here again, and banned);
    the searched plan, saying why, where no node could race."""
    progress.begin(Phase.RACE, detail="on the measuring node")
    guard = config.options.numeric_guard
    job = RaceJob(race_request(config, searched, known), type(builder), guard)
    answer = measurer.run_on_node(model, job)
    if isinstance(answer, str):
        return searched.with_stats(end_to_end_ms={SEARCHED: f"not raced: the race on {answer}"},
                                   kept=SEARCHED)
    objective = Objective.of(config.options)
    plan = answer.outcome(objective).plan
    progress.trail.keep(Kept(Finished.RACED, answer.kept, plan))
    if guard and answer.guard is not None and not answer.guard:
        plan = plan.with_stats(numeric_guard=GUARD_PASSED)
    return plan


def overhead_estimate(searched: Plan, measured: float | None) -> float | None:
    """What each partition of the searched plan cost beyond its part measured alone."""
    parts = searched.partitions
    if len(parts) < 2 or measured is None or any(p.cost_ms is None for p in parts):
        return None
    alone = sum(float(p.cost_ms or 0.0) for p in parts)
    return round(max(0.0, (measured - alone) / len(parts)), 4)


def _ban(plan: Plan, verdicts: Mapping[int, Finding], banned: dict[str, dict[str, str]]
         ) -> None:
    """Each finding's nodes leave their partition's target (the rest of it stays)."""
    for index, finding in verdicts.items():
        part = plan.partitions[index]
        if part.kind == FALLBACK.kind.name:
            continue
        for node in finding.nodes:  # a one-thread variant bans the target it came from
            for target in dict.fromkeys((str(part.target), base_target(str(part.target)))):
                banned.setdefault(node, {})[target] = finding.reason


def _kept_time(plan: Plan) -> tuple[str, float] | None:
    """The plan's kept rival and its end-to-end time, where a race timed it."""
    timings, kept = plan.stats.end_to_end_ms or {}, plan.stats.kept
    value = timings.get(kept) if kept is not None else None
    return (str(kept), float(value)) if isinstance(value, float) else None


def _ban_cost(before: tuple[str, float] | None, plan: Plan,
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


def _verified(model: Model, config: CompilationConfig, plan: Plan,
              pins: Mapping[int, Target], when: str) -> None:
    """The plan verifier after a placement step, with the `verify` option (debug mode)."""
    if config.options.verify:
        verify_plan(model, plan, config, pins, when=when)


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


__all__ = ["CALIBRATION_ROUNDS", "Placement", "measurer_for", "overhead_estimate", "place",
           "replace_lost"]
