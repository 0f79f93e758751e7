"""Measuring a candidate: compile its submodel on its target, run it on random inputs of its
shapes, warm up, then take the median of several timed runs. The run is exactly what the
executor does at a partition (numpy in, numpy out), so the handoff of tensors across the
partition's boundary is part of what is measured.

The search measures through a `Measurer` (see `_measurers`): in this process, or in the
isolated worker, where a backend that crashes or hangs costs only its candidate."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tessera import backends
from tessera._private.text import first_line, typed_line
from tessera._private.timing import time_block
from tessera.backends._inputs import random_inputs
from tessera.errors import TesseraError
from tessera.ir import Model, NodeSet
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
    # a first run slower than this (ms) is the cost: a candidate that slow cannot win, and
    # timing its runs (TVM untuned: 1.1 s a call on ResNet-50's first blocks) costs seconds
    give_up_ms: float | None = None


class Measurer(Protocol):
    """Prices one candidate: its cost, or a failed cost with the reason. Never raises."""

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost: ...


class PointMeasurer(Measurer, Protocol):
    """A measurer that also prices a candidate of a model with symbolic dimensions at
    several points with one compile: one cost per point (its inputs' shapes there)."""

    def at_points(self, model: Model, mask: NodeSet, target: Target,
                  points: Sequence[Mapping[str, Sequence[int]]]) -> list[Cost]: ...


def measure_submodel(submodel: onnx.ModelProto, target: Target,
                     settings: MeasureSettings | None = None, *,
                     device: Target | None = None) -> Cost:
    return measure_points(submodel, target, settings, [{}], device=device)[0]


def measure_points(submodel: onnx.ModelProto, target: Target,
                   settings: MeasureSettings | None,
                   points: Sequence[Mapping[str, Sequence[int]]], *,
                   device: Target | None = None) -> list[Cost]:
    """The submodel compiled once for `device` (None: the plain device kind) and timed at
    each point (its inputs' shapes there, for a submodel with symbolic dimensions; `{}` for
    its own static shapes): one cost per point, all failed when it does not compile."""
    settings = settings or MeasureSettings()
    try:
        compiled = backends.get(target.kind.name).compile(submodel, target, check=False,
                                                          device=device)
    except TesseraError as err:
        return [Cost.failed(first_line(err))] * len(points)
    except Exception as err:  # a backend's own failure must not end the compile
        return [Cost.failed(typed_line(err))] * len(points)
    costs = []
    # at several points the search uses their mean, which averages their noise: fewer runs
    # each, and one warm-up after the first point's
    min_runs = settings.min_runs if len(points) == 1 else max(3, settings.min_runs - 2)
    for index, shapes in enumerate(points):
        try:
            feeds = random_inputs(compiled, shapes=shapes)
            if feeds is None:
                costs.append(Cost.failed("inputs have no static shape to measure with"))
                continue
            run = functools.partial(compiled.run, feeds)
            warmup = settings.warmup if index == 0 else 1
            if settings.give_up_ms is not None:
                first = _one_run_ms(run)  # a warm-up run as well
                if first > settings.give_up_ms:
                    costs.append(Cost(round(first, 6), 0.0, 1))
                    continue
                warmup = max(0, warmup - 1)
            latency = time_block(run, warmup=warmup,
                                 min_runs=min_runs, max_runs=settings.max_runs,
                                 seconds=settings.budget_s / len(points))
        except TesseraError as err:
            costs.append(Cost.failed(first_line(err)))
        except Exception as err:
            costs.append(Cost.failed(typed_line(err)))
        else:
            costs.append(Cost(latency.median_ms, latency.spread_ms, latency.runs))
    return costs


def _one_run_ms(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return (time.perf_counter() - began) * 1000.0


__all__ = ["MeasureSettings", "Measurer", "PointMeasurer", "measure_points", "measure_submodel"]
