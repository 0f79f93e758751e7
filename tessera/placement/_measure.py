"""Measuring a candidate: compile its submodel on its target, run it on random inputs of its
shapes, warm up, then take the median of several timed runs. The run is exactly what the
executor does at a partition (numpy in, numpy out), so the handoff of tensors across the
partition's boundary is part of what is measured.

The search measures through a `Measurer`, and never knows which: in this process or in the
isolated worker, where a backend that crashes or hangs costs only its candidate
(`_measurers.LocalMeasurer`), or on the nodes of a Ray cluster (`_ray.RayMeasurer`). Each
answers with data: a cost, or a failed cost with the reason."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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


Point = Mapping[str, Sequence[int]]  # a symbolic model's inputs' shapes at one point


@dataclass(frozen=True)
class Job:
    """One measurement: the candidate `mask` of `model` on `target`; with `points`, compiled
    once with the model's symbolic dimensions and timed at each point (one cost each)."""

    model: Model
    mask: NodeSet
    target: Target
    points: tuple[Point, ...] = ()


@dataclass(frozen=True)
class Measured:
    """A job's costs (one, or one per point) and the fingerprint of the machine that
    measured them (None: this machine), under which they are kept."""

    costs: tuple[Cost, ...]
    fingerprint: str | None = None


@runtime_checkable
class BatchMeasurer(PointMeasurer, Protocol):
    """A measurer given many jobs at once, which may measure several at a time (on several
    machines) and answers each as it is done."""

    def measure_all(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
        """(index into `jobs`, its result) for every job, in the order they finish."""
        ...

    def fingerprints(self, target: Target) -> tuple[str, ...]:
        """The machine fingerprints whose records price `target` here: where the costs of
        this measurer's measurements are kept."""
        ...

    def built_for(self, target: Target) -> Target: ...

    @property
    def measures_here(self) -> bool:
        """Whether it measures on this machine (so timing whole plans here agrees)."""
        ...


def measure_jobs(measurer: Measurer, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
    """Every job's result through `measurer`: all at once where it takes a batch, else one
    after another (a plain callable, as tests write them)."""
    if isinstance(measurer, BatchMeasurer):
        yield from measurer.measure_all(jobs)
        return
    for index, job in enumerate(jobs):
        if job.points:
            at_points = getattr(measurer, "at_points")  # noqa: B009 (a PointMeasurer's)
            costs = tuple(at_points(job.model, job.mask, job.target, list(job.points)))
        else:
            costs = (measurer(job.model, job.mask, job.target),)
        yield index, Measured(costs)


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


__all__ = ["BatchMeasurer", "Job", "MeasureSettings", "Measured", "Measurer", "Point",
           "PointMeasurer", "measure_jobs", "measure_points", "measure_submodel"]
