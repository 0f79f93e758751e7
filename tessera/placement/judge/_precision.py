"""Precision under an accuracy budget, on the user's samples. After the fp32 decision, each
precision variant its backends offer (`onnxruntime -precision=int8 -int8-recipe=static`,
`... dynamic`, `openvino -precision=int8`) is tried on the segments of the plan
(`_segments.py`), calibrated on the samples' even half and judged on the odd half against
the fp32 answers of the consensus oracle (`tessera.oracle`):

1. every variant runs on every segment it supports, and the fp32 plan and these whole-model
   variants race end to end; a variant no faster than fp32 is dropped (dynamic int8 makes
   convolutions 5-11x slower); a variant many times over the budget on its first
   validation samples stops there untimed (`hopeless`: no partial plan of it could save 10%
   even at int8's best speed-up), and another variant of the same quantized model on the
   same segments is not built (ONNX Runtime and OpenVINO run one QDQ form);
2. a variant that misses the budget on the whole model is measured one segment at a time
   (only the one predicted to save the most, and only when it is predicted to save 10%),
   and the segments that cost the least error per unit of work stay quantized while their
   errors sum within the budget; the plan is measured again and, while it misses, the most
   sensitive segment left goes back to fp32 (NNCF's accuracy control, by partition);
3. each variant's plan that meets the budget, its neighbours of one target merged, races
   the fp32 plan, and the fastest is kept; a plan of the model whole on one variant races
   with its runtime-settings variants too (`_settings.py`: OpenVINO's throughput streams,
   ONNX Runtime's pools per caller), which reuse its int8 form.

Only measured plans are kept: the plan returned meets the budget on the validation samples,
and its report is the plan's `accuracy`."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tessera import backends
from tessera._private.cores import cpu_flags
from tessera._private.text import first_line
from tessera._private.timing import Clock
from tessera.config import CompilationConfig
from tessera.config._accuracy import DEFAULT_BUDGET, AccuracyBudget, AccuracyReport, measure
from tessera.config._objective import Objective
from tessera.errors import TesseraError
from tessera.ir import Model, Samples
from tessera.ir._implied import implied_inputs, non_tensor_input
from tessera.oracle import answers
from tessera.placement.judge._race import PointShapes, point_shapes, race, race_throughput
from tessera.placement.measure._points import Points
from tessera.placement.record._builder import Builder, Built, Runnable
from tessera.placement.record._phase import Phase
from tessera.placement.record._plan import Partition, Plan, make_partitions
from tessera.placement.record._progress import ProgressLike, Reporter
from tessera.placement.record._stats import PrecisionRecord, VariantRecord
from tessera.placement.search._segments import Segment, segments
from tessera.placement.search._settings import setting_variants, settings_base
from tessera.placement.search._support import SupportTable
from tessera.target import Target

FASTER = 0.97  # a variant must beat fp32 by this much on the whole model to be searched
FILL = 0.9  # the share of the budget the predicted errors may use before measuring
# A partial plan is searched only when it is predicted to save this much: it pays one
# build and validation per segment, and a chain of partitions costs time of its own
# (BERT-base, static int8 on 2 of 7 segments: 7.6% predicted, 2% slower measured).
MIN_SAVING = 0.10
PROBE = 2  # validation samples a whole-model variant runs before it may be given up


def int8_speedup_bound() -> float:
    """The most an int8 form can run faster than fp32: an int8 dot product instruction does
    four times the multiply-adds of an fp32 FMA (AVX-VNNI, AVX-512 VNNI, NEON's SDOT); AMX
    tiles do many more."""
    return 16.0 if "amx_int8" in cpu_flags() else 4.0


def hopeless(used: float) -> bool:
    """Whether a variant that uses `used` times the budget on the whole model cannot pay
    for its partial search even at int8's best speed-up (BERT-base: static and dynamic int8
    use 8-9 times `cosine>=0.999`, GPT-2-small 26-59 times; both plans stayed fp32)."""
    return used > 1.0 and predicted_saving(1.0 / int8_speedup_bound(), used) < MIN_SAVING


def predicted_saving(ratio: float, used: float) -> float:
    """The share of the fp32 time a partial plan of a variant is predicted to save: the
    variant's whole-model saving (`ratio` is its time over fp32's) over the share of the
    model that fits the budget, when its error spreads evenly over the model's work
    (`used` is the whole-model variant's budget share). BERT-base, dynamic int8 at 0.58 of
    fp32's time, 7.8 times over `cosine>=0.999`: 4.8%; its partial plan measured as slow
    as fp32."""
    if ratio >= 1.0:
        return 0.0
    return (1.0 - ratio) * min(1.0, FILL / used) if used > 0 else 1.0 - ratio


def variants_of(config: CompilationConfig) -> list[Target]:
    """Every precision variant the config's targets offer, in priority order."""
    found: list[Target] = []
    for target in config.priority:
        backend = backends.get(target.kind.name)
        if backend.is_available().ok:
            found += [v for v in backend.precision_variants(target) if v not in found]
    return found


GENERATED = 8  # inputs generated where the user gave no samples: 4 judge (float forms)


def float_form(target: Target) -> bool:
    """Whether `target` computes in a float form below fp32 that needs no calibration."""
    return target.attrs.get("precision") in ("bf16", "f16")


@dataclass(frozen=True)
class PrecisionSetup:
    """What the precision search runs with: the config carrying the budget it judges by,
    the samples (the user's, or generated in the ranges the model implies) and whether
    only the calibration-free float forms are tried (no user budget, or no samples: int8
    needs the user's own samples)."""

    config: CompilationConfig
    samples: Samples
    float_only: bool
    generated: bool


def precision_setup(model: Model, config: CompilationConfig, samples: Samples | None,
                    sizes: Mapping[str, int] | None = None) -> PrecisionSetup | str:
    """The search's setup for this compile, or why no lower precision is tried."""
    budget = config.options.accuracy
    if budget is not None and budget.exact:
        return "accuracy=exact keeps fp32"
    float_only = budget is None or samples is None
    variants = [v for v in variants_of(config) if not float_only or float_form(v)]
    if not variants:
        if not float_only:
            return "no target offers a precision variant (onnxruntime and openvino do)"
        return ("no target computes a float form below fp32 (bf16, f16) natively on this CPU, "
                "and int8 is tried only with an accuracy budget and your own samples")
    generated = samples is None
    if samples is None:
        not_tensor = non_tensor_input(model)
        if not_tensor:
            return (f"input {not_tensor!r} is not a tensor, and tessera generates only tensor "
                    "inputs: pass samples to judge a lower precision")
        samples = Samples.load(implied_inputs(model, GENERATED, sizes=sizes), model)
    if budget is None:
        options = replace(config.options, accuracy=AccuracyBudget.parse(DEFAULT_BUDGET))
        config = replace(config, options=options)
    return PrecisionSetup(config, samples, float_only, generated)


def budget_used(report: AccuracyReport, budget: AccuracyBudget) -> float:
    """How much of the budget the worst output uses: 1.0 at the bound, above it a miss.
    A lower bound L on a similarity (cosine, top1) allows 1 - L of loss; an upper bound
    on an error allows the bound itself."""
    used = 0.0
    for bound in budget.bounds:
        for m in report.values:
            if m.metric != bound.metric:
                continue
            if bound.op == ">=":
                loss, allowed = 1.0 - m.value, 1.0 - bound.limit
            else:
                loss, allowed = m.value, bound.limit
            share = loss / allowed if allowed > 0 else (0.0 if loss <= 0 else float("inf"))
            used = max(used, share)
    return used


@dataclass
class _Judge:
    """Builds plans and measures them on the validation samples."""

    model: Model
    config: CompilationConfig
    builder: Builder
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
        built = self.builder.build(self.model, self.config, plan, self.samples)
        if built.failures or built.runnable is None:
            return built, None, "failed to build: " + first_line(
                "; ".join(built.failures.values()))
        got: list[dict[str, Any]] = []
        try:
            for feed in self.feeds:
                got.append(built.runnable.run(feed))
                if probe and len(got) == PROBE < len(self.feeds):
                    early = measure(got, self.reference[:PROBE], self.budget, self.judges)
                    if hopeless(_lower_bound_used(early, self.budget)):
                        return built, early, ""
        except Exception as err:  # a quantized form that cannot run is not kept
            return built, None, f"failed to run: {first_line(err)}"
        return built, measure(got, self.reference, self.budget, self.judges), ""


def _lower_bound_used(report: AccuracyReport, budget: AccuracyBudget) -> float:
    """The budget share of the metrics that can only get worse with more samples (the
    lowest cosine, the largest absolute error), or 0 when the budget has none."""
    kept = AccuracyBudget(tuple(b for b in budget.bounds if b.metric in ("cosine", "max-abs")))
    return budget_used(report, kept) if kept.bounds else 0.0


def search_precision(model: Model, config: CompilationConfig, fp32: Plan, fp32_built: Built,
                     builder: Builder, samples: Samples, clock: Clock = time.perf_counter,
                     pins: Mapping[int, Target] | None = None,
                     progress: ProgressLike | None = None, float_only: bool = False
                     ) -> tuple[Plan, Built]:
    """The fastest plan that meets the config's accuracy budget: `fp32` itself, or one with
    some of its segments in a lower precision."""
    started = clock()
    reporter = Reporter.of(progress)
    reporter.begin(Phase.PRECISION, detail="the fp32 answers")
    budget = config.options.accuracy
    assert budget is not None
    _, validation = samples.split()
    feeds = list(validation)
    assert fp32_built.runnable is not None
    try:
        fp32_outputs = [fp32_built.runnable.run(f) for f in feeds]
        truth = answers(model.proto, feeds)
    except TesseraError as err:  # inputs it cannot take: categories no encoder knows, scales
        refused = fp32.with_stats(precision=PrecisionRecord(
            f"not tried: the fp32 plan or the oracle fails on the inputs that would judge it "
            f"({first_line(err)}); give samples of real inputs (samples=...)"))
        return refused, replace(fp32_built, plan=refused)
    judge = _Judge(model, config, builder, samples, budget, list(truth.outputs), feeds,
                   truth.judges)
    table = SupportTable.build(model, config, None, pins or {})  # pinned nodes stay
    flow = model.dataflow
    order = [flow.names.index(n) for p in fp32.partitions for n in p.nodes]
    fp32_of = {flow.names.index(n): p.target for p in fp32.partitions for n in p.nodes}
    cut = segments(flow, order)
    fp32_report = measure(fp32_outputs, judge.reference, budget, judge.judges)

    variants = [v for v in variants_of(config) if not float_only or float_form(v)]
    records: dict[str, VariantRecord] = {}
    whole: dict[str, tuple[Target, Plan, Built, AccuracyReport]] = {}
    # the hopeless forms: (form, segments) -> the variant that judged it, and its share
    hopeless_forms: dict[tuple[str, tuple[int, ...]], tuple[str, float]] = {}
    for position, variant in enumerate(variants):
        reporter.step(Phase.PRECISION, position, len(variants), f"{variant} on the whole model")
        chosen = tuple(s.index for s in cut if _runs(table, s, variant))
        if not chosen:
            records[str(variant)] = VariantRecord(str(variant), note="runs no segment")
            continue
        backend = backends.get(variant.kind.name)
        suits = backend.variant_suits(variant, _weights_by_op(flow, cut, chosen))
        if not suits:
            records[str(variant)] = VariantRecord(str(variant), segments=chosen,
                                                  note=f"not tried: {suits.reason}")
            continue
        form = backend.precision_form(variant) or str(variant)
        if (form, chosen) in hopeless_forms:
            judged, used = hopeless_forms[(form, chosen)]
            records[str(variant)] = VariantRecord(str(variant), whole_used=used,
                                                  segments=chosen, note=(
                f"the same {form} model as `{judged}`, {used:.1f} times over the budget: "
                "not built"))
            continue
        # as one would quantize it by hand: every segment it runs, neighbours merged
        plan = _plan(flow, cut, fp32_of, dict.fromkeys(chosen, variant), fp32,
                     merge=True)
        built, report, why = judge.accuracy(plan, probe=True)
        if report is None:
            records[str(variant)] = VariantRecord(str(variant), note=why)
            continue
        used = budget_used(report, budget)
        records[str(variant)] = VariantRecord(str(variant), whole_used=used, segments=chosen)
        if not report.met and hopeless(used):
            hopeless_forms[(form, chosen)] = (str(variant), used)
            # not timed: no partial plan of it could save enough to pay for its search
            records[str(variant)] = replace(records[str(variant)], note=(
                f"misses the budget on the whole model, {used:.1f} times over on "
                f"{report.samples} validation sample(s): even {int8_speedup_bound():g}x "
                f"faster than fp32, a partial plan is predicted to save under "
                f"{MIN_SAVING:.0%}; not timed"))
            continue
        whole[str(variant)] = (variant, plan, built, report)
    objective = Objective.of(config.options)
    if not whole:
        builder.release()
        return _finish(fp32, fp32_built, fp32_report, records, "fp32", cut, flow.names, {},
                       clock() - started)
    at = point_shapes(model, Points.of(model, config))  # a dynamic model: at its points
    timed = _timed(objective, {"fp32": fp32_built.runnable, **{
        n: b.runnable for n, (_, _, b, _) in whole.items() if b.runnable}}, clock, reporter,
        at)
    base_ms = timed["fp32"]
    for name in [n for n in whole if not math.isfinite(timed.get(n, math.inf))]:
        # a timing that could not be taken is a refusal, never a number in a comparison
        why = ("the fp32 plan could not be timed on inputs of its shapes, so nothing is "
               "compared with it" if not math.isfinite(base_ms) else
               "could not be timed on inputs of its shapes")
        records[name] = replace(records[name], note=f"not compared: {why}")
        del whole[name]
    candidates: dict[str, tuple[Plan, Built, AccuracyReport]] = {}
    searched = False  # one variant at most is searched segment by segment: the costly step
    for name, (variant, plan, built, report) in sorted(
            whole.items(), key=lambda item: (-predicted_saving(
                timed[item[0]] / base_ms, budget_used(item[1][3], budget)), item[0])):
        record = replace(records[name], whole_ms=timed[name])
        if timed[name] >= base_ms * FASTER:
            unit = "ms per inference" if objective.throughput else "ms"
            records[name] = replace(record, note=f"no faster than fp32 on the whole model "
                                                 f"({timed[name]:.3f} vs {base_ms:.3f} {unit})")
            continue
        final: tuple[Plan, Built, AccuracyReport] | None
        if report.met:
            kept: tuple[int, ...] = record.segments
            final = (plan, built, report)
        else:
            saving = predicted_saving(timed[name] / base_ms, budget_used(report, budget))
            if searched or saving < MIN_SAVING:
                why = (f"a partial plan within the budget is predicted to save "
                       f"{saving:.1%}, under {MIN_SAVING:.0%}: not searched") \
                    if saving < MIN_SAVING else "a more promising variant was searched"
                records[name] = replace(record, note=f"misses the budget on the whole "
                                                     f"model; {why}")
                continue
            searched = True
            kept, final, record = _within_budget(judge, flow, cut, fp32_of, fp32,
                                                 variant, record, reporter)
        if final is None:
            records[name] = replace(record, note=record.note or "no segment set meets the budget")
            continue
        merged = _merged(judge, final[0])
        final = merged or final
        records[name] = replace(record, kept=kept, met=True)
        candidates[name] = final
    if not candidates:
        builder.release()
        return _finish(fp32, fp32_built, fp32_report, records, "fp32", cut, flow.names,
                       {"fp32": base_ms}, clock() - started)
    origin = {name: name for name in candidates}
    for name, plan in [(n, c[0]) for n, c in candidates.items()]:
        for variant, settled in _with_settings(judge, plan, objective):
            origin[str(variant)] = name
            candidates[str(variant)] = settled
    finals = _timed(objective, {"fp32": fp32_built.runnable, **{
        n: b.runnable for n, (_, b, _) in candidates.items() if b.runnable}}, clock, reporter,
        at)
    finals = {n: ms for n, ms in finals.items() if math.isfinite(ms) or n == "fp32"}
    winner = min(finals, key=lambda n: (finals[n], n != "fp32"))
    if winner == "fp32":
        plan, built, report = fp32, fp32_built, fp32_report
    else:
        plan, built, report = candidates[winner]
    result = _finish(plan, built, report, records, origin.get(winner, winner), cut,
                     flow.names, finals, clock() - started)
    builder.release()
    return result


def _timed(objective: Objective, runnables: Mapping[str, Runnable], clock: Clock,
           report: Reporter | None = None, points: PointShapes | None = None
           ) -> dict[str, float]:
    """Each plan's figure under the objective, lower is better: its latency at the
    percentile, or under `throughput` the milliseconds per inference its callers achieve
    together (infinite over the latency budget, or where it could not be timed). A model
    with symbolic dimensions is timed at its profile's `points`."""
    if not objective.throughput:
        return race(runnables, clock=clock, percentile=objective.percentile, progress=report,
                    points=points)
    served = race_throughput(runnables, objective.concurrency, objective.percentile,
                             clock=clock, progress=report, points=points)
    budget = objective.latency_budget_ms
    return {name: (float("inf") if s.per_second <= 0 or (
        budget is not None and s.latency_ms > budget) else round(1000.0 / s.per_second, 4))
        for name, s in served.items()}


def _with_settings(judge: _Judge, plan: Plan, objective: Objective
                   ) -> list[tuple[Target, tuple[Plan, Built, AccuracyReport]]]:
    """The settings variants of a plan of one partition that build and meet the budget
    (settings may change how a backend computes, so each is measured again)."""
    if len(plan.partitions) != 1:
        return []
    part = plan.partitions[0]
    found = []
    for variant in setting_variants(part.target, objective):
        settled = replace(plan, partitions=(replace(part, target=variant),))
        built, report, _ = judge.accuracy(settled)
        if report is not None and report.met:
            found.append((variant, (settled, built, report)))
    return found


def _weights_by_op(flow: object, cut: Sequence[Segment], chosen: Sequence[int]
                   ) -> dict[str, int]:
    """The weight elements of the chosen segments, by the operator that reads them."""
    from tessera.ir import DataflowGraph

    assert isinstance(flow, DataflowGraph)
    found: dict[str, int] = {}
    for segment in cut:
        if segment.index not in chosen:
            continue
        for i in segment.nodes:
            node = flow.nodes[i]
            for name in node.input:
                tensor = flow.initializers.get(name)
                if tensor is not None:
                    size = 1
                    for d in tensor.dims:
                        size *= d
                    found[node.op_type] = found.get(node.op_type, 0) + size
    return found


def _runs(table: SupportTable, segment: Segment, variant: Target) -> bool:
    """Whether every node of `segment` may run on `variant`'s backend."""
    return all(any(t.kind.name == variant.kind.name for t in table.allowed[i])
               and i not in table.pinned for i in segment.nodes)


def _plan(flow: object, cut: Sequence[Segment], fp32_of: Mapping[int, Target],
          quantized: Mapping[int, Target], fp32: Plan, merge: bool = False) -> Plan:
    """The plan with the segments in `quantized` on their variant and the rest as in
    `fp32`, one partition per segment and fp32 target (neighbours merged with `merge`)."""
    from tessera.ir import DataflowGraph, bits

    assert isinstance(flow, DataflowGraph)
    runs: list[tuple[list[int], Target]] = []
    for segment in cut:
        variant = quantized.get(segment.index)
        for position, node in enumerate(segment.nodes):
            target = variant or fp32_of[node]
            if runs and runs[-1][1] == target and (merge or position > 0):
                runs[-1][0].append(node)
            else:
                runs.append(([node], target))
    parts = make_partitions(flow, [(bits(nodes), target, None) for nodes, target in runs])
    return Plan(parts, fp32.partitioner, fp32.reasons, fp32.decisions, fp32.stats)


def _within_budget(judge: _Judge, flow: object, cut: Sequence[Segment],
                   fp32_of: Mapping[int, Target], fp32: Plan, variant: Target,
                   record: VariantRecord, progress: Reporter | None = None
                   ) -> tuple[tuple[int, ...], tuple[Plan, Built, AccuracyReport] | None,
                              VariantRecord]:
    """The segments of `variant` that keep the plan within the budget, chosen by their
    error measured one at a time, and the plan measured with them."""
    reporter = progress or Reporter()
    used: dict[int, float] = {}
    reporter.begin(Phase.PRECISION, len(record.segments), f"{variant}, segment by segment")
    for index in record.segments:
        _, report, _ = judge.accuracy(_plan(flow, cut, fp32_of, {index: variant}, fp32))
        used[index] = budget_used(report, judge.budget) if report is not None else float("inf")
        reporter.advance(Phase.PRECISION, f"{variant}, segment {index}")
    weight = {s.index: s.weight for s in cut}
    # least error per unit of work first, while the predicted errors sum within the budget
    ranked = sorted(used, key=lambda i: (used[i] / weight[i], i))
    kept: list[int] = []
    total = 0.0
    for index in ranked:
        if total + used[index] <= FILL:
            kept.append(index)
            total += used[index]
    record = replace(record, segment_used=tuple(sorted(used.items())))
    reverted = 0
    reporter.begin(Phase.PRECISION, detail=f"{variant} on {len(kept)} segment(s)")
    while kept:
        plan = _plan(flow, cut, fp32_of, dict.fromkeys(kept, variant), fp32)
        built, report, _ = judge.accuracy(plan)
        if report is not None and report.met:
            return tuple(sorted(kept)), (plan, built, report), replace(
                record, reverted=reverted)
        worst = max(kept, key=lambda i: (used[i], i))  # the most sensitive goes back
        kept.remove(worst)
        reverted += 1
    return (), None, replace(record, reverted=reverted)


def _merged(judge: _Judge, plan: Plan) -> tuple[Plan, Built, AccuracyReport] | None:
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
    flow = judge.model.dataflow
    groups = [(judge.model.node_set([n for p in parts for n in p.nodes]), target, None)
              for parts, target in runs]
    merged = replace(plan, partitions=make_partitions(flow, groups))
    built, report, _ = judge.accuracy(merged)
    return (merged, built, report) if report is not None and report.met else None


def _finish(plan: Plan, built: Built, report: AccuracyReport,
            records: Mapping[str, VariantRecord], kept: str, cut: Sequence[Segment],
            names: Sequence[str], timings: Mapping[str, float], seconds: float
            ) -> tuple[Plan, Built]:
    chosen = records.get(kept)
    record = PrecisionRecord(status="searched", segments=len(cut),
                             variants=tuple(records.values()), kept=kept,
                             end_to_end_ms={n: ms for n, ms in timings.items()
                                            if math.isfinite(ms)}, seconds=round(seconds, 3),
                             partition_used=_partition_shares(plan, chosen, cut, names))
    decisions = dict(plan.decisions)
    for part in plan.partitions:
        if chosen is not None and settings_base(part.target) == Target(chosen.target):
            for node in part.nodes:
                decisions[node] = (f"{part.target}: quantized within the accuracy budget "
                                   f"{report.budget} on the validation samples, faster end "
                                   f"to end than fp32; was: {plan.decisions.get(node, '')}")
    plan = replace(plan, decisions=decisions).with_stats(accuracy=report, precision=record)
    return plan, replace(built, plan=plan)

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
        if settings_base(part.target) != Target(chosen.target):
            shares.append(None)
            continue
        held = dict.fromkeys(segment_of[n] for n in part.nodes)
        shares.append(round(sum(alone[i] for i in held), 4) if alone and all(
            i in alone for i in held) else chosen.whole_used)
    return tuple(shares)


__all__ = ["GENERATED", "MIN_SAVING", "PrecisionSetup", "budget_used", "float_form", "hopeless",
           "int8_speedup_bound", "precision_setup", "predicted_saving", "search_precision",
           "variants_of"]
