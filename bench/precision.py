"""Precision and objective: what int8 under an accuracy budget buys, against what a user gets
from the libraries directly.

Per model (batch 1), every row in the same run, on the same generated samples
(`zoo.example_inputs(name, seed=s)`, s = 0..15): the even-indexed ones calibrate, the
odd-indexed ones validate (the split `tessera.ir.Samples.split` makes). Every row's outputs on
the validation samples are measured against the consensus oracle's fp32 answers for the whole
model (`tessera.oracle.answers`) with `tessera.config._accuracy.measure`, against the budget
`cosine>=0.999` (plus `top1>=0.99` for the classifiers). Rows:

- `ORT fp32 defaults`: a plain onnxruntime.InferenceSession with default options (the baseline);
- `OpenVINO defaults`: `openvino.Core().compile_model(path, "CPU")` (its hint and inference
  precision recorded: bf16 where the CPU has it); `best native` is the faster of the two;
- hand int8: onnxruntime.quantization's `quantize_dynamic` and `quantize_static` (QDQ,
  calibrated on the calibration samples, after `quant_pre_process`), each run on ONNX Runtime
  and on OpenVINO; and NNCF's ONNX backend, its QDQ model run on OpenVINO (as `OpenVINO
  defaults` runs a model):
  - `NNCF defaults`: `nncf.quantize(model, nncf.Dataset(calibration),
    subset_size=len(calibration), model_type=TRANSFORMER or None)`, transformer where the
    graph has a Softmax over a product of two activations (through the attention's scale
    and mask; tessera's `has_attention`), not by the model's name;
  - `NNCF accuracy control`: `nncf.quantize_with_accuracy_control(..)` with the same
    calibration, the validation samples, `max_drop` = 1 - the budget's cosine bound
    (absolute) and as metric the min cosine over the validation samples against the fp32
    answers, the model it is given run on OpenVINO computing in f32 (so the fp32 model scores
    about 1); NNCF reverts quantizers to fp32 until the drop keeps to `max_drop`. It runs
    in a child process stopped after `--ac-seconds` (900) (its ranking compiles the model once per
    quantizer group), the row then saying so;
  NNCF runs quiet (log level ERROR, its progress bars swallowed) in a private temporary
  directory, so nothing lands in the working directory. `best hand int8` is the fastest of
  the hand int8 rows that meets the budget, and `best by hand` the fastest of every row
  above that meets it (native or int8);
- `tessera latency`: `tessera.compile(path, "openvino,onnxruntime,cpu", samples=..,
  accuracy=..)`, compiled cold (empty caches) before any timing;
- `tessera throughput`: the same with `objective="throughput", concurrency=2`, timed as
  inferences per second with 2 concurrent callers, beside the latency plan and ONNX Runtime
  timed the same way.

Every row is timed in rounds of blocks (bench/_rounds.py); ratios are paired within rounds
against `ORT fp32 defaults` of the same run. A row that misses the budget is marked and never
chosen as a best. Writes bench/results/precision.{md,json} (`--out` for another directory).

    python -m bench.precision [--models resnet50 bert-base] [--rounds 3] [--seconds 0.5]
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench._markdown import preamble, table_head, table_row
from bench._report import RESULTS, arguments, each_model, first_line, header, write
from bench._report import geomean as geometric_mean
from bench._rounds import Measured, in_rounds, paired
from tessera import zoo
from tessera.config._accuracy import AccuracyBudget, AccuracyReport, accuracy_of

MODELS = ["resnet50", "mobilenetv2", "efficientnet-b0", "bert-base", "vit-b16", "gpt2-small"]
CLASSIFIERS = {"resnet50", "mobilenetv2", "efficientnet-b0", "vit-b16", "resnet-tiny",
               "mobilenetv2-tiny"}
CNNS = {"resnet50", "mobilenetv2", "efficientnet-b0", "resnet-tiny", "mobilenetv2-tiny"}
CONFIG = "openvino,onnxruntime,cpu"
SAMPLES = 16
CONCURRENCY = 2
PER_CALLER = 4  # runs each concurrent caller makes per timed call of a throughput block
# (a timed call is already 8 inferences: fewer calls than a latency block's 10 suffice)

BASE = "ORT fp32 defaults"
OV = "OpenVINO defaults"
TESS = "tessera latency"
TESS_THROUGHPUT = "tessera throughput"
NNCF_DEFAULTS = "NNCF defaults"
NNCF_AC = "NNCF accuracy control"
HAND = (*(f"{lib} int8 {recipe}" for recipe in ("dynamic", "static")
          for lib in ("ORT", "OpenVINO")), NNCF_DEFAULTS, NNCF_AC)

Feeds = Mapping[str, np.ndarray]


@dataclass
class Row:
    """One configuration of one model: how it runs, and what it measured."""

    label: str
    run: Callable[[Feeds], Any] | None = None  # the timed call
    named: Callable[[Any], dict[str, np.ndarray]] = dict  # its result as named outputs
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    accuracy: AccuracyReport | None = None

    @property
    def meets(self) -> bool:
        return self.accuracy is not None and bool(self.accuracy.met)


def budget_for(name: str) -> AccuracyBudget:
    return AccuracyBudget.parse("cosine>=0.999" + (",top1>=0.99" if name in CLASSIFIERS
                                                   else ""))


# -- the configurations ---------------------------------------------------------------------------
def ort_row(label: str, model: str | bytes, outputs: list[str]) -> Row:
    import onnxruntime as ort

    session = ort.InferenceSession(model)  # the defaults, as a user creates one
    return Row(label, lambda feeds: session.run(None, feeds),
               lambda result: dict(zip(outputs, result, strict=True)),
               {"providers": session.get_providers()})


def openvino_row(label: str, model: str | bytes, outputs: list[str]) -> Row:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(model if isinstance(model, str) else core.read_model(model),
                                  "CPU")
    request = compiled.create_infer_request()
    ports = list(compiled.outputs)
    hint = str(compiled.get_property("PERFORMANCE_HINT"))
    return Row(label, request.infer,
               lambda result: {n: np.asarray(result[p]) for n, p in zip(outputs, ports,
                                                                         strict=True)},
               {"performance_hint": hint,
                "streams": int(compiled.get_property("NUM_STREAMS")),
                "precision": compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()})


# -- NNCF (its ONNX backend; the quantized model runs on OpenVINO) -------------------------------
def is_transformer(proto: onnx.ModelProto) -> bool:
    """Attention as tessera's quantizer sees it: a Softmax over a product of activations."""
    from tessera.backends._quantize import has_attention

    return has_attention(proto)


