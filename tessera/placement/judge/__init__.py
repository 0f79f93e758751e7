"""Judging whole plans: the end-to-end race of the searched plan against its rivals, the
numeric guard against the consensus oracle, and the precision search under the accuracy
budget."""

from tessera.placement.judge._guard import guard
from tessera.placement.judge._precision import search_precision
from tessera.placement.judge._race import RaceOutcome, keep_fastest
from tessera.placement.judge._timing import Rounds, Served, race, race_throughput

__all__ = ["RaceOutcome", "Rounds", "Served", "guard", "keep_fastest", "race", "race_throughput",
           "search_precision"]
