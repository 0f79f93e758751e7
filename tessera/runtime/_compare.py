"""One comparison, measured in one run: each backend natively, tessera on each backend alone,
tessera's greedy plan and its Collage plan. Everything is built first; then each row is timed
in its own block, and ratios are taken against the best native row of the same run.

With samples and an accuracy budget (`compare_within`), the rows are what a user gets without
tessera (each backend natively, ONNX Runtime's defaults the baseline), what they could do by
hand (the model quantized to int8 with ONNX Runtime's static quantizer, calibrated on the same
samples, run natively on each backend) and tessera's plan under the budget, each with its
accuracy on the validation samples against the consensus oracle's fp32 answers."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tessera import backends
from tessera._private.text import typed_line
from tessera._private.timing import time_block
from tessera.backends import NativeRunner, random_inputs, shapes_at
from tessera.config import CompilationConfig, ShapePoint, ShapeProfile
from tessera.errors import InterruptedCompile, TesseraError
from tessera.ir import Model, Samples, inline_weights
from tessera.placement import ProgressLike
from tessera.runtime._compiled import CompiledModel, compile

_Built = TypeVar("_Built")


@dataclass(frozen=True)
class _Native:
    """A row of one backend run natively, through its library's own runner."""

    backend: str
    run: NativeRunner


@dataclass(frozen=True)
class _Failed:
    """A row that could not be built, and why."""

    why: str


# what each row is built as: tessera's compiled model, a native runner, or a failure
_Row = CompiledModel | _Native | _Failed


