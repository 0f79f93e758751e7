"""Placement: which backend runs which nodes. Greedy (priority order, maximal regions) or
Collage (measured candidates, exact cheapest cover)."""

from __future__ import annotations

from tessera.placement._candidates import Candidate
from tessera.placement._collage import known_plans, place_collage
from tessera.placement._costdb import Cost, CostDB, Record
from tessera.placement._greedy import place_greedy
from tessera.placement._measure import MeasureSettings, measure
from tessera.placement._pins import METADATA_KEY, annotate, resolve_pins
from tessera.placement._plan import Partition, Plan, make_partitions
from tessera.placement._search import SearchResult, cheapest_cover
from tessera.placement._support import FALLBACK, SupportTable, candidate_targets

__all__ = [
    "FALLBACK",
    "METADATA_KEY",
    "Candidate",
    "Cost",
    "CostDB",
    "MeasureSettings",
    "Partition",
    "Plan",
    "Record",
    "SearchResult",
    "SupportTable",
    "annotate",
    "candidate_targets",
    "cheapest_cover",
    "known_plans",
    "make_partitions",
    "measure",
    "place_collage",
    "place_greedy",
    "resolve_pins",
]
