"""Collage placement: candidates from every target's support table, their measured costs
(from the cost database when known), then the exact cheapest cover. Known plans (greedy, and
each target alone) are candidates too, so the search's optimum is never worse than them under
the cost model, and the cheapest of them is the search's upper bound."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from tessera.config import FineSearch
from tessera.errors import PartitionError
from tessera.ir import DataflowGraph, Model, NodeSet, members
from tessera.placement._context import PlacementContext
from tessera.placement.record._costdb import Cost
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Plan, make_partitions
from tessera.placement.record._records import (
    CoarseRecord,
    InvalidCandidate,
    ProposalRecord,
    ShapesRecord,
)
from tessera.placement.record._rival import GREEDY, Rival
from tessera.placement.record._stats import CoverStats, SearchStats
from tessera.placement.search._candidates import Candidate, generate
from tessera.placement.search._cover import SearchBudgetError, cheapest_cover
from tessera.placement.search._greedy import place_greedy
from tessera.placement.search._pricer import Pricer
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
Priced = tuple[Candidate, Cost]


def single_target_table(table: SupportTable, target: Target) -> SupportTable | None:
    """The table with only `target` (and the fallback, and pins); None if it cannot cover."""
    keep = {str(target), str(FALLBACK), *(str(t) for t in table.pinned.values())}
    allowed = tuple(tuple(t for t in row if str(t) in keep) for row in table.allowed)
    if not all(allowed):
        return None
    targets = tuple(t for t in table.targets if str(t) in keep)
    return replace(table, targets=targets, allowed=allowed)


def known_plans(model: Model, table: SupportTable, min_block_size: int) -> dict[Rival, Plan]:
    """The greedy plan and each target's single-target plan."""
    plans = {GREEDY: place_greedy(model, table, min_block_size)}
    for target in table.targets:
        alone = single_target_table(table, target)
        if alone is not None and str(target) != str(FALLBACK):
            plans[Rival.single(target)] = place_greedy(model, alone, 1)
    return plans


def place_collage(ctx: PlacementContext, table: SupportTable, overhead_ms: float = 0.0
                  ) -> tuple[Plan, dict[Rival, Plan]]:
    """The searched plan and the known plans it was bounded by (with their modelled costs).
    `overhead_ms` is charged once per partition: a partition measured alone in a tight loop
    runs faster than inside a chain, where its pool must wake and its inputs arrive cold
    (the driver calibrates it end to end). A model with symbolic dimensions is measured at
    each of the context's points and a cost is the points' weighted mean. A model of more
    than `FINE_ALL` nodes is first measured in regions (`_regions`): only where a mix of
    targets could win is it searched node by node, and targets many times slower
    everywhere stop being measured; with the flow option fine-search=everywhere, every
    model is searched node by node."""
    options, flow = ctx.config.options, ctx.model.dataflow
    plans = known_plans(ctx.model, table, options.min_block_size)
    pricer = Pricer(ctx)
    ctx.progress.trail.priced = lambda: pricer.so_far(plans, overhead_ms)  # for an interrupt
    coarse = _Coarse() if options.fine_search is FineSearch.EVERYWHERE else \
        _coarse(pricer, table, overhead_ms)
    candidates, costs, proposals = _priced(ctx, pricer, table, plans, coarse)
    usable = [(c, k) for c, k in zip(candidates, costs, strict=True) if k.ok]
    invalid = [(c, k) for c, k in zip(candidates, costs, strict=True) if not k.ok]
    _check_covered(flow.names, usable, invalid)
    # ties within noise go to the earlier-listed target: the search never sees the other
    usable = tie_broken([(c.mask, c.target, float(k.ms or 0.0), (c, k)) for c, k in usable],
                        table.targets)
    chosen, cover = _covered(ctx, usable, plans, overhead_ms)
    tried = small_candidates(chosen, sum(1 << i for i in table.pinned))
    if tried:  # small partitions may run faster on one thread: measured, not assumed
        alone = pricer.price([c for _, c in tried])
        before = sum(float(cost.ms or 0.0) for _, cost in chosen)
        chosen, moved = keep_faster(chosen, tried, alone)
        saved = before - sum(float(cost.ms or 0.0) for _, cost in chosen)
        cover = replace(cover, modelled_ms=(cover.modelled_ms or 0.0) - saved,
                        one_thread_partitions=moved)
        candidates, costs = candidates + [c for _, c in tried], costs + alone
    examples = tuple(  # what crashed, hung or failed, for explain
        InvalidCandidate(str(c.target), tuple(flow.names[j] for j in members(c.mask)),
                         k.invalid or "", k.fault) for c, k in invalid[:12])
    stats = SearchStats(measuring=pricer.stats(len(invalid), examples), cover=cover,
                        proposals=proposals or None, coarse=coarse.record,
                        shapes=_shapes(ctx, pricer, chosen))
    parts = make_partitions(flow, [(c.mask, c.target, cost.ms) for c, cost in chosen])
    decisions = _decisions(ctx.model, table, chosen, candidates, costs)
    return Plan(parts, "collage", table.reasons, decisions, stats), _costed(
        flow, plans, candidates, costs)


