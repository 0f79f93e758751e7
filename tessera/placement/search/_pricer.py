"""Pricing Collage's candidates: each priced once per compile, remembered under its structure
(here, or in the cost database) or measured through the context's `Measurer`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera import backends
from tessera.ir import NodeSet
from tessera.placement._context import PlacementContext
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import Job, Measurer
from tessera.placement.record._costdb import Cost, fingerprint
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Plan
from tessera.placement.record._records import InvalidCandidate
from tessera.placement.record._rival import Rival
from tessera.placement.record._stats import MeasuringStats
from tessera.placement.record._trail import SoFar
from tessera.placement.search._candidates import Candidate
from tessera.target import Target


class Pricer:
    """Candidates' costs, each priced once per compile: remembered under its structure
    (here, or in the cost database), or measured. The measurer is given the batch of what
    is not known at once (in order of target, so that one backend's spinning pool never
    slows the next one's measurements on one machine; several machines measure several at
    a time), and each record is kept as its answer comes, under the fingerprint of the
    machine that measured it. A model with symbolic dimensions is measured at each of its
    `points` (a static view each, so the cost database keys each cost by its shapes); a
    candidate's cost is the points' weighted mean, and it fails where any point fails."""

    def __init__(self, ctx: PlacementContext) -> None:
        self.model, self.db, self.run = ctx.model, ctx.db, ctx.measurer
        self.foreign = ctx.config.options.foreign_costs
        self.progress, self.points = ctx.progress, ctx.points
        self.views = ctx.points.views
        self.costs: dict[tuple[NodeSet, str], Cost] = {}
        self.at_points: dict[tuple[NodeSet, str], tuple[float | None, ...]] = {}
        self.candidates: list[Candidate] = []  # in the order first priced
        self._memo: dict[tuple[str, str], Cost] = {}
        self._keys: dict[str, _Key] = {}
        self.hits = self.measured = 0
        self.seconds = 0.0
        self.ahead = 0  # candidates the caller will ask for after these (for progress)

    def stats(self, invalid: int, examples: tuple[InvalidCandidate, ...]) -> MeasuringStats:
        return MeasuringStats(len(self.costs), self.measured, self.hits,
                              round(self.seconds, 3), invalid, examples)

    def so_far(self, plans: Mapping[Rival, Plan], overhead_ms: float) -> SoFar:
        """The known plans whose every partition has a cost among those priced so far, with
        those costs, and their modelled cost (`overhead_ms` per partition): what an
        interrupt may keep."""
        whole: dict[Rival, Plan] = {}
        modelled: dict[Rival, float] = {}
        flow = self.model.dataflow
        for rival, plan in plans.items():
            found = [self.costs.get((flow.node_set(p.nodes), str(p.target)))
                     for p in plan.partitions]
            if not found or not all(k is not None and k.ok for k in found):
                continue
            ms = [float(k.ms or 0.0) for k in found if k is not None]
            whole[rival] = replace(plan, partitions=tuple(
                replace(p, cost_ms=m) for p, m in zip(plan.partitions, ms, strict=True)))
            modelled[rival] = sum(ms) + overhead_ms * len(ms)
        return SoFar(whole, modelled, len(self.costs), self.measured)

    def price(self, candidates: list[Candidate], run: Measurer | None = None) -> list[Cost]:
        """Each candidate's cost, in the order given (those not known measured by `run`,
        by default the pricer's measurer)."""
        run = run or self.run
        fresh = [c for c in dict.fromkeys(candidates) if (c.mask, str(c.target))
                 not in self.costs]
        total = len(self.costs) + len(fresh) + self.ahead
        if len(fresh) > 1:  # a batch: its own rate of progress
            self.progress.begin(Phase.MEASURING, total, done=len(self.costs))
        pending = [self._looked_up(c) for c in sorted(fresh, key=lambda c: str(c.target))]
        jobs, owners = self._jobs(pending, run)
        done = len(self.costs)
        for p in pending:
            if not p.parts:
                done += 1
                self.progress.step(Phase.MEASURING, done, total, str(p.candidate.target))
        began = time.perf_counter()
        for index, measured in run.measure_all(jobs):
            owner, slots = owners[index]
            for slot, cost in zip(slots, measured.costs, strict=True):
                owner.known[slot] = cost
                if self.db is not None:  # kept as it comes: an error later loses nothing
                    self.db.put(owner.key.tuning, owner.structures[slot],
                                measured.fingerprint or owner.key.write, cost)
            owner.waiting -= 1
            self.measured += len(slots)
            if not owner.waiting:
                done += 1
                self.progress.step(Phase.MEASURING, done, total, str(owner.candidate.target))
        self.seconds += time.perf_counter() - began
        for p in pending:
            self._settled(p)
        return [self.costs[(c.mask, str(c.target))] for c in candidates]

    def _looked_up(self, candidate: Candidate) -> _Pending:
        """What is known of the candidate at each point, and what is to be measured."""
        key = self._key(candidate.target)
        structures = [view.structural_hash(candidate.mask) for _, view in self.views]
        known: list[Cost | None] = []
        for structure in structures:
            cost = self._memo.get((key.tuning, structure))
            if cost is None and self.db is not None:
                cost = next((found for finger in key.read if (found := self.db.get(
                    key.tuning, structure, finger)) is not None), None)
                if cost is None and self.foreign:
                    cost = self.db.get_foreign(key.tuning, structure)
            self.hits += cost is not None
            known.append(cost)
        return _Pending(candidate, key, structures, known)

    def _jobs(self, pending: list[_Pending], run: Measurer
              ) -> tuple[list[Job], list[tuple[_Pending, list[int]]]]:
        """The measurements the pending candidates need, each once: a structure two
        candidates share is measured for the first (the other waits for it). At several
        points, a measurer that can compiles the candidate once and times it at each."""
        jobs: list[Job] = []
        owners: list[tuple[_Pending, list[int]]] = []
        first: dict[tuple[str, tuple[str, ...]], _Pending] = {}
        for p in pending:
            missing = [i for i, cost in enumerate(p.known) if cost is None]
            if not missing:
                continue
            same = (p.key.tuning, tuple(p.structures[i] for i in missing))
            if same in first:
                p.copies = first[same]
                self.hits += len(missing)  # priced by the first, as the memo would
                continue
            first[same] = p
            mask, target = p.candidate.mask, p.candidate.target
            if len(missing) > 1 and run.points_in_one_compile:
                inputs = self.model.dataflow.boundary(mask)[0]
                parts = [(Job(self.model, mask, target, tuple(
                    self.points.shapes(i, inputs) for i in missing)), missing)]
            else:
                parts = [(Job(self.views[i][1], mask, target), [i]) for i in missing]
            for job, slots in parts:
                jobs.append(job)
                owners.append((p, slots))
            p.parts = p.waiting = len(parts)
        return jobs, owners

    def _settled(self, p: _Pending) -> None:
        """The candidate's costs recorded, once every measurement it needed is in."""
        if p.copies is not None:
            p.known = [k if k is not None else c for k, c in zip(p.known, p.copies.known,
                                                                  strict=True)]
        costs: list[Cost] = []
        for (point, _), structure, cost in zip(self.views, p.structures, p.known,
                                               strict=True):
            assert cost is not None
            self._memo[(p.key.tuning, structure)] = cost
            if not cost.ok and point.sizes:
                cost = replace(cost, invalid=f"at {point}: {cost.invalid}")
            costs.append(cost)
            if not cost.ok:
                break
        key = (p.candidate.mask, str(p.candidate.target))
        self.costs[key] = _combined(costs, self.points)
        self.at_points[key] = tuple(k.ms for k in costs) if len(costs) == len(self.views) \
            else ()
        self.candidates.append(p.candidate)

    def _key(self, target: Target) -> _Key:
        if str(target) not in self._keys:
            version = backends.get(target.kind.name).is_available().version
            here = fingerprint(target.kind.name, version)
            # the cost of what is built, kept under the fingerprints of where it is measured
            built, read = self.run.built_for(target), self.run.fingerprints(target)
            self._keys[str(target)] = _Key(built.tuning_key(), here, read)
        return self._keys[str(target)]


@dataclass(frozen=True)
class _Key:
    tuning: str
    write: str  # the fingerprint of a cost measured here
    read: tuple[str, ...]  # the fingerprints whose records price it


@dataclass(eq=False)
class _Pending:
    candidate: Candidate
    key: _Key
    structures: list[str]
    known: list[Cost | None]
    parts: int = 0  # measurements it waits for
    waiting: int = 0
    copies: _Pending | None = None  # the candidate of the same structure measured for it


def _combined(found: list[Cost], points: Points) -> Cost:
    """One cost for the profile: the first failure, or the points' weighted mean."""
    failed = next((k for k in found if not k.ok), None)
    if failed is not None or len(found) == 1:
        return failed or found[0]
    mean = points.mean([float(k.ms or 0.0) for k in found])
    return Cost(round(mean, 6), max(k.spread for k in found), min(k.samples for k in found))


__all__ = ["Pricer"]
