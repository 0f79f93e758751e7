"""Measuring a candidate: compile its submodel on its target, run it on random inputs of its
shapes, warm up, then take the median of several timed runs. The run is exactly what the
executor does at a partition (numpy in, numpy out), so the handoff of tensors across the
partition's boundary is part of what is measured.

The search measures through a `Measurer` (see `_measurers`): in this process, or in the
isolated worker, where a backend that crashes or hangs costs only its candidate."""

from __future__ import annotations

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


class Measurer(Protocol):
    """Prices one candidate: its cost, or a failed cost with the reason. Never raises."""

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost: ...


def measure_submodel(submodel: onnx.ModelProto, target: Target,
                     settings: MeasureSettings | None = None) -> Cost:
    settings = settings or MeasureSettings()
    try:
        compiled = backends.get(target.kind.name).compile(submodel, target, check=False)
        feeds = random_inputs(compiled)
        if feeds is None:
            return Cost.failed("inputs have no static shape to measure with")
        latency = time_block(lambda: compiled.run(feeds), warmup=settings.warmup,
                             min_runs=settings.min_runs, max_runs=settings.max_runs,
                             seconds=settings.budget_s)
    except TesseraError as err:
        return Cost.failed(first_line(err))
    except Exception as err:  # a backend's own failure must not end the compile
        return Cost.failed(typed_line(err))
    return Cost(latency.median_ms, latency.spread_ms, latency.runs)


__all__ = ["MeasureSettings", "Measurer", "measure_submodel"]