@contextlib.contextmanager
def nncf_contained() -> Iterator[Any]:
    """nncf imported and run quiet (log level ERROR, its progress bars, which go to stdout,
    swallowed) in a private temporary directory as its working and temporary directory
    (tessera's quantizer's `_contained`), removed after."""
    import io
    import logging

    import nncf

    from tessera.backends._quantize import _contained

    log = logging.getLogger("nncf")
    level = log.level
    nncf.set_log_level(logging.ERROR)
    try:
        with (tempfile.TemporaryDirectory(prefix="bench-nncf-") as tmp, _contained(tmp),
              contextlib.redirect_stdout(io.StringIO())):
            yield nncf
    finally:
        nncf.set_log_level(level)


def quantize_linear(model: onnx.ModelProto) -> int:
    return sum(node.op_type == "QuantizeLinear" for node in model.graph.node)


def openvino_f32(outputs: list[str]) -> Callable[[Any, Feeds], dict[str, np.ndarray]]:
    """Run a model (an onnx.ModelProto, or an openvino.Model) on OpenVINO's CPU computing in
    f32; the last model's compile kept (NNCF validates one model on many samples, one call a
    sample, and may do it from several threads)."""
    import threading

    import openvino as ov

    core, lock = ov.Core(), threading.Lock()
    last: list[Any] = [None, None]  # the model, its compile (the model held: its id stays)

    def run(model: Any, feeds: Feeds) -> dict[str, np.ndarray]:
        with lock:
            if last[0] is not model:
                read = (model if isinstance(model, ov.Model)
                        else core.read_model(model.SerializeToString()))
                last[:] = model, core.compile_model(read, "CPU",
                                                    {"INFERENCE_PRECISION_HINT": "f32"})
            compiled = last[1]
        result = compiled.create_infer_request().infer(feeds)
        return {n: np.asarray(result[p]) for n, p in zip(outputs, compiled.outputs,
                                                         strict=True)}

    return run


