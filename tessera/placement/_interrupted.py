"""What a compile keeps when an interrupt (Ctrl-C) stops its search: the best plan known so
far, in this order: the plan the end-to-end race kept (a calibration round may have been
under way), the searched plan (cheapest under the cost model, not yet raced), the cheapest
known plan whose every partition was measured, and else the greedy plan by priority. It is
built and passes the numeric guard like any plan, and its statistics say it was interrupted
(`InterruptRecord`). It is never remembered as a searched plan; the costs measured stay in
the cost database. A second interrupt while it builds ends the compile with an
`InterruptedCompile`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from tessera.errors import InterruptedCompile
from tessera.placement._context import PlacementContext
from tessera.placement.judge._guard import guard_verdicts
from tessera.placement.record._builder import Built
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Banned, Plan
from tessera.placement.record._progress import Reporter
from tessera.placement.record._records import InterruptRecord, PrecisionRecord
from tessera.placement.record._stats import GuardVerdict
from tessera.placement.record._trail import Finished, SoFar
from tessera.placement.search._device_targets import assign_devices
from tessera.placement.search._greedy import place_greedy
from tessera.placement.search._support import SupportTable
from tessera.target import Target


def keep_interrupted(ctx: PlacementContext, banned: Banned, build: bool,
                     requested: Mapping[str, Target]) -> tuple[Plan, Built | None]:
    """The best plan known when the search was interrupted, built (with `build`, else the
    plan alone) and checked by the numeric guard when the config asks for it."""
    report = ctx.progress
    phase = report.stage or Phase.SUPPORT
    done, total = report.counted(phase)
    so_far = report.trail.priced() if report.trail.priced is not None else None
    record = InterruptRecord(phase, "", done, total,
                             so_far.candidates if so_far is not None else None,
                             so_far.measurements if so_far is not None else None)
    try:
        tried: list[tuple[tuple[str, tuple[str, ...]], ...]] = []
        for kept, plan, built in _choices(ctx, banned, so_far):
            shape = tuple((str(p.target), p.nodes) for p in plan.partitions)
            if shape in tried:
                continue
            tried.append(shape)
            if requested:  # nodes pinned to a specialised device target: built for it
                plan, built = assign_devices(plan, ctx.config, requested), None
            plan = plan.with_stats(interrupted=replace(record, kept=kept), source=None)
            if not build or ctx.builder is None:
                return plan, None
            checked = _checked(ctx, plan, built)
            if checked is not None:
                return checked
    except KeyboardInterrupt:
        raise InterruptedCompile(
            f"interrupted again while building the plan kept after an interrupt during "
            f"{phase.words}: nothing was kept; the costs measured so far are in the cost "
            "database, so compiling again measures only the rest") from None
    raise InterruptedCompile(
        f"interrupted during {phase.words}, and none of the plans known so far built and "
        "passed the numeric guard: nothing was kept; compile again to finish the search")


def _checked(ctx: PlacementContext, plan: Plan, built: Built | None
             ) -> tuple[Plan, Built] | None:
    """`plan` built, and passed by the numeric guard where the config asks for it; None
    where it fails either."""
    assert ctx.builder is not None
    built = built if built is not None else ctx.builder.build(ctx.model, ctx.config, plan)
    if built.failures or built.runnable is None:
        return None
    if ctx.config.options.numeric_guard and not plan.stats.guard_passed:
        if guard_verdicts(ctx, plan, built.parts):
            return None
        plan = replace(plan, stats=plan.stats.with_guard(verdict=GuardVerdict.PASSED))
    return plan, replace(built, plan=plan)


def keep_fp32(plan: Plan, built: Built | None, report: Reporter) -> tuple[Plan, Built | None]:
    """The fp32 plan, when an interrupt stops the precision search: already built and
    checked, and remembered under its own key (the precision search's plan is not)."""
    done, total = report.counted(Phase.PRECISION)
    record = InterruptRecord(Phase.PRECISION, "the fp32 plan: the precision search had not "
                             "finished", done, total)
    plan = plan.with_stats(interrupted=record, precision=PrecisionRecord(
        "interrupted: the fp32 plan was kept"))
    return plan, (replace(built, plan=plan) if built is not None else None)


def stopped(report: Reporter) -> InterruptedCompile:
    """The error for an interrupt outside the search (building, the numeric guard), where
    no plan is kept."""
    phase = report.phase.words if report.phase is not None else "placement"
    return InterruptedCompile(
        f"interrupted during {phase}: no plan was kept (only the search keeps its best plan "
        "so far); what was measured and remembered is reused when compiling again")


def _choices(ctx: PlacementContext, banned: Banned, so_far: SoFar | None
             ) -> Iterator[tuple[str, Plan, Built | None]]:
    """The plans to keep, best first, with why, and their builds where the search built
    them."""
    kept = ctx.progress.trail.kept
    if kept is not None:
        yield (f"the {kept.rival} plan, the fastest end to end in the race"
               if kept.finished is Finished.RACED else
               "the searched plan, the cheapest under the cost model (not raced end to "
               "end)"), kept.plan, kept.built
    best = so_far.best() if so_far is not None else None
    if best is not None and so_far is not None:
        rival, plan = best
        yield (f"the {rival} plan, the cheapest of the plans measured whole so far "
               f"({so_far.modelled_ms[rival]:.3f} ms modelled)"), plan, None
    table = SupportTable.build(ctx.model, ctx.config, banned, ctx.pins)
    why = "no plan had been measured whole" if best is None and kept is None \
        else "the better plans did not build"
    yield (f"the greedy plan by priority ({why})",
           place_greedy(ctx.model, table, ctx.config.options.min_block_size), None)


__all__ = ["keep_fp32", "keep_interrupted", "stopped"]
