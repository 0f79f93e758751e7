"""What a placement did, as a typed value made of small parts: what the search measured
(`MeasuringStats`), how it covered the model (`CoverStats`), how the rival plans timed end
to end (`RaceRecord`), what the numeric guard found (`GuardRecord`), where the plan came
from (`PlanSource`), and the records of the other steps. Code reads the parts; `to_dict`
and `create` are the JSON form, one flat object whose keys name the parts' fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tessera.config import AccuracyReport, Objective
from tessera.oracle import Disagreement
from tessera.placement.record import _records as records
from tessera.placement.record._records import InvalidCandidate
from tessera.placement.record._rival import SEARCHED, Rival


@dataclass(frozen=True)
class Timing:
    """A rival plan's end-to-end figure: measured milliseconds, or why it was not timed."""

    ms: float | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if (self.ms is None) == (self.reason is None):
            raise ValueError("a timing is measured milliseconds or the reason there are none")

    @classmethod
    def measured(cls, ms: float) -> Timing:
        return cls(ms=ms)

    @classmethod
    def not_timed(cls, reason: str) -> Timing:
        return cls(reason=reason)

    def to_json(self) -> float | str:
        return self.ms if self.ms is not None else str(self.reason)

    @classmethod
    def from_json(cls, value: float | str) -> Timing:
        return cls.not_timed(value) if isinstance(value, str) else cls.measured(float(value))

    def __str__(self) -> str:
        return f"{self.ms:.3f} ms" if self.ms is not None else str(self.reason)


class GuardVerdict(StrEnum):
    """The numeric guard's verdict on a plan it let through."""

    PASSED = "passed"  # every partition agreed with the consensus oracle


@dataclass(frozen=True)
class MeasuringStats:
    """What the search priced: candidates, measurements made, costs found in the database,
    the seconds measuring took, and the candidates that could not run (a few examples)."""

    candidates: int = 0
    measurements: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    invalid: int = 0
    invalid_examples: tuple[InvalidCandidate, ...] = ()


@dataclass(frozen=True)
class CoverStats:
    """The cheapest cover: the states searched and pruned, the modelled cost and bound, the
    seconds it took (with why it stopped short, where it did), the partitions moved to one
    thread, the overhead charged per partition and the calibration rounds."""

    modelled_ms: float | None = None
    seconds: float | None = None
    states: int | None = None
    pruned: int | None = None
    truncated: str | None = None
    bound_ms: float | None = None
    one_thread_partitions: int | None = None
    partition_overhead_ms: float | None = None
    calibration_rounds: int | None = None


@dataclass(frozen=True)
class RaceRecord:
    """The end-to-end race: every rival's figure under the `objective` (the latency at its
    percentile and concurrency, or why it was not timed; with objective=throughput the
    inferences per second too), the rival kept, and the machine it ran on where not here."""

    timings: Mapping[Rival, Timing] = field(default_factory=dict)
    kept: Rival = SEARCHED
    objective: Objective | None = None
    throughput_ips: Mapping[Rival, float] = field(default_factory=dict)
    raced_on: str | None = None

    def ms(self, rival: Rival) -> float | None:
        timing = self.timings.get(rival)
        return timing.ms if timing is not None else None


@dataclass(frozen=True)
class GuardRecord:
    """The numeric guard: its verdict (None: not asked, or not yet passed), what it found
    against the consensus over its rounds, and what its bans cost, where they cost time."""

    verdict: GuardVerdict | None = None
    disagreements: tuple[Disagreement, ...] = ()
    cost: str | None = None


@dataclass(frozen=True)
class PlanSource:
    """Where a plan came from: the key it is remembered under, and set when it was
    remembered rather than searched."""

    key: str | None = None
    cache: str | None = None


