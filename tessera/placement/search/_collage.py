"""Collage placement: candidates from every target's support table, their measured costs
(from the cost database when known), then the exact cheapest cover. Known plans (greedy, and
each target alone) are candidates too, so the search's optimum is never worse than them under
the cost model, and the cheapest of them is the search's upper bound."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tessera import backends
from tessera.errors import PartitionError
from tessera.ir import Model, NodeSet, members
from tessera.placement.measure._local import LocalMeasurer
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import Job, Measurer
from tessera.placement.record._costdb import Cost, CostDB, fingerprint
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import GREEDY_RIVAL, Plan, make_partitions, single_rival
from tessera.placement.record._progress import ProgressLike, Reporter
from tessera.placement.record._stats import (
    CoarseRecord,
    InvalidCandidate,
    SearchStats,
    ShapesRecord,
)
from tessera.placement.record._trail import SoFar
from tessera.placement.search._candidates import Candidate, generate
from tessera.placement.search._cover import SearchBudgetError, cheapest_cover
from tessera.placement.search._greedy import place_greedy
from tessera.placement.search._priority import TIE, tie_broken, within_noise
from tessera.placement.search._proposed import proposed_candidates
from tessera.placement.search._regions import (
    NEAR_SINGLE,
    REGION_NODES,
    SLOW,
    Slowness,
    coarse_choice,
    optimistic_single,
    regions,
)
from tessera.placement.search._support import FALLBACK, SupportTable
from tessera.placement.search._threads import keep_faster, small_candidates
from tessera.target import Target

FINE_ALL = 2 * REGION_NODES  # models this small are searched node by node everywhere


def single_target_table(table: SupportTable, target: Target) -> SupportTable | None:
    """The table with only `target` (and the fallback, and pins); None if it cannot cover."""
    keep = {str(target), str(FALLBACK), *(str(t) for t in table.pinned.values())}
    allowed = tuple(tuple(t for t in row if str(t) in keep) for row in table.allowed)
    if not all(allowed):
        return None
    targets = tuple(t for t in table.targets if str(t) in keep)
    return replace(table, targets=targets, allowed=allowed)


def known_plans(model: Model, table: SupportTable, min_block_size: int) -> dict[str, Plan]:
    """The greedy plan and each target's single-target plan, by name."""
    plans = {GREEDY_RIVAL: place_greedy(model, table, min_block_size)}
    for target in table.targets:
        alone = single_target_table(table, target)
        if alone is not None and str(target) != str(FALLBACK):
            plans[single_rival(target)] = place_greedy(model, alone, 1)
    return plans


