"""The plan verifier (placeholder until the full verifier lands)."""

from __future__ import annotations

from collections.abc import Mapping

from tessera.config import CompilationConfig
from tessera.ir import Model
from tessera.placement._plan import Plan
from tessera.target import Target


def verify_plan(model: Model, plan: Plan, config: CompilationConfig,
                pins: Mapping[int, Target] | None = None) -> None:
    """Raise a PartitionError naming the first broken invariant of `plan`."""