def nncf_defaults(proto: onnx.ModelProto, calibration: list[dict[str, np.ndarray]],
                  transformer: bool, **_: Any) -> tuple[onnx.ModelProto, dict[str, Any]]:
    with nncf_contained() as nncf:
        quantized = nncf.quantize(proto, nncf.Dataset(calibration),
                                  subset_size=len(calibration),
                                  model_type=nncf.ModelType.TRANSFORMER if transformer
                                  else None)
    return quantized, {}


def nncf_accuracy_control(proto: onnx.ModelProto, calibration: list[dict[str, np.ndarray]],
                          transformer: bool, validation: list[dict[str, np.ndarray]],
                          want: Sequence[Mapping[str, Any]], budget: AccuracyBudget
                          ) -> tuple[onnx.ModelProto, dict[str, Any]]:
    cosine = [b.limit for b in budget.bounds if b.metric == "cosine"]
    if not cosine:
        raise ValueError(f"the budget {budget} has no cosine bound to derive max_drop from")
    max_drop = round(1.0 - cosine[0], 9)
    run = openvino_f32([o.name for o in proto.graph.output])

    def min_cosine(model: Any, items: Any) -> float:
        """The metric (higher is better): the min cosine of the model's outputs on these
        validation samples (each item is (index, feeds)) against the fp32 answers."""
        items = list(items)
        report = accuracy_of([run(model, feeds) for _, feeds in items],
                             [want[index] for index, _ in items])
        return min((m.value for m in report.values if m.metric == "cosine"), default=1.0)

    with nncf_contained() as nncf:
        quantized = nncf.quantize_with_accuracy_control(
            proto, nncf.Dataset(calibration),
            nncf.Dataset(list(enumerate(validation)), lambda item: item[1]), min_cosine,
            max_drop=max_drop, drop_type=nncf.DropType.ABSOLUTE,
            model_type=nncf.ModelType.TRANSFORMER if transformer else None,
            subset_size=len(calibration))
    return quantized, {"max_drop": max_drop,
                       "metric": "min cosine vs the fp32 answers, on OpenVINO in f32"}


AC_SECONDS = 900  # NNCF's accuracy control ranks every quantizer group, a compile each


def nncf_accuracy_control_stopped(proto: onnx.ModelProto, calibration: Any, transformer: bool,
                                  name: str, work: Path, budget: AccuracyBudget, **_: Any
                                  ) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """`nncf_accuracy_control` in a child process stopped after `AC_SECONDS` (on ViT-B/16 it
    ran past 30 minutes here); the model it made read back."""
    from bench._child import in_child

    work.mkdir(parents=True, exist_ok=True)
    out = work / "nncf-ac.onnx"
    result = in_child("precision", "nncf_accuracy_control_of", name, str(budget), str(out),
                      stop_after=AC_SECONDS)
    if "error" in result:
        raise RuntimeError(f"accuracy control: {result['error']}"
                           + (" (its ranking compiles the model once per quantizer group)"
                              if "over_s" in result else ""))
    return onnx.load_model(str(out)), result


