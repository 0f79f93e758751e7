"""`tessera.partition`: choose a plan. Greedy places by priority; Collage searches measured
candidates, and then its plan is timed end to end against the greedy plan and the best
single-target plan, and the fastest is kept: the search never hands out a slower plan than
those, within the noise of the measurement."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tessera.backends._inputs import random_inputs
from tessera.config import CompilationConfig
from tessera.ir import Model, load_model
from tessera.placement import (
    Cost,
    CostDB,
    Plan,
    SupportTable,
    place_collage,
    place_greedy,
    resolve_pins,
)
from tessera.placement._collage import Progress
from tessera.placement._costdb import fingerprint
from tessera.placement._pins import PinSpec
from tessera.placement._support import Banned
from tessera.runtime._remember import remembered_plan, search_key


def as_config(config: Any, options: Mapping[str, Any]) -> CompilationConfig:
    if isinstance(config, CompilationConfig):
        return CompilationConfig.create(config, **options) if options else config
    return CompilationConfig.create(config if config is not None else "onnxruntime", **options)


def partitioner_for(config: CompilationConfig) -> str:
    chosen = config.options.partitioner
    if chosen == "auto":
        return "collage" if len(config.priority) > 1 else "greedy"
    return chosen


def partition(model: Any, config: Any = None, partitioner: str | None = None,
              pins: PinSpec = None, progress: Progress | None = None,
              **options: Any) -> Plan:
    """The plan for `model` (a path, bytes, ModelProto or loaded Model) on `config`'s
    targets. `partitioner` is 'collage' or 'greedy' (default: the config's, where 'auto' is
    collage with several targets); `pins` maps node names or 're:<regex>' to targets."""
    if partitioner is not None:
        options = {**options, "partitioner": partitioner}
    config = as_config(config, options)
    loaded = model if isinstance(model, Model) else load_model(model, verify=config.options.verify)
    return place(loaded, config, pins, progress=progress)[0]


def place(model: Model, config: CompilationConfig, pins: PinSpec = None,
          banned: Banned | None = None, progress: Progress | None = None
          ) -> tuple[Plan, Any]:
    """The plan, and its CompiledModel when the end-to-end guard already built it. A Collage
    plan is remembered in the cost database: a warm compile of the same model, config and
    backend versions on this machine skips the search."""
    flow_options = config.options
    resolved = resolve_pins(model.dataflow, pins)
    if partitioner_for(config) == "greedy":
        table = SupportTable.build(model, config, banned, resolved)
        return place_greedy(model, table, flow_options.min_block_size), None
    db = CostDB()
    key = search_key(model, config, resolved, banned)
    remembered = remembered_plan(db, key)
    if remembered is not None:
        return remembered, None
    table = SupportTable.build(model, config, banned, resolved)
    overhead_key = _overhead_key(config)
    remembered_overhead = db.get(*overhead_key)
    overhead = remembered_overhead.ms if remembered_overhead and remembered_overhead.ms else 0.0
    rounds, first_stats = 0, None
    while True:
        searched, known = place_collage(
            model, table, db=db, max_candidate_size=flow_options.max_candidate_size,
            min_block_size=flow_options.min_block_size,
            foreign_costs=flow_options.foreign_costs, progress=progress,
            isolate=flow_options.isolate, measure_timeout=flow_options.measure_timeout,
            partition_overhead_ms=overhead)
        plan, built = _keep_fastest(model, config, searched, known, db)
        rounds += 1
        first_stats = first_stats or searched.stats  # where the measuring happened
        estimate = _overhead_estimate(searched, plan.stats["end_to_end_ms"].get("collage"))
        if estimate is None:
            break
        db.put(*overhead_key, Cost(estimate, 0.0, 1))
        # the searched plan lost end to end because its chain cost more than its parts:
        # search again, charging each partition what the chain showed it costs
        if plan.stats["kept"] == "collage" or rounds > _CALIBRATION_ROUNDS or \
                estimate <= overhead * 1.25 + 1e-3:
            break
        overhead = estimate
    measured = {k: first_stats[k] for k in _MEASURING_STATS if first_stats and k in first_stats}
    plan = replace(plan, stats={**plan.stats, **measured, "calibration_rounds": rounds,
                                "plan_key": key})
    # failed candidates are in the database as well, so a new search would find this plan
    db.put_plan(key, plan.to_json(indent=None))
    if built is not None:
        built.plan = plan
    return plan, built


def versions(kinds: list[str]) -> str:
    """'kind version, ...' of the backend libraries: part of every key a result depends on."""
    from tessera import backends

    return ", ".join(f"{k} {backends.get(k).is_available().version}" for k in kinds)


_CALIBRATION_ROUNDS = 2  # searches again after the first; each costs one end-to-end timing
_MEASURING_STATS = ("candidates", "measurements", "cache_hits", "measure_seconds", "invalid",
                    "invalid_examples")


def _overhead_key(config: CompilationConfig) -> tuple[str, str, str]:
    """The cost-database key of the per-partition chain overhead among these backends."""

    kinds = sorted({t.kind.name for t in config.priority})
    return "overhead:" + ",".join(kinds), "per-partition", fingerprint("chain", versions(kinds))


def _overhead_estimate(searched: Plan, measured: Any) -> float | None:
    """What each partition of the searched plan cost beyond its part measured alone."""
    parts = searched.partitions
    if len(parts) < 2 or not isinstance(measured, float) or \
            any(p.cost_ms is None for p in parts):
        return None
    alone = sum(float(p.cost_ms or 0.0) for p in parts)
    return round(max(0.0, (measured - alone) / len(parts)), 4)


def _keep_fastest(model: Model, config: CompilationConfig, searched: Plan,
                  known: Mapping[str, Plan], db: CostDB | None = None) -> tuple[Plan, Any]:
    """Time the rival plans end to end and keep the fastest. Each plan's end-to-end latency
    is a record of the cost database too, so a warm compile times nothing and builds only
    the winner."""
    from tessera.runtime._compiled import CompiledModel, build_partitions, policy_for

    rivals = rival_plans(searched, known)
    timings: dict[str, float | str] = {}
    built: dict[str, Any] = {}
    keys: dict[str, tuple[str, str, str]] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, plan in rivals.items():
        shape = tuple((p.target, p.nodes) for p in plan.partitions)
        if shape in seen:  # the same plan: time it once
            timings[name] = f"same plan as {seen[shape]}"
            continue
        seen[shape] = name
        if name != "collage" and plan.cost_ms is None:  # never run what failed measuring
            timings[name] = "skipped: one of its partitions failed when measured"
            continue
        policy = policy_for(config, plan)  # a single-target plan runs with native settings
        keys[name] = _plan_key(model, plan, policy.name)
        remembered = db.get(*keys[name]) if db is not None else None
        if remembered is not None and remembered.ms is not None:
            timings[name] = remembered.ms
            continue
        parts, failures = build_partitions(model, plan, policy,
                                           warm=config.options.compile_cache)
        if failures:
            timings[name] = "failed to build: " + "; ".join(failures.values())[:200]
            continue
        built[name] = CompiledModel(model, config, plan, parts, policy)
    for name, latency in race(built).items():
        timings[name] = latency
        if db is not None and latency != float("inf"):
            db.put(*keys[name], Cost(latency, 0.0, 1))
    measured = {n: t for n, t in timings.items() if isinstance(t, float)}
    if not measured:
        return searched, None
    # ties favour the search's plan, then greedy: the order of `rivals`
    winner = min(measured, key=lambda n: (measured[n], list(rivals).index(n)))
    chosen = rivals[winner]
    stats = {**searched.stats, "end_to_end_ms": timings, "kept": winner}
    plan = replace(chosen, partitioner="collage", stats=stats,
                   decisions={**chosen.decisions, **(
                       {} if winner == "collage" else
                       {n: f"{d}; kept from the {winner} plan, faster end to end"
                        for n, d in chosen.decisions.items()})},
                   reasons=searched.reasons)
    kept = built.get(winner)
    if kept is None:  # remembered, not built: the caller builds it
        return plan, None
    kept.plan = plan
    return plan, kept


# Two backends often run a whole model within a few percent of each other (BERT-base:
# OpenVINO 141 ms, ONNX Runtime 146 ms), closer than the costs summed from partitions can
# tell apart: every single-target plan modelled that close to the best is raced as well.
_NEAR_SINGLE = 1.15
_MAX_SINGLES = 3
_CLOSE = 0.05  # a race this close gets more rounds


def rival_plans(searched: Plan, known: Mapping[str, Plan]) -> dict[str, Plan]:
    """The plans to race end to end: the searched plan, greedy, and the single-target plans
    modelled within `_NEAR_SINGLE` of the best of them (at most `_MAX_SINGLES`)."""
    rivals = {"collage": searched, "greedy": known["greedy"]}
    singles = sorted((n for n in known if n.startswith("only ")),
                     key=lambda n: (_modelled(known[n]), n))
    if singles:
        best = _modelled(known[singles[0]])
        for name in singles[:_MAX_SINGLES]:
            if name == singles[0] or _modelled(known[name]) <= best * _NEAR_SINGLE:
                rivals[name] = known[name]
    return rivals


def race(compiled: Mapping[str, Any], rounds: int = 3, seconds: float = 0.3,
         close: float = _CLOSE, extra_rounds: int = 2) -> dict[str, float]:
    """Each compiled plan's latency (ms): the lowest of its block medians over `rounds`
    rounds, and `extra_rounds` more when the two fastest are within `close` of each other.
    A plan runs alone for a block, so that another backend's spinning pool never slows its
    runs, and the rounds give every plan its share of the quiet moments: on a shared
    machine other work only ever slows a block (blocks of one plan swung between 14 and
    28 ms here), so a plan's quietest block is the fairest to compare."""
    from tessera.runtime._timing import time_block

    feeds = {name: random_inputs(c) for name, c in compiled.items()}
    medians: dict[str, list[float]] = {name: [] for name, f in feeds.items() if f is not None}

    def one_round(first: bool) -> None:
        for name in medians:
            run = functools.partial(compiled[name].run, feeds[name])
            medians[name].append(time_block(run, warmup=2 if first else 1, min_runs=2,
                                            seconds=seconds).median_ms)

    for round_index in range(rounds):
        one_round(round_index == 0)
    best = sorted(min(m) for m in medians.values() if m)
    if len(best) > 1 and best[1] <= best[0] * (1 + close):
        for _ in range(extra_rounds):
            one_round(False)
    return {name: (round(min(medians[name]), 4) if medians.get(name)
                   else float("inf")) for name in compiled}


def _plan_key(model: Model, plan: Plan, policy: str) -> tuple[str, str, str]:
    """(tuning key, structure, fingerprint) of a whole plan's end-to-end latency."""
    import hashlib

    from tessera.target import Target

    shape = json.dumps([policy, [(p.target, p.nodes) for p in plan.partitions]])
    kinds = sorted({Target(p.target).kind.name for p in plan.partitions})
    return ("plan:" + hashlib.sha256(shape.encode()).hexdigest()[:24],
            model.structural_hash(), fingerprint("end-to-end", versions(kinds)))


def _modelled(plan: Plan) -> float:
    cost = plan.cost_ms
    return float("inf") if cost is None else cost
