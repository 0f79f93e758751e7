"""Precision under an accuracy budget, on the user's samples. After the fp32 decision, each
precision variant its backends offer (`onnxruntime -precision=int8 -int8-recipe=static`,
`... dynamic`, `openvino -precision=int8`) is tried on the segments of the plan
(`search/_segments.py`), calibrated on the samples' even half and judged on the odd half
against the fp32 answers of the consensus oracle (`tessera.oracle.reference_answers`). The
variants come in the order of their expected payoff (`payoff_rank`), and the search has a
time (the `precision-time` option; auto: as long as the compile took to reach the fp32
plan): once it is spent, no new variant, op-level mix or settings choice is started, and
what was found races as it is. The search runs in phases:

1. `_whole_model`: every variant runs on every segment it supports; a variant many times
   over the budget on its first validation samples stops there untimed (`hopeless`: no
   partial plan of it could save 10% even at int8's best speed-up), and another variant of
   the same quantized model on the same segments is not built (ONNX Runtime and OpenVINO
   run one QDQ form);
2. `_timed_whole`: the fp32 plan and these whole-model variants race end to end; a variant
   no faster than fp32 is dropped (dynamic int8 makes convolutions 5-11x slower);
3. `_within_budget`: a static int8 variant that misses the budget on the whole model is
   mixed op by op (`op_by_op`: the ops ranked by the error quantizing their inputs adds, the
   worst kept in float until the plan meets the budget; each static form once); any other
   is measured one segment at a time (only the one predicted to save the most, and only
   when it is predicted to save 10%), and the segments that cost the least error per unit
   of work stay quantized while their errors sum within the budget; the plan is measured
   again and, while it misses, the most sensitive segment left goes back to fp32 (NNCF's
   accuracy control, by partition);
4. `_final_race`: each variant's plan that meets the budget, its neighbours of one target
   merged, and a plan of the model whole on one variant with its runtime-settings choices
   (`search/_settings.py`): the plans not timed in step 2 race the fastest of step 2, and
   the fastest is kept (with nothing new, step 2 decides).

Only measured plans are kept: the plan returned meets the budget on the validation samples,
and its report is the plan's `accuracy`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from tessera import backends
from tessera._private.text import first_line
from tessera.backends._quantize import has_attention
from tessera.config import AccuracyBudget, AccuracyReport, accuracy_of
from tessera.errors import TesseraError
from tessera.ir import DataflowGraph, Samples, bits
from tessera.oracle import reference_answers
from tessera.placement._context import PlacementContext
from tessera.placement.judge._budget import (
    FASTER,
    FILL,
    MIN_SAVING,
    PROBE,
    budget_used,
    hopeless,
    int8_speedup_bound,
    lower_bound_used,
    matrix_engine,
    predicted_saving,
)
from tessera.placement.judge._precision_setup import (
    PrecisionSetup,
    float_form,
    per_row_weights,
    variants_of,
    weight_only,
)
from tessera.placement.judge._timing import Rounds, point_shapes, timed
from tessera.placement.record._builder import Built, Runnable
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Partition, Plan, make_partitions
from tessera.placement.record._progress import Reporter
from tessera.placement.record._records import SEARCHED, PrecisionRecord, VariantRecord
from tessera.placement.record._rival import FP32, Rival
from tessera.placement.search._segments import Segment, segments
from tessera.placement.search._settings import setting_choices, settings_base
from tessera.placement.search._support import SupportTable
from tessera.target import Target

Judged = tuple[Plan, Built, AccuracyReport]  # a plan, its build and its accuracy


@dataclass
class _Judge:
    """Builds plans and measures them on the validation samples."""

    ctx: PlacementContext
    samples: Samples
    budget: AccuracyBudget
    reference: list[Mapping[str, Any]]  # the fp32 answers
    feeds: list[Mapping[str, Any]]
    judges: str = ""  # who gave the fp32 answers

    def accuracy(self, plan: Plan, probe: bool = False
                 ) -> tuple[Built, AccuracyReport | None, str]:
        """The plan built and measured on the validation samples. With `probe`, a plan that
        is `hopeless` on the first `PROBE` samples stops there: its worst cosine and
        absolute error only grow with more samples."""
        assert self.ctx.builder is not None
        built = self.ctx.builder.build(self.ctx.model, self.ctx.config, plan, self.samples)
        if built.failures or built.runnable is None:
            return built, None, "failed to build: " + first_line(
                "; ".join(built.failures.values()))
        got: list[dict[str, Any]] = []
        try:
            for feed in self.feeds:
                got.append(built.runnable.run(feed))
                if probe and len(got) == PROBE < len(self.feeds):
                    early = accuracy_of(got, self.reference[:PROBE], self.budget, self.judges)
                    if hopeless(lower_bound_used(early, self.budget)):
                        return built, early, ""
        except Exception as err:  # a quantized form that cannot run is not kept
            return built, None, f"failed to run: {first_line(err)}"
        return built, accuracy_of(got, self.reference, self.budget, self.judges), ""

    def met(self, plan: Plan) -> Judged | None:
        built, report, _ = self.accuracy(plan)
        return (plan, built, report) if report is not None and report.met else None


def search_precision(ctx: PlacementContext, fp32: Plan, fp32_built: Built,
                     setup: PrecisionSetup) -> tuple[Plan, Built]:
    """The fastest plan that meets the setup's accuracy budget: `fp32` itself, or one with
    some of its segments in a lower precision. `ctx` carries the setup's config."""
    began = ctx.clock()  # the search's time counts from here: the answers judging it too
    ctx.progress.begin(Phase.PRECISION, detail="the fp32 answers")
    assert fp32_built.runnable is not None and ctx.builder is not None
    budget = ctx.config.options.accuracy
    assert budget is not None
    try:
        truth = reference_answers(ctx.model, setup.samples)
        fp32_outputs = [fp32_built.runnable.run(f) for f in truth.feeds]
    except TesseraError as err:  # inputs it cannot take: categories no encoder knows, scales
        refused = fp32.with_stats(precision=PrecisionRecord(
            f"not tried: the fp32 plan or the oracle fails on the inputs that would judge it "
            f"({first_line(err)}); give samples of real inputs (samples=...)"))
        return refused, replace(fp32_built, plan=refused)
    judged = setup.judged  # a decoder: its logits alone
    reference: list[Mapping[str, Any]] = [
        {n: v for n, v in answer.items() if not judged or n in judged} for answer in truth.outputs]
    judge = _Judge(ctx, setup.samples, budget, reference, list(truth.feeds), truth.judges)
    fp32_judged = (fp32, fp32_built, accuracy_of(fp32_outputs, judge.reference, budget,
                                             judge.judges))
    search = _Search(judge, fp32_judged, setup, began)
    try:
        return search.run()
    finally:
        ctx.builder.release()


