"""Collage placement: candidates from every target's support table, their measured costs
(from the cost database when known), then the exact cheapest cover. Known plans (greedy, and
each target alone) are candidates too, so the search's optimum is never worse than them under
the cost model, and the cheapest of them is the search's upper bound."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tessera import backends
from tessera._private.shapes import ShapePoint
from tessera.ir import Model, NodeSet, members
from tessera.placement._candidates import Candidate, generate
from tessera.placement._costdb import Cost, CostDB, fingerprint
from tessera.placement._greedy import place_greedy
from tessera.placement._measure import Measurer
from tessera.placement._measurers import LocalMeasurer
from tessera.placement._plan import Plan, make_partitions
from tessera.placement._points import Points
from tessera.placement._priority import TIE, tie_broken, within_noise
from tessera.placement._proposed import proposed_candidates
from tessera.placement._search import SearchBudgetError, cheapest_cover
from tessera.placement._stats import InvalidCandidate, SearchStats, ShapesRecord
from tessera.placement._support import FALLBACK, SupportTable
from tessera.placement._variants import keep_faster, small_candidates
from tessera.target import Target

Progress = Callable[[int, int, str], None]  # candidates priced, of all, current target


@dataclass(frozen=True)
class _Priced:
    """Costs of a batch of candidates, and how they were found."""

    costs: list[Cost]
    candidates: int
    measurements: int
    cache_hits: int
    measure_seconds: float
    at_points: list[tuple[float | None, ...]]  # per candidate: its cost at each point

    def __add__(self, other: _Priced) -> _Priced:
        return _Priced(self.costs + other.costs, self.candidates + other.candidates,
                       self.measurements + other.measurements,
                       self.cache_hits + other.cache_hits,
                       round(self.measure_seconds + other.measure_seconds, 3),
                       self.at_points + other.at_points)


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
    plans = {"greedy": place_greedy(model, table, min_block_size)}
    for target in table.targets:
        alone = single_target_table(table, target)
        if alone is not None and str(target) != str(FALLBACK):
            plans[f"only {target}"] = place_greedy(model, alone, 1)
    return plans


def place_collage(model: Model, table: SupportTable, *, db: CostDB | None,
                  max_candidate_size: int = 3, min_block_size: int = 1,
                  foreign_costs: bool = False, measurer: Measurer | None = None,
                  progress: Progress | None = None, partition_overhead_ms: float = 0.0,
                  points: Points | None = None) -> tuple[Plan, dict[str, Plan]]:
    """The searched plan and the known plans it was bounded by (with their modelled costs).
    `partition_overhead_ms` is charged once per partition: a partition measured alone in a
    tight loop runs faster than inside a chain, where its pool must wake and its inputs
    arrive cold (`_decide` calibrates it end to end). `measurer` defaults to the isolated
    worker. A model with symbolic dimensions is measured at each of `points` and a cost is
    the points' weighted mean."""
    flow = model.dataflow
    plans = known_plans(model, table, min_block_size)
    index = {name: i for i, name in enumerate(flow.names)}
    extra = [Candidate(_mask(p.nodes, index), p.target)
             for plan in plans.values() for p in plan.partitions]
    proposed, proposals = proposed_candidates(model, table)
    candidates = generate(flow, table, max_candidate_size, extra, proposed)
    run: Measurer = measurer or LocalMeasurer()
    priced = _costs(model, candidates, db, run, foreign_costs, progress, points)
    rescue = _uncovered_fallbacks(len(flow), table, candidates, priced.costs)
    if rescue:  # every candidate of these nodes failed to run: the reference takes them
        priced = priced + _costs(model, rescue, db, run, foreign_costs, progress, points)
        candidates = candidates + rescue
    costs = priced.costs
    usable = [(c, costs[i]) for i, c in enumerate(candidates) if costs[i].ok]
    invalid = [(c, k) for c, k in zip(candidates, costs, strict=True) if not k.ok]
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
        variants = _costs(model, [c for _, c in tried], db, run, foreign_costs, progress,
                          points)
        before = sum(float(cost.ms or 0.0) for _, cost in chosen)
        chosen, one_thread = keep_faster(chosen, tried, variants.costs)
        modelled -= before - sum(float(cost.ms or 0.0) for _, cost in chosen)
        candidates = candidates + [c for _, c in tried]
        priced = priced + variants
    stats = SearchStats(
        candidates=priced.candidates, measurements=priced.measurements,
        cache_hits=priced.cache_hits, measure_seconds=priced.measure_seconds,
        invalid=len(invalid), invalid_examples=examples, states=states, pruned=pruned,
        modelled_ms=modelled, search_seconds=search_seconds, search_truncated=truncated,
        one_thread_partitions=one_thread, bound_ms=None if bound == math.inf else bound,
        partition_overhead_ms=partition_overhead_ms, proposals=proposals or None)
    parts = make_partitions(flow, [(c.mask, c.target, cost.ms) for c, cost in chosen])
    if points is not None and points.dynamic:
        at_point = {(c.mask, str(c.target)): at for c, at in zip(
            candidates, priced.at_points, strict=True)}
        stats = stats.merged(shapes=ShapesRecord(
            points.labels(), tuple(round(w, 4) for w in points.weights), points.defaulted,
            tuple(at_point.get((c.mask, str(c.target)), ()) for c, _ in chosen)))
    decisions = _decisions(model, table, chosen, candidates, priced.costs)
    known = {name: replace(plan, partitions=tuple(
        replace(p, cost_ms=priced_at.get((_mask(p.nodes, index), str(p.target))))
        for p in plan.partitions)) for name, plan in plans.items()}
    return Plan(parts, "collage", table.reasons, decisions, stats), known


