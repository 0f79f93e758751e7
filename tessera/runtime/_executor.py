"""The graph executor: runs a plan's compiled partitions in order on numpy arrays, freeing
every intermediate once its last consumer has run. Registered as the executor 'graph'."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tessera import backends
from tessera.backends import Compiled
from tessera.placement import Plan

if TYPE_CHECKING:
    import numpy as np
    import onnx


class Executor(Protocol):
    """What a registered executor gives the compiled model: `run`, the outputs for checked
    inputs (which it may consume), and `whole`: where the plan is one partition taking the
    model's inputs and giving its outputs, that partition (its backend may then be called
    directly), else None."""

    whole: Compiled | None

    def run(self, values: dict[str, Any], /) -> dict[str, np.ndarray]: ...


class GraphExecutor:
    """One process, one partition after another; values travel as host arrays."""

    def __init__(self, plan: Plan, parts: Sequence[Compiled], inputs: Sequence[str],
                 outputs: Sequence[str], constants: Mapping[str, onnx.TensorProto]) -> None:
        self.outputs = list(outputs)
        self._constants = dict(constants)  # graph outputs that are initializers
        # the loop's work prepared once: in a chain every interpreted step runs with caches
        # the backends just evicted, so each costs several times what it costs in a loop
        self._steps = [(tuple(part.inputs), compiled.run_checked, tuple(frees))
                       for part, compiled, frees in zip(
                           plan.partitions, parts, _last_uses(plan, self.outputs),
                           strict=True)]
        only = plan.partitions[0] if len(plan.partitions) == 1 else None
        whole = only is not None and not self._constants and list(only.outputs) == \
            self.outputs and sorted(only.inputs) == sorted(inputs)
        # the outputs for checked inputs (`values` is consumed); one partition taking the
        # model's inputs needs no bookkeeping between backends
        self.run: Callable[[dict[str, Any]], dict[str, np.ndarray]] = \
            parts[0].run_checked if whole else self._chain
        # that partition, whose backend may be called directly on the caller's inputs
        self.whole: Compiled | None = parts[0] if whole else None

    def _chain(self, values: dict[str, Any]) -> dict[str, np.ndarray]:
        for names, run, frees in self._steps:
            values.update(run({n: values[n] for n in names}))
            for name in frees:
                values.pop(name, None)
        return {name: values[name] if name in values else
                self._constant(name) for name in self.outputs}

    def _constant(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        return numpy_helper.to_array(self._constants[name])


def _last_uses(plan: Plan, keep: list[str]) -> list[list[str]]:
    last: dict[str, int] = {}
    for i, part in enumerate(plan.partitions):
        for name in part.inputs:
            last[name] = i
    frees: list[list[str]] = [[] for _ in plan.partitions]
    for name, i in last.items():
        if name not in keep:
            frees[i].append(name)
    return frees


def widens_float16(plan: Plan) -> bool:
    """Whether the plan's chain carries float16 between partitions as float32
    (`extract_submodel(widen_float16=True)`): unless a partition quantizes with calibration
    data, which holds the boundary's own types."""
    return not any(backends.get(p.target.kind.name).calibrated(p.target)
                   for p in plan.partitions)


__all__ = ["GraphExecutor", "widens_float16"]