@dataclass(frozen=True)
class SearchStats:
    """Statistics of one placement. Every part is optional: a greedy plan has no race, a
    remembered plan measured nothing."""

    measuring: MeasuringStats | None = None
    cover: CoverStats | None = None
    race: RaceRecord | None = None
    guard: GuardRecord | None = None
    source: PlanSource | None = None
    proposals: tuple[records.ProposalRecord, ...] | None = None  # backends' proposed subgraphs
    coarse: records.CoarseRecord | None = None  # the regions step that bounds the fine search
    # the points a model with symbolic dimensions was measured at
    shapes: records.ShapesRecord | None = None
    # the plan against the reference on the user's validation samples, after the search
    accuracy: AccuracyReport | None = None
    precision: records.PrecisionRecord | None = None  # the search of precision variants
    interrupted: records.InterruptRecord | None = None  # set when an interrupt stopped the search
    fallback_from: tuple[str, ...] | None = None  # backends an artifact load re-placed

    @property
    def guard_passed(self) -> bool:
        """Whether the numeric guard passed every partition of the plan."""
        return self.guard is not None and self.guard.verdict is GuardVerdict.PASSED

    def merged(self, **changes: Any) -> SearchStats:
        return dataclasses.replace(self, **changes)

    def with_guard(self, **changes: Any) -> SearchStats:
        return self.merged(guard=dataclasses.replace(self.guard or GuardRecord(), **changes))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: one flat object, only what is set."""
        data: dict[str, Any] = {}
        for name, value in vars(self).items():  # a frozen dataclass's fields by name
            if value is None:
                continue
            if name not in _PARTS:
                data[name] = _WHOLE[name][0](value)
                continue
            for field_name, item in vars(value).items():
                if item is not None and item != () and item != {}:
                    key, write, _ = _codec(name, field_name)
                    data[key] = write(item)
        return data

    @classmethod
    def create(cls, data: Mapping[str, Any] | None) -> SearchStats:
        """From the JSON form; keys this version does not know are left."""
        data = data or {}
        parts: dict[str, Any] = {}
        for part, made in _PARTS.items():
            found = {}
            for f in dataclasses.fields(made):
                key, _, read = _codec(part, f.name)
                if data.get(key) is not None:
                    found[f.name] = read(data[key])
            if found:
                parts[part] = made(**found)
        for name, (_, read) in _WHOLE.items():
            if data.get(name) is not None:
                parts[name] = read(data[name])
        return cls(**parts)


def _same(value: Any) -> Any:
    return value


Codec = tuple[str, Callable[[Any], Any], Callable[[Any], Any]]  # JSON key, write, read
_PARTS: dict[str, type[Any]] = {
    "measuring": MeasuringStats, "cover": CoverStats, "race": RaceRecord,
    "guard": GuardRecord, "source": PlanSource}
# the parts' fields kept under other JSON keys (the keys plans have always been written
# with), or written other than as they are; every other field is its own key, as it is
_CODECS: dict[tuple[str, str], Codec] = {
    ("measuring", "seconds"): ("measure_seconds", _same, _same),
    ("measuring", "invalid_examples"): (
        "invalid_examples", lambda v: [e.to_dict() for e in v],
        lambda v: tuple(InvalidCandidate.from_dict(e) for e in v)),
    ("cover", "seconds"): ("search_seconds", _same, _same),
    ("cover", "truncated"): ("search_truncated", _same, _same),
    ("race", "timings"): ("end_to_end_ms", lambda v: {str(r): t.to_json() for r, t in v.items()},
                          lambda v: {Rival.parse(r): Timing.from_json(t) for r, t in v.items()}),
    ("race", "kept"): ("kept", str, Rival.parse),
    ("race", "objective"): ("objective", lambda v: v.to_dict(), Objective.from_dict),
    ("race", "throughput_ips"): ("throughput_ips", lambda v: {str(r): x for r, x in v.items()},
                                 lambda v: {Rival.parse(r): float(x) for r, x in v.items()}),
    ("guard", "verdict"): ("numeric_guard", str, GuardVerdict),
    ("guard", "disagreements"): ("disagreements", lambda v: [d.to_dict() for d in v],
                                 lambda v: tuple(Disagreement.from_dict(d) for d in v)),
    ("guard", "cost"): ("guard_cost", _same, _same),
    ("source", "key"): ("plan_key", _same, _same),
    ("source", "cache"): ("plan_cache", _same, _same),
}
_WHOLE: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "proposals": (lambda v: [p.to_dict() for p in v],
                  lambda v: tuple(records.ProposalRecord.from_dict(p) for p in v)),
    "coarse": (lambda v: v.to_dict(), records.CoarseRecord.from_dict),
    "shapes": (lambda v: v.to_dict(), records.ShapesRecord.from_dict),
    "accuracy": (lambda v: v.to_dict(), AccuracyReport.from_dict),
    "precision": (lambda v: v.to_dict(), records.PrecisionRecord.from_dict),
    "interrupted": (lambda v: v.to_dict(), records.InterruptRecord.from_dict),
    "fallback_from": (list, tuple),
}


def _codec(part: str, name: str) -> Codec:
    return _CODECS.get((part, name), (name, _same, _same))


__all__ = ["CoverStats", "GuardRecord", "GuardVerdict", "MeasuringStats", "PlanSource",
           "RaceRecord", "SearchStats", "Timing"]
