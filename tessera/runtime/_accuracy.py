"""The plan's accuracy on the user's samples: its outputs on the validation samples
against the consensus oracle's fp32 answers for the whole model. Runs after the placement,
outside the remembered search: samples change no decision yet, so they never enter the
plan's key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from tessera.config import AccuracyReport, accuracy_of
from tessera.ir import Samples, SampleSource
from tessera.oracle import reference_answers
from tessera.placement import Plan

if TYPE_CHECKING:
    import numpy as np

    from tessera.config import CompilationConfig
    from tessera.ir import Model


class JudgedModel(Protocol):
    """A compiled model as its accuracy is measured and recorded (`CompiledModel`)."""

    model: Model
    config: CompilationConfig
    plan: Plan

    def run_many(self, inputs: Iterable[Mapping[str, np.ndarray]], concurrency: int = 1
                 ) -> list[dict[str, np.ndarray]]: ...


def assess_accuracy(compiled: JudgedModel, samples: Samples) -> AccuracyReport:
    """The report for `compiled` on the validation half of `samples`, against the config's
    accuracy budget (when it has one)."""
    reference = reference_answers(compiled.model, samples)
    got = compiled.run_many(reference.feeds)
    return accuracy_of(got, reference.outputs, compiled.config.options.accuracy, reference.judges)


def with_accuracy(compiled: JudgedModel, samples: SampleSource | Samples | None) -> Plan:
    """The compiled model's plan with its accuracy recorded (itself without samples)."""
    if samples is None:
        return compiled.plan
    checked = Samples.load(samples, compiled.model)
    compiled.plan = compiled.plan.with_stats(accuracy=assess_accuracy(compiled, checked))
    return compiled.plan


__all__ = ["assess_accuracy", "with_accuracy"]
