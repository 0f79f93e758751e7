"""The record of a placement: the plan and its partitions, the search's statistics, the
progress events a compile reports, the cost database, and the plans it remembers."""

from tessera.placement.record._builder import Builder, Built, Runnable
from tessera.placement.record._costdb import Cost, CostDB, Record
from tessera.placement.record._phase import PHASES, Phase
from tessera.placement.record._plan import Partition, Plan, make_partitions
from tessera.placement.record._progress import (
    MeasuringCallback,
    Progress,
    ProgressEvent,
    ProgressLike,
)
from tessera.placement.record._stats import (
    InterruptRecord,
    InvalidCandidate,
    PrecisionRecord,
    ProposalRecord,
    SearchStats,
)

__all__ = [
    "PHASES",
    "Builder",
    "Built",
    "Cost",
    "CostDB",
    "InterruptRecord",
    "InvalidCandidate",
    "MeasuringCallback",
    "Partition",
    "Phase",
    "Plan",
    "PrecisionRecord",
    "Progress",
    "ProgressEvent",
    "ProgressLike",
    "ProposalRecord",
    "Record",
    "Runnable",
    "SearchStats",
    "make_partitions",
]