def place_collage(model: Model, table: SupportTable, *, db: CostDB | None,
                  max_candidate_size: int = 3, min_block_size: int = 1,
                  foreign_costs: bool = False, measurer: Measurer | None = None,
                  progress: ProgressLike | None = None, partition_overhead_ms: float = 0.0,
                  points: Points | None = None, fine_everywhere: bool = False
                  ) -> tuple[Plan, dict[str, Plan]]:
    """The searched plan and the known plans it was bounded by (with their modelled costs).
    `partition_overhead_ms` is charged once per partition: a partition measured alone in a
    tight loop runs faster than inside a chain, where its pool must wake and its inputs
    arrive cold (`_decide` calibrates it end to end). `measurer` defaults to the isolated
    worker. A model with symbolic dimensions is measured at each of `points` and a cost is
    the points' weighted mean. A model of more than `FINE_ALL` nodes is first measured in
    regions (`_regions`): only where a mix of targets could win is it searched node by
    node, and targets many times slower everywhere stop being measured; with
    `fine_everywhere`, every model is searched node by node."""
    flow = model.dataflow
    plans = known_plans(model, table, min_block_size)
    index = {name: i for i, name in enumerate(flow.names)}
    report = Reporter.of(progress)
    pricer = _Pricer(model, db, measurer or LocalMeasurer(), foreign_costs, report, points)
    report.trail.priced = lambda: priced_so_far(  # what an interrupt may keep
        plans, pricer.costs, index, partition_overhead_ms, pricer.measured)
    within, coarse, slow, unpromising = (None, None, {}, ()) if fine_everywhere else \
        _coarse(pricer, table, partition_overhead_ms)
    # a single-target plan bound to lose is not priced: it would be neither the bound nor
    # a rival in the race (light_resnet50 on IREE alone: 60 partitions around what it lacks)
    extra = [Candidate(_mask(p.nodes, index), p.target)
             for name, plan in plans.items() if name not in unpromising
             for p in plan.partitions if str(p.target) not in slow]
    proposed, proposals = proposed_candidates(model, table)
    proposed = [c for c in proposed if str(c.target) not in slow]
    candidates = pricer.candidates + [
        c for c in generate(flow, table, max_candidate_size, extra, proposed, within)
        if not (c.target != FALLBACK and str(c.target) in slow)
        and (c.mask, str(c.target)) not in pricer.costs]
    costs = pricer.price(candidates)
    rescue = _uncovered_fallbacks(len(flow), table, candidates, costs)
    if rescue:  # every candidate of these nodes failed to run: the reference takes them
        costs = costs + pricer.price(rescue)
        candidates = candidates + rescue
    usable = [(c, costs[i]) for i, c in enumerate(candidates) if costs[i].ok]
    invalid = [(c, k) for c, k in zip(candidates, costs, strict=True) if not k.ok]
    _check_covered(flow.names, usable, invalid)
    examples = tuple(  # what crashed, hung or failed, for explain
        InvalidCandidate(str(c.target), tuple(flow.names[j] for j in members(c.mask)),
                         k.invalid or "", k.fault) for c, k in invalid[:12])
    priced_at = {(c.mask, str(c.target)): float(k.ms) for c, k in zip(candidates, costs,
                                                                      strict=True)
                 if k.ok and k.ms is not None}
    # ties within noise go to the earlier-listed target: the search never sees the other
    usable = tie_broken([(c.mask, c.target, float(k.ms or 0.0), (c, k)) for c, k in usable],
                        table.targets)
    searchable = {(c.mask, str(c.target)): float(k.ms or 0.0) for c, k in usable}
    bounded = {name: _plan_cost(plan, index, searchable) + partition_overhead_ms * len(
        plan.partitions) for name, plan in plans.items()}
    bound = min(bounded.values(), default=math.inf)
    report.begin(Phase.SEARCH)
    start = time.perf_counter()
    states = pruned = None
    truncated = None
    try:
        result = cheapest_cover(len(flow), _preds(model),
                                [(c.mask, float(cost.ms or 0.0) + partition_overhead_ms)
                                 for c, cost in usable], bound)
        chosen = [usable[i] for i in result.chosen]
        states, pruned, modelled = result.states, result.pruned, result.cost
    except SearchBudgetError as err:  # too wide to search exactly: the best known plan
        if bound == math.inf:
            raise
        fallback = min(bounded, key=lambda name: bounded[name])
        where = {(c.mask, str(c.target)): (c, k) for c, k in usable}
        chosen = [where[(_mask(p.nodes, index), str(p.target))]
                  for p in plans[fallback].partitions]
        truncated, modelled = f"{err}; kept the {fallback} plan", bound
    search_seconds = round(time.perf_counter() - start, 4)
    one_thread = None
    tried = small_candidates(chosen, sum(1 << i for i in table.pinned))
    if tried:  # small partitions may run faster on one thread: measured, not assumed
        variants = pricer.price([c for _, c in tried])
        before = sum(float(cost.ms or 0.0) for _, cost in chosen)
        chosen, one_thread = keep_faster(chosen, tried, variants)
        modelled -= before - sum(float(cost.ms or 0.0) for _, cost in chosen)
        candidates = candidates + [c for _, c in tried]
        costs = costs + variants
    stats = SearchStats(
        candidates=len(pricer.costs), measurements=pricer.measured,
        cache_hits=pricer.hits, measure_seconds=round(pricer.seconds, 3),
        invalid=len(invalid), invalid_examples=examples, states=states, pruned=pruned,
        modelled_ms=modelled, search_seconds=search_seconds, search_truncated=truncated,
        one_thread_partitions=one_thread, bound_ms=None if bound == math.inf else bound,
        partition_overhead_ms=partition_overhead_ms, proposals=proposals or None,
        coarse=coarse)
    parts = make_partitions(flow, [(c.mask, c.target, cost.ms) for c, cost in chosen])
    if points is not None and points.dynamic:
        stats = stats.merged(shapes=ShapesRecord(
            points.labels(), tuple(round(w, 4) for w in points.weights), points.defaulted,
            tuple(pricer.at_points.get((c.mask, str(c.target)), ()) for c, _ in chosen)))
    decisions = _decisions(model, table, chosen, candidates, costs)
    known = {name: replace(plan, partitions=tuple(
        replace(p, cost_ms=priced_at.get((_mask(p.nodes, index), str(p.target))))
        for p in plan.partitions)) for name, plan in plans.items()}
    return Plan(parts, "collage", table.reasons, decisions, stats), known