@dataclass
class _Whole:
    """A variant on every segment it runs, as one would quantize by hand: its plan, build
    and accuracy."""

    variant: Target
    plan: Plan
    built: Built
    report: AccuracyReport


class _Search:
    """One precision search: the segments of the fp32 plan, each variant's record, and the
    plans that meet the budget."""

    def __init__(self, judge: _Judge, fp32: Judged, setup: PrecisionSetup,
                 began: float) -> None:
        ctx = judge.ctx
        self.judge, self.fp32, self.ctx = judge, fp32, ctx
        self.flow = ctx.model.dataflow
        self.table = SupportTable.build(ctx.model, ctx.config, None, ctx.pins)  # pins stay
        plan = fp32[0]
        order = [self.flow.index[n] for p in plan.partitions for n in p.nodes]
        self.fp32_of = {self.flow.index[n]: p.target for p in plan.partitions for n in p.nodes}
        self.cut = segments(self.flow, order)
        attention = has_attention(ctx.model.proto)
        self.engine = matrix_engine()  # AMX: bf16 and static int8 outrun weight-only int8
        self.variants = [v for v in variants_of(ctx.config, attention, setup.decoder,
                                                self.engine) if setup.offers(v)]
        self.decoder = setup.decoder  # its steps read every weight: 4-bit may still pay
        self.records: dict[Target, VariantRecord] = {}
        self.started = began
        self.seconds = _seconds(ctx.config.options.precision_time, began - ctx.started)
        self.how = Rounds.under(ctx.objective, ctx.clock, point_shapes(ctx.model, ctx.points))

    def time_left(self, racing: int = 2, ahead: float = 0.0) -> bool:
        """Whether the search's time (the `precision-time` option) holds more work, `ahead`
        seconds of it foreseen, and the race after it, of `racing` plans (its planned rounds
        of blocks): the time is the whole search's, from the fp32 answers to the last race."""
        race = racing * self.how.rounds * self.how.seconds
        return self.ctx.clock() - self.started + ahead + race < self.seconds

    def _out_of_time(self) -> str:
        return (f"the precision search's {self.seconds:.0f} s (option precision-time: "
                f"{self.ctx.config.options.precision_time}) were spent, or would be by the "
                f"race of the forms found")

    def run(self) -> tuple[Plan, Built]:
        whole = self._whole_model()
        if not whole:
            return self._finish(self.fp32, FP32, {})
        base_ms, timed_ms = self._timed_whole(whole)
        candidates = self._within_budget(whole, base_ms, timed_ms)
        if not candidates:
            return self._finish(self.fp32, FP32, {FP32: base_ms})
        timed_before = {FP32: base_ms, **{r: timed_ms[r] for r, (plan, _, _) in
                                          candidates.items() if plan is whole[r].plan}}
        return self._final_race(candidates, timed_before)

    def _whole_model(self) -> dict[Rival, _Whole]:
        """Each variant on every segment it runs, measured on the validation samples."""
        whole: dict[Rival, _Whole] = {}
        hopeless_forms: dict[tuple[str, tuple[int, ...]], tuple[Target, float]] = {}
        per_row: Target | None = None  # a weight-only form quantizing rows as it runs, met
        took: dict[tuple[str, str], float] = {}  # seconds per way of making a form (`_maker`)
        quantized_yet = False
        for position, variant in enumerate(self.variants):
            # the first, the most promising, always, and the first quantized form after a
            # float one (which has no quantizer to time: BERT-base's NNCF form was tried or
            # not by a second's noise on the Xeon with AMX, where it runs 1.4x bf16); a later
            # one where the time a form made the same way took (none made so: the slowest
            # so far), and the race of every form found so far, fp32 and it fit (ViT-B/16:
            # NNCF's second form started with 7 s left and took 25; ONNX Runtime's quantizer
            # after it, with 8 s left, 10)
            first_quantized = not quantized_yet and not float_form(variant)
            quantized_yet = quantized_yet or first_quantized
            ahead = took.get(_maker(variant), max(took.values(), default=0.0))
            if position and not first_quantized and \
                    not self.time_left(racing=len(whole) + 2, ahead=ahead):
                self.records[variant] = VariantRecord(
                    str(variant), note=f"not tried: {self._out_of_time()}")
                continue
            if per_row is not None and not (self.decoder and weight_only(variant)):
                self.records[variant] = VariantRecord(str(variant), note=(
                    f"not tried: `{per_row}` met the budget on the whole model, with int8 "
                    f"dot products and activations quantized per row as it runs; no other "
                    f"form saved {MIN_SAVING:.0%} more than that on the suite's "
                    f"transformers on a CPU without AMX (static int8 within 3%, dynamic "
                    f"within 6%, bf16 and f16 2x slower)"))
                continue
            self.ctx.progress.step(Phase.PRECISION, position, len(self.variants),
                                   f"{variant} on the whole model")
            began = self.ctx.clock()
            found = self._whole_variant(variant, hopeless_forms)
            took[_maker(variant)] = self.ctx.clock() - began
            if found is not None:
                whole[Rival.precision(variant)] = found
                if found.report.met and per_row_weights(variant) and not self.engine:
                    per_row = per_row or variant
        return whole

    def _whole_variant(self, variant: Target,
                       hopeless_forms: dict[tuple[str, tuple[int, ...]], tuple[Target, float]]
                       ) -> _Whole | None:
        chosen = tuple(s.index for s in self.cut if _runs(self.table, s, variant))
        refused = self._not_tried(variant, chosen, hopeless_forms)
        if refused is not None:
            self.records[variant] = refused
            return None
        plan = self._plan(dict.fromkeys(chosen, variant), merge=True)
        built, report, why = self.judge.accuracy(plan, probe=True)
        if report is None:
            self.records[variant] = VariantRecord(str(variant), note=why)
            return None
        used = budget_used(report, self.judge.budget)
        record = VariantRecord(str(variant), whole_used=used, segments=chosen)
        self.records[variant] = record
        if not report.met and hopeless(used):
            form = backends.get(variant.kind.name).precision_form(variant) or str(variant)
            hopeless_forms[(form, chosen)] = (variant, used)
            # not timed: no partial plan of it could save enough to pay for its search
            self.records[variant] = replace(record, note=(
                f"misses the budget on the whole model, {used:.1f} times over on "
                f"{report.samples} validation sample(s): even {int8_speedup_bound():g}x "
                f"faster than fp32, a partial plan is predicted to save under "
                f"{MIN_SAVING:.0%}; not timed"))
            return None
        return _Whole(variant, plan, built, report)

    def _not_tried(self, variant: Target, chosen: tuple[int, ...],
                   hopeless_forms: Mapping[tuple[str, tuple[int, ...]], tuple[Target, float]]
                   ) -> VariantRecord | None:
        """The record of `variant` where it is not built on the segments it runs."""
        if not chosen:
            return VariantRecord(str(variant), note="runs no segment")
        backend = backends.get(variant.kind.name)
        suits = backend.variant_suits(variant, _weights_by_op(self.flow, self.cut, chosen))
        if not suits:
            return VariantRecord(str(variant), segments=chosen, note=f"not tried: {suits.reason}")
        form = backend.precision_form(variant) or str(variant)
        if (form, chosen) in hopeless_forms:
            judged, used = hopeless_forms[(form, chosen)]
            return VariantRecord(str(variant), whole_used=used, segments=chosen, note=(
                f"the same {form} model as `{judged}`, {used:.1f} times over the budget: "
                "not built"))
        return None

    def _timed_whole(self, whole: dict[Rival, _Whole]
                     ) -> tuple[float, dict[Rival, float]]:
        """The fp32 plan and the whole-model variants timed end to end; a variant that could
        not be timed is dropped, saying why."""
        runnables = {FP32: self.fp32[1].runnable, **{
            r: w.built.runnable for r, w in whole.items() if w.built.runnable}}
        costs = self._timed(runnables)
        base_ms = costs[FP32]
        for rival in [r for r in whole if not math.isfinite(costs.get(r, math.inf))]:
            # a timing that could not be taken is a refusal, never a number in a comparison
            why = ("the fp32 plan could not be timed on inputs of its shapes, so nothing is "
                   "compared with it" if not math.isfinite(base_ms) else
                   "could not be timed on inputs of its shapes")
            variant = whole[rival].variant
            self.records[variant] = replace(self.records[variant], note=f"not compared: {why}")
            del whole[rival]
        return base_ms, costs

    def _timed(self, runnables: Mapping[Rival, Runnable | None]) -> dict[Rival, float]:
        present = {r: run for r, run in runnables.items() if run is not None}
        figures = timed(present, self.ctx.objective, self.how, self.ctx.progress)
        return figures.cost(self.ctx.objective)

    def _within_budget(self, whole: dict[Rival, _Whole], base_ms: float,
                       timed_ms: Mapping[Rival, float]) -> dict[Rival, Judged]:
        """Each variant's plan that meets the budget: its whole-model plan, or its partial
        plan searched op by op (each static int8 form once) or segment by segment (one
        variant at most: the costly step)."""
        budget = self.judge.budget
        candidates: dict[Rival, Judged] = {}
        searched: set[str] = set()  # the forms searched op by op, "" for segment by segment
        for rival, w in sorted(whole.items(), key=lambda item: (-predicted_saving(
                timed_ms[item[0]] / base_ms, budget_used(item[1].report, budget)),
                str(item[0]))):
            record = replace(self.records[w.variant], whole_ms=timed_ms[rival])
            self.records[w.variant] = record
            way = self._way(w.variant)
            note = self._not_searched(w, timed_ms[rival], base_ms, way in searched)
            if note is not None:
                self.records[w.variant] = replace(record, note=note)
                continue
            kept: tuple[int, ...]
            final: Judged | None
            if w.report.met:
                kept, final = record.segments, (w.plan, w.built, w.report)
            else:
                searched.add(way)
                kept, final = self._mixed(w)
            record = self.records[w.variant]
            if final is None:
                self.records[w.variant] = replace(
                    record, note=record.note or "no segment set meets the budget")
                continue
            final = _merged(self.judge, final[0]) or final
            self.records[w.variant] = replace(record, kept=kept, met=True)
            candidates[rival] = final
        return candidates

    def _not_searched(self, w: _Whole, ms: float, base_ms: float, searched: bool
                      ) -> str | None:
        """Why the variant goes no further: no faster than fp32 on the whole model, or it
        misses the budget and a partial plan of it is not worth searching."""
        if ms >= base_ms * FASTER:
            unit = "ms per inference" if self.ctx.objective.throughput else "ms"
            return f"no faster than fp32 on the whole model ({ms:.3f} vs {base_ms:.3f} {unit})"
        if w.report.met:
            return None
        saving = predicted_saving(ms / base_ms, budget_used(w.report, self.judge.budget))
        if saving < MIN_SAVING:
            return (f"misses the budget on the whole model; a partial plan within the budget "
                    f"is predicted to save {saving:.1%}, under {MIN_SAVING:.0%}: not searched")
        if searched:
            return "misses the budget on the whole model; a more promising variant was searched"
        if not self.time_left():
            return f"misses the budget on the whole model; not searched: {self._out_of_time()}"
        return None

    def _way(self, variant: Target) -> str:
        """How a variant that misses the budget is searched: its static int8 form's name
        (op by op), or "" (segment by segment)."""
        backend = backends.get(variant.kind.name)
        if FLOAT_OPS in variant.kind.schema and backend.calibrated(variant):
            return backend.precision_form(variant) or str(variant)
        return ""

    def _mixed(self, w: _Whole) -> tuple[tuple[int, ...], Judged | None]:
        """The variant op by op where its backend can keep single ops of its static int8
        form in float, else segment by segment."""
        if not self._way(w.variant):
            return self._segment_by_segment(w.variant)
        found, record = op_by_op(self.judge, w.plan, w.variant, self.records[w.variant],
                                 self.ctx.progress, self.time_left)
        self.records[w.variant] = record
        return (record.segments if found is not None else ()), found

    def _segment_by_segment(self, variant: Target
                            ) -> tuple[tuple[int, ...], Judged | None]:
        kept, found, record = within_budget(self.judge, self.cut, self._plan, variant,
                                            self.records[variant], self.ctx.progress)
        self.records[variant] = record
        return kept, found

    def _final_race(self, candidates: dict[Rival, Judged], timed_before: Mapping[Rival, float]
                    ) -> tuple[Plan, Built]:
        """The fastest of the plans within the budget and the fp32 plan, with the settings
        choices of each within `SETTINGS_REACH` of the fastest on the whole model, and that
        fastest with its float ops in bf16 too (each a build and a validation, even once the
        time is spent: the others' bf16, tried on BERT-base, never won). A plan timed in
        `timed_before` (the race of the whole-model forms) races again only as the fastest
        there, the anchor the new plans must beat: the others lost to it already; with no
        new plan nothing races again."""
        origin = {rival: rival for rival in candidates}
        rest = "bf16" if any(v.attrs.get("precision") == "bf16" for v in self.variants) \
            else None
        leading = min(candidates, key=lambda r: (self._whole_ms(r), str(r)))
        # settings choices and a bf16 rest are cheap (they reuse the quantized form), so they
        # are built even once the time is spent: settings for every plan within
        # SETTINGS_REACH of the leading one (a weight-only form's larger activation groups
        # ran it 1.3x faster), the bf16 rest for the leading one (ResNet-50: 4% faster)
        reach = self._whole_ms(leading) * SETTINGS_REACH
        extras = [(rival, found) for rival in sorted(candidates, key=str)
                  if rival == leading or self._whole_ms(rival) <= reach
                  for found in _with_settings(self.judge, candidates[rival][0])]
        extras += [(leading, found) for found in
                   _with_float_rest(self.judge, candidates[leading][0], rest)]
        for rival, (choice, settled) in extras:
            origin[Rival.precision(choice)] = rival
            candidates[Rival.precision(choice)] = settled
        finals = {r: ms for r, ms in timed_before.items() if r == FP32 or r in candidates}
        raced = to_race(list(candidates), finals)
        if raced:
            finals.update(self._timed({r: (self.fp32 if r == FP32 else candidates[r])[1].runnable
                                       for r in raced}))
        contenders = raced or list(finals)
        finals = {r: ms for r, ms in finals.items() if math.isfinite(ms) or r == FP32}
        winner = min((r for r in contenders if r in finals),
                     key=lambda r: (finals[r], r != FP32, str(r)), default=FP32)
        chosen = self.fp32 if winner == FP32 else candidates[winner]
        return self._finish(chosen, origin.get(winner, winner), finals)

    def _whole_ms(self, rival: Rival) -> float:
        record = self.records.get(rival.target) if rival.target is not None else None
        ms = record.whole_ms if record is not None else None
        return math.inf if ms is None else ms

    def _plan(self, quantized: Mapping[int, Target], merge: bool = False) -> Plan:
        return plan_with(self.flow, self.fp32[0], self.cut, self.fp32_of, quantized, merge)

    def _finish(self, chosen: Judged, kept: Rival, timings: Mapping[Rival, float]
                ) -> tuple[Plan, Built]:
        plan, built, report = chosen
        record = self.records.get(kept.target) if kept.target is not None else None
        precision = PrecisionRecord(
            status=SEARCHED, segments=len(self.cut), variants=tuple(self.records.values()),
            kept=kept, end_to_end_ms={r: ms for r, ms in timings.items() if math.isfinite(ms)},
            seconds=round(self.ctx.clock() - self.started, 3),
            partition_used=_partition_shares(plan, record, self.cut, self.flow.names))
        decisions = dict(plan.decisions)
        for part in plan.partitions:
            if record is not None and variant_of(part.target) == Target(record.target):
                for node in part.nodes:
                    decisions[node] = (
                        f"{part.target}: quantized within the accuracy budget {report.budget} "
                        f"on the validation samples, faster end to end than fp32; was: "
                        f"{plan.decisions.get(node, '')}")
        plan = replace(plan, decisions=decisions).with_stats(accuracy=report,
                                                            precision=precision)
        return plan, replace(built, plan=plan)