def _measured_rows(built: Mapping[str, _Row],
                   measured: Callable[[str, CompiledModel | _Native], dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Each row measured; one that failed to build, or fails to run, is an error row."""
    rows: list[dict[str, Any]] = []
    for label, value in built.items():
        if isinstance(value, _Failed):
            rows.append({"row": label, "error": value.why})
            continue
        try:
            rows.append(measured(label, value))
        except Exception as err:  # a backend failing at run time is a row, not a crash
            rows.append({"row": label, "error": typed_line(err, 160)})
    return rows


def _native(backend: str, model: bytes) -> _Native:
    return _Native(backend, backends.get(backend).native_runner(model))


@dataclass
class Comparison:
    rows: list[dict[str, Any]]
    best: CompiledModel | None  # tessera's own plan for the config (collage, or the single
    # target's)
    point: ShapePoint  # the sizes of the model's symbolic dimensions the rows ran at


def compare(model: Model, config: CompilationConfig, *, seconds: float = 1.0,
            progress: ProgressLike | None = None) -> Comparison:
    raw = inline_weights(model.proto).SerializeToString()  # native runners read bytes
    targets = [t for t in config.priority if t.kind.name != "reference"]
    built: dict[str, _Row] = {}
    plans: dict[str, str] = {}
    compiled_any = None
    for target in targets:
        built[f"native {target.kind.name}"] = _guarded(
            functools.partial(_native, target.kind.name, raw))
    for target in targets:
        single = dataclasses.replace(config, entries=tuple(
            e for e in config.entries if e.target == target or e.target.kind.name in (
                "cpu", "cuda")))
        built[f"tessera {target}"] = _guarded(functools.partial(compile, model, single))
    if len(targets) > 1:
        built["tessera greedy"] = _guarded(functools.partial(
            compile, model, config, partitioner="greedy"))
        built["tessera collage"] = _guarded(functools.partial(
            compile, model, config, partitioner="collage", progress=progress))
    for label, value in built.items():
        if isinstance(value, CompiledModel):
            compiled_any = value
            plans[label] = " + ".join(f"{p.target}[{len(p.nodes)}]"
                                      for p in value.plan.partitions)
    if compiled_any is None:
        raise TesseraError("no row could be built: every backend failed on this model")
    # a model with symbolic dimensions is timed at its profile's heaviest point
    point = max((config.options.shapes or ShapeProfile(())).points(model.symbols),
                key=lambda p: p.weight)
    feeds = random_inputs(compiled_any, shapes=shapes_at(compiled_any, point.as_dict()))
    if feeds is None:
        raise TesseraError("the model has inputs of unknown rank; fix them with --input-shape")

    def timed(label: str, value: CompiledModel | _Native) -> dict[str, Any]:
        latency = time_block(functools.partial(value.run, feeds), seconds=seconds)
        row = {"row": label, **latency.to_dict(), "plan": plans.get(label, "whole model")}
        lower = _lower_precision(value.backend) if isinstance(value, _Native) else None
        if lower is not None:
            row.update(precision=lower, plan=f"whole model, in {lower} (its default here)")
        return row

    rows = _measured_rows(built, timed)
    natives = [r["median_ms"] for r in rows if r["row"].startswith("native ") and "error" not in r]
    best = min(natives, default=None)
    for row in rows:
        if best and "median_ms" in row:
            row["vs_best_native"] = round(row["median_ms"] / best, 3)
    own = built.get("tessera collage", built.get(f"tessera {targets[0]}") if targets else None)
    return Comparison(rows, own if isinstance(own, CompiledModel) else None, point)


def _lower_precision(backend: str) -> str | None:
    """Where `backend` natively computes below fp32 by default, that precision."""
    try:
        return backends.get(backend).native_precision()
    except Exception:  # a backend that cannot say: the row stands as measured
        return None


def _guarded(build: Callable[[], _Built]) -> _Built | _Failed:
    try:
        built = build()
    except InterruptedCompile:
        raise
    except Exception as err:  # one failing backend must not end the comparison
        return _Failed(typed_line(err, 160))
    stopped = built.plan.stats.interrupted if isinstance(built, CompiledModel) else None
    if stopped is not None:  # Ctrl-C ends the comparison
        raise InterruptedCompile(f"interrupted during {stopped.phase}: the comparison "
                                 "stopped before its rows were timed")
    return built


BASELINE = "native onnxruntime"  # what a user gets without tessera: ONNX Runtime's defaults
TESSERA = "tessera"


@dataclass
class BudgetComparison:
    """The rows of `compare_within`, each with its accuracy; `baseline`, `by_hand` and
    `tessera` name the three rows a reader compares (None where that row failed or, by
    hand, where nothing met the budget)."""

    rows: list[dict[str, Any]]
    best: CompiledModel | None  # tessera's plan, compiled
    point: ShapePoint
    budget: str
    validation: int  # samples the accuracy is measured on
    baseline: dict[str, Any] | None
    by_hand: dict[str, Any] | None
    tessera: dict[str, Any] | None


def compare_within(model: Model, config: CompilationConfig, samples: Samples, *,
                   seconds: float = 1.0, progress: ProgressLike | None = None
                   ) -> BudgetComparison:
    """Without tessera, by hand, and tessera's plan under the config's accuracy budget, on
    the same samples; each timed in its own block. `speedup` is the baseline's median over
    the row's (higher is faster)."""
    from tessera.backends._quantize import Recipe, quantize
    from tessera.config import accuracy_of
    from tessera.oracle import reference_answers

    budget = config.options.accuracy
    raw = inline_weights(model.proto).SerializeToString()
    names = [t.kind.name for t in config.priority if t.kind.name in ("onnxruntime", "openvino")]
    if "onnxruntime" not in names:
        names.insert(0, "onnxruntime")  # the baseline is always there
    calibration, _ = samples.split()
    built: dict[str, _Row] = {f"native {name}": _guarded(functools.partial(
        _native, name, raw)) for name in names}
    quantized = _guarded(lambda: quantize(inline_weights(model.proto), Recipe(),
                                          list(calibration), backend="onnxruntime")
                         .SerializeToString())
    for name in names:
        built[f"{name} int8 static, by hand"] = quantized if isinstance(quantized, _Failed) \
            else _guarded(functools.partial(_native, name, quantized))
    built[TESSERA] = _guarded(functools.partial(compile, model, config, samples=samples,
                                                progress=progress))
    reference = reference_answers(model, samples)
    feeds = reference.feeds
    outputs = [o.name for o in model.proto.graph.output]

    def judged(label: str, value: CompiledModel | _Native) -> dict[str, Any]:
        got = [_named(value, feed, outputs) for feed in feeds]
        latency = time_block(functools.partial(value.run, feeds[0]), seconds=seconds)
        report = accuracy_of(got, reference.outputs, budget, reference.judges)
        plan = " + ".join(str(p.target) for p in value.plan.partitions) \
            if isinstance(value, CompiledModel) else "whole model"
        return {"row": label, **latency.to_dict(), "plan": plan,
                "accuracy": report.to_dict(), "summary": report.summary(),
                "min_cosine": _min_cosine(report), "meets": report.met is not False}

    rows = _measured_rows(built, judged)
    base = next((r for r in rows if r["row"] == BASELINE and "median_ms" in r), None)
    for row in rows:
        if base is not None and "median_ms" in row:
            row["speedup"] = round(base["median_ms"] / row["median_ms"], 3)
    hand = [r for r in rows if r["row"] not in (TESSERA,) and "median_ms" in r and r["meets"]]
    own = built.get(TESSERA)
    return BudgetComparison(
        rows, own if isinstance(own, CompiledModel) else None, ShapePoint(()), str(budget),
        len(feeds), base, min(hand, key=lambda r: r["median_ms"], default=None),
        next((r for r in rows if r["row"] == TESSERA and "median_ms" in r), None))


def _named(row: CompiledModel | _Native, feed: Mapping[str, Any], outputs: list[str]
           ) -> dict[str, Any]:
    """The row's outputs on `feed` by name: a native runner gives them in the model's
    order."""
    if isinstance(row, CompiledModel):
        return row.run(feed)
    return dict(zip(outputs, row.run(feed), strict=False))


def _min_cosine(report: Any) -> float | None:
    cosines = [m.value for m in report.values if m.metric == "cosine"]
    return min(cosines) if cosines else None


__all__ = ["BASELINE", "TESSERA", "BudgetComparison", "Comparison", "compare", "compare_within"]
