"""Measurement: pricing one candidate (compile its submodel, time it on its inputs), in this
process, in the isolated worker, or on the nodes of a Ray cluster, at each shape point of a
model with symbolic dimensions."""

from tessera.placement.measure._local import LocalMeasurer
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import (
    FunctionMeasurer,
    Job,
    Measured,
    Measurer,
    MeasureSettings,
    NodeJob,
    OneAtATime,
)
from tessera.placement.measure._ray import RayMeasurer

__all__ = ["FunctionMeasurer", "Job", "LocalMeasurer", "MeasureSettings", "Measured", "Measurer",
           "NodeJob", "OneAtATime", "Points", "RayMeasurer"]
