"""Timing in rounds of blocks: each configuration runs alone for a block of calls (so one
backend's spinning pool never slows another's), and the blocks repeat in rounds so slow drift
of a shared machine hits every configuration alike. A result is the median of the block
medians, with the spread (lowest and highest block median)."""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tessera.runtime._timing import time_block


@dataclass(frozen=True)
class Measured:
    median_ms: float
    low_ms: float
    high_ms: float
    runs: int

    @property
    def spread(self) -> float:
        """(high - low) / median of the block medians."""
        return (self.high_ms - self.low_ms) / self.median_ms if self.median_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spread": round(self.spread, 4)}


def in_rounds(blocks: Mapping[str, Callable[[], object]], *, rounds: int = 3,
              seconds: float = 0.5) -> dict[str, Measured]:
    medians: dict[str, list[float]] = {label: [] for label in blocks}
    runs = dict.fromkeys(blocks, 0)
    for _ in range(rounds):
        for label, run in blocks.items():
            latency = time_block(run, seconds=seconds)
            medians[label].append(latency.median_ms)
            runs[label] += latency.runs
    return {label: Measured(round(statistics.median(m), 4), round(min(m), 4),
                            round(max(m), 4), runs[label]) for label, m in medians.items()}


def machine() -> str:
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.machine()} {platform.processor() or ''}".strip()
            + f", {cores} cores, {sys.platform}, Python {platform.python_version()}")


__all__ = ["Measured", "in_rounds", "machine"]
