"""Measuring a candidate: compile its submodel on its target, run it on random inputs of its
shapes, warm up, then take the median of several timed runs. The run is exactly what the
executor does at a partition (numpy in, numpy out), so the handoff of tensors across the
partition's boundary is part of what is measured.

The search measures through a `Measurer`, and never knows which: in this process or in the
isolated worker, where a backend that crashes or hangs costs only its candidate
(`_local.LocalMeasurer`), or on the nodes of a Ray cluster (`_ray.RayMeasurer`). Each
answers with data: a cost, or a failed cost with the reason."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from tessera import backends
from tessera._private.text import first_line, typed_line
from tessera._private.timing import time_block
from tessera.backends import random_inputs
from tessera.errors import TesseraError
from tessera.ir import Model, NodeSet
from tessera.placement.record._costdb import Cost, fingerprint
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


_T_co = TypeVar("_T_co", covariant=True)
_R = TypeVar("_R")


class NodeJob(Protocol[_T_co]):
    """Work that runs where a measurer measures, on the model loaded there (the end-to-end
    race on a measuring node). It travels by pickling, so it is a plain value."""

    def __call__(self, model: Model) -> _T_co: ...


class Measurer(Protocol):
    """Prices candidates: a cost for each, or a failed cost with the reason. Never raises.
    Every capability the search uses is declared here; `OneAtATime` gives the defaults of a
    measurer that prices one candidate at a time in this process."""

    @property
    def measures_here(self) -> bool:
        """Whether it measures on this machine (so timing whole plans here agrees)."""
        ...

    @property
    def points_in_one_compile(self) -> bool:
        """Whether a job with several points is compiled once and timed at each."""
        ...

    def measure_all(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
        """(index into `jobs`, its result) for every job, in the order they finish."""
        ...

    def fingerprints(self, target: Target) -> tuple[str, ...]:
        """The machine fingerprints whose records price `target` here: where the costs of
        this measurer's measurements are kept."""
        ...

    def built_for(self, target: Target) -> Target:
        """`target` as it is built for its device: what a measured cost is the cost of."""
        ...

    def bounded(self, give_up_ms: float) -> Measurer | None:
        """This measurer giving a candidate up after one run slower than `give_up_ms`;
        None where it cannot."""
        ...

    def run_on_node(self, model: Model, job: NodeJob[_R]) -> _R | str:
        """`job` run where this measurer measures, or why it could not run there."""
        ...



def here_fingerprints(target: Target) -> tuple[str, ...]:
    """The fingerprint of this machine with `target`'s backend at its version."""
    version = backends.get(target.kind.name).is_available().version
    return (fingerprint(target.kind.name, version),)


class OneAtATime:
    """A measurer that prices one candidate at a time in this process: subclasses give
    `__call__`, and `at_points` where `points_in_one_compile`."""

    points_in_one_compile = False

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        raise NotImplementedError

    def at_points(self, model: Model, mask: NodeSet, target: Target,
                  points: Sequence[Point]) -> list[Cost]:
        raise NotImplementedError  # only asked for where points_in_one_compile

    @property
    def measures_here(self) -> bool:
        return True

    def measure_all(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Measured]]:
        for index, job in enumerate(jobs):
            costs = self.at_points(job.model, job.mask, job.target, job.points) \
                if job.points else [self(job.model, job.mask, job.target)]
            yield index, Measured(tuple(costs))

    def fingerprints(self, target: Target) -> tuple[str, ...]:
        return here_fingerprints(target)

    def built_for(self, target: Target) -> Target:
        return target

    def bounded(self, give_up_ms: float) -> Measurer | None:
        return None

    def run_on_node(self, model: Model, job: NodeJob[_R]) -> _R | str:
        return job(model)


@dataclass(frozen=True)
class FunctionMeasurer(OneAtATime):
    """A measurer made of a function that prices one candidate (the tests of the search
    price with synthetic costs this way)."""

    price: Callable[[Model, NodeSet, Target], Cost]

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        return self.price(model, mask, target)


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


__all__ = ["FunctionMeasurer", "Job", "MeasureSettings", "Measured", "Measurer", "NodeJob",
           "OneAtATime", "Point", "here_fingerprints", "measure_points", "measure_submodel"]
