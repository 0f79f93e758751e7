"""One-thread choices for the chosen partitions. A partition of a few dozen microseconds
gains nothing from a pool of threads: waking the pool and joining it cost more than the
split work saves. Measured here, ResNet-tiny cut into ten ONNX Runtime/OpenVINO partitions
ran in 0.82 ms with one thread each and in 1.22 ms with two.

So after the search, each chosen partition cheaper than `SMALL_MS` is measured again on one
thread, and keeps that choice when it is faster alone, or, in a plan of several partitions,
within `CHAIN_TOLERANCE` of it: a pool measured alone wakes warm, but in a chain it wakes
after another library's workers, which may still spin (OpenVINO's TBB workers do). Measured
here, bert-tiny in ten ONNX Runtime/OpenVINO partitions ran in 1.0 ms or in 3.9 ms with two
threads each, depending on what ran in the process before; with one-thread OpenVINO parts,
1.0-1.1 ms either way. The choice is an explicit attribute of the
partition's target (`onnxruntime -num-threads=1`), so the plan shows it and the thread policy
leaves it alone. Only backends whose thread count belongs to one compiled partition take part
(not torch, whose count is process-wide), and never a target whose count the user set
or a partition with pinned nodes."""

from __future__ import annotations

from tessera import backends
from tessera.backends._threads import core_budget
from tessera.ir import NodeSet
from tessera.placement.record._costdb import Cost
from tessera.placement.search._candidates import Candidate
from tessera.placement.search._settings import settings_base
from tessera.target import Target

SMALL_MS = 0.25
CHAIN_TOLERANCE = 1.10
_ATTR = "num-threads"


def one_thread(target: Target) -> Target | None:
    """`target` on one thread, or None where that is not a choice tessera may make."""
    if _ATTR not in target.kind.schema or _ATTR in target.explicit_attrs:
        return None
    if not backends.get(target.kind.name).per_partition_threads or core_budget() <= 1:
        return None
    return target.with_attrs(**{_ATTR: 1})


def base_target(target: str) -> str:
    """The target a choice was made from (itself when it is not one): a one-thread
    choice's, or a runtime-settings choice's (`_settings.settings_base`)."""
    parsed = Target(target)
    base = settings_base(parsed)
    if base.explicit_attrs.get(_ATTR) == 1:
        base = base.with_attrs(**{_ATTR: 0})
    return target if base == parsed else str(base)


def small_candidates(chosen: list[tuple[Candidate, Cost]], pinned: NodeSet = 0
                     ) -> list[tuple[int, Candidate]]:
    """(index in `chosen`, its one-thread choice) for each partition worth trying; a
    partition holding `pinned` nodes keeps the target exactly as pinned."""
    found = []
    for i, (candidate, cost) in enumerate(chosen):
        if cost.ms is None or cost.ms >= SMALL_MS or candidate.mask & pinned:
            continue
        alone = one_thread(candidate.target)
        if alone is not None:
            found.append((i, Candidate(candidate.mask, alone, candidate.origin)))
    return found


def prefer_one_thread(one_ms: float, pooled_ms: float, partitions: int) -> bool:
    """Whether a partition measured at `one_ms` on one thread and `pooled_ms` with its
    pool (each alone) should run on one thread in a plan of `partitions` partitions."""
    limit = pooled_ms * (CHAIN_TOLERANCE if partitions > 1 else 1.0)
    return one_ms < limit


def keep_faster(chosen: list[tuple[Candidate, Cost]], tried: list[tuple[int, Candidate]],
                costs: list[Cost]) -> tuple[list[tuple[Candidate, Cost]], int]:
    """`chosen` with each one-thread choice kept where `prefer_one_thread`, and how many were."""
    kept = list(chosen)
    count = 0
    for (i, alone), cost in zip(tried, costs, strict=True):
        if cost.ok and cost.ms is not None and prefer_one_thread(
                cost.ms, float(chosen[i][1].ms or 0.0), len(chosen)):
            kept[i] = (alone, cost)
            count += 1
    return kept, count
