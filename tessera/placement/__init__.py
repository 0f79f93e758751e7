"""Placement: which backend runs which nodes. `place` owns the whole decision, and its
sub-packages each do one part of it:

- `search`: the support table (every backend's answer per node, pins, bans), greedy
  placement by priority, and Collage's measured search for the cheapest cover;
- `measure`: pricing candidates, here, in the isolated worker or on a Ray cluster;
- `judge`: the end-to-end race of whole plans, the numeric guard and the precision search;
- `record`: the plan, its statistics, progress, the cost database and remembered plans.

The driver (`_driver.py`) is the only module that uses all four. Building and timing whole
plans goes through the `Builder` protocol, which `tessera.runtime` implements; measuring
candidates goes through the `Measurer` protocol."""

from __future__ import annotations

from tessera.errors import InterruptedCompile, MeasuringError, PartitionError
from tessera.placement._context import Tools
from tessera.placement._driver import Placement, place, replace_lost
from tessera.placement.measure import LocalMeasurer, Measurer, RayMeasurer
from tessera.placement.record import (
    Builder,
    Built,
    CostDB,
    Partition,
    Plan,
    ProgressEvent,
    ProgressLike,
    Runnable,
    SearchStats,
)
from tessera.placement.search import METADATA_KEY, PinSpec, annotate

__all__ = [
    "METADATA_KEY",
    "Builder",
    "Built",
    "CostDB",
    "InterruptedCompile",
    "LocalMeasurer",
    "Measurer",
    "MeasuringError",
    "Partition",
    "PartitionError",
    "PinSpec",
    "Placement",
    "Plan",
    "ProgressEvent",
    "ProgressLike",
    "RayMeasurer",
    "Runnable",
    "SearchStats",
    "Tools",
    "annotate",
    "place",
    "replace_lost",
]
