"""`tessera.compile` and `CompiledModel`: build each partition of a plan on its backend and
chain them, freeing every intermediate as soon as its last consumer has run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera.backends import Compiled
from tessera.backends._protocol import InputCheck, TensorSpec
from tessera.backends._threads import ThreadPolicy, prepare_environment
from tessera.config import CompilationConfig
from tessera.errors import CompileError
from tessera.ir import Model, extract_submodel, load_model
from tessera.placement import Plan
from tessera.placement._collage import Progress
from tessera.placement._pins import PinSpec
from tessera.placement._variants import base_target
from tessera.runtime._guard import check_partition
from tessera.target import Target

if TYPE_CHECKING:
    import numpy as np
    import onnx


class CompiledModel:
    """A placed and compiled model. `run` is thread-safe: each call keeps its own tensors,
    and backends whose runtimes are not re-entrant serialise their own runs."""

    def __init__(self, model: Model, config: CompilationConfig, plan: Plan,
                 parts: list[Compiled], policy: ThreadPolicy | None = None) -> None:
        self.model = model
        self.config = config
        self.plan = plan
        self.parts = parts
        self.policy = policy or policy_for(config, plan)
        self.transfers = plan_devices(plan)
        self.sources = ["compiled"] * len(parts)  # per partition; a loaded one says how
        flow = model.dataflow
        types = flow.value_types
        self.inputs = [_spec(name, types) for name in flow.graph_inputs]
        self.inputs_names = [s.name for s in self.inputs]
        self._check = InputCheck(self.inputs)
        self.outputs = list(flow.graph_outputs)
        self._constants = {n: t for n, t in flow.initializers.items() if n in self.outputs}
        # the loop's work prepared once: in a chain every interpreted step runs with caches
        # the backends just evicted, so each costs several times what it costs in a loop
        self._steps = [(tuple(part.inputs), compiled.run_checked, tuple(frees))
                       for part, compiled, frees in zip(
                           plan.partitions, parts, _last_uses(plan, self.outputs), strict=True)]
        only = plan.partitions[0] if len(plan.partitions) == 1 else None
        whole = only is not None and not self._constants and list(only.outputs) == \
            self.outputs and sorted(only.inputs) == sorted(self.inputs_names)
        self._whole = parts[0] if whole else None

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values: dict[str, Any] = self._check(inputs)  # once, at the model's boundary
        if self._whole is not None:  # one partition: no bookkeeping between backends
            return self._whole.run_checked(values)
        for names, run, frees in self._steps:
            values.update(run({n: values[n] for n in names}))
            for name in frees:
                values.pop(name, None)
        return {name: values[name] if name in values else
                self._constant(name) for name in self.outputs}

    def _constant(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        return numpy_helper.to_array(self._constants[name])

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write one `.tess` file (atomically): the plan, config, every partition's ONNX
        submodel, the backends' compiled caches and a checksummed manifest."""
        from tessera.runtime._artifact import save

        return save(self, Path(path))

    def __repr__(self) -> str:
        return f"CompiledModel({self.plan.summary()})"


def policy_for(config: CompilationConfig, plan: Plan) -> ThreadPolicy:
    return ThreadPolicy.for_partitions(len(plan.partitions), config.options.threads)


@dataclass(frozen=True)
class Transfer:
    """A tensor crossing devices at a partition boundary (PlanDevices). Within a partition a
    tensor stays on its backend's device; between partitions it travels as a host array, so
    a crossing is explicit and happens once, at the receiving partition."""

    value: str
    source: str  # device of the producer ('host' for graph inputs)
    destination: str
    partition: int


def plan_devices(plan: Plan) -> list[Transfer]:
    device_of: dict[str, str] = {}
    transfers = []
    for i, part in enumerate(plan.partitions):
        device = Target(part.target).device_type
        for name in part.inputs:
            source = device_of.get(name, "cpu")
            if source != device:
                transfers.append(Transfer(name, source, device, i))
        for name in part.outputs:
            device_of[name] = device
    return transfers


