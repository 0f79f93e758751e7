"""What placement remembers between compiles, and under which keys: a searched plan (so a
warm compile skips the support table, the search and, once it passed, the numeric guard),
each rival plan's end-to-end figures (latency, throughput), and the chain overhead
calibrated for a set of backends. Every key holds everything its record depends on."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from tessera import backends
from tessera._private.version import __version__
from tessera.backends import ThreadPolicy
from tessera.config import CompilationConfig
from tessera.errors import PartitionError
from tessera.ir import Model
from tessera.placement.record._costdb import CostDB, fingerprint
from tessera.placement.record._plan import Banned, Plan
from tessera.placement.record._stats import (
    CoverStats,
    GuardVerdict,
    MeasuringStats,
    PlanSource,
)
from tessera.target import Target


def versions(kinds: Sequence[str]) -> str:
    """'kind version, ...' of the backend libraries: part of every key a result depends on."""
    return ", ".join(f"{k} {backends.get(k).is_available().version}" for k in kinds)


def search_key(model: Model, config: CompilationConfig, pins: Mapping[int, Target],
               banned: Banned | None) -> str:
    """What a searched plan depends on: the model's structure, node and value names, the
    config's cache key, pins, bans, the machine and every backend's version."""
    by_kind = {t.kind.name: backends.get(t.kind.name).is_available().version
               for t in config.priority}
    # a plan names values as well as nodes: models of one structure whose values are named
    # otherwise (onnx's function expansions, say) must not share it
    wiring = [[list(n.input), list(n.output)] for n in model.dataflow.nodes]
    payload = [__version__, model.structural_hash(), model.dataflow.names, wiring,
               config.cache_key(), [str(t) for t in config.priority],
               sorted((i, str(t)) for i, t in pins.items()),
               sorted((n, sorted(b.items())) for n, b in (banned or {}).items()),
               fingerprint("plan", json.dumps(by_kind, sort_keys=True))]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:32]


def recall(db: CostDB, key: str) -> Plan | None:
    """The plan remembered under `key`, marked as remembered; None if there is none."""
    text = db.get_plan(key)
    if text is None:
        return None
    try:
        plan = Plan.from_json(text)
    except PartitionError:  # unreadable: search again, and the search overwrites it
        return None
    # nothing measured: every candidate's cost is known, through the plan they made
    stats = plan.stats
    priced = stats.measuring.candidates if stats.measuring is not None else 0
    return plan.with_stats(
        measuring=replace(stats.measuring or MeasuringStats(), measurements=0,
                          cache_hits=priced, seconds=0.0),
        cover=replace(stats.cover or CoverStats(), seconds=0.0),
        source=PlanSource(key, "hit: the search was skipped"))


def remember(db: CostDB, key: str, plan: Plan) -> Plan:
    plan = plan.with_stats(source=replace(plan.stats.source or PlanSource(), key=key))
    db.put_plan(key, plan.to_json(indent=None))
    return plan


def remember_guard_passed(db: CostDB, plan: Plan) -> Plan:
    """Record that the numeric guard passed the plan's partitions, in the remembered plan
    too: a warm compile then skips the guard (the verdict is on the structure and the
    backends; weights of the same structure are trusted alike)."""
    plan = replace(plan, stats=plan.stats.with_guard(verdict=GuardVerdict.PASSED))
    key = plan.stats.source.key if plan.stats.source is not None else None
    text = db.get_plan(key) if key is not None else None
    if key is not None and text is not None:
        remembered = Plan.from_json(text)
        passed = remembered.stats.with_guard(verdict=GuardVerdict.PASSED)
        db.put_plan(key, replace(remembered, stats=passed).to_json(indent=None))
    return plan


def latency_key(model: Model, plan: Plan, policy: ThreadPolicy, figure: str
                ) -> tuple[str, str, str]:
    """(plan key, model structure, fingerprint) of one end-to-end figure of a whole plan:
    `figure` names it with everything it depends on (`Objective.figure_key`: the objective,
    the percentile, the concurrency), so figures of different objectives never mix."""
    shape = json.dumps([policy.name, [(str(p.target), p.nodes) for p in plan.partitions],
                        figure])
    return (hashlib.sha256(shape.encode()).hexdigest()[:24], model.structural_hash(),
            fingerprint("end-to-end", versions(plan.kinds)))


def overhead_key(config: CompilationConfig) -> tuple[str, str]:
    """(backend set, fingerprint) of the per-partition chain overhead among these backends."""
    kinds = sorted(dict.fromkeys(t.kind.name for t in config.priority))
    return ",".join(kinds), fingerprint("chain", versions(kinds))


__all__ = ["latency_key", "overhead_key", "recall", "remember", "remember_guard_passed",
           "search_key", "versions"]