def _costs(model: Model, candidates: list[Candidate], db: CostDB | None, run: Measurer,
           foreign: bool, progress: Progress | None = None, points: Points | None = None
           ) -> _Priced:
    """Each candidate's cost, measured target by target (in blocks: a spinning pool of one
    backend must not slow the next one's measurements). A model with symbolic dimensions
    is measured at each of its `points` (a static view each, so the cost database keys each
    cost by its shapes); a candidate's cost is the points' weighted mean, and it fails where
    any point fails."""
    views = points.views if points is not None else ((None, model),)
    costs: list[Cost | None] = [None] * len(candidates)
    at_points: list[tuple[float | None, ...]] = [()] * len(candidates)
    hits = measured = 0
    spent = 0.0
    order = sorted(range(len(candidates)), key=lambda i: str(candidates[i].target))
    keys: dict[str, tuple[str, str]] = {}
    memo: dict[tuple[str, str], Cost] = {}
    for i in order:
        candidate = candidates[i]
        target = candidate.target
        if str(target) not in keys:
            version = backends.get(target.kind.name).is_available().version
            built_for = getattr(run, "built_for", None)  # the cost of what is built
            built = built_for(target) if callable(built_for) else target
            keys[str(target)] = (built.tuning_key(), fingerprint(target.kind.name, version))
        priced = _priced_at_points(model, candidate, views, points, memo, db, run, foreign,
                                   keys[str(target)])
        hits += priced.hits
        measured += priced.measured
        spent += priced.seconds
        found = priced.costs
        costs[i] = _combined(found, points)
        at_points[i] = tuple(k.ms for k in found) if len(found) == len(views) else ()
        if progress is not None:
            progress(hits + measured, len(candidates), str(target))
    return _Priced([c for c in costs if c is not None], len(candidates), measured, hits,
                   round(spent, 3), at_points)


@dataclass
class _Found:
    costs: list[Cost]
    hits: int = 0
    measured: int = 0
    seconds: float = 0.0


def _priced_at_points(model: Model, candidate: Candidate,
                      views: tuple[tuple[ShapePoint | None, Model], ...],
                      points: Points | None, memo: dict[tuple[str, str], Cost],
                      db: CostDB | None, run: Measurer, foreign: bool, key: tuple[str, str]
                      ) -> _Found:
    """A candidate's cost at each point: remembered under the static view's structure, or
    measured. At several points, a measurer that can (`at_points`) compiles the candidate
    once with its symbolic dimensions and times it at each point."""
    tuning, finger = key
    structures = [view.structural_hash(candidate.mask) for _, view in views]
    known: list[Cost | None] = []
    found = _Found([])
    for structure in structures:
        cost = memo.get((tuning, structure))
        if cost is None and db is not None:
            cost = db.get(tuning, structure, finger)
            if cost is None and foreign:
                cost = db.get_foreign(tuning, structure)
        found.hits += cost is not None
        known.append(cost)
    missing = [i for i, cost in enumerate(known) if cost is None]
    if missing:
        began = time.perf_counter()
        at_points = getattr(run, "at_points", None)
        if len(missing) > 1 and points is not None and callable(at_points):
            inputs = model.dataflow.boundary(candidate.mask)[0]
            costs = at_points(model, candidate.mask, candidate.target,
                              [points.shapes(i, inputs) for i in missing])
        else:
            costs = [run(views[i][1], candidate.mask, candidate.target) for i in missing]
        found.seconds = time.perf_counter() - began
        found.measured = len(missing)
        for i, cost in zip(missing, costs, strict=True):
            known[i] = cost
            if db is not None:
                db.put(tuning, structures[i], finger, cost)
    for (point, _), structure, cost in zip(views, structures, known, strict=True):
        assert cost is not None
        memo[(tuning, structure)] = cost
        if not cost.ok and point is not None and point.sizes:
            cost = replace(cost, invalid=f"at {point}: {cost.invalid}")
        found.costs.append(cost)
        if not cost.ok:
            break
    return found


def _combined(found: list[Cost], points: Points | None) -> Cost:
    """One cost for the profile: the first failure, or the points' weighted mean."""
    failed = next((k for k in found if not k.ok), None)
    if failed is not None or len(found) == 1 or points is None:
        return failed or found[0]
    mean = points.mean([float(k.ms or 0.0) for k in found])
    return Cost(round(mean, 6), max(k.spread for k in found), min(k.samples for k in found))


def _uncovered_fallbacks(count: int, table: SupportTable, candidates: list[Candidate],
                         costs: list[Cost]) -> list[Candidate]:
    covered = 0
    for candidate, cost in zip(candidates, costs, strict=True):
        if cost.ok:
            covered |= candidate.mask
    return [Candidate(1 << i, FALLBACK) for i in range(count)
            if not covered >> i & 1 and FALLBACK in table.allowed[i]
            and Candidate(1 << i, FALLBACK) not in candidates]


def _mask(nodes: tuple[str, ...], index: dict[str, int]) -> NodeSet:
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
