"""What one placement works with, passed whole instead of long parameter lists: the model
and config, the pins resolved, the shape points it is measured at, and its tools (the
measurer, the builder, the cost database, the clock and the progress reporter). The user
hands in `Tools`; the driver settles each default once (`_driver.context_for`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tessera._private.timing import Clock
from tessera.config import CompilationConfig, Objective
from tessera.ir import Model
from tessera.placement.measure._points import Points
from tessera.placement.measure._protocol import Measurer
from tessera.placement.record._builder import Builder
from tessera.placement.record._costdb import CostDB
from tessera.placement.record._progress import ProgressLike, Reporter
from tessera.target import Target


@dataclass(frozen=True)
class Tools:
    """What a placement may use, each optional: a `builder` to build and race whole plans
    (without one, the search decides alone), a `measurer` for candidates (default: the
    config's), a cost database (default: a fresh one for Collage), a clock and a progress
    callback. `started`: the clock's reading when the compile began (default: when the
    placement began), from which the precision search's time is set."""

    builder: Builder | None = None
    measurer: Measurer | None = None
    db: CostDB | None = None
    clock: Clock = time.perf_counter
    progress: ProgressLike | None = None
    started: float | None = None


@dataclass(frozen=True, eq=False)
class PlacementContext:
    model: Model
    config: CompilationConfig
    pins: Mapping[int, Target]  # node index -> target
    points: Points
    measurer: Measurer
    builder: Builder | None = None
    db: CostDB | None = None
    clock: Clock = time.perf_counter
    progress: Reporter = field(default_factory=Reporter)
    started: float = 0.0  # the clock's reading when the compile began

    @property
    def objective(self) -> Objective:
        return Objective.of(self.config.options)

    def with_config(self, config: CompilationConfig) -> PlacementContext:
        return replace(self, config=config)


__all__ = ["PlacementContext", "Tools"]
