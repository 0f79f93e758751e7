"""The search: which targets may run each node (the support table, pins, bans), greedy
placement by priority, and Collage's measured search for the cheapest cover."""

from tessera.placement.search._candidates import Candidate
from tessera.placement.search._collage import known_plans, place_collage
from tessera.placement.search._cover import SearchResult, cheapest_cover
from tessera.placement.search._device_targets import assign_devices
from tessera.placement.search._greedy import place_greedy
from tessera.placement.search._pins import (
    METADATA_KEY,
    PinSpec,
    annotate,
    pinned_devices,
    resolve_pins,
)
from tessera.placement.search._support import FALLBACK, SupportTable, candidate_targets

__all__ = ["FALLBACK", "METADATA_KEY", "Candidate", "PinSpec", "SearchResult", "SupportTable",
           "annotate", "assign_devices", "candidate_targets", "cheapest_cover", "known_plans",
           "pinned_devices", "place_collage", "place_greedy", "resolve_pins"]
