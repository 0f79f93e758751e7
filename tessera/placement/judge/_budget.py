"""How much of an accuracy budget a plan uses, and when a lower-precision variant is worth
searching: the arithmetic the precision search decides by."""

from __future__ import annotations

from tessera._private.cores import cpu_flags
from tessera.config import AccuracyBudget, AccuracyReport

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


def matrix_engine() -> bool:
    """Whether the CPU has AMX tiles, which run bf16 and static int8 matrix products many
    times faster than its vector units. There the float form and static int8 beat OpenVINO's
    weight-only int8, whose activations are quantized per row as it runs (BERT-base on a
    2-core Xeon with AMX: weight-only int8 32-48 ms, bf16 22.8 ms, NNCF's static int8 17.3
    ms); on a CPU without them the weight-only form was as fast as static int8."""
    flags = cpu_flags()
    return "amx_bf16" in flags or "amx_int8" in flags


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


def lower_bound_used(report: AccuracyReport, budget: AccuracyBudget) -> float:
    """The budget share of the metrics that can only get worse with more samples (the
    lowest cosine, the largest absolute error), or 0 when the budget has none."""
    kept = AccuracyBudget(tuple(b for b in budget.bounds if b.metric in ("cosine", "max-abs")))
    return budget_used(report, kept) if kept.bounds else 0.0


__all__ = ["FASTER", "FILL", "MIN_SAVING", "PROBE", "budget_used", "hopeless",
           "int8_speedup_bound", "lower_bound_used", "matrix_engine", "predicted_saving"]
