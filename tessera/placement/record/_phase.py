"""The phases of a placement, in the order a compile usually meets them. A phase may come
again: the search runs again after calibration, and plans are built for the race, the guard
and precision. A `Phase` is a string too, so a progress callback may compare it with its
name."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    SUPPORT = "support"
    MEASURING = "measuring"
    SEARCH = "search"
    RACE = "race"
    BUILD = "build"
    GUARD = "guard"
    PRECISION = "precision"

    def __str__(self) -> str:
        return self.value

    @property
    def words(self) -> str:
        """The phase in a sentence: 'interrupted during the numeric guard'."""
        return _WORDS[self]


_WORDS = {Phase.SUPPORT: "the support table", Phase.MEASURING: "measuring",
          Phase.SEARCH: "the search", Phase.RACE: "the end-to-end race",
          Phase.BUILD: "building", Phase.GUARD: "the numeric guard",
          Phase.PRECISION: "the precision search"}
PHASES = tuple(Phase)

__all__ = ["PHASES", "Phase"]
