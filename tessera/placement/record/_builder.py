"""What placement needs from the layer that builds and runs plans. The end-to-end race and
the numeric guard judge whole built plans, but building them is `tessera.runtime`'s job:
placement defines this protocol and the runtime implements it, so placement never imports
the runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tessera.backends import Compiled, TensorSpec
from tessera.config import CompilationConfig
from tessera.ir import Model, Samples
from tessera.placement.record._plan import Plan


class Runnable(Protocol):
    """A built plan as the race times it."""

    @property
    def inputs(self) -> Sequence[TensorSpec]: ...

    def run(self, inputs: Mapping[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Built:
    """A plan's partitions built; `runnable` chains them (None when any failed to build)."""

    plan: Plan
    parts: tuple[Compiled | None, ...]  # per partition; None where it failed
    failures: Mapping[int, str] = field(default_factory=dict)  # partition -> why
    runnable: Runnable | None = None


class Builder(Protocol):
    def build(self, model: Model, config: CompilationConfig, plan: Plan,
              samples: Samples | None = None) -> Built:
        """Every partition of `plan` compiled under the plan's thread policy. A partition
        that fails to compile is a failure, not an exception (the reference's own failures
        excepted: nothing can stand in for it). A partition whose target quantizes with
        calibration data is calibrated on what flows into it on the calibration half of
        `samples`."""
        ...

    def op_errors(self, model: Model, config: CompilationConfig, plan: Plan, index: int,
                  samples: Samples) -> tuple[tuple[str, float], ...]:
        """The nodes of partition `index` that its target's quantized form changes, with the
        relative error each adds on the calibration half of `samples`, the largest first
        (`tessera.backends._sensitivity`); () where the target computes in float."""
        ...

    def release(self) -> None:
        """Lets go of what it kept between builds (partitions shared by several plans,
        calibration data), once the plans built so far are no longer needed."""
        ...


__all__ = ["Builder", "Built", "Runnable"]