def _priced(ctx: PlacementContext, pricer: Pricer, table: SupportTable,
            plans: dict[Rival, Plan], coarse: _Coarse
            ) -> tuple[list[Candidate], list[Cost], tuple[ProposalRecord, ...]]:
    """Every candidate and its cost: those the regions step priced, the known plans'
    partitions, the grown candidates and the backends' proposals (none on a target found
    too slow), and for nodes whose every candidate failed, the reference."""
    flow, slow = ctx.model.dataflow, coarse.slow
    # a single-target plan bound to lose is not priced: it would be neither the bound nor
    # a rival in the race (light_resnet50 on IREE alone: 60 partitions around what it lacks)
    extra = [Candidate(flow.node_set(p.nodes), p.target)
             for rival, plan in plans.items() if rival not in coarse.unpromising
             for p in plan.partitions if str(p.target) not in slow]
    proposed, proposals = proposed_candidates(ctx.model, table)
    proposed = [c for c in proposed if str(c.target) not in slow]
    size = ctx.config.options.max_candidate_size
    candidates = pricer.candidates + [
        c for c in generate(flow, table, size, extra, proposed, coarse.within)
        if not (c.target != FALLBACK and str(c.target) in slow)
        and (c.mask, str(c.target)) not in pricer.costs]
    costs = pricer.price(candidates)
    rescue = _uncovered_fallbacks(len(flow), table, candidates, costs)
    if rescue:  # every candidate of these nodes failed to run: the reference takes them
        costs = costs + pricer.price(rescue)
        candidates = candidates + rescue
    return candidates, costs, tuple(proposals)


def _covered(ctx: PlacementContext, usable: list[Priced], plans: dict[Rival, Plan],
             overhead_ms: float) -> tuple[list[Priced], CoverStats]:
    """The cheapest cover of the model by `usable` candidates, bounded by the cheapest known
    plan; where the cover is too wide to search exactly, the cheapest known plan."""
    flow = ctx.model.dataflow
    searchable = {(c.mask, str(c.target)): float(k.ms or 0.0) for c, k in usable}
    bounded = {rival: _plan_cost(flow, plan, searchable) + overhead_ms * len(plan.partitions)
               for rival, plan in plans.items()}
    bound = min(bounded.values(), default=math.inf)
    stats = CoverStats(bound_ms=None if bound == math.inf else bound,
                       partition_overhead_ms=overhead_ms)
    ctx.progress.begin(Phase.SEARCH)
    start = time.perf_counter()
    try:
        result = cheapest_cover(len(flow), _preds(ctx.model),
                                [(c.mask, float(cost.ms or 0.0) + overhead_ms)
                                 for c, cost in usable], bound)
        chosen = [usable[i] for i in result.chosen]
        stats = replace(stats, states=result.states, pruned=result.pruned,
                        modelled_ms=result.cost)
    except SearchBudgetError as err:  # too wide to search exactly: the best known plan
        if bound == math.inf:
            raise
        fallback = min(bounded, key=lambda rival: (bounded[rival], str(rival)))
        where = {(c.mask, str(c.target)): (c, k) for c, k in usable}
        chosen = [where[(flow.node_set(p.nodes), str(p.target))]
                  for p in plans[fallback].partitions]
        stats = replace(stats, truncated=f"{err}; kept the {fallback} plan", modelled_ms=bound)
    return chosen, replace(stats, seconds=round(time.perf_counter() - start, 4))


def _shapes(ctx: PlacementContext, pricer: Pricer, chosen: list[Priced]
            ) -> ShapesRecord | None:
    """Where a model with symbolic dimensions was measured, and each partition's costs."""
    points = ctx.points
    if not points.dynamic:
        return None
    return ShapesRecord(points.labels(), tuple(round(w, 4) for w in points.weights),
                        points.defaulted, tuple(pricer.at_points.get(
                            (c.mask, str(c.target)), ()) for c, _ in chosen))


