"""Latency in blocks: warm up, then run one thing repeatedly until a time budget is spent.
Timing one plan's runs together keeps another backend's spinning pool from slowing them.
The clock is a parameter, so tests of the decisions built on it run on a synthetic one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Clock = Callable[[], float]  # seconds, monotonic


@dataclass(frozen=True)
class Latency:
    median_ms: float
    p90_ms: float
    min_ms: float
    mean_ms: float
    runs: int
    spread_ms: float = 0.0  # max - min of the samples

    @classmethod
    def of(cls, samples: Sequence[float]) -> Latency:
        ordered = sorted(samples)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        return cls(round(statistics.median(ordered), 4), round(p90, 4), round(ordered[0], 4),
                   round(statistics.fmean(ordered), 4), len(ordered),
                   round(ordered[-1] - ordered[0], 4))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_block(run: Callable[[], object], *, warmup: int = 3, min_runs: int = 10,
               max_runs: int = 2000, seconds: float = 1.0,
               before: Callable[[], object] | None = None,
               clock: Clock = time.perf_counter) -> Latency:
    """`run` timed after `warmup` calls: at least `min_runs`, then until `seconds` pass.
    `before`, if given, runs untimed ahead of every timed call (to flush caches, say)."""
    for _ in range(warmup):
        run()
    samples: list[float] = []
    start = clock()
    while len(samples) < max_runs and (len(samples) < min_runs or clock() - start < seconds):
        if before is not None:
            before()
        began = clock()
        run()
        samples.append((clock() - began) * 1e3)
    return Latency.of(samples)


__all__ = ["Clock", "Latency", "time_block"]
