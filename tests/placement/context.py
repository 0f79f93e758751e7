"""A placement context for tests that call one step of placement directly."""

from __future__ import annotations

import time
from typing import Any

from tessera._private.timing import Clock
from tessera.config import CompilationConfig
from tessera.ir import Model
from tessera.placement import Builder, CostDB, Measurer
from tessera.placement._context import PlacementContext
from tessera.placement.measure import LocalMeasurer, Points
from tessera.placement.record._progress import Reporter
from tessera.placement.search import resolve_pins


def context(model: Model, config: CompilationConfig | str = "onnxruntime", *,
            builder: Builder | None = None, measurer: Measurer | None = None,
            db: CostDB | None = None, clock: Clock = time.perf_counter, pins: Any = None,
            progress: Any = None) -> PlacementContext:
    """The context `place` would make, with exactly the tools given (no cost database
    unless one is given)."""
    if isinstance(config, str):
        config = CompilationConfig.create(config)
    return PlacementContext(model, config, resolve_pins(model.dataflow, pins, config),
                            Points.of(model, config), measurer or LocalMeasurer(), builder,
                            db, clock, Reporter.of(progress))


def timings_of(outcome: Any) -> dict[str, float | str]:
    """A race's timings by rival name: milliseconds, or why a rival was not timed."""
    return {str(r): t.to_json() for r, t in outcome.record.timings.items()}


def ips_of(outcome: Any) -> dict[str, float]:
    """A race's inferences per second by rival name."""
    return {str(r): v for r, v in outcome.record.throughput_ips.items()}