def priced_so_far(plans: Mapping[str, Plan], costs: Mapping[tuple[NodeSet, str], Cost],
                  index: Mapping[str, int], overhead_ms: float, measured: int) -> SoFar:
    """The known plans whose every partition has a cost among `costs` (priced by the search
    so far), with those costs, and their modelled cost (`overhead_ms` per partition)."""
    whole: dict[str, Plan] = {}
    modelled: dict[str, float] = {}
    for name, plan in plans.items():
        found = [costs.get((_mask(p.nodes, index), str(p.target))) for p in plan.partitions]
        if not found or not all(k is not None and k.ok for k in found):
            continue
        ms = [float(k.ms or 0.0) for k in found if k is not None]
        whole[name] = replace(plan, partitions=tuple(
            replace(p, cost_ms=m) for p, m in zip(plan.partitions, ms, strict=True)))
        modelled[name] = sum(ms) + overhead_ms * len(ms)
    return SoFar(whole, modelled, len(costs), measured)


def _coarse(pricer: _Pricer, table: SupportTable, overhead_ms: float
            ) -> tuple[NodeSet | None, CoarseRecord | None, dict[str, str], tuple[str, ...]]:
    """The part of the model to search node by node (None: all of it), the record of the
    regions step, the targets found too slow to measure further (name -> why), and the
    known plans not worth pricing (the single-target plans the regions show are more than
    `NEAR_SINGLE` over the best one, even where they did not run, or that do not run
    every region whole)."""
    flow = pricer.model.dataflow
    targets = [t for t in table.targets if t != FALLBACK]
    if len(flow) <= FINE_ALL or len(targets) < 2:
        return None, None, {}, ()
    cut = regions(flow, range(len(flow)))
    costs: list[dict[str, float]] = [{} for _ in cut]
    slowness = Slowness()
    slow: dict[str, str] = {}
    for t, target in enumerate(targets):
        for r, mask in enumerate(cut):
            pricer.ahead = (len(targets) - t) * len(cut) - r - 1  # regions to go, at most
            if not all(target in table.allowed[i] for i in members(mask)):
                continue
            best = slowness.best(r)
            (cost,) = pricer.price([Candidate(mask, target)],
                                   pricer.run.bounded(SLOW * best) if best < math.inf else None)
            ms = float(cost.ms) if cost.ok and cost.ms is not None else math.inf
            if not math.isinf(ms):
                costs[r][str(target)] = ms
            slowness.record(str(target), r, ms)
            if slowness.hopeless(str(target)):
                slow[str(target)] = f"{target}: {slowness.describe(str(target))}"
                break
    pricer.ahead = 0
    kept = [str(t) for t in targets if str(t) not in slow]
    kept_costs = [{t: c for t, c in region.items() if t in kept} for region in costs]
    choice = coarse_choice(kept_costs, kept, overhead_ms)
    # a target missing from a region runs it in pieces around what it lacks: its plan is a
    # mix, which the greedy plan and the refined regions already cover
    unpromising = tuple(single_rival(t) for t in kept if choice.single is not None and (
        optimistic_single(kept_costs, t) > NEAR_SINGLE * choice.single_ms
        or any(region and t not in region for region in kept_costs)))
    refined = choice.refined()
    within = 0
    for r in refined:
        within |= cut[r]
    record = CoarseRecord(len(cut), round(choice.saving, 4), len(refined),
                          tuple(slow[t] for t in sorted(slow)))
    return within, record, slow, unpromising



class _Pricer:
    """Candidates' costs, each priced once per compile: remembered under its structure
    (here, or in the cost database), or measured. The measurer is given the batch of what
    is not known at once (in order of target, so that one backend's spinning pool never
    slows the next one's measurements on one machine; several machines measure several at
    a time), and each record is kept as its answer comes, under the fingerprint of the
    machine that measured it. A model with symbolic dimensions is measured at each of its
    `points` (a static view each, so the cost database keys each cost by its shapes); a
    candidate's cost is the points' weighted mean, and it fails where any point fails."""

    def __init__(self, model: Model, db: CostDB | None, run: Measurer, foreign: bool,
                 progress: Reporter, points: Points | None) -> None:
        self.model, self.db, self.run, self.foreign = model, db, run, foreign
        self.progress, self.points = progress, points
        self.views = points.views if points is not None else ((None, model),)
        self.costs: dict[tuple[NodeSet, str], Cost] = {}
        self.at_points: dict[tuple[NodeSet, str], tuple[float | None, ...]] = {}
        self.candidates: list[Candidate] = []  # in the order first priced
        self._memo: dict[tuple[str, str], Cost] = {}
        self._keys: dict[str, _Key] = {}
        self.hits = self.measured = 0
        self.seconds = 0.0
        self.ahead = 0  # candidates the caller will ask for after these (for progress)

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
            if len(missing) > 1 and self.points is not None and run.points_in_one_compile:
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
            if not cost.ok and point is not None and point.sizes:
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


def _combined(found: list[Cost], points: Points | None) -> Cost:
    """One cost for the profile: the first failure, or the points' weighted mean."""
    failed = next((k for k in found if not k.ok), None)
    if failed is not None or len(found) == 1 or points is None:
        return failed or found[0]
    mean = points.mean([float(k.ms or 0.0) for k in found])
    return Cost(round(mean, 6), max(k.spread for k in found), min(k.samples for k in found))