class Judging(Protocol):
    """What measures a plan against the budget (the search's judge; a fake in tests)."""

    budget: AccuracyBudget

    def accuracy(self, plan: Plan) -> tuple[Built | None, AccuracyReport | None, str]: ...


def within_budget(judge: Judging, cut: Sequence[Segment],
                  plan_of: Callable[[Mapping[int, Target]], Plan], variant: Target,
                  record: VariantRecord, progress: Reporter | None = None
                  ) -> tuple[tuple[int, ...], Judged | None, VariantRecord]:
    """The segments of `variant` that keep the plan within the budget, chosen by their
    error measured one at a time, the plan measured with them (`plan_of` a quantized
    segment set), and the variant's record with what was measured."""
    progress = progress or Reporter()
    used: dict[int, float] = {}
    progress.begin(Phase.PRECISION, len(record.segments), f"{variant}, segment by segment")
    for index in record.segments:
        _, report, _ = judge.accuracy(plan_of({index: variant}))
        used[index] = budget_used(report, judge.budget) if report is not None else math.inf
        progress.advance(Phase.PRECISION, f"{variant}, segment {index}")
    weight = {s.index: s.weight for s in cut}
    # least error per unit of work first, while the predicted errors sum within the budget
    kept: list[int] = []
    total = 0.0
    for index in sorted(used, key=lambda i: (used[i] / weight[i], i)):
        if total + used[index] <= FILL:
            kept.append(index)
            total += used[index]
    progress.begin(Phase.PRECISION, detail=f"{variant} on {len(kept)} segment(s)")
    record = replace(record, segment_used=tuple(sorted(used.items())))
    reverted = 0
    while kept:
        plan = plan_of(dict.fromkeys(kept, variant))
        built, report, _ = judge.accuracy(plan)
        if built is not None and report is not None and report.met:
            return tuple(sorted(kept)), (plan, built, report), replace(record,
                                                                       reverted=reverted)
        kept.remove(max(kept, key=lambda i: (used[i], i)))  # the most sensitive goes back
        reverted += 1
    return (), None, replace(record, reverted=reverted)


