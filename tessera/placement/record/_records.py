"""The small records a placement's statistics are made of: what failed measuring, what
became of proposed subgraphs, the coarse step, an interrupt, each precision variant, the
shape points and the precision search. Each is a frozen value with its JSON form."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tessera.placement.record._phase import Phase
from tessera.placement.record._rival import FP32, Rival


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


class ProposalStatus(StrEnum):
    """What Collage made of a proposed subgraph."""

    CANDIDATE = "candidate"
    SPLIT = "split"  # into convex parts
    REFUSED = "refused"


@dataclass(frozen=True)
class ProposalRecord:
    """What Collage made of one proposed subgraph: a `candidate`, `split` into convex parts
    (`parts` of them), or `refused`; `reason` is the proposal's own, then why."""

    source: str  # the backend that proposed it, or the registered proposer
    target: str
    label: str
    nodes: tuple[str, ...]  # known nodes in the model's order (as given where none is known)
    status: ProposalStatus
    reason: str
    parts: int = 0  # the candidates it became

    def __str__(self) -> str:
        label = f" ({self.label})" if self.label else ""
        made = f" into {self.parts} part(s)" if self.status is ProposalStatus.SPLIT else ""
        return (f"{self.source}{label} for {self.target}, {len(self.nodes)} node(s): "
                f"{self.status}{made}: {self.reason}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["nodes"] = list(self.nodes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProposalRecord:
        return cls(str(data["source"]), str(data["target"]), str(data.get("label", "")),
                   tuple(data.get("nodes", ())), ProposalStatus(data["status"]),
                   str(data["reason"]),
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


SEARCHED = "searched"  # a PrecisionRecord's status where the search ran


@dataclass(frozen=True)
class PrecisionRecord:
    """The precision search: whether it ran (`status` says why not), over how many
    segments, each variant's record, which plan it kept and the end-to-end race."""

    status: str  # SEARCHED, or why the search did not run
    segments: int = 0
    variants: tuple[VariantRecord, ...] = ()
    kept: Rival = FP32
    end_to_end_ms: Mapping[Rival, float] | None = None
    seconds: float | None = None
    # per partition of the plan kept: its share of the budget (None: fp32)
    partition_used: tuple[float | None, ...] = ()
    inputs: str = ""  # which inputs judged it: the user's samples, or generated ones
    budget: str = ""  # the budget it kept (the default where the user gave none)

    @property
    def searched(self) -> bool:
        return self.status == SEARCHED

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "segments": self.segments,
                "variants": [v.to_dict() for v in self.variants], "kept": str(self.kept),
                "end_to_end_ms": {str(r): ms for r, ms in (self.end_to_end_ms or {}).items()},
                "seconds": self.seconds, "partition_used": list(self.partition_used),
                "inputs": self.inputs, "budget": self.budget}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrecisionRecord:
        return cls(str(data["status"]), int(data.get("segments", 0)),
                   tuple(VariantRecord.from_dict(v) for v in data.get("variants", ())),
                   Rival.parse(str(data.get("kept", "fp32"))),
                   {Rival.parse(r): float(ms)
                    for r, ms in (data.get("end_to_end_ms") or {}).items()},
                   data.get("seconds"), tuple(data.get("partition_used", ())),
                   str(data.get("inputs", "")), str(data.get("budget", "")))

__all__ = ["SEARCHED", "CoarseRecord", "InterruptRecord", "InvalidCandidate", "PrecisionRecord",
           "ProposalRecord", "ProposalStatus", "ShapesRecord", "VariantRecord"]
