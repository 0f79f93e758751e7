"""Placement: which backend runs which nodes. `place` owns the whole decision: the support
table, greedy placement or Collage's measured search, the end-to-end race, calibration, the
numeric guard and remembering plans. The race keeps the best plan under the flow options'
`Objective`: latency at a percentile, or throughput from several callers at once. Building
and timing whole plans goes through the `Builder` protocol, which `tessera.runtime`
implements."""

from __future__ import annotations

from tessera._private.accuracy import AccuracyReport
from tessera.placement._builder import Builder, Built, Runnable
from tessera.placement._candidates import Candidate
from tessera.placement._collage import known_plans, place_collage
from tessera.placement._costdb import Cost, CostDB, Record
from tessera.placement._decide import Placement, place, replace_lost
from tessera.placement._greedy import place_greedy
from tessera.placement._measure import BatchMeasurer, Job, Measured, Measurer, MeasureSettings
from tessera.placement._measurers import LocalMeasurer
from tessera.placement._objective import Objective
from tessera.placement._pins import (
    METADATA_KEY,
    PinSpec,
    annotate,
    pinned_devices,
    resolve_pins,
)
from tessera.placement._plan import Partition, Plan, make_partitions
from tessera.placement._progress import (
    PHASES,
    MeasuringCallback,
    Progress,
    ProgressEvent,
    ProgressLike,
)
from tessera.placement._race import Served, race, race_throughput
from tessera.placement._ray import RayMeasurer
from tessera.placement._search import SearchResult, cheapest_cover
from tessera.placement._stats import (
    InterruptRecord,
    InvalidCandidate,
    ProposalRecord,
    SearchStats,
)
from tessera.placement._support import FALLBACK, SupportTable, candidate_targets

__all__ = [
    "FALLBACK",
    "METADATA_KEY",
    "PHASES",
    "AccuracyReport",
    "BatchMeasurer",
    "Builder",
    "Built",
    "Candidate",
    "Cost",
    "CostDB",
    "InterruptRecord",
    "InvalidCandidate",
    "Job",
    "LocalMeasurer",
    "MeasureSettings",
    "Measured",
    "Measurer",
    "MeasuringCallback",
    "Objective",
    "Partition",
    "PinSpec",
    "Placement",
    "Plan",
    "Progress",
    "ProgressEvent",
    "ProgressLike",
    "ProposalRecord",
    "RayMeasurer",
    "Record",
    "Runnable",
    "SearchResult",
    "SearchStats",
    "Served",
    "SupportTable",
    "annotate",
    "candidate_targets",
    "cheapest_cover",
    "known_plans",
    "make_partitions",
    "pinned_devices",
    "place",
    "place_collage",
    "place_greedy",
    "race",
    "race_throughput",
    "replace_lost",
    "resolve_pins",
]