FLOAT_OPS = "int8-float-ops"  # the attribute naming the nodes a quantized form keeps in float
MAX_TRIALS = 7  # op-level mixes built and judged, at most


def op_by_op(judge: _Judge, plan: Plan, variant: Target, record: VariantRecord,
             progress: Reporter | None = None, time_left: Callable[[], bool] = lambda: True
             ) -> tuple[Judged | None, VariantRecord]:
    """`plan` (its partitions on `variant` quantized whole) with the fewest ops kept in
    float that meets the budget: the ops ranked by the error each adds (measured once on the
    calibration samples), the 1, 2, 4, ... that add the most kept in float until the plan
    meets the budget, then the count between the last two halved while it still does. Each
    partition stays one partition (the mix is its target's attribute). None where no mix
    within `MAX_TRIALS` builds meets the budget; once `time_left` says no, the mix found so
    far is kept."""
    progress = progress or Reporter()
    ctx = judge.ctx
    assert ctx.builder is not None
    progress.begin(Phase.PRECISION, detail=f"{variant}, op by op")
    ranked: list[tuple[float, str]] = []
    for index, part in enumerate(plan.partitions):
        if settings_base(part.target) == variant:
            ranked += [(-error, node) for node, error in ctx.builder.op_errors(
                ctx.model, ctx.config, plan, index, judge.samples) if error > 0]
    order = [node for _, node in sorted(ranked)]
    if not order:
        return None, replace(record, note="no op adds a measurable error: nothing to mix")

    def mix(count: int) -> Plan:
        kept = set(order[:count])
        parts = tuple(replace(p, target=p.target.with_attrs(**{FLOAT_OPS: tuple(
            n for n in p.nodes if n in kept)})) if settings_base(p.target) == variant else p
            for p in plan.partitions)
        return replace(plan, partitions=parts)

    trials, low, high = 0, 0, 0
    best: Judged | None = None
    count = 1
    while trials < MAX_TRIALS and count <= len(order) and (not trials or time_left()):
        # 1, 2, 4, ...: the first that meets
        trials += 1
        progress.advance(Phase.PRECISION, f"{variant} with {count} op(s) in float")
        best = judge.met(mix(count))
        if best is not None:
            high = count
            break
        low = count
        count = min(count * 2, len(order)) if count < len(order) else count + 1
    while best is not None and trials < MAX_TRIALS and high - low > 1 and time_left():
        trials += 1
        middle = (low + high) // 2
        found = judge.met(mix(middle))
        if found is not None:
            best, high = found, middle
        else:
            low = middle
    done = replace(record, reverted=high if best is not None else 0)
    if best is None:
        stopped = "; its time was spent" if trials < MAX_TRIALS and count <= len(order) else ""
        return None, replace(done, note=(
            f"op by op: no mix of up to {min(count, len(order))} of the {len(order)} ranked "
            f"op(s) in float meets the budget ({trials} tried{stopped})"))
    return best, replace(done, note=(
        f"op by op: the {high} op(s) adding the most error of {len(order)} kept in float "
        f"({trials} mix(es) tried)"))


