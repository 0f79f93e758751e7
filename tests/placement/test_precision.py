"""Precision variants under an accuracy budget: the budget share, the greedy choice of the
segments that stay quantized (with a FAKE judge: a test of the search algorithm only), and
real compiles on the user's samples checked against the reference."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera
from tessera import backends, zoo
from tessera._private.cores import core_budget, cpu_flags
from tessera.backends._quantize import recipes_for
from tessera.config import CompilationConfig
from tessera.config._accuracy import AccuracyBudget, AccuracyReport, MetricValue
from tessera.ir import load_model
from tessera.placement import Plan
from tessera.placement.judge._budget import (
    MIN_SAVING,
    PROBE,
    budget_used,
    hopeless,
    int8_speedup_bound,
    predicted_saving,
)
from tessera.placement.judge._precision import plan_with, within_budget
from tessera.placement.judge._precision_setup import (
    GENERATED,
    PrecisionSetup,
    float_form,
    payoff_rank,
    precision_setup,
    variants_of,
)
from tessera.placement.record import VariantRecord
from tessera.placement.record._plan import make_partitions
from tessera.placement.record._progress import Reporter
from tessera.placement.record._rival import FP32
from tessera.placement.search._segments import segments
from tessera.target import Target


def _report(budget: str, **values: float) -> AccuracyReport:
    parsed = AccuracyBudget.parse(budget)
    return AccuracyReport(4, tuple(MetricValue(m.replace("_", "-"), "y", v)
                                   for m, v in values.items()), parsed)


def test_budget_used_is_the_worst_share_of_each_bound() -> None:
    assert budget_used(_report("cosine>=0.999", cosine=0.9995), AccuracyBudget.parse(
        "cosine>=0.999")) == pytest.approx(0.5)
    both = AccuracyBudget.parse("cosine>=0.99,top1>=0.9")
    assert budget_used(_report(str(both), cosine=0.995, top1=0.7), both) == pytest.approx(3.0)
    errors = AccuracyBudget.parse("max-abs<=0.01")
    assert budget_used(_report(str(errors), max_abs=0.02), errors) == pytest.approx(2.0)
    exact = AccuracyBudget.parse("cosine>=1.0")
    assert budget_used(_report(str(exact), cosine=1.0), exact) == 0.0
    assert budget_used(_report(str(exact), cosine=0.9), exact) == float("inf")


def test_the_predicted_saving_of_a_partial_plan() -> None:
    # within the budget: the whole saving; over it: the share of the model that fits
    assert predicted_saving(0.6, 0.5) == pytest.approx(0.4)
    assert predicted_saving(0.6, 4.0) == pytest.approx(0.4 * 0.9 / 4.0)
    assert predicted_saving(1.2, 2.0) == 0.0  # slower than fp32: nothing to save
    # BERT-base as measured: dynamic int8 at 0.58 of fp32, 7.8 times over, and static at
    # 0.73, 4.6 times over: neither searched
    assert predicted_saving(0.58, 7.8) < MIN_SAVING
    assert predicted_saving(0.73, 4.6) < MIN_SAVING
    # MobileNetV2-like: 0.66 of fp32, 1.5 times over: searched
    assert predicted_saving(0.66, 1.5) > MIN_SAVING


def test_a_variant_far_over_the_budget_is_hopeless_at_int8s_best_speed() -> None:
    bound = int8_speedup_bound()
    assert bound in (4.0, 16.0)
    # BERT-base's whole-model int8 forms (8-9 times over) and GPT-2-small's (26-59 times)
    if bound == 4.0:
        assert hopeless(7.8) and hopeless(9.0)
    assert hopeless(26.0) and hopeless(59.0)
    # within the budget, or a little over it (MobileNetV2-like): worth timing
    assert not hopeless(0.5) and not hopeless(1.5) and not hopeless(float("nan"))
    assert all(predicted_saving(1.0 / bound, used) < MIN_SAVING
               for used in (26.0, 59.0))


def test_backends_running_one_quantized_model_name_the_same_form() -> None:
    ort, ov = backends.get("onnxruntime"), backends.get("openvino")
    static = ort.precision_form(Target("onnxruntime -precision=int8 -int8-recipe=static"))
    assert static == "onnxruntime-quantizer static"
    assert ov.precision_form(Target("openvino -precision=int8")) == static
    assert ort.precision_form(Target("onnxruntime -precision=int8 -int8-recipe=dynamic")) \
        == "onnxruntime-quantizer dynamic"
    assert ort.precision_form(Target("onnxruntime")) is None
    assert ov.precision_form(Target("openvino")) is None
    assert ov.precision_form(Target("openvino -precision=bf16")) == "openvino bf16"
    assert backends.get("torch").precision_form(Target("torch")) is None


def test_dynamic_int8_is_tried_only_where_matrix_products_hold_the_weights() -> None:
    ort = backends.get("onnxruntime")
    dynamic = Target("onnxruntime -precision=int8 -int8-recipe=dynamic")
    static = Target("onnxruntime -precision=int8 -int8-recipe=static")
    cnn = {"Conv": 23_000_000, "Gemm": 2_000_000}
    refused = ort.variant_suits(dynamic, cnn)
    assert not refused and refused.reason == (
        "dynamic int8 runs convolutions as ConvInteger, several times slower than fp32, and "
        "92% of the weights are in convolutions")
    assert ort.variant_suits(static, cnn)
    assert ort.variant_suits(dynamic, {"MatMul": 85_000_000, "Gather": 38_000_000})
    assert ort.variant_suits(dynamic, {})
    assert backends.get("openvino").variant_suits(Target("openvino -precision=int8"), cnn)


def test_a_hopeless_variant_is_neither_timed_nor_validated_past_the_probe() -> None:
    name = "resnet-tiny"
    samples = _samples(name, 8)
    # int8 cannot keep every output within 1e-9 of fp32: every variant is hopeless
    compiled = tessera.compile(zoo.export(name), "openvino,onnxruntime", samples=samples,
                               accuracy="max-abs<=1e-9", partitioner="greedy")
    record = compiled.plan.stats.precision
    assert record is not None and record.status == "searched" and record.kept == FP32
    by_target = {v.target: v for v in record.variants}
    dynamic = by_target.pop("onnxruntime -precision=int8 -int8-recipe=dynamic")
    assert dynamic.note.startswith("not tried: dynamic int8 runs convolutions as ConvInteger")
    assert dynamic.whole_used is None and dynamic.whole_ms is None
    # the weight-only forms compress matrix products' weights, a few percent of a CNN's
    weights_only = [t for t in by_target if "weights" in t or "int4" in t]
    assert weights_only
    for target in weights_only:
        refused = by_target.pop(target)
        assert "compresses the weights of matrix products only" in refused.note
        assert refused.note.startswith("not tried: ") and refused.whole_used is None
    for variant in by_target.values():
        assert variant.whole_used is not None and hopeless(variant.whole_used)
        assert variant.whole_ms is None
    judged = by_target["openvino -precision=int8"]
    assert "not timed" in judged.note
    assert f"on {PROBE} validation sample(s)" in judged.note
    # ONNX Runtime's static form is the QDQ model OpenVINO's int8 just missed with
    same = by_target["onnxruntime -precision=int8 -int8-recipe=static"]
    assert same.note.startswith("the same onnxruntime-quantizer static model as "
                                "`openvino -precision=int8`") and "not built" in same.note
    assert same.whole_used == by_target["openvino -precision=int8"].whole_used
    assert not record.end_to_end_ms  # fp32 had nothing to race
    assert all("precision" not in p.target.explicit_attrs for p in compiled.plan.partitions)
    # fp32 is kept whatever it measures: judged by the consensus, not by itself, it too may
    # miss a bound of 1e-9 (graph rewrites reorder float sums)
    accuracy = compiled.plan.stats.accuracy
    assert accuracy is not None and accuracy.judges.startswith("the consensus of ")
    assert accuracy.value("max-abs", "output") < 1e-6


def test_the_precision_setup_says_why_not_or_what_judges() -> None:
    from tessera.ir import Samples

    model = load_model(zoo.export("mlp"))
    samples = Samples.load([zoo.example_inputs("mlp", seed=s) for s in range(2)], model)
    with_budget = CompilationConfig.create("onnxruntime", accuracy="cosine>=0.999")
    # int8 needs the user's samples; ONNX Runtime has no float form below fp32
    assert "int8 is tried only with an accuracy budget and your own samples" in str(
        precision_setup(model, with_budget, None))
    exact = CompilationConfig.create("openvino,onnxruntime", accuracy="exact")
    assert precision_setup(model, exact, samples) == "accuracy=exact keeps fp32"
    reference_only = CompilationConfig.create("reference", accuracy="cosine>=0.999")
    assert "no target offers" in str(precision_setup(model, reference_only, samples))
    setup = precision_setup(model, with_budget, samples)
    assert isinstance(setup, PrecisionSetup)
    assert (setup.float_only, setup.generated, setup.samples) == (False, False, samples)
    # no budget and no samples: the float forms, where this CPU has one, under the default
    # budget on generated inputs
    default = CompilationConfig.create("openvino,onnxruntime")
    floats = [v for v in variants_of(default) if float_form(v)]
    setup = precision_setup(model, default, None)
    if not floats:
        assert "no target computes a float form" in str(setup)
        return
    assert isinstance(setup, PrecisionSetup) and setup.float_only and setup.generated
    assert str(setup.config.options.accuracy) == "cosine>=0.9995"
    assert len(setup.samples) == GENERATED


def test_variants_are_offered_per_target_and_a_precision_the_user_set_is_kept() -> None:
    static = [str(Target("onnxruntime").with_attrs(precision="int8", **{
        "int8-recipe": "static", **recipe})) for recipe in recipes_for(cpu_flags())]
    offered = [str(v) for v in variants_of(CompilationConfig.create("onnxruntime,cpu"))]
    assert offered[:len(static) + 1] == [  # on AMX the u8 recipe first (`recipes_for`)
        *static, "onnxruntime -precision=int8 -int8-recipe=dynamic"]
    chosen = CompilationConfig.create("openvino,onnxruntime -precision=int8 "
                                      "-int8-recipe=dynamic,cpu")
    assert "openvino -precision=int8" in [str(v) for v in variants_of(chosen)]
    assert not any(v.kind.name == "onnxruntime" for v in variants_of(chosen))


def test_variants_come_in_the_order_of_their_expected_payoff() -> None:
    """Static int8 first (NNCF's before ONNX Runtime's; with attention the 8-bit weight-only
    forms, then NNCF's at SmoothQuant alpha 0.15), the float forms, dynamic int8 last; the
    config's priority within each."""
    found = [str(v) for v in variants_of(CompilationConfig.create("openvino,onnxruntime"),
                                          engine=False)]
    ranks = [payoff_rank(Target(v)) for v in found]
    assert ranks == sorted(ranks)
    assert "onnxruntime -precision=int8 -int8-recipe=dynamic" in found[-5:]  # with weight-only
    assert found.index("openvino -precision=int8") < found.index(
        "onnxruntime -precision=int8 -int8-recipe=static")
    if "openvino -precision=int8 -int8-quantizer=nncf" in found:
        assert found[0] == "openvino -precision=int8 -int8-quantizer=nncf"
    assert [payoff_rank(Target(t)) for t in (
        "openvino -precision=int8 -int8-quantizer=nncf", "openvino -precision=int8",
        "openvino -precision=bf16", "onnxruntime -precision=int8 -int8-recipe=dynamic")] == [
        0, 1, 4, 5]
    # with attention the 8-bit weight-only forms come first (no calibration; OpenVINO
    # quantizes their activations per token as it runs), then NNCF's static form at
    # SmoothQuant alpha 0.15, ONNX Runtime's static form (its matrix products alone), then
    # NNCF's other alphas; SmoothQuant's alphas are offered only where there is attention
    assert not any("smoothquant" in v for v in found)
    with_attention = [str(v) for v in variants_of(
        CompilationConfig.create("openvino,onnxruntime"), attention=True, engine=False)]
    if "openvino -precision=int8 -int8-quantizer=nncf" in with_attention:
        def static(kind: str, **attrs: str) -> list[str]:
            # ONNX Runtime's quantizer's recipes for this CPU (AMX: u8 first)
            return [str(Target(kind).with_attrs(precision="int8", **attrs, **recipe))
                    for recipe in recipes_for(cpu_flags())]

        expected = [
            "openvino -precision=int8 -int8-recipe=weights",
            "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=off",
            "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=0.15",
            *static("openvino"), "openvino -precision=int8 -int8-quantizer=nncf",
            *static("onnxruntime", **{"int8-recipe": "static"})]
        assert with_attention[:len(expected)] == expected
    assert [payoff_rank(Target(t), attention=True) for t in (
        "openvino -precision=int8 -int8-recipe=weights",
        "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=off",
        "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=0.15",
        "openvino -precision=int8", "openvino -precision=int8 -int8-quantizer=nncf",
        "openvino -precision=int4",
        "onnxruntime -precision=int8 -int8-recipe=weights -matmul-accuracy=4")] == [
        0, 1, 2, 3, 3, 5, 5]


def test_on_a_cpu_with_amx_a_model_with_attention_starts_with_bf16() -> None:
    """AMX's tiles run bf16 and static int8: with attention bf16 comes first, the static
    forms in their order, then the 8-bit weight-only form; without attention nothing
    changes."""
    forms = ("openvino -precision=bf16",
             "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=off",
             "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=0.15",
             "openvino -precision=int8", "openvino -precision=f16",
             "openvino -precision=int8 -int8-recipe=weights",
             "onnxruntime -precision=int8 -int8-recipe=dynamic")
    assert [payoff_rank(Target(t), attention=True, engine=True) for t in forms] == [
        0, 1, 2, 3, 4, 4, 5]
    assert [payoff_rank(Target(t), engine=True) for t in forms] == [
        payoff_rank(Target(t)) for t in forms]
    found = [str(v) for v in variants_of(CompilationConfig.create("openvino,onnxruntime"),
                                         attention=True, engine=True)]
    if "openvino -precision=bf16" in found:  # the CPU has bf16
        assert found[0] == "openvino -precision=bf16"
    if "openvino -precision=int8 -int8-recipe=weights" in found:
        weights = found.index("openvino -precision=int8 -int8-recipe=weights")
        assert all(found.index(t) < weights for t in forms[1:4] if t in found)
        assert found.index(forms[1]) < found.index(forms[2])  # SmoothQuant off first


def test_once_the_precision_time_is_spent_no_new_variant_is_tried() -> None:
    """The first variant is always tried; the others say why they were not, and the plan
    kept still meets the budget."""
    name = "mlp"
    samples = _samples(name, 8)
    config = CompilationConfig.create("openvino,onnxruntime,cpu", accuracy="cosine>=0.99",
                                      precision_time=0.001)
    first = str(variants_of(config)[0])
    compiled = tessera.compile(zoo.export(name), config, samples=samples)
    record = compiled.plan.stats.precision
    assert record is not None and record.status == "searched"
    by_target = {v.target: v for v in record.variants}
    assert by_target[first].whole_used is not None  # built and judged
    rest = [v for t, v in by_target.items() if t != first]
    assert rest and all(v.note == "not tried: the precision search's 0 s (option "
                        "precision-time: 0.001) were spent, or would be by the race of the "
                        "forms found" for v in rest)
    accuracy = compiled.plan.stats.accuracy
    assert accuracy is not None and accuracy.met


@dataclass
class FakeJudge:
    """FAKE, for the search algorithm only: each quantized segment costs a fixed share of
    a cosine budget, and the shares add up (as 1 - cosine roughly does)."""

    model: object
    budget: AccuracyBudget
    loss: dict[int, float]
    owner: dict[str, int]
    variant: Target
    measured: list[tuple[int, ...]]

    def accuracy(self, plan: Plan) -> tuple[object, AccuracyReport, str]:
        quantized = sorted({self.owner[n] for p in plan.partitions if p.target == self.variant
                            for n in p.nodes})
        self.measured.append(tuple(quantized))
        cosine = 1.0 - sum(self.loss[i] for i in quantized)
        return plan, AccuracyReport(4, (MetricValue("cosine", "y", cosine),), self.budget), ""


def test_the_least_sensitive_segments_stay_quantized_and_the_worst_go_back() -> None:
    model = load_model(zoo.export("bert-tiny"))
    flow = model.dataflow
    order = list(range(len(flow)))
    cut = segments(flow, order, 4)
    assert len(cut) >= 3
    fp32_target, variant = Target("onnxruntime"), Target("onnxruntime -precision=int8")
    fp32 = Plan(make_partitions(flow, [(flow.all_nodes(), fp32_target, None)]), "collage")
    budget = AccuracyBudget.parse("cosine>=0.999")
    # the first segment alone blows the budget; the rest fit, but not all together with
    # the second (0.0004 + 0.0003 + 0.0002 + ... > 0.0009 is found only by measuring)
    loss = {s.index: 0.0002 for s in cut}
    loss[0], loss[1] = 0.01, 0.0004
    judge = FakeJudge(model, budget, loss,
                      {flow.names[n]: s.index for s in cut for n in s.nodes}, variant, [])
    fp32_of = dict.fromkeys(order, fp32_target)
    record = VariantRecord(str(variant), segments=tuple(s.index for s in cut))
    kept, final, record = within_budget(
        judge, cut, functools.partial(plan_with, flow, fp32, cut, fp32_of), variant, record)
    assert 0 not in kept and final is not None
    assert final[2].met
    assert sum(loss[i] for i in kept) <= 0.001 + 1e-12  # the cosine stays within 0.999
    # every segment was measured alone first
    assert judge.measured[:len(cut)] == [(s.index,) for s in cut]
    assert dict(record.segment_used)[0] == pytest.approx(10.0)
    assert all(p.target in (fp32_target, variant) for p in final[0].partitions)


def _samples(name: str, count: int) -> list[dict[str, np.ndarray]]:
    return [zoo.example_inputs(name, seed=s) for s in range(count)]


@pytest.mark.slow
def test_compile_searches_precision_on_samples_within_the_budget() -> None:
    name = "resnet-tiny"
    samples = _samples(name, 8)
    compiled = tessera.compile(zoo.export(name), "onnxruntime", samples=samples,
                               accuracy="cosine>=0.999")
    stats = compiled.plan.stats
    assert stats.precision is not None and stats.precision.status == "searched"
    tried = {v.target for v in stats.precision.variants}
    assert any("int8-recipe=static" in t for t in tried)
    assert any("int8-recipe=dynamic" in t for t in tried)
    assert stats.accuracy is not None and stats.accuracy.met
    for part in compiled.plan.partitions:
        assert Target(str(part.target)).attrs.get("precision") in (None, "fp32", "int8")
    # the plan's outputs on the validation samples keep the budget against the reference
    reference = backends.get("reference").compile(compiled.model.proto, check=False)
    for feed in samples[1::2]:
        got, want = compiled.run(feed), reference.run(feed)
        for out, value in want.items():
            a, b = got[out].ravel().astype(np.float64), value.ravel().astype(np.float64)
            assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= 0.999
    # warm: remembered, same plan
    again = tessera.compile(zoo.export(name), "onnxruntime", samples=samples,
                            accuracy="cosine>=0.999")
    assert again.plan.stats.source is not None and again.plan.stats.source.cache is not None
    assert [str(p.target) for p in again.plan.partitions] == \
        [str(p.target) for p in compiled.plan.partitions]


def test_without_samples_no_int8_is_tried_and_the_plan_says_so() -> None:
    compiled = tessera.compile(zoo.export("mlp"), "onnxruntime", accuracy="cosine>=0.999")
    record = compiled.plan.stats.precision
    assert record is not None and record.status.startswith("not tried: no target computes")
    assert "int8 is tried only with an accuracy budget and your own samples" in record.status
    assert all("precision" not in p.target.explicit_attrs for p in compiled.plan.partitions)


def _float_forms() -> list[Target]:
    config = CompilationConfig.create("openvino")
    return [v for v in variants_of(config) if v.attrs.get("precision") in ("bf16", "f16")]


def test_a_dynamic_model_keeps_a_float_form_within_the_default_budget() -> None:
    """No samples, no budget, symbolic dimensions and a profile: the float forms are timed at
    the profile's points (never `inf`) and judged on generated inputs against the consensus;
    one that meets `cosine>=0.9995` and runs faster is kept."""
    pytest.importorskip("openvino")
    if not _float_forms():
        pytest.skip("this CPU computes no float form below fp32 natively (bf16, f16)")
    path = zoo.export("bert-tiny", dynamic=True)
    compiled = tessera.compile(path, "openvino", shapes={"batch": [1], "sequence": [16, 32]})
    record = compiled.plan.stats.precision
    assert record is not None and record.status == "searched", record
    assert record.budget == "cosine>=0.9995"
    assert record.inputs == f"{GENERATED} inputs generated in the ranges the model implies"
    assert record.end_to_end_ms and all(ms < float("inf") for ms in record.end_to_end_ms.values())
    timed = [v for v in record.variants if v.whole_ms is not None]
    assert timed and all("not compared" not in v.note for v in record.variants)
    accuracy = compiled.plan.stats.accuracy
    assert accuracy is not None and accuracy.met and accuracy.judges.startswith("the consensus")
    kept = {Target(str(p.target)).attrs.get("precision") for p in compiled.plan.partitions}
    if record.kept != FP32:  # a float form met the budget and was faster end to end
        assert kept & {"bf16", "f16"}
        assert record.end_to_end_ms[record.kept] < record.end_to_end_ms[FP32]
    exact = tessera.compile(path, "openvino", shapes={"batch": [1], "sequence": [16, 32]},
                            accuracy="exact")
    assert exact.plan.stats.precision is not None
    assert exact.plan.stats.precision.status == "not tried: accuracy=exact keeps fp32"


@pytest.mark.slow
def test_a_static_int8_artifact_loads_without_calibration_or_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name = "resnet-tiny"
    samples = _samples(name, 4)
    compiled = tessera.compile(zoo.export(name), "onnxruntime -precision=int8",
                               samples=samples)
    assert [Target(str(p.target)).attrs["precision"] for p in compiled.plan.partitions] == \
        ["int8"]
    path = compiled.save(tmp_path / "m.tess")
    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path / "empty-cache"))
    loaded = tessera.load(path)
    feed = samples[1]
    for out, value in compiled.run(feed).items():
        np.testing.assert_allclose(loaded.run(feed)[out], value, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_under_throughput_a_whole_int8_plan_races_its_settings_variants() -> None:
    from tessera.placement.search._settings import settings_base

    name = "resnet-tiny"
    samples = _samples(name, 8)
    compiled = tessera.compile(zoo.export(name), "openvino", samples=samples,
                               accuracy="cosine>=0.99", objective="throughput",
                               concurrency=2)
    record = compiled.plan.stats.precision
    assert record is not None and record.status == "searched"
    raced = {str(r) for r in record.end_to_end_ms or {}}
    met = [v for v in record.variants if v.met and v.whole_ms is not None]
    if met and core_budget() > 1:  # the fastest variant within the budget races its streams
        leading = Target(min(met, key=lambda v: v.whole_ms or 0.0).target)
        streams = leading.with_attrs(**{"performance-hint": "throughput", "num-streams": 2})
        assert str(streams) in raced
    kept = [settings_base(p.target) for p in compiled.plan.partitions]
    if record.kept != FP32:  # the kept variant names the partition's precision target
        assert kept == [record.kept.target]
    assert compiled.plan.stats.accuracy is not None and compiled.plan.stats.accuracy.met


def test_where_no_implementation_answers_the_judging_inputs_no_precision_is_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs that would judge a lower precision but that every implementation refuses
    (a Resize's scales drawn at random): the fp32 plan is kept and the record says why."""
    from tessera.errors import ExecutionError
    from tessera.placement.judge import _precision

    def no_answers(*_: object, **__: object) -> None:
        raise ExecutionError("no implementation could compute the model's fp32 answers")

    monkeypatch.setattr(_precision, "reference_answers", no_answers)
    samples = _samples("mlp", 4)
    compiled = tessera.compile(zoo.export("mlp"), "onnxruntime", samples=samples,
                               accuracy="cosine>=0.999")
    record = compiled.plan.stats.precision
    assert record is not None and record.status.startswith("not tried: the fp32 plan or the "
                                                           "oracle fails on the inputs")
    assert [str(p.target) for p in compiled.plan.partitions] == ["onnxruntime"]
    reference = backends.get("reference").compile(compiled.model.proto, check=False)
    np.testing.assert_allclose(compiled.run(samples[0])["output"],
                               reference.run(samples[0])["output"],
                               rtol=1e-5, atol=1e-6)


OV_NO_IMPLEMENTATION = """
Exception from src/inference/src/cpp/core.cpp:121:
Check '!implementations.empty()' failed at src/plugins/intel_cpu/src/node.cpp:707:
[CPU] FullyConnected node with name '/mm1' No suitable implementations
"""


@pytest.mark.skipif(not (backends.get("openvino").is_available().ok
                         and backends.get("onnxruntime").is_available().ok),
                    reason="needs openvino and onnxruntime")
def test_a_form_its_backend_cannot_compile_is_refused_with_its_reason_not_timed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO on an AMX CPU refuses ONNX Runtime's QDQ form with s8 activations (forged
    here with its own message): the variant is a refusal that names the backend's
    informative line, never a timing, and the plan keeps a form that compiles."""
    openvino = backends.get("openvino")
    compile_ = type(openvino)._compile

    def refusing(self: object, submodel: object, target: Target) -> object:
        if target.attrs["precision"] == "int8":
            raise RuntimeError(OV_NO_IMPLEMENTATION)
        return compile_(self, submodel, target)  # type: ignore[arg-type]

    monkeypatch.setattr(type(openvino), "_compile", refusing)
    samples = _samples("mlp", 6)
    compiled = tessera.compile(zoo.export("mlp"), "openvino,onnxruntime", samples=samples,
                               accuracy="cosine>=0.99", compile_cache=False)
    record = compiled.plan.stats.precision
    assert record is not None and record.searched
    refusals = [v for v in record.variants if v.target.startswith("openvino -precision=int8")]
    # ONNX Runtime's quantizer (its recipes for this CPU) and NNCF's, and NNCF's 8-bit
    # weight-only form
    assert len(refusals) == len(recipes_for(cpu_flags())) + 2
    for refused in refusals:
        assert refused.note.startswith("failed to build: ")
        assert "No suitable implementations" in refused.note
        assert refused.whole_ms is None and not refused.met
    assert all(Target(str(p.target)).attrs.get("precision") != "int8"
               or p.kind != "openvino" for p in compiled.plan.partitions)


def test_a_warm_compile_with_samples_builds_the_remembered_plan_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The precision search's plan is remembered under the samples: a second compile builds
    it and nothing else (not the fp32 plan it grew from), and gives the same plan."""
    from tessera.runtime._compiled import RuntimeBuilder

    monkeypatch.setenv("TESSERA_CACHE", str(tmp_path))
    name = "mlp"
    samples = _samples(name, 8)
    first = tessera.compile(zoo.export(name), "onnxruntime", samples=samples,
                            accuracy="cosine>=0.99")
    assert first.plan.stats.precision is not None
    plans: list[list[str]] = []
    build = RuntimeBuilder.build

    def counted(self: RuntimeBuilder, model: Any, config: Any, plan: Any,
                samples: Any = None) -> Any:
        plans.append([str(p.target) for p in plan.partitions])
        return build(self, model, config, plan, samples)

    monkeypatch.setattr(RuntimeBuilder, "build", counted)
    again = tessera.compile(zoo.export(name), "onnxruntime", samples=samples,
                            accuracy="cosine>=0.99")
    assert plans == [[str(p.target) for p in first.plan.partitions]]
    assert again.plan.stats.source is not None and again.plan.stats.source.cache is not None
    assert [str(p.target) for p in again.plan.partitions] == plans[0]


@pytest.mark.skipif(not backends.get("openvino").is_available().ok
                    or not backends.get("openvino").precision_variants(Target("openvino")),
                    reason="needs openvino and nncf")
def test_once_a_per_row_weight_only_form_meets_the_budget_nothing_else_is_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a model with attention, on a CPU without AMX, OpenVINO's 8-bit weight-only form
    comes first; once it meets the budget on the whole model the other forms are not built,
    each saying why, and its larger activation groups race as settings choices of it."""
    import tessera.placement.judge._precision as precision

    monkeypatch.setattr(precision, "matrix_engine", lambda: False)
    name = "bert-tiny"
    config = CompilationConfig.create("openvino,onnxruntime,cpu", accuracy="cosine>=0.99",
                                      precision_time="unlimited")
    compiled = tessera.compile(zoo.export(name), config, samples=_samples(name, 8))
    record = compiled.plan.stats.precision
    assert record is not None
    first = record.variants[0]
    assert first.target == "openvino -precision=int8 -int8-recipe=weights"
    assert first.whole_used is not None and first.whole_used <= 1.0  # within the budget
    for variant in record.variants[1:]:
        assert variant.whole_used is None and variant.note.startswith(
            f"not tried: `{first.target}` met the budget"), variant
    raced = {str(r.target) for r in record.end_to_end_ms if r.target is not None}
    if first.target in raced:  # not dropped as slower than fp32 (tiny rows may be)
        assert {f"{first.target} -dq-group-size={g}" for g in (256, 128)} <= raced


def test_the_final_race_times_only_new_plans_against_the_fastest_timed_before() -> None:
    from tessera.placement.judge._precision import to_race
    from tessera.placement.record._rival import Rival

    static, weights, settled = (Rival.precision(Target(t)) for t in (
        "openvino -precision=int8", "openvino -precision=int8 -int8-recipe=weights",
        "openvino -precision=int8 -int8-recipe=weights -dq-group-size=256"))
    before = {FP32: 10.0, static: 4.0, weights: 5.0}
    assert to_race([static, weights], before) == []  # that race already decided
    assert to_race([static, weights, settled], before) == [static, settled]
    # fp32 anchors where it was the fastest timed (the new plan is a partial one)
    assert to_race([settled], {FP32: 3.0, static: 4.0}) == [FP32, settled]


def test_the_precision_time_holds_the_race_of_the_forms_found() -> None:
    """The search's time runs from the fp32 answers to its last race: a form starts only
    where its race (3 rounds of 0.3 s blocks per plan) still fits."""
    from types import SimpleNamespace

    from tessera.placement.judge._precision import _Search
    from tessera.placement.judge._timing import Rounds

    search = _Search.__new__(_Search)
    now = [10.0]
    search.ctx = SimpleNamespace(clock=lambda: now[0])  # type: ignore[assignment]
    search.started, search.seconds, search.how = 4.0, 8.0, Rounds(rounds=3, seconds=0.3)
    assert search.time_left(racing=2)  # 6 s spent, 1.8 s of race: 7.8 < 8
    assert not search.time_left(racing=3)  # 2.7 s of race: over
    assert not search.time_left(racing=2, ahead=0.5)  # a form foreseen to take 0.5 s: over
    assert search.time_left(racing=0, ahead=1.5)  # 6 + 1.5 < 8
    now[0] = 12.5
    assert not search.time_left(racing=0)  # 8.5 s spent


def test_out_of_time_the_first_quantized_form_is_still_tried_after_a_float_one() -> None:
    """A float form first (bf16 on a CPU with AMX, for a transformer) has no quantizer to
    time, so the first quantized form after it is tried whatever the time says; the rest
    are not."""
    from types import SimpleNamespace

    from tessera.placement.judge._precision import _Search

    forms = ["openvino -precision=bf16",
             "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=off",
             "openvino -precision=int8 -int8-quantizer=nncf", "openvino -precision=f16",
             "openvino -precision=int8"]
    search = _Search.__new__(_Search)
    search.variants = [Target(t) for t in forms]
    search.records, search.decoder, search.engine = {}, False, True
    search.ctx = SimpleNamespace(clock=lambda: 0.0, progress=Reporter())  # type: ignore
    search.time_left = lambda racing=2, ahead=0.0: False  # type: ignore[method-assign]
    search._out_of_time = lambda: "no time"  # type: ignore[method-assign]
    tried: list[str] = []

    def whole_variant(variant: Target, hopeless: object) -> None:
        """FAKE, for the search algorithm only: records the form, finds nothing."""
        tried.append(str(variant))

    search._whole_variant = whole_variant  # type: ignore[method-assign,assignment]
    assert search._whole_model() == {}
    assert tried == forms[:2]
    assert [search.records[Target(t)].note for t in forms[2:]] == ["not tried: no time"] * 3


def test_a_form_made_the_way_an_earlier_one_was_is_foreseen_to_take_as_long() -> None:
    """NNCF's forms share a way of making (its alphas take about as long as each other);
    ONNX Runtime's quantizer, the float forms and the weight-only forms each have theirs."""
    from tessera.placement.judge._precision import _maker

    makers = [_maker(Target(t)) for t in (
        "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=off",
        "openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=0.15",
        "openvino -precision=int8 -int8-quantizer=nncf", "openvino -precision=int8",
        "openvino -precision=int8 -int8-activations=u8", "openvino -precision=bf16",
        "openvino -precision=int8 -int8-recipe=weights",
        "onnxruntime -precision=int8 -int8-recipe=static")]
    assert makers[0] == makers[1] == makers[2]
    assert makers[3] == makers[4] and makers[3] != makers[0]
    assert len(set(makers[3:])) == 4