def _costed(flow: DataflowGraph, plans: dict[Rival, Plan], candidates: list[Candidate],
            costs: list[Cost]) -> dict[Rival, Plan]:
    """The known plans with each partition's measured cost."""
    priced_at = {(c.mask, str(c.target)): float(k.ms)
                 for c, k in zip(candidates, costs, strict=True) if k.ok and k.ms is not None}
    return {rival: replace(plan, partitions=tuple(
        replace(p, cost_ms=priced_at.get((flow.node_set(p.nodes), str(p.target))))
        for p in plan.partitions)) for rival, plan in plans.items()}


@dataclass(frozen=True)
class _Coarse:
    """What the regions step found: the part of the model to search node by node (None:
    all of it), its record, the targets too slow to measure further (name -> why), and the
    known plans not worth pricing."""

    within: NodeSet | None = None
    record: CoarseRecord | None = None
    slow: dict[str, str] = field(default_factory=dict)
    unpromising: tuple[Rival, ...] = ()


def _coarse(pricer: Pricer, table: SupportTable, overhead_ms: float) -> _Coarse:
    """The regions step, on a model of more than `FINE_ALL` nodes with two targets or
    more: each target's cost per region, the regions where a mix could win, and the
    single-target plans the regions show are more than `NEAR_SINGLE` over the best one (or
    that do not run every region whole)."""
    flow = pricer.model.dataflow
    targets = [t for t in table.targets if t != FALLBACK]
    if len(flow) <= FINE_ALL or len(targets) < 2:
        return _Coarse()
    cut = regions(flow, range(len(flow)))
    costs, slow = _region_costs(pricer, table, targets, cut)
    kept = [str(t) for t in targets if str(t) not in slow]
    kept_costs = [{t: c for t, c in region.items() if t in kept} for region in costs]
    choice = coarse_choice(kept_costs, kept, overhead_ms)
    # a target missing from a region runs it in pieces around what it lacks: its plan is a
    # mix, which the greedy plan and the refined regions already cover
    unpromising = tuple(Rival.single(Target(t)) for t in kept if choice.single is not None
                        and (optimistic_single(kept_costs, t) > NEAR_SINGLE * choice.single_ms
                             or any(region and t not in region for region in kept_costs)))
    whole = _whole_costs(pricer, table, [t for t in targets if str(t) in kept
                                         and Rival.single(t) not in unpromising])
    if choice.single in whole:
        choice = replace(choice, whole_ms=whole[choice.single])
    refined = choice.refined()
    within = 0
    for r in refined:
        within |= cut[r]
    record = CoarseRecord(len(cut), round(choice.saving, 4), len(refined),
                          tuple(slow[t] for t in sorted(slow)))
    return _Coarse(within, record, slow, unpromising)


def _whole_costs(pricer: Pricer, table: SupportTable, targets: list[Target]
                 ) -> dict[str, float]:
    """Each target's cost on the whole model, where it runs every node (the single-target
    plan's one partition, which the search prices anyway unless it is bound to lose)."""
    flow = pricer.model.dataflow
    every = [t for t in targets if all(t in table.allowed[i] for i in range(len(flow)))]
    found = pricer.price([Candidate((1 << len(flow)) - 1, t) for t in every])
    return {str(t): float(k.ms) for t, k in zip(every, found, strict=True)
            if k.ok and k.ms is not None}


def _region_costs(pricer: Pricer, table: SupportTable, targets: list[Target],
                  cut: list[NodeSet]) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Each region's cost per target that runs it whole, target by target; a target many
    times slower than the best on the regions tried so far stops being measured."""
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
    return costs, slow


def _plan_cost(flow: DataflowGraph, plan: Plan,
               priced_at: dict[tuple[NodeSet, str], float]) -> float:
    costs = [priced_at.get((flow.node_set(p.nodes), str(p.target))) for p in plan.partitions]
    return math.inf if any(c is None for c in costs) else sum(c for c in costs if c is not None)


class UnmeasuredNodes(PartitionError):
    """Some nodes have no candidate that could be measured (the shapes reaching them are
    unknown after shape inference, as behind some ai.onnx.ml ops): Collage cannot price
    them, and the placement is left to the priority order (the driver)."""

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
