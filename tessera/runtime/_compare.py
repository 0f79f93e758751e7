"""One comparison, measured in one run: each backend natively, tessera on each backend alone,
tessera's greedy plan and its Collage plan. Everything is built first; then each row is timed
in its own block, and ratios are taken against the best native row of the same run."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tessera._private.shapes import ShapePoint, ShapeProfile
from tessera._private.text import typed_line
from tessera._private.timing import time_block
from tessera.backends._inputs import random_inputs, shapes_at
from tessera.config import CompilationConfig
from tessera.errors import InterruptedCompile, TesseraError
from tessera.ir import Model, inline_weights
from tessera.placement import ProgressLike
from tessera.runtime._compiled import compile
from tessera.runtime._native import native_runner


@dataclass
class Comparison:
    rows: list[dict[str, Any]]
    best: Any  # tessera's own plan for the config (collage, or the single target's)
    point: ShapePoint  # the sizes of the model's symbolic dimensions the rows ran at


def compare(model: Model, config: CompilationConfig, *, seconds: float = 1.0,
            progress: ProgressLike | None = None) -> Comparison:
    raw = inline_weights(model.proto).SerializeToString()  # native runners read bytes
    targets = [t for t in config.priority if t.kind.name != "reference"]
    built: dict[str, Any] = {}  # a runner or compiled model, or why it could not be built
    plans: dict[str, str] = {}
    compiled_any = None
    for target in targets:
        built[f"native {target.kind.name}"] = _guarded(
            functools.partial(native_runner, target.kind.name, raw))
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
        if hasattr(value, "plan"):
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
    rows: list[dict[str, Any]] = []
    for label, value in built.items():
        if isinstance(value, str):
            rows.append({"row": label, "error": value})
            continue
        call = value.run if hasattr(value, "run") else value
        try:
            latency = time_block(functools.partial(call, feeds), seconds=seconds)
        except Exception as err:  # a backend failing at run time is a row, not a crash
            rows.append({"row": label, "error": typed_line(err, 160)})
            continue
        rows.append({"row": label, **latency.to_dict(), "plan": plans.get(label, "whole model")})
    natives = [r["median_ms"] for r in rows if r["row"].startswith("native ") and "error" not in r]
    best = min(natives, default=None)
    for row in rows:
        if best and "median_ms" in row:
            row["vs_best_native"] = round(row["median_ms"] / best, 3)
    own = built.get("tessera collage", built.get(f"tessera {targets[0]}") if targets else None)
    return Comparison(rows, own if hasattr(own, "plan") else None, point)


def _guarded(build: Callable[[], Any]) -> Any:
    try:
        built = build()
    except InterruptedCompile:
        raise
    except Exception as err:  # one failing backend must not end the comparison
        return typed_line(err, 160)
    stopped = getattr(getattr(built, "plan", None), "stats", None)
    if stopped is not None and stopped.interrupted is not None:  # Ctrl-C ends the comparison
        raise InterruptedCompile(f"interrupted during {stopped.interrupted.phase}: the "
                                 "comparison stopped before its rows were timed")
    return built


__all__ = ["Comparison", "compare"]
