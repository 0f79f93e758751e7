"""The record of a placement: the plan and its partitions, the search's statistics and the
records they are made of, the rival plans of a race, the progress events a compile reports,
the cost database, and the plans it remembers."""

from tessera.placement.record._builder import Builder, Built, Runnable
from tessera.placement.record._costdb import Cost, CostDB, Record
from tessera.placement.record._phase import PHASES, Phase
from tessera.placement.record._plan import Partition, Plan, make_partitions
from tessera.placement.record._progress import (
    MeasuringCallback,
    Progress,
    ProgressEvent,
    ProgressLike,
    Reporter,
)
from tessera.placement.record._records import (
    CoarseRecord,
    InterruptRecord,
    InvalidCandidate,
    PrecisionRecord,
    ProposalRecord,
    ShapesRecord,
    VariantRecord,
)
from tessera.placement.record._rival import Rival, RivalKind
from tessera.placement.record._stats import (
    CoverStats,
    GuardRecord,
    GuardVerdict,
    MeasuringStats,
    PlanSource,
    RaceRecord,
    SearchStats,
    Timing,
)

__all__ = ["PHASES", "Builder", "Built", "CoarseRecord", "Cost", "CostDB", "CoverStats",
           "GuardRecord", "GuardVerdict", "InterruptRecord", "InvalidCandidate",
           "MeasuringCallback", "MeasuringStats", "Partition", "Phase", "Plan", "PlanSource",
           "PrecisionRecord", "Progress", "ProgressEvent", "ProgressLike", "ProposalRecord",
           "RaceRecord", "Record", "Reporter", "Rival", "RivalKind", "Runnable", "SearchStats",
           "ShapesRecord", "Timing", "VariantRecord", "make_partitions"]