def compile(model: Any, config: Any = None, *, pins: PinSpec = None,
            progress: Progress | None = None, **options: Any) -> CompiledModel:
    """Place `model` (a path, bytes or ModelProto) on the backends of `config` (anything
    `CompilationConfig.create` takes) and compile every partition. `pins` fix nodes to
    targets and `progress` follows the measuring (see `tessera.partition`); `options` are
    flow options (partitioner='greedy', fallback=False, threads='shared', ...)."""
    from tessera.runtime._place import as_config, place
    from tessera.runtime._remember import remember_guard_passed

    loaded = model if isinstance(model, Model) else load_model(model)
    config = as_config(config, options)
    prepare_environment(len(config.priority))
    banned: dict[str, dict[str, str]] = {}
    while True:
        plan, built = place(loaded, config, pins, banned, progress)
        # a remembered plan that passed the guard before is not checked again
        guard = config.options.numeric_guard and plan.stats.get("numeric_guard") != "passed"
        if built is not None:
            parts = built.parts
            verdicts = guard_partitions(loaded, plan, parts) if guard else {}
        else:
            parts, verdicts = build_partitions(loaded, plan, policy_for(config, plan),
                                               guard=guard, warm=config.options.compile_cache)
        if not verdicts:
            if guard:
                plan = remember_guard_passed(plan)
            return CompiledModel(loaded, config, plan, parts)
        for index, reason in verdicts.items():  # each round bans at least one pair: it ends
            part = plan.partitions[index]
            if part.target == "reference":
                continue
            for node in part.nodes:  # a one-thread variant bans the target it came from
                for target in dict.fromkeys((part.target, base_target(part.target))):
                    banned.setdefault(node, {})[target] = reason


def build_partitions(model: Model, plan: Plan, policy: ThreadPolicy, *, guard: bool = False,
                     warm: bool = False) -> tuple[list[Compiled], dict[int, str]]:
    """Each partition compiled under the plan's thread policy (through the warm cache of
    compiled partitions with `warm`), and the partitions that failed to compile or (with
    `guard`) disagree with the reference, with the reason. The reference is never judged."""
    from tessera.runtime._warm import compile_partition

    parts: list[Compiled] = []
    verdicts: dict[int, str] = {}
    for i, part in enumerate(plan.partitions):
        target = policy.apply(Target(part.target))
        mask = model.node_set(part.nodes)
        submodel = extract_submodel(model, mask)
        try:
            compiled = (compile_partition(model, mask, submodel, target) if warm else
                        backends.get(target.kind.name).compile(submodel, target, check=False))
        except CompileError as err:
            if target.kind.name == "reference":
                raise
            verdicts[i] = f"compile failed: {str(err).splitlines()[0][:200]}"
            continue
        parts.append(compiled)
        if guard and target.kind.name != "reference":
            verdict = check_partition(submodel, compiled)
            if verdict:
                verdicts[i] = verdict
    return parts, verdicts


def submodel_of(model: Model, nodes: tuple[str, ...] | list[str]) -> onnx.ModelProto:
    return extract_submodel(model, model.node_set(nodes))


def guard_partitions(model: Model, plan: Plan, parts: list[Compiled]) -> dict[int, str]:
    """The numeric guard's verdicts on already built partitions."""
    verdicts = {}
    for i, (part, compiled) in enumerate(zip(plan.partitions, parts, strict=True)):
        if Target(part.target).kind.name != "reference":
            submodel = submodel_of(model, part.nodes)
            verdict = check_partition(submodel, compiled)
            if verdict:
                verdicts[i] = verdict
    return verdicts


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


def _spec(name: str, types: Mapping[str, Any]) -> TensorSpec:
    import onnx

    value_type = types.get(name)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value_type.elem_type).name \
        if value_type is not None and value_type.elem_type else "float32"
    return TensorSpec(name, dtype, value_type.shape if value_type is not None else None)


__all__ = ["CompiledModel", "Transfer", "build_partitions", "compile", "plan_devices"]
