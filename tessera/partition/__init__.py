"""Placement: which backend runs which nodes."""

from __future__ import annotations

from tessera.partition._assign import assign, candidate_targets, place_by_priority
from tessera.partition._plan import Partition, Plan

__all__ = ["Partition", "Plan", "assign", "candidate_targets", "place_by_priority"]
