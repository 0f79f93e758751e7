"""The measurers of this machine: a candidate compiled and timed in this process, or in the
shared worker process, where a backend that crashes or hangs costs only its candidate. The
Ray measurer (`_ray`) measures on other machines through the same interface."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tessera import backends
from tessera._private.text import first_line
from tessera.backends import ThreadPolicy
from tessera.config import MEASURE_TIMEOUT_S
from tessera.errors import TesseraError
from tessera.ir import Model, NodeSet, extract_submodel
from tessera.placement.measure._protocol import (
    MeasureSettings,
    OneAtATime,
    measure_points,
    measure_submodel,
)
from tessera.placement.measure._worker import Part, Source, shared_worker
from tessera.placement.record._costdb import Cost
from tessera.target import Target

if TYPE_CHECKING:
    import onnx

# a candidate becomes one partition of a mixed plan: it is measured under that plan's policy
_MIXED = ThreadPolicy.for_partitions(2)


@dataclass(frozen=True)
class LocalMeasurer(OneAtATime):
    """Measures in this process, or with `isolate` in the shared worker process. A candidate
    is built for the device target of its device among `devices` (the config's, which a
    plan's partitions get), so that a cpu `-num-cores=1` is measured on one thread."""

    isolate: bool = True
    timeout_s: float = MEASURE_TIMEOUT_S
    settings: MeasureSettings = field(default_factory=MeasureSettings)
    devices: tuple[Target, ...] = ()
    points_in_one_compile = True

    def __call__(self, model: Model, mask: NodeSet, target: Target) -> Cost:
        """The candidate's cost on its device target; with `isolate`, measured in the worker
        process (a crash or a hang there marks the candidate invalid instead of ending the
        compile)."""
        device = self.device(target)
        target = _MIXED.apply(target, device)
        try:
            submodel = extract_submodel(model, mask)  # references only: cheap, and it checks
        except TesseraError as err:
            return Cost.failed(first_line(err))
        if self.isolate:
            return shared_worker().measure(_source(model, mask, submodel), str(target),
                                           self.settings, self.timeout_s, device=_text(device))
        return measure_submodel(submodel, target, self.settings, device=device)

    def bounded(self, give_up_ms: float) -> LocalMeasurer:
        """This measurer, giving a candidate up after one run slower than `give_up_ms`."""
        return replace(self, settings=replace(self.settings, give_up_ms=give_up_ms))

    def device(self, target: Target) -> Target | None:
        return next((d for d in self.devices if d.device_type == target.device_type), None)

    def built_for(self, target: Target) -> Target:
        """`target` specialised for its device: what its measured cost is the cost of, and
        so the target whose tuning key the cost is kept under."""
        return backends.get(target.kind.name).for_device(target, self.device(target))

    def at_points(self, model: Model, mask: NodeSet, target: Target,
                  points: Sequence[Mapping[str, Sequence[int]]]) -> list[Cost]:
        """The candidate of a model with symbolic dimensions, compiled once with them and
        timed at each point."""
        device = self.device(target)
        target = _MIXED.apply(target, device)
        try:
            submodel = extract_submodel(model, mask)
        except TesseraError as err:
            return [Cost.failed(first_line(err))] * len(points)
        if self.isolate:
            return shared_worker().measure_points(_source(model, mask, submodel), str(target),
                                                  self.settings, points, self.timeout_s,
                                                  device=_text(device))
        return measure_points(submodel, target, self.settings, points, device=device)



def _source(model: Model, mask: NodeSet, submodel: onnx.ModelProto) -> Source:
    """What the worker is sent: the model's skeleton file and the mask, or for a model
    without a weights file, the submodel itself."""
    path = model.skeleton_file
    return submodel.SerializeToString() if path is None else Part(str(path), mask)


def _text(device: Target | None) -> str | None:
    return None if device is None else str(device)


__all__ = ["LocalMeasurer"]