def _maker(variant: Target) -> tuple[str, str]:
    """How a variant's form is made, for foreseeing its time: its backend and quantizer
    (NNCF's forms take about as long as each other, ONNX Runtime's far less)."""
    attrs = variant.attrs
    return variant.kind.name, "/".join(str(attrs.get(a, "")) for a in (
        "precision", "int8-recipe", "int8-quantizer"))


def to_race(candidates: Sequence[Rival], timed_before: Mapping[Rival, float]) -> list[Rival]:
    """The plans the final race times: none where every candidate was timed before (in
    `timed_before`, with the fp32 plan), else the new ones and, as the anchor they must
    beat, the fastest timed before (the others lost to it in that race)."""
    new = [r for r in candidates if r not in timed_before]
    if not new:
        return []
    anchor = min(timed_before, key=lambda r: (timed_before[r], r != FP32, str(r)))
    return [anchor, *new]


def _seconds(option: float | str, before: float) -> float:
    """The precision search's time: the option's seconds, or with auto `auto_seconds`."""
    if option == "auto":
        return auto_seconds(before)
    return math.inf if option == "unlimited" else float(option)


def auto_seconds(before: float) -> float:
    """precision-time=auto: as long as the compile took to reach the fp32 plan (`before`),
    so that a compile with samples takes about twice a float one."""
    return max(before, 0.0)


