"""Remembered plans: a Collage plan is kept in the cost database under everything it
depends on, so a warm compile skips the support table, the search and, once the numeric
guard has passed the plan, the guard too."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tessera.config import CompilationConfig
from tessera.errors import PartitionError
from tessera.ir import Model
from tessera.placement import CostDB, Plan
from tessera.placement._costdb import fingerprint
from tessera.placement._support import Banned


def remember_guard_passed(plan: Plan) -> Plan:
    """Record that the numeric guard passed the plan's partitions, in the remembered plan
    too: a warm compile then skips the guard (the verdict is on the structure and the
    backends; weights of the same structure are trusted alike)."""
    plan = replace(plan, stats={**plan.stats, "numeric_guard": "passed"})
    key = plan.stats.get("plan_key")
    db = CostDB()
    text = db.get_plan(key) if key else None
    if key and text is not None:
        data = json.loads(text)
        data["stats"]["numeric_guard"] = "passed"
        db.put_plan(key, json.dumps(data))
    return plan


def search_key(model: Model, config: CompilationConfig, pins: Mapping[int, Any],
               banned: Banned | None) -> str:
    """What a searched plan depends on: the model's structure and node names, the config's
    cache key, pins, bans, the machine and every backend's version."""
    import tessera
    from tessera import backends

    versions = {t.kind.name: backends.get(t.kind.name).is_available().version
                for t in config.priority}
    payload = [tessera.__version__, model.structural_hash(), model.dataflow.names,
               config.cache_key(), [str(t) for t in config.priority],
               sorted((i, str(t)) for i, t in pins.items()),
               sorted((n, sorted(b.items())) for n, b in (banned or {}).items()),
               fingerprint("plan", json.dumps(versions, sort_keys=True))]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:32]


def remembered_plan(db: CostDB, key: str) -> Plan | None:
    text = db.get_plan(key)
    if text is None:
        return None
    try:
        plan = Plan.from_json(text)
    except PartitionError:  # unreadable: search again, and the search overwrites it
        return None
    # nothing measured: every candidate's cost is known, through the plan they made
    return replace(plan, stats={**plan.stats, "measurements": 0,
                                "cache_hits": plan.stats.get("candidates", 0),
                                "plan_cache": "hit: the search was skipped", "plan_key": key})
