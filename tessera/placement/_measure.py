"""Measuring a candidate: compile its submodel on its target, run it on random inputs of its
shapes, warm up, then take the median of several timed runs. The run is exactly what the
executor does at a partition (numpy in, numpy out), so the handoff of tensors across the
partition's boundary is part of what is measured."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessera import backends
from tessera.backends._inputs import random_inputs
from tessera.backends._threads import ThreadPolicy
from tessera.errors import TesseraError
from tessera.ir import Model, NodeSet, extract_submodel
from tessera.placement._costdb import Cost
from tessera.target import Target

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class MeasureSettings:
    warmup: int = 2
    min_runs: int = 5
    max_runs: int = 25
    budget_s: float = 0.25  # per candidate, once min_runs are done


def measure(model: Model, mask: NodeSet, target: Target,
            settings: MeasureSettings = MeasureSettings(), *, isolate: bool = False,
            timeout_s: float = 120.0) -> Cost:
    """The candidate's cost; with `isolate`, measured in the worker process (a crash or a
    hang there marks the candidate invalid instead of ending the compile)."""
    # a candidate becomes one partition of a mixed plan: measure it under that plan's policy
    target = ThreadPolicy.for_partitions(2).apply(target)
    try:
        submodel = extract_submodel(model, mask)
    except TesseraError as err:
        return Cost.failed(_line(err))
    if isolate:
        from tessera.placement._isolated import shared_worker

        return shared_worker().measure(submodel.SerializeToString(), str(target), settings,
                                       timeout_s)
    return measure_submodel(submodel, target, settings)


def measure_submodel(submodel: onnx.ModelProto, target: Target,
                     settings: MeasureSettings = MeasureSettings()) -> Cost:
    try:
        compiled = backends.get(target.kind.name).compile(submodel, target, check=False)
        feeds = random_inputs(compiled)
        if feeds is None:
            return Cost.failed("inputs have no static shape to measure with")
        for _ in range(settings.warmup):
            compiled.run(feeds)
        samples: list[float] = []
        start = time.perf_counter()
        while len(samples) < settings.max_runs and (
                len(samples) < settings.min_runs
                or time.perf_counter() - start < settings.budget_s):
            began = time.perf_counter()
            compiled.run(feeds)
            samples.append((time.perf_counter() - began) * 1e3)
    except TesseraError as err:
        return Cost.failed(_line(err))
    except Exception as err:  # a backend's own failure must not end the compile
        return Cost.failed(f"{type(err).__name__}: {_line(err)}")
    return Cost(statistics.median(samples), max(samples) - min(samples), len(samples))


def _line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