def plan_with(flow: DataflowGraph, fp32: Plan, cut: Sequence[Segment],
              fp32_of: Mapping[int, Target], quantized: Mapping[int, Target],
              merge: bool = False) -> Plan:
    """The `fp32` plan with the segments in `quantized` on their variant, one partition per
    segment and fp32 target (neighbours merged with `merge`)."""
    runs: list[tuple[list[int], Target]] = []
    for segment in cut:
        variant = quantized.get(segment.index)
        for position, node in enumerate(segment.nodes):
            target = variant or fp32_of[node]
            if runs and runs[-1][1] == target and (merge or position > 0):
                runs[-1][0].append(node)
            else:
                runs.append(([node], target))
    parts = make_partitions(flow, [(bits(nodes), t, None) for nodes, t in runs])
    return Plan(parts, fp32.partitioner, fp32.reasons, fp32.decisions, fp32.stats)


def _with_settings(judge: _Judge, plan: Plan) -> list[tuple[Target, Judged]]:
    """The settings choices of a plan of one partition that build and meet the budget
    (settings may change how a backend computes, so each is measured again)."""
    if len(plan.partitions) != 1:
        return []
    part = plan.partitions[0]
    found = []
    for choice in setting_choices(part.target, judge.ctx.objective):
        settled = judge.met(replace(plan, partitions=(replace(part, target=choice),)))
        if settled is not None:
            found.append((choice, settled))
    return found


