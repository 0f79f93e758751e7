"""What the end-to-end race compares, from the flow options `objective`,
`latency-percentile`, `concurrency` and `latency-budget`:

- latency: a percentile (the median by default) of per-call latencies, with `concurrency`
  callers at once; the lowest wins;
- throughput: inferences per second from `concurrency` callers at once; the most wins,
  among the plans whose latency per call (at the percentile) keeps within the budget.

A value type: the plan's stats say which figure was compared, and the cost database keys
each remembered figure by it, so figures of different objectives never mix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tessera.config._options import FlowOptions, ObjectiveName


@dataclass(frozen=True)
class Objective:
    name: ObjectiveName = ObjectiveName.LATENCY
    percentile: float = 50
    concurrency: int = 1
    latency_budget_ms: float | None = None  # throughput only

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", ObjectiveName(self.name))  # given as text too

    @classmethod
    def of(cls, options: FlowOptions) -> Objective:
        return cls(options.objective, options.latency_percentile, options.concurrency,
                   options.latency_budget)

    @property
    def throughput(self) -> bool:
        return self.name is ObjectiveName.THROUGHPUT

    @property
    def single_call_median(self) -> bool:
        """Whether the latency compared is the median of calls made one at a time: the
        figure the search's partition costs are measured in."""
        return not self.throughput and self.percentile == 50 and self.concurrency == 1

    @property
    def latency_label(self) -> str:
        """'median latency', 'p99 latency'."""
        return "median latency" if self.percentile == 50 else f"p{self.percentile:g} latency"

    def figure_key(self, figure: str) -> str:
        """The cost database's name of one figure ('latency' or 'throughput') measured
        under this objective: each names everything its value depends on."""
        at = f" p{self.percentile:g}" if figure == "latency" else ""
        return f"{figure}{at} c{self.concurrency} ({self.name})"

    def __str__(self) -> str:
        """'median latency', 'p99 latency at concurrency 4', 'throughput at concurrency 2,
        p50 latency <= 5 ms'."""
        callers = f" at concurrency {self.concurrency}" if self.concurrency > 1 else ""
        if not self.throughput:
            return self.latency_label + callers
        budget = (f", p{self.percentile:g} latency <= {self.latency_budget_ms:g} ms"
                  if self.latency_budget_ms is not None else "")
        return f"throughput{callers}{budget}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "percentile": self.percentile,
                "concurrency": self.concurrency, "latency_budget_ms": self.latency_budget_ms}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Objective:
        budget = data.get("latency_budget_ms")
        return cls(ObjectiveName(data.get("name", "latency")), data.get("percentile", 50),
                   int(data.get("concurrency", 1)),
                   float(budget) if budget is not None else None)


__all__ = ["Objective"]
