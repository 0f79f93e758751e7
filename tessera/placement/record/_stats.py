"""What a placement did, as a typed value: how many candidates were measured, how the rival
plans timed end to end, which one was kept, whether the numeric guard passed. Code reads the
fields; the mapping view (only the fields that are set) is for JSON, `explain` and users."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tessera.config._accuracy import AccuracyReport
from tessera.config._objective import Objective
from tessera.oracle import Disagreement
from tessera.placement.record._phase import Phase

Timing = float | str  # a plan's end-to-end latency in ms, or why it was not timed
GUARD_PASSED = "passed"  # SearchStats.numeric_guard once the guard passed every partition


@dataclass(frozen=True)
class InvalidCandidate:
    """A candidate that cannot run on its target: the measuring failed, or (`fault`) the
    backend crashed, hung or ran out of memory in the measuring worker."""

    target: str
    nodes: tuple[str, ...]
    reason: str
    fault: str | None = None  # 'crashed', 'hung' or 'out of memory'

    def __str__(self) -> str:
        return f"{self.target} on {', '.join(self.nodes)[:80]}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "nodes": list(self.nodes), "reason": self.reason,
                "fault": self.fault}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | str) -> InvalidCandidate:
        if isinstance(data, str):  # written as a line by older plans
            return cls("", (), data)
        return cls(str(data["target"]), tuple(data.get("nodes", ())), str(data["reason"]),
                   data.get("fault"))


@dataclass(frozen=True)
class ProposalRecord:
    """What Collage made of one proposed subgraph: a `candidate`, `split` into convex parts
    (`parts` of them), or `refused`; `reason` is the proposal's own, then why."""

    source: str  # the backend that proposed it, or the registered proposer
    target: str
    label: str
    nodes: tuple[str, ...]  # known nodes in the model's order (as given where none is known)
    status: str  # 'candidate', 'split' or 'refused'
    reason: str
    parts: int = 0  # the candidates it became

    def __str__(self) -> str:
        label = f" ({self.label})" if self.label else ""
        made = f" into {self.parts} part(s)" if self.status == "split" else ""
        return (f"{self.source}{label} for {self.target}, {len(self.nodes)} node(s): "
                f"{self.status}{made}: {self.reason}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["nodes"] = list(self.nodes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProposalRecord:
        return cls(str(data["source"]), str(data["target"]), str(data.get("label", "")),
                   tuple(data.get("nodes", ())), str(data["status"]), str(data["reason"]),
                   int(data.get("parts", 0)))


@dataclass(frozen=True)
class CoarseRecord:
    """The coarse step of the search: the model in `regions` measured per target, the
    share of the best single target's time the best mix of targets per region would save,
    the regions then searched node by node, and the targets no longer measured because they
    were many times slower than the best on every region tried (with how much)."""

    regions: int
    saving: float
    refined: int
    slow: tuple[str, ...] = ()  # 'torch: 9.3x the best on each of 3 regions'

    def __str__(self) -> str:
        fine = "the fine search skipped" if not self.refined else \
            f"{self.refined} searched node by node"
        slow = f"; stopped measuring {', '.join(self.slow)}" if self.slow else ""
        return (f"{self.regions} region(s); mixing targets per region would save "
                f"{self.saving:.1%}: {fine}{slow}")

    def to_dict(self) -> dict[str, Any]:
        return {"regions": self.regions, "saving": self.saving, "refined": self.refined,
                "slow": list(self.slow)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CoarseRecord:
        return cls(int(data["regions"]), float(data["saving"]), int(data["refined"]),
                   tuple(data.get("slow", ())))


@dataclass(frozen=True)
class InterruptRecord:
    """A search stopped by an interrupt (Ctrl-C): the phase it was in and how far it had got
    (`done` of `total` units of that phase), what it had priced and measured by then, and
    the plan kept instead of its answer (`kept`, with why). Such a plan is not remembered:
    the next compile searches again, reusing the costs measured."""

    phase: Phase
    kept: str
    done: int = 0
    total: int | None = None
    candidates: int | None = None
    measurements: int | None = None

    def __str__(self) -> str:
        count = f" at {self.done} of {self.total}" if self.total is not None else ""
        measured = f"; {self.candidates} candidate(s) priced, {self.measurements} measured" \
            if self.candidates is not None else ""
        return (f"interrupted during {self.phase.words}{count}"
                f"{measured}: kept {self.kept}; not remembered, the next compile searches "
                "again")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InterruptRecord:
        def count(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        return cls(Phase(data["phase"]), str(data["kept"]), int(data.get("done", 0)),
                   count("total"), count("candidates"), count("measurements"))


@dataclass(frozen=True)
class VariantRecord:
    """What the precision search found for one variant target: the budget share its whole
    model used (1.0 is the bound), its latency there, each segment's share measured alone,
    the segments kept in it, how many went back to fp32, and why it was dropped."""

    target: str
    whole_used: float | None = None
    whole_ms: float | None = None
    segments: tuple[int, ...] = ()  # the segments it runs
    segment_used: tuple[tuple[int, float], ...] = ()
    kept: tuple[int, ...] = ()
    reverted: int = 0
    met: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["segments"] = list(self.segments)
        data["segment_used"] = [[i, u] for i, u in self.segment_used]
        data["kept"] = list(self.kept)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VariantRecord:
        return cls(str(data["target"]), data.get("whole_used"), data.get("whole_ms"),
                   tuple(data.get("segments", ())),
                   tuple((int(i), float(u)) for i, u in data.get("segment_used", ())),
                   tuple(data.get("kept", ())), int(data.get("reverted", 0)),
                   bool(data.get("met", False)), str(data.get("note", "")))


@dataclass(frozen=True)
class ShapesRecord:
    """Where a model with symbolic dimensions was measured: the points (`batch=1,sequence=128`)
    and their weights, whether they were the defaults (no profile given), and each
    partition's cost at each point (None where not measured alone)."""

    points: tuple[str, ...]
    weights: tuple[float, ...]
    defaulted: bool = False
    partition_ms: tuple[tuple[float | None, ...], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"points": list(self.points), "weights": list(self.weights),
                "defaulted": self.defaulted,
                "partition_ms": [list(row) for row in self.partition_ms]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShapesRecord:
        return cls(tuple(data["points"]), tuple(float(w) for w in data["weights"]),
                   bool(data.get("defaulted", False)),
                   tuple(tuple(row) for row in data.get("partition_ms", ())))


@dataclass(frozen=True)
class PrecisionRecord:
    """The precision search: whether it ran (`status` says why not), over how many
    segments, each variant's record, which plan it kept and the end-to-end race."""

    status: str
    segments: int = 0
    variants: tuple[VariantRecord, ...] = ()
    kept: str = "fp32"
    end_to_end_ms: Mapping[str, float] | None = None
    seconds: float | None = None
    # per partition of the plan kept: its share of the budget (None: fp32)
    partition_used: tuple[float | None, ...] = ()
    inputs: str = ""  # which inputs judged it: the user's samples, or generated ones
    budget: str = ""  # the budget it kept (the default where the user gave none)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "segments": self.segments,
                "variants": [v.to_dict() for v in self.variants], "kept": self.kept,
                "end_to_end_ms": dict(self.end_to_end_ms or {}), "seconds": self.seconds,
                "partition_used": list(self.partition_used), "inputs": self.inputs,
                "budget": self.budget}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrecisionRecord:
        return cls(str(data["status"]), int(data.get("segments", 0)),
                   tuple(VariantRecord.from_dict(v) for v in data.get("variants", ())),
                   str(data.get("kept", "fp32")), dict(data.get("end_to_end_ms") or {}),
                   data.get("seconds"), tuple(data.get("partition_used", ())),
                   str(data.get("inputs", "")), str(data.get("budget", "")))


@dataclass(frozen=True)
class SearchStats(Mapping[str, Any]):
    """Statistics of one placement. Every field is optional: a greedy plan has no race, a
    remembered plan measured nothing."""

    candidates: int | None = None
    measurements: int | None = None
    cache_hits: int | None = None
    measure_seconds: float | None = None
    invalid: int | None = None
    invalid_examples: tuple[InvalidCandidate, ...] | None = None
    states: int | None = None
    pruned: int | None = None
    modelled_ms: float | None = None
    search_seconds: float | None = None
    search_truncated: str | None = None
    one_thread_partitions: int | None = None
    bound_ms: float | None = None
    partition_overhead_ms: float | None = None
    end_to_end_ms: Mapping[str, Timing] | None = None
    kept: str | None = None  # which rival plan won the end-to-end race
    raced_on: str | None = None  # the measuring node's machine, where the race ran there
    # the figure the race compared: `end_to_end_ms` holds the latency at its percentile and
    # concurrency, and with objective=throughput `throughput_ips` the inferences per second
    objective: Objective | None = None
    throughput_ips: Mapping[str, float] | None = None
    calibration_rounds: int | None = None
    plan_key: str | None = None
    plan_cache: str | None = None  # set when the plan was remembered, not searched
    numeric_guard: str | None = None  # 'passed' once the guard passed every partition
    # what the guard found against the consensus: bans' evidence, outvoted implementations
    # and undecided verdicts
    disagreements: tuple[Disagreement, ...] | None = None
    guard_cost: str | None = None  # where the guard's bans made the plan slower, how much
    fallback_from: tuple[str, ...] | None = None  # backends an artifact load re-placed
    # the plan against the reference on the user's validation samples, after the search
    accuracy: AccuracyReport | None = None
    precision: PrecisionRecord | None = None  # the search of precision variants
    shapes: ShapesRecord | None = None  # the points a model with symbolic dims was measured at
    proposals: tuple[ProposalRecord, ...] | None = None  # backends' proposed subgraphs
    coarse: CoarseRecord | None = None  # the regions step that bounds the fine search
    interrupted: InterruptRecord | None = None  # set when an interrupt stopped the search

    # -- the mapping view ------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in _FIELDS else None
        if value is None:
            raise KeyError(key)
        return _plain(value)

    def __iter__(self) -> Iterator[str]:
        return (name for name in _FIELDS if getattr(self, name) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_dict(self) -> dict[str, Any]:
        return {name: self[name] for name in self}

    @property
    def guard_passed(self) -> bool:
        """Whether the numeric guard passed every partition of the plan."""
        return self.numeric_guard == GUARD_PASSED

    def merged(self, **changes: Any) -> SearchStats:
        return dataclasses.replace(self, **changes)

    @classmethod
    def create(cls, data: Mapping[str, Any] | None) -> SearchStats:
        """From a mapping (a plan's JSON, say); keys this version does not know are left."""
        if isinstance(data, SearchStats):
            return data
        values = {k: v for k, v in (data or {}).items() if k in _FIELDS and v is not None}
        if "invalid_examples" in values:
            values["invalid_examples"] = tuple(
                InvalidCandidate.from_dict(e) for e in values["invalid_examples"])
        if "proposals" in values:
            values["proposals"] = tuple(
                p if isinstance(p, ProposalRecord) else ProposalRecord.from_dict(p)
                for p in values["proposals"])
        if "disagreements" in values:
            values["disagreements"] = tuple(
                d if isinstance(d, Disagreement) else Disagreement.from_dict(d)
                for d in values["disagreements"])
        if "fallback_from" in values:
            values["fallback_from"] = tuple(values["fallback_from"])
        if "accuracy" in values and not isinstance(values["accuracy"], AccuracyReport):
            values["accuracy"] = AccuracyReport.from_dict(values["accuracy"])
        if "precision" in values and not isinstance(values["precision"], PrecisionRecord):
            values["precision"] = PrecisionRecord.from_dict(values["precision"])
        if "shapes" in values and not isinstance(values["shapes"], ShapesRecord):
            values["shapes"] = ShapesRecord.from_dict(values["shapes"])
        if "coarse" in values and not isinstance(values["coarse"], CoarseRecord):
            values["coarse"] = CoarseRecord.from_dict(values["coarse"])
        if "interrupted" in values and not isinstance(values["interrupted"], InterruptRecord):
            values["interrupted"] = InterruptRecord.from_dict(values["interrupted"])
        if "end_to_end_ms" in values:
            values["end_to_end_ms"] = dict(values["end_to_end_ms"])
        if "objective" in values and not isinstance(values["objective"], Objective):
            values["objective"] = Objective.from_dict(values["objective"])
        if "throughput_ips" in values:
            values["throughput_ips"] = {k: float(v) for k, v in values["throughput_ips"].items()}
        return cls(**values)


_FIELDS = tuple(f.name for f in dataclasses.fields(SearchStats))  # the view's stable order


def _plain(value: Any) -> Any:
    if isinstance(value, AccuracyReport | PrecisionRecord | ShapesRecord | Objective |
                  CoarseRecord | InterruptRecord):
        return value.to_dict()
    if isinstance(value, tuple) and value and isinstance(value[0], InvalidCandidate |
                                                          ProposalRecord | Disagreement):
        return [v.to_dict() for v in value]
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


__all__ = ["GUARD_PASSED", "CoarseRecord", "InterruptRecord", "InvalidCandidate", "PrecisionRecord",
           "ProposalRecord", "SearchStats", "ShapesRecord", "Timing", "VariantRecord"]
