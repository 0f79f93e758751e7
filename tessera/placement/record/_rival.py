"""The plans an end-to-end race compares, as values: the searched plan, the greedy plan, the
model whole on one target (a runtime-settings choice of a target is one too), and in the
precision search, the fp32 plan and each lower-precision target. A rival's text is its name
in a plan's statistics and in `explain`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tessera.target import Target


class RivalKind(Enum):
    SEARCHED = "collage"  # the plan the search found
    GREEDY = "greedy"  # the greedy plan by priority
    SINGLE = "only"  # the whole model on one target
    FP32 = "fp32"  # the precision search's fp32 plan
    PRECISION = "precision"  # the precision search's plan on a lower-precision target


@dataclass(frozen=True)
class Rival:
    kind: RivalKind
    target: Target | None = None  # the target of a SINGLE or PRECISION rival

    def __post_init__(self) -> None:
        needs = self.kind in (RivalKind.SINGLE, RivalKind.PRECISION)
        if needs != (self.target is not None):
            raise ValueError(f"a {self.kind.name} rival {'needs' if needs else 'has no'} "
                             "target")

    @classmethod
    def single(cls, target: Target) -> Rival:
        return cls(RivalKind.SINGLE, target)

    @classmethod
    def precision(cls, target: Target) -> Rival:
        return cls(RivalKind.PRECISION, target)

    @classmethod
    def parse(cls, text: str) -> Rival:
        """The rival named `text` (as `str` writes it)."""
        for kind in (RivalKind.SEARCHED, RivalKind.GREEDY, RivalKind.FP32):
            if text == kind.value:
                return cls(kind)
        prefix = RivalKind.SINGLE.value + " "
        if text.startswith(prefix):
            return cls.single(Target(text[len(prefix):]))
        return cls.precision(Target(text))

    def __str__(self) -> str:
        if self.kind is RivalKind.SINGLE:
            return f"{self.kind.value} {self.target}"
        if self.kind is RivalKind.PRECISION:
            return str(self.target)
        return str(self.kind.value)


SEARCHED = Rival(RivalKind.SEARCHED)
GREEDY = Rival(RivalKind.GREEDY)
FP32 = Rival(RivalKind.FP32)

__all__ = ["FP32", "GREEDY", "SEARCHED", "Rival", "RivalKind"]
