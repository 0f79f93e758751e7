"""Greedy placement, with ONNX Runtime's and tvmc's semantics: walk the targets in priority
order (the order the config lists them); each claims the maximal regions of unclaimed nodes
it supports, as long as the graph of partitions stays acyclic. Regions smaller than
min_block_size are left to later targets; what no one claims goes to the reference fallback
(CPU nodes only). A node pinned to a device is claimed by the first of that device's backends
in priority order that runs it."""

from __future__ import annotations

from tessera.ir import Model, members
from tessera.placement.record._plan import Plan, make_partitions
from tessera.placement.record._stats import CoverStats, MeasuringStats, SearchStats
from tessera.placement.search._groups import GroupGraph, fuse
from tessera.placement.search._support import SupportTable
from tessera.target import Target


def place_greedy(model: Model, table: SupportTable, min_block_size: int = 1) -> Plan:
    flow = model.dataflow
    groups = GroupGraph(flow)
    owner: list[Target | None] = [None] * len(flow)
    decisions: dict[str, str] = {}
    last = len(table.targets) - 1
    for rank, target in enumerate(table.targets):
        mine = [i for i in range(len(flow)) if owner[i] is None and target in table.allowed[i]
                and table.pinned.get(i, target) == target]
        for group in fuse(groups, mine):
            mask = groups.masks[group]
            size = bin(mask).count("1")
            pinned = any(i in table.pinned for i in members(mask))
            if size < min_block_size and rank < last and not pinned and _has_later(
                    table, mask, rank):
                groups.split(group)
                for i in members(mask):
                    decisions[flow.names[i]] = (
                        f"{target} skipped: its region here has {size} node(s), below "
                        f"min_block_size {min_block_size}")
                continue
            for i in members(mask):
                owner[i] = target
                device = f"pinned to {table.devices[i]}; " if i in table.devices else ""
                decisions[flow.names[i]] = (
                    f"pinned to {target}" if i in table.pinned else
                    f"{device}greedy: {target} is the first target in priority order that "
                    "runs it"
                    + (f" ({decisions[flow.names[i]]})" if flow.names[i] in decisions else ""))
    ordered = [(mask, owner[next(members(mask))], None) for mask in groups.groups_in_order()]
    parts = make_partitions(flow, [(m, t, c) for m, t, c in ordered if t is not None])
    return Plan(parts, "greedy", table.reasons, decisions,
                SearchStats(measuring=MeasuringStats(), cover=CoverStats(seconds=0.0)))


def _has_later(table: SupportTable, mask: int, rank: int) -> bool:
    """Every node of the region has a later target to go to."""
    return all(any(table.targets.index(t) > rank for t in table.allowed[i])
               for i in members(mask))