def nncf_accuracy_control_of(name: str, budget: str, out: str) -> dict[str, Any]:
    """The zoo model's samples, fp32 answers and accuracy control rebuilt here (a child
    process); the quantized model saved to `out`."""
    from tessera.oracle import answers

    proto = onnx.load_model(str(zoo.export(name)))
    samples = [zoo.example_inputs(name, seed=s) for s in range(SAMPLES)]
    want = list(answers(proto, samples[1::2]).outputs)
    quantized, details = nncf_accuracy_control(
        proto, samples[0::2], is_transformer(proto), validation=samples[1::2], want=want,
        budget=AccuracyBudget.parse(budget))
    onnx.save_model(quantized, out)
    return details


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """These environment variables set (None: unset) for the block, then as they were."""
    def put(settings: Mapping[str, str | None]) -> None:
        for key, value in settings.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    saved = {k: os.environ.get(k) for k in values}
    try:
        put(values)
        yield
    finally:
        put(saved)


def cold_caches(root: Path) -> contextlib.AbstractContextManager[None]:
    """tessera's caches (compiled partitions, plans, measured costs) in an empty directory,
    so a compile is cold; the zoo's exported model was found before."""
    return environment(TESSERA_CACHE=str(root), TESSERA_COST_DB=None)


def tessera_row(label: str, path: str, samples: list[dict[str, np.ndarray]],
                budget: AccuracyBudget, cache: Path, **options: Any) -> Row:
    from tessera.runtime import compile as compile_model  # tessera.compile
    from tessera.target import Target

    with cold_caches(cache):
        began = time.perf_counter()
        compiled = compile_model(path, CONFIG, samples=samples, accuracy=str(budget),
                                 **options)
        seconds = time.perf_counter() - began
    plan = compiled.plan
    parts = []
    for part in plan.partitions:
        attrs = Target(str(part.target)).attrs
        precision = str(attrs.get("precision", "fp32"))  # a target without the attribute
        recipe = attrs.get("int8-recipe")
        parts.append({"target": str(part.target), "nodes": len(part.nodes),
                      "precision": precision + (f" {recipe}" if recipe else "")})
    reported = getattr(plan.stats, "accuracy", None)
    return Row(label, compiled.run, dict,
               {"compile_seconds": round(seconds, 2), "partitions": parts,
                "plan": plan.summary(), "options": dict(options),
                "reported_accuracy": reported.to_dict() if reported is not None else None})


