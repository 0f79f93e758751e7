"""The end-to-end race and the numeric guard on a measuring node (measure=ray): the node
that priced the candidates times the rival plans and checks the kept one against the
reference, on the machine the plan is for. The compiling side sends the plans as JSON and
the runtime's builder class (placement never imports the runtime; the node constructs it);
the answer comes back as data (`RaceAnswer`) and the compile decides with it as with a race
run here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tessera.config import CompilationConfig
from tessera.ir import Model
from tessera.placement._context import PlacementContext
from tessera.placement.judge._guard import guard_verdicts
from tessera.placement.judge._race import RaceOutcome, keep_fastest
from tessera.placement.measure._local import LocalMeasurer
from tessera.placement.measure._points import Points
from tessera.placement.record._builder import Builder
from tessera.placement.record._costdb import machine
from tessera.placement.record._plan import Plan
from tessera.placement.record._rival import Rival
from tessera.placement.record._stats import RaceRecord


@dataclass(frozen=True)
class RaceAnswer:
    """What a node's race found: the plan kept (JSON, with its race figures), the race's
    record, and the guard's verdicts on the kept plan's partitions (partition -> why it is
    given back; None where the guard was not asked or nothing was built)."""

    machine: str
    plan: str
    record: RaceRecord
    guard: Mapping[int, str] | None = None

    def outcome(self) -> RaceOutcome:
        """The race as the compile decides with it (no build: the compile builds here)."""
        record = replace(self.record, raced_on=self.machine)
        plan = Plan.from_json(self.plan)
        return RaceOutcome(plan.with_stats(race=record), None, record)


@dataclass(frozen=True)
class RaceJob:
    """The race and the guard as a measuring node runs them (a `NodeJob`): the request as
    JSON text (`race_request`) and the compiling side's builder class, constructed there
    (placement never imports the runtime)."""

    request: Mapping[str, Any]
    builder: type[Builder]
    guard: bool

    def __call__(self, model: Model) -> RaceAnswer:
        return race_from_request(model, self.request, self.builder(), self.guard, machine())


def race_here(ctx: PlacementContext, searched: Plan, known: Mapping[Rival, Plan],
              guard: bool, machine: str) -> RaceAnswer:
    """The race, and the guard on the plan it keeps, on this machine (the node's side)."""
    outcome = keep_fastest(ctx, searched, known)
    verdicts: dict[int, str] | None = None
    if guard:
        assert ctx.builder is not None
        built = outcome.built or ctx.builder.build(ctx.model, ctx.config, outcome.plan)
        verdicts = {**built.failures, **guard_verdicts(ctx, outcome.plan, built.parts)}
    return RaceAnswer(machine, outcome.plan.to_json(indent=None), outcome.record, verdicts)


def race_request(config: CompilationConfig, searched: Plan, known: Mapping[Rival, Plan]
                 ) -> dict[str, Any]:
    """The race's inputs as the node receives them: JSON text."""
    return {"config": config.to_json(), "searched": searched.to_json(indent=None),
            "known": {str(rival): plan.to_json(indent=None) for rival, plan in known.items()}}


def race_from_request(model: Model, request: Mapping[str, Any], builder: Builder,
                      guard: bool, machine: str) -> RaceAnswer:
    config = CompilationConfig.from_json(request["config"])
    known = {Rival.parse(name): Plan.from_json(text) for name, text in request["known"].items()}
    # no pins reach the node, and it remembers nothing: its figures go back in the answer
    ctx = PlacementContext(model, config, {}, Points.of(model, config), LocalMeasurer(),
                           builder)
    return race_here(ctx, Plan.from_json(request["searched"]), known, guard, machine)


__all__ = ["RaceAnswer", "RaceJob", "race_from_request", "race_here", "race_request"]
