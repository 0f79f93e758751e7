"""`tessera.compile` and `CompiledModel`: build each partition of a plan on its backend and
chain them, freeing every intermediate as soon as its last consumer has run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera.backends import Compiled
from tessera.backends._protocol import TensorSpec, check_inputs
from tessera.config import CompilationConfig
from tessera.errors import CompileError
from tessera.ir import Model, bits, extract_submodel, load_model
from tessera.placement import Plan
from tessera.placement._pins import PinSpec
from tessera.runtime._guard import check_partition
from tessera.target import Target

if TYPE_CHECKING:
    import numpy as np


class CompiledModel:
    """A placed and compiled model. `run` is thread-safe when its backends' runs are, which
    tessera's backends are."""

    def __init__(self, model: Model, config: CompilationConfig, plan: Plan,
                 parts: list[Compiled]) -> None:
        self.model = model
        self.config = config
        self.plan = plan
        self.parts = parts
        flow = model.dataflow
        types = flow.value_types
        self.inputs = [_spec(name, types) for name in flow.graph_inputs]
        self.outputs = list(flow.graph_outputs)
        self._constants = {n: t for n, t in flow.initializers.items() if n in self.outputs}
        self._frees = _last_uses(plan, self.outputs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        from onnx import numpy_helper

        values: dict[str, Any] = dict(check_inputs(self.inputs, inputs))
        for part, compiled, frees in zip(self.plan.partitions, self.parts, self._frees,
                                         strict=True):
            values.update(compiled.run({n: values[n] for n in part.inputs}))
            for name in frees:
                values.pop(name, None)
        return {name: values[name] if name in values else
                numpy_helper.to_array(self._constants[name]) for name in self.outputs}

    def __repr__(self) -> str:
        return f"CompiledModel({self.plan.summary()})"


def compile(model: Any, config: Any = None, *, pins: PinSpec = None,
            **options: Any) -> CompiledModel:
    """Place `model` (a path, bytes or ModelProto) on the backends of `config` (anything
    `CompilationConfig.create` takes) and compile every partition. `pins` fix nodes to
    targets (see `tessera.partition`)."""
    from tessera.runtime._place import as_config, place

    loaded = model if isinstance(model, Model) else load_model(model)
    config = as_config(config, options)
    banned: dict[str, dict[str, str]] = {}
    while True:
        plan, built = place(loaded, config, pins, banned)
        if built is not None:
            parts = built.parts
            verdicts = guard_partitions(loaded, plan, parts) \
                if config.options.numeric_guard else {}
        else:
            parts, verdicts = build_partitions(loaded, plan,
                                               guard=config.options.numeric_guard)
        if not verdicts:
            return CompiledModel(loaded, config, plan, parts)
        for index, reason in verdicts.items():  # each round bans at least one pair: it ends
            part = plan.partitions[index]
            if part.target == "reference":
                continue
            for node in part.nodes:
                banned.setdefault(node, {})[part.target] = reason


def build_partitions(model: Model, plan: Plan, *, guard: bool = False
                     ) -> tuple[list[Compiled], dict[int, str]]:
    """Each partition compiled, and the partitions that failed to compile or (with `guard`)
    disagree with the reference, with the reason. The reference itself is never judged."""
    index = {name: i for i, name in enumerate(model.dataflow.names)}
    parts: list[Compiled] = []
    verdicts: dict[int, str] = {}
    for i, part in enumerate(plan.partitions):
        target = Target(part.target)
        submodel = extract_submodel(model, bits(index[n] for n in part.nodes))
        try:
            compiled = backends.get(target.kind.name).compile(submodel, target)
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


def guard_partitions(model: Model, plan: Plan, parts: list[Compiled]) -> dict[int, str]:
    """The numeric guard's verdicts on already built partitions."""
    index = {name: i for i, name in enumerate(model.dataflow.names)}
    verdicts = {}
    for i, (part, compiled) in enumerate(zip(plan.partitions, parts, strict=True)):
        if Target(part.target).kind.name != "reference":
            submodel = extract_submodel(model, bits(index[n] for n in part.nodes))
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


__all__ = ["CompiledModel", "build_partitions", "compile"]