def build_rows(name: str, path: str, proto: onnx.ModelProto, samples: list[dict[str, np.ndarray]],
               want: Sequence[Mapping[str, Any]], budget: AccuracyBudget, work: Path
               ) -> dict[str, Row]:
    """Every configuration built, each failure recorded in its row; tessera's compiles come
    last, so nothing else runs in the process while they measure. `want`: the fp32 answers
    on the validation samples (NNCF's accuracy control measures against them)."""
    from tessera.backends._quantize import Recipe, quantize

    outputs = [o.name for o in proto.graph.output]
    calibration = samples[0::2]
    rows: dict[str, Row] = {}

    def attempt(label: str, build: Callable[..., Row], *args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        try:
            rows[label] = build(label, *args, **kwargs)
        except Exception as err:  # a row that fails to build is reported; the run goes on
            rows[label] = Row(label, error=first_line(err))
            print(f"  {name}: {label} failed to build: {first_line(err)}", file=sys.stderr)
        rows[label].info.setdefault("build_seconds", round(time.perf_counter() - began, 2))

    attempt(BASE, ort_row, path, outputs)
    attempt(OV, openvino_row, path, outputs)
    for recipe in ("dynamic", "static"):
        began = time.perf_counter()
        try:
            # ONNX Runtime's own defaults: every op it knows quantized
            quantized = quantize(proto, Recipe(recipe, ops="all"),
                                 calibration if recipe == "static" else None,
                                 backend="onnxruntime").SerializeToString()
            failed = None
        except Exception as err:
            quantized, failed = b"", first_line(err)
        seconds = round(time.perf_counter() - began, 2)
        for lib, build in (("ORT", ort_row), ("OpenVINO", openvino_row)):
            label = f"{lib} int8 {recipe}"
            if failed:
                rows[label] = Row(label, error=f"quantize_{recipe}: {failed}")
                continue
            attempt(label, build, quantized, outputs)
            rows[label].info.update(recipe=recipe, quantize_seconds=seconds)
        del quantized
    transformer = is_transformer(proto)
    for label, nncf_quantize in ((NNCF_DEFAULTS, nncf_defaults),
                                 (NNCF_AC, nncf_accuracy_control_stopped)):
        began = time.perf_counter()
        try:
            model, details = nncf_quantize(proto, calibration, transformer,
                                           validation=samples[1::2], want=want, budget=budget,
                                           name=name, work=work)
        except Exception as err:  # NNCF's failure is the row's, the run goes on
            rows[label] = Row(label, error=f"nncf: {first_line(err)}")
            print(f"  {name}: {label} failed to quantize: {first_line(err)}", file=sys.stderr)
            continue
        seconds = round(time.perf_counter() - began, 2)
        details.update(quantizer="nncf", model_type="transformer" if transformer else None,
                       quantize_linear=quantize_linear(model), quantize_seconds=seconds)
        quantized = model.SerializeToString()
        del model
        attempt(label, openvino_row, quantized, outputs)
        rows[label].info.update(details)
        del quantized
    attempt(TESS, tessera_row, path, samples, budget, work / "latency")
    # the throughput compile reuses the latency compile's measured costs: its search key
    # differs (the objective), so it races and judges afresh without measuring again
    attempt(TESS_THROUGHPUT, tessera_row, path, samples, budget, work / "latency",
            objective="throughput", concurrency=CONCURRENCY)
    return rows


# -- timing ---------------------------------------------------------------------------------------
class Callers:
    """`CONCURRENCY` threads, each calling `run` `PER_CALLER` times in a loop per timed call:
    the time of one call covers CONCURRENCY * PER_CALLER inferences."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(CONCURRENCY, "bench-caller")

    def block(self, run: Callable[[Feeds], Any], feeds: Feeds) -> Callable[[], None]:
        def loop() -> None:
            for _ in range(PER_CALLER):
                run(feeds)

        def call() -> None:
            for done in [self.pool.submit(loop) for _ in range(CONCURRENCY)]:
                done.result()

        return call

    def close(self) -> None:
        self.pool.shutdown()


def per_second(m: Measured) -> float:
    return round(CONCURRENCY * PER_CALLER * 1e3 / m.median_ms, 2) if m.median_ms else 0.0


# -- one model ------------------------------------------------------------------------------------
def bench_model(name: str, rounds: int, seconds: float, work: Path) -> dict[str, Any]:
    from tessera.oracle import answers

    path = str(zoo.export(name))
    proto = onnx.load_model(path)
    samples = [zoo.example_inputs(name, seed=s) for s in range(SAMPLES)]
    validation = samples[1::2]
    budget = budget_for(name)
    began = time.perf_counter()
    want = list(answers(proto, validation).outputs)
    reference_seconds = round(time.perf_counter() - began, 2)
    rows = build_rows(name, path, proto, samples, want, budget, work / name)
    del proto
    latency, concurrent = measure_rows(rows, validation, want, budget, rounds, seconds)
    result = summarise(name, budget, rows, latency, concurrent)
    result["reference_seconds"] = reference_seconds
    rows.clear()  # the sessions go before the next model loads (gpt2-small's are large)
    gc.collect()
    shutil.rmtree(work / name, ignore_errors=True)
    return result


def measure_rows(rows: Mapping[str, Row], validation: list[dict[str, np.ndarray]],
                 want: list[dict[str, np.ndarray]], budget: AccuracyBudget, rounds: int,
                 seconds: float) -> tuple[dict[str, Measured], dict[str, Measured]]:
    """Each row's accuracy on the validation samples, then its latency, then (for the
    baseline and the two tessera plans) its throughput with concurrent callers."""
    for row in rows.values():
        if row.run is not None:
            try:
                got = [row.named(row.run(feeds)) for feeds in validation]
                row.accuracy = accuracy_of(got, want, budget)
            except Exception as err:
                row.error, row.run = f"running: {first_line(err)}", None
    feeds = validation[0]
    ready = {label: row.run for label, row in rows.items() if row.run is not None}
    latency = in_rounds({label: (lambda r=run: r(feeds))  # type: ignore[misc]
                         for label, run in ready.items()}, rounds=rounds, seconds=seconds)
    callers = Callers()
    try:
        concurrent = in_rounds({label: callers.block(ready[label], feeds)
                                for label in (BASE, TESS, TESS_THROUGHPUT) if label in ready},
                               rounds=rounds, seconds=seconds, min_runs=3, warmup=1)
    finally:
        callers.close()
    return latency, concurrent


def accuracy_view(report: AccuracyReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    cosines = [m.value for m in report.values if m.metric == "cosine"]
    top1 = [m.value for m in report.values if m.metric == "top1"]
    return {"met": report.met, "min_cosine": min(cosines) if cosines else None,
            "top1": min(top1) if top1 else None, "report": report.to_dict()}


def summarise(name: str, budget: AccuracyBudget, rows: Mapping[str, Row],
              latency: Mapping[str, Measured], concurrent: Mapping[str, Measured]
              ) -> dict[str, Any]:
    base = latency.get(BASE)
    table: dict[str, dict[str, Any]] = {}
    for label, row in rows.items():
        entry: dict[str, Any] = {"info": row.info, "accuracy": accuracy_view(row.accuracy),
                                 "meets_budget": row.meets}
        if row.error:
            entry["error"] = row.error
        if label in latency:
            entry["ms"] = latency[label].to_dict()
            entry["speedup_vs_ort"] = paired(base, latency[label]) if base else None
        table[label] = entry

    def fastest(labels: Sequence[str]) -> str | None:
        timed = [lb for lb in labels if lb in latency and rows[lb].meets]
        return min(timed, key=lambda lb: latency[lb].median_ms) if timed else None

    best_native, best_hand = fastest([BASE, OV]), fastest(HAND)
    best_by_hand = fastest([BASE, OV, *HAND])
    tess = TESS if TESS in latency and rows[TESS].meets else None
    throughput: dict[str, Any] = {}
    cbase = concurrent.get(BASE)
    for label, m in concurrent.items():
        throughput[label] = {"per_second": per_second(m), "ms_per_call": m.to_dict(),
                             "vs_ort": paired(cbase, m) if cbase else None,
                             "meets_budget": rows[label].meets}
    if TESS in concurrent and TESS_THROUGHPUT in concurrent:
        throughput[TESS_THROUGHPUT]["vs_latency_plan"] = paired(concurrent[TESS],
                                                                concurrent[TESS_THROUGHPUT])
    return {
        "model": name, "budget": str(budget), "samples": SAMPLES,
        "calibration": len(range(0, SAMPLES, 2)), "validation": len(range(1, SAMPLES, 2)),
        "rows": table, "best_native": best_native, "best_hand_int8": best_hand,
        "best_native_speedup_vs_ort": table[best_native]["speedup_vs_ort"] if best_native
        else None,
        "best_hand_int8_speedup_vs_ort": table[best_hand]["speedup_vs_ort"] if best_hand
        else None,
        "tessera_met_budget": tess is not None,
        "tessera_vs_best_hand_int8": paired(latency[best_hand], latency[TESS])
        if best_hand and tess else None,
        "best_by_hand": best_by_hand,
        "tessera_vs_best_by_hand": paired(latency[best_by_hand], latency[TESS])
        if best_by_hand and tess else None,
        "throughput": throughput,
        "concurrency": CONCURRENCY,
    }


# -- report ---------------------------------------------------------------------------------------
def geomean(values: Sequence[float]) -> float | None:
    return round(geometric_mean(values), 4) if values else None


def summary(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    versus_ort = [r["rows"][TESS]["speedup_vs_ort"] for r in results
                  if r["tessera_met_budget"] and r["rows"][TESS].get("speedup_vs_ort")]
    versus_hand = {r["model"]: r["tessera_vs_best_hand_int8"] for r in results}
    versus_any = {r["model"]: r.get("tessera_vs_best_by_hand") for r in results}
    ratios = {r["model"]: r["throughput"].get(TESS_THROUGHPUT, {}).get("vs_latency_plan")
              for r in results}
    cnn = [v for k, v in ratios.items() if k in CNNS and v]
    return {"tessera_latency_vs_ort_geomean": geomean(versus_ort),
            "tessera_latency_vs_ort_models": len(versus_ort),
            "tessera_vs_best_hand_int8": versus_hand,
            "tessera_vs_best_by_hand": versus_any,
            "throughput_vs_latency_plan": ratios,
            "throughput_vs_latency_plan_cnn_geomean": geomean(cnn),
            "throughput_vs_latency_plan_cnn_models": len(cnn)}


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "–"


def _accuracy_cells(entry: dict[str, Any]) -> tuple[str, str, str]:
    acc = entry.get("accuracy")
    if not acc:
        return "–", "–", "–"
    cosine = f"{acc['min_cosine']:.5f}" if acc["min_cosine"] is not None else "–"
    top1 = f"{acc['top1']:.3f}" if acc["top1"] is not None else "–"
    return cosine, top1, "✓" if acc["met"] else "✗ misses budget"


def _notes(label: str, entry: dict[str, Any]) -> str:
    info = entry.get("info", {})
    if entry.get("error"):
        return f"not available: {entry['error']}".replace("|", "/")
    if "performance_hint" in info:
        precision = f", computes in {info['precision']}" if "precision" in info else ""
        nncf = (f"NNCF model_type {info['model_type']}, {info['quantize_linear']} "
                f"QuantizeLinear, quantized in {info['quantize_seconds']:.1f} s; "
                if info.get("quantizer") == "nncf" else "")
        return (f"{nncf}hint {info['performance_hint']}, {info['streams']} "
                f"stream(s){precision}")
    if "partitions" in info:
        parts = "; ".join(f"`{p['target']}` ({p['nodes']} nodes, {p['precision']})"
                          for p in info["partitions"])
        reported = info.get("reported_accuracy") or {}
        met = reported.get("met")
        return (f"cold compile {info['compile_seconds']:.1f} s; {parts}; plan reports budget "
                f"{'met' if met else 'missed' if met is False else '?'}").replace("|", "/")
    return ""


def _line(label: str, entry: dict[str, Any], notes: str) -> str:
    ms = f"{entry['ms']['median_ms']:.3f}" if "ms" in entry else "–"
    cosine, top1, met = _accuracy_cells(entry)
    return table_row(label, ms, _x(entry.get("speedup_vs_ort")), cosine, top1, met, notes)


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [*preamble("Precision and objective: int8 under an accuracy budget", result),
             f"Batch 1. {SAMPLES} generated samples per model (`zoo.example_inputs(name, "
             f"seed=s)`, s = 0..{SAMPLES - 1}): the even-indexed calibrate, the odd-indexed "
             "validate. Accuracy of every row: its outputs on the validation samples against "
             "the consensus oracle's fp32 answers (ONNX Runtime unoptimised and "
             "onnx.reference, a third where they disagree; min cosine over outputs; top1 where "
             "the budget asks). Budget `cosine>=0.999`, plus `top1>=0.99` for classifiers. "
             f"Median of {result['rounds']} rounds of {result['seconds']} s blocks; ratios "
             "paired within rounds. A row that misses the budget is never chosen as a best.",
             "", "## Summary", "",
             f"- tessera latency vs ORT fp32 defaults, geometric mean over the "
             f"{s['tessera_latency_vs_ort_models']} model(s) where tessera met the budget: "
             f"{_x(s['tessera_latency_vs_ort_geomean'])} (higher is faster)",
             "- tessera latency vs best hand int8 (higher: tessera faster): "
             + (", ".join(f"{m} {_x(v) if v else 'n/a'}"
                          for m, v in s["tessera_vs_best_hand_int8"].items()) or "none"),
             "- tessera latency vs the best by hand within the budget, native or int8 "
             "(higher: tessera faster): "
             + (", ".join(f"{m} {_x(v) if v else 'n/a'}"
                          for m, v in s.get("tessera_vs_best_by_hand", {}).items()) or "none"),
             f"- tessera throughput plan vs tessera latency plan with {CONCURRENCY} callers, "
             f"geometric mean over the {s['throughput_vs_latency_plan_cnn_models']} CNN(s): "
             f"{_x(s['throughput_vs_latency_plan_cnn_geomean'])} (higher is more "
             "inferences/s)", ""]
    for name, error in result.get("failed", {}).items():
        lines += [f"## {name}", "", f"Not measured: {error}", ""]
    for r in result["results"]:
        lines += [f"## {r['model']}", "", f"Budget `{r['budget']}`. Best native: "
                  f"{r['best_native'] or 'none'} ({_x(r['best_native_speedup_vs_ort'])}); "
                  f"best hand int8: {r['best_hand_int8'] or 'none meets the budget'}"
                  f" ({_x(r['best_hand_int8_speedup_vs_ort'])}); best by hand: "
                  f"{r.get('best_by_hand') or 'none'}.", "",
                  *table_head("row", "median ms", "speed-up vs ORT fp32 (higher is faster)",
                        "min cosine", "top1", "budget", "notes")]
        for label, entry in r["rows"].items():
            lines.append(_line(label, entry, _notes(label, entry)))
            best = {OV: ("best native", r["best_native"]),
                    HAND[-1]: ("best hand int8", r["best_hand_int8"])}.get(label)
            if best:  # the chosen row again, under its role
                role, chosen = best
                lines.append(_line(f"**{role}**", r["rows"][chosen], f"= {chosen}")
                             if chosen else table_row(f"**{role}**", *["–"] * 5,
                                                "none meets the budget"))
        if r["throughput"]:
            lines += ["", f"With {CONCURRENCY} concurrent callers:", "",
                      *table_head("row", "inferences/s", "vs ORT fp32 (higher is faster)",
                            "vs tessera latency plan (higher is faster)")]
            lines += [table_row(label, f"{t['per_second']:.1f}", _x(t["vs_ort"]),
                          _x(t.get("vs_latency_plan")))
                      for label, t in r["throughput"].items()]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    global AC_SECONDS
    parser = arguments(__doc__, models=MODELS, rounds=3, seconds=0.5, out=RESULTS)
    parser.add_argument("--ac-seconds", type=int, default=AC_SECONDS,
                        help="seconds NNCF's accuracy control may run per model")
    args = parser.parse_args(argv)
    AC_SECONDS = args.ac_seconds
    top = header("precision", argv, rounds=args.rounds, seconds=args.seconds, config=CONFIG,
                 concurrency=CONCURRENCY, runs_per_caller=PER_CALLER, ac_seconds=AC_SECONDS)

    def result(results: list[dict[str, Any]], failed: dict[str, str]) -> dict[str, Any]:
        return {**top, "results": results, "failed": failed, "summary": summary(results)}

    def written(results: list[dict[str, Any]], failed: dict[str, str]) -> None:
        done = result(results, failed)
        write(args.out / "precision", done, markdown(done))

    with tempfile.TemporaryDirectory(prefix="tessera-precision-") as tmp:
        def bench(name: str) -> dict[str, Any]:
            began = time.perf_counter()
            measured = bench_model(name, args.rounds, args.seconds, Path(tmp))
            return {**measured, "wall_seconds": round(time.perf_counter() - began, 1)}

        # a model that could not be benchmarked at all is in `failed`, with why
        print(markdown(result(*each_model(args.models, bench, written))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