SETTINGS_REACH = 1.5  # plans this much slower than the leading one still try their settings
FLOAT_PRECISION = "int8-float-precision"  # the precision of the ops an int8 form leaves float


def variant_of(target: Target) -> Target:
    """The precision variant a partition's target was made from: its settings choice, its
    op-level mix and the precision of its float ops undone."""
    base = settings_base(target)
    undone = {n: v for n, v in ((FLOAT_OPS, ()), (FLOAT_PRECISION, "f32"))
              if n in base.explicit_attrs}  # their canonical forms drop them
    return base.with_attrs(**undone) if undone else base


def _with_float_rest(judge: _Judge, plan: Plan, precision: str | None
                     ) -> list[tuple[Target, Judged]]:
    """`plan` with the ops its int8 partitions leave in float computed in `precision` (bf16,
    where the CPU has it and the backend offers it), when it meets the budget."""
    if precision is None:
        return []
    parts = tuple(replace(p, target=p.target.with_attrs(**{FLOAT_PRECISION: precision}))
                  if FLOAT_PRECISION in p.target.kind.schema
                  and p.target.attrs.get("precision") == "int8" else p
                  for p in plan.partitions)
    changed = [p.target for p, q in zip(parts, plan.partitions, strict=True) if p != q]
    if not changed:
        return []
    settled = judge.met(replace(plan, partitions=parts))
    return [(changed[0], settled)] if settled is not None else []


