"""The measurers: where a candidate is compiled and timed. In this process, or in the shared
worker process, where a backend that crashes or hangs costs only its candidate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tessera._private.text import first_line
from tessera.backends._threads import ThreadPolicy
from tessera.config import MEASURE_TIMEOUT_S
from tessera.errors import TesseraError
from tessera.ir import Model, NodeSet, extract_submodel
from tessera.placement._costdb import Cost
from tessera.placement._isolated import shared_worker
from tessera.placement._measure import MeasureSettings, measure_points, measure_submodel
from tessera.target import Target

DEFAULT_SETTINGS = MeasureSettings()

@dataclass(frozen=True)
class LocalMeasurer:
    """Measures in this process, or with `isolate` in the shared worker process."""

    isolate: bool = True
    timeout_s: float = MEASURE_TIMEOUT_S
    settings: MeasureSettings = field(default_factory=MeasureSettings)

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        return measure(model, mask, target, self.settings, isolate=self.isolate,
                       timeout_s=self.timeout_s)

    def at_points(self, model: Model, mask: NodeSet, target: Target,
                  points: Sequence[Mapping[str, Sequence[int]]]) -> list[Cost]:
        """The candidate of a model with symbolic dimensions, compiled once with them and
        timed at each point."""
        target = ThreadPolicy.for_partitions(2).apply(target)
        try:
            submodel = extract_submodel(model, mask)
        except TesseraError as err:
            return [Cost.failed(first_line(err))] * len(points)
        if self.isolate:
            return shared_worker().measure_points(submodel.SerializeToString(), str(target),
                                                  self.settings, points, self.timeout_s)
        return measure_points(submodel, target, self.settings, points)


def measure(model: Model, mask: NodeSet, target: Target,
            settings: MeasureSettings = DEFAULT_SETTINGS, *, isolate: bool = False,
            timeout_s: float = MEASURE_TIMEOUT_S) -> Cost:
    """The candidate's cost; with `isolate`, measured in the worker process (a crash or a
    hang there marks the candidate invalid instead of ending the compile)."""
    # a candidate becomes one partition of a mixed plan: measure it under that plan's policy
    target = ThreadPolicy.for_partitions(2).apply(target)
    try:
        submodel = extract_submodel(model, mask)
    except TesseraError as err:
        return Cost.failed(first_line(err))
    if isolate:
        return shared_worker().measure(submodel.SerializeToString(), str(target), settings,
                                       timeout_s)
    return measure_submodel(submodel, target, settings)

__all__ = ["LocalMeasurer", "measure"]
