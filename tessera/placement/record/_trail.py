"""The search's trail: what an interrupt (Ctrl-C) may keep instead of the search's answer
(`placement/_interrupted.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from tessera.placement.record._builder import Built
from tessera.placement.record._plan import Plan
from tessera.placement.record._rival import Rival


class Finished(IntEnum):
    """How far a plan the search finished got: a later plan of a lower rank does not
    replace the one kept."""

    SEARCHED = 1
    RACED = 2  # timed end to end


@dataclass(frozen=True)
class SoFar:
    """The known plans (greedy, each target alone) whose every partition was measured,
    their modelled costs, and what the search had priced and measured."""

    plans: dict[Rival, Plan] = field(default_factory=dict)
    modelled_ms: dict[Rival, float] = field(default_factory=dict)
    candidates: int = 0
    measurements: int = 0

    def best(self) -> tuple[Rival, Plan] | None:
        if not self.modelled_ms:
            return None
        rival = min(self.modelled_ms, key=lambda r: (self.modelled_ms[r], str(r)))
        return rival, self.plans[rival]


@dataclass(frozen=True)
class Kept:
    """A plan the search finished, how far it got, which rival it is, and its build."""

    finished: Finished
    rival: Rival
    plan: Plan
    built: Built | None = None


@dataclass
class Trail:
    """What the search has found so far: the best plan it finished, and how to price the
    known plans from the costs measured so far."""

    kept: Kept | None = None
    priced: Callable[[], SoFar] | None = None

    def keep(self, kept: Kept) -> None:
        """A plan the search finished: kept unless the trail holds one that got further."""
        if self.kept is None or kept.finished >= self.kept.finished:
            self.kept = kept


__all__ = ["Finished", "Kept", "SoFar", "Trail"]