def _weights_by_op(flow: DataflowGraph, cut: Sequence[Segment], chosen: Sequence[int]
                   ) -> dict[str, int]:
    """The weight elements of the chosen segments, by the operator that reads them."""
    found: dict[str, int] = {}
    for segment in cut:
        if segment.index not in chosen:
            continue
        for i in segment.nodes:
            node = flow.nodes[i]
            for name in node.input:
                tensor = flow.initializers.get(name)
                if tensor is not None:
                    found[node.op_type] = found.get(node.op_type, 0) + math.prod(tensor.dims)
    return found


def _runs(table: SupportTable, segment: Segment, variant: Target) -> bool:
    """Whether every node of `segment` may run on `variant`'s backend."""
    return all(any(t.kind.name == variant.kind.name for t in table.allowed[i])
               and i not in table.pinned for i in segment.nodes)


def _merged(judge: _Judge, plan: Plan) -> Judged | None:
    """`plan` with neighbouring partitions of one target merged, when it still meets the
    budget (a static int8 form calibrated as one piece differs slightly)."""
    runs: list[tuple[list[Partition], Target]] = []
    for part in plan.partitions:
        if runs and runs[-1][1] == part.target:
            runs[-1][0].append(part)
        else:
            runs.append(([part], part.target))
    if len(runs) == len(plan.partitions):
        return None
    flow = judge.ctx.model.dataflow
    groups = [(flow.node_set(n for p in parts for n in p.nodes), target, None)
              for parts, target in runs]
    return judge.met(replace(plan, partitions=make_partitions(flow, groups)))


def _partition_shares(plan: Plan, chosen: VariantRecord | None, cut: Sequence[Segment],
                      names: Sequence[str]) -> tuple[float | None, ...]:
    """Each partition's share of the budget: the shares its quantized segments used when
    measured alone (the whole model's, when no segment was measured alone); None for fp32."""
    if chosen is None:
        return tuple(None for _ in plan.partitions)
    alone = dict(chosen.segment_used)
    segment_of = {names[n]: s.index for s in cut for n in s.nodes}
    shares: list[float | None] = []
    for part in plan.partitions:
        if variant_of(part.target) != Target(chosen.target):
            shares.append(None)
            continue
        held = dict.fromkeys(segment_of[n] for n in part.nodes)
        shares.append(round(sum(alone[i] for i in held), 4) if alone and all(
            i in alone for i in held) else chosen.whole_used)
    return tuple(shares)


__all__ = ["FLOAT_OPS", "Judging", "op_by_op", "plan_with", "search_precision", "to_race",
           "within_budget"]