class UnmeasuredNodes(PartitionError):
    """Some nodes have no candidate that could be measured (the shapes reaching them are
    unknown after shape inference, as behind some ai.onnx.ml ops): Collage cannot price
    them, and the placement is left to the priority order (`_decide`)."""

    def __init__(self, nodes: list[str], reasons: list[str]) -> None:
        super().__init__(f"no candidate for node(s) {nodes[:10]} could be measured: "
                         + "; ".join(dict.fromkeys(reasons[:3])))
        self.nodes = nodes


def _check_covered(names: list[str], usable: list[tuple[Candidate, Cost]],
                   invalid: list[tuple[Candidate, Cost]]) -> None:
    covered = 0
    for candidate, _ in usable:
        covered |= candidate.mask
    missing = [i for i in range(len(names)) if not covered >> i & 1]
    if missing:
        why = [k.invalid or "failed" for c, k in invalid if c.mask >> missing[0] & 1]
        raise UnmeasuredNodes([names[i] for i in missing], why)


def _uncovered_fallbacks(count: int, table: SupportTable, candidates: list[Candidate],
                         costs: list[Cost]) -> list[Candidate]:
    covered = 0
    for candidate, cost in zip(candidates, costs, strict=True):
        if cost.ok:
            covered |= candidate.mask
    return [Candidate(1 << i, FALLBACK) for i in range(count)
            if not covered >> i & 1 and FALLBACK in table.allowed[i]
            and Candidate(1 << i, FALLBACK) not in candidates]


def _mask(nodes: tuple[str, ...], index: Mapping[str, int]) -> NodeSet:
    mask = 0
    for name in nodes:
        mask |= 1 << index[name]
    return mask


def _plan_cost(plan: Plan, index: dict[str, int],
               priced_at: dict[tuple[NodeSet, str], float]) -> float:
    costs = [priced_at.get((_mask(p.nodes, index), str(p.target))) for p in plan.partitions]
    return math.inf if any(c is None for c in costs) else sum(c for c in costs if c is not None)


def _preds(model: Model) -> list[NodeSet]:
    flow = model.dataflow
    out = []
    for producers in flow.producers:
        mask = 0
        for p in producers:
            mask |= 1 << p
        out.append(mask)
    return out


def _decisions(model: Model, table: SupportTable, chosen: list[tuple[Candidate, Cost]],
               candidates: list[Candidate], costs: list[Cost]) -> dict[str, str]:
    """Why each node went where it did: pinned, the only target that runs it, or cheaper
    than the same nodes on another target (when that was measured)."""
    flow = model.dataflow
    same: dict[NodeSet, list[tuple[str, Cost]]] = {}
    for c, cost in zip(candidates, costs, strict=True):
        same.setdefault(c.mask, []).append((str(c.target), cost))
    rank = {str(t): r for r, t in enumerate(table.targets)}
    decisions = {}
    for candidate, cost in chosen:
        rivals = [(t, k) for t, k in same.get(candidate.mask, []) if t != str(candidate.target)]
        for i in members(candidate.mask):
            name = flow.names[i]
            device = f"pinned to {table.devices[i]}; " if i in table.devices else ""
            if i in table.pinned:
                decisions[name] = f"pinned to {candidate.target}"
            elif len(table.allowed[i]) == 1:
                decisions[name] = f"{device}only {candidate.target} runs it"
            else:
                decisions[name] = device + _compare(str(candidate.target), cost, rivals, rank)
            if candidate.origin:  # where the candidate came from, when a backend proposed it
                decisions[name] += f"; a candidate proposed by {candidate.origin}"
    return decisions


def _compare(target: str, cost: Cost, rivals: list[tuple[str, Cost]],
             rank: dict[str, int]) -> str:
    here = f"collage: {target} ({cost.ms:.3f} ms for its partition)"
    valid = [(t, k) for t, k in rivals if k.ok]
    if not valid:
        return here + "; no other target ran the same nodes"
    best_t, best = min(valid, key=lambda r: float(r[1].ms or 0.0))
    delta = float(best.ms or 0.0) - float(cost.ms or 0.0)
    if delta >= 0:
        return here + f"; cheaper than {best_t} by {delta:.3f} ms"
    if rank.get(target, len(rank)) < rank.get(best_t, len(rank)) and within_noise(
            float(cost.ms or 0.0), float(best.ms or 0.0)):
        return here + (f"; {best_t} is {-delta:.3f} ms faster on these nodes alone, within "
                       f"noise ({TIE:.0%}): the earlier-listed target keeps them")
    return here + (f"; {best_t} is {-delta:.3f} ms faster on these nodes alone, but the "
                   "cover as a whole is cheaper this way")
