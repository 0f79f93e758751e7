"""`tessera.compile` and `CompiledModel`: build each partition of a plan on its backend and
chain them, freeing every intermediate as soon as its last consumer has run."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera._private.memory import trim
from tessera._private.text import first_line
from tessera.backends import Compiled, ThreadPolicy, prepare_environment
from tessera.backends._protocol import InputCheck, TensorSpec
from tessera.config import EXECUTORS, RUNTIMES, CompilationConfig
from tessera.errors import CompileError, ConfigError, InputError, ModelError, TesseraError
from tessera.ir import (
    Model,
    Samples,
    SampleSource,
    ValueKind,
    cuttable,
    extract_submodel,
    load_model,
    value_kind,
)
from tessera.placement import Built, PinSpec, Plan, ProgressLike, Tools, place
from tessera.placement.record import Phase, Reporter
from tessera.placement.search import FALLBACK, assign_devices
from tessera.runtime._accuracy import with_accuracy
from tessera.runtime._artifact import save
from tessera.runtime._calibration import Activations
from tessera.runtime._executor import Executor, widens_float16
from tessera.runtime._generate import GenerateResult, generate
from tessera.runtime._warm import compile_partition

if TYPE_CHECKING:
    import numpy as np


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
        self.keeps: list[object] = []  # what must live as long as it (a weights entry)
        flow = model.dataflow
        types = flow.value_types
        kinds = {v.name: value_kind(v.type) for v in flow.graph.input}
        self.inputs = [_spec(name, types, kinds.get(name, ValueKind.TENSOR))
                       for name in flow.graph_inputs]
        self.inputs_names = [s.name for s in self.inputs]
        self._check = InputCheck(self.inputs, config.options.shapes)
        self.outputs = list(flow.graph_outputs)
        weights = model.weights
        constants = {n: weights.inline_tensor(t) if weights is not None else t
                     for n, t in flow.initializers.items() if n in self.outputs}
        executor = EXECUTORS.get(config.executor).load()
        self.executor: Executor = executor(plan, parts, self.inputs_names, self.outputs,
                                           constants)
        self._execute: Callable[[dict[str, Any]], dict[str, np.ndarray]] = self.executor.run
        whole = self.executor.whole
        call = whole.direct_call() if whole is not None else None
        if call is not None and whole is not None:  # `run`, one call less deep
            self.run = _direct(  # type: ignore[method-assign,assignment]
                self._check, call, whole.failure, self._checked)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The model's outputs for `inputs` (numpy arrays by input name), checked against
        the model's inputs: an InputError names what does not fit."""
        return self._checked(inputs)

    def _checked(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._execute(self._check(inputs))  # inputs checked once, at the boundary

    def run_many(self, inputs: Iterable[Mapping[str, np.ndarray]], concurrency: int = 1
                 ) -> list[dict[str, np.ndarray]]:
        """`run` on each input dict; the results in the order of the inputs. With
        `concurrency` > 1, that many threads run them (`run` is thread-safe)."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InputError(f"run_many: concurrency must be an integer >= 1, got "
                             f"{concurrency!r}")
        feeds = list(inputs)
        if concurrency == 1 or len(feeds) < 2:
            return [self.run(feed) for feed in feeds]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(concurrency, len(feeds)), "tessera-run") as pool:
            return list(pool.map(self.run, feeds))

    def generate(self, input_ids: Any, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None,
                 do_sample: bool = False, seed: int | None = None,
                 eos_token_id: int | None = None, prefill: CompiledModel | None = None
                 ) -> GenerateResult:
        """Of a decoder with a key/value cache: up to `max_new_tokens` tokens after the prompt
        `input_ids`, greedy or sampled, the prefill on `prefill` where given (another
        compiled form of the decoder; the cache is handed over once) (`tessera.runtime.
        generate`)."""
        return generate(self, input_ids, max_new_tokens, temperature=temperature, top_k=top_k,
                        top_p=top_p, do_sample=do_sample, seed=seed,
                        eos_token_id=eos_token_id, prefill=prefill)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write one `.tess` file (atomically): the plan, config, every partition's ONNX
        submodel, the backends' compiled caches and a checksummed manifest."""
        return save(self, Path(path))

    def __repr__(self) -> str:
        return f"CompiledModel({self.plan.summary()})"


def assemble(model: Model, config: CompilationConfig, plan: Plan, parts: list[Compiled],
             policy: ThreadPolicy | None = None) -> CompiledModel:
    """The built partitions as a compiled model of the config's runtime."""
    runtime: type[CompiledModel] = RUNTIMES.get(config.runtime).load()
    return runtime(model, config, plan, parts, policy)


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
        device = part.target.device_type
        for name in part.inputs:
            source = device_of.get(name, "cpu")
            if source != device:
                transfers.append(Transfer(name, source, device, i))
        for name in part.outputs:
            device_of[name] = device
    return transfers


def as_config(config: Any, options: Mapping[str, Any], executor: str | None = None
              ) -> CompilationConfig:
    """`config` as a CompilationConfig (anything `create` takes), with flow `options`; of a
    config with named executors, the one `executor` names (see `executor_config`)."""
    if not isinstance(config, CompilationConfig):
        config = CompilationConfig.create(config if config is not None else "onnxruntime")
    config = config.executor_config(executor)
    return CompilationConfig.create(config, **options) if options else config


def loaded_for(model: Any, config: CompilationConfig) -> Model:
    """`model` loaded (its symbolic dimensions kept) and checked against the config's shape
    profile."""
    loaded = model if isinstance(model, Model) else load_model(
        model, require_static=False, verify=config.options.verify)
    check_profile(loaded, config)
    return loaded


def check_profile(model: Model, config: CompilationConfig) -> None:
    """A ConfigError for a profile naming a dimension the model lacks, a ModelError for a
    size the model contradicts (a Reshape to a constant, a positional table too short): both
    before anything is measured. The ends of each range (and a listed 0) are checked as well
    as the measured points, since `run` accepts them: each with the other dimensions at the
    first point, and each sum computed from the sizes there."""
    profile = config.options.shapes
    if profile is None:
        return
    if model.is_static:
        raise ConfigError(f"shape profile {profile} given, but the model has no symbolic "
                          "dimensions: every input shape is fixed; leave out the profile")
    profile.check_names(model.symbols)
    points = profile.points(model.symbols)
    base = points[0].as_dict()
    checked = [point.as_dict() for point in points] + [
        profile.complete({**base, dim.name: end}) for dim in profile.dims for end in dim.checked]
    for point in dict.fromkeys(tuple(sorted(c.items())) for c in checked):  # each once
        try:
            model.at(dict(point))
        except ModelError as err:
            raise ModelError(f"{err}{profile.sum_hint(model.symbols)}") from None


def compile(model: Any, config: Any = None, *, executor: str | None = None,
            pins: PinSpec = None, progress: ProgressLike | None = None,
            samples: SampleSource | Samples | None = None, **options: Any) -> CompiledModel:
    """Place `model` (a path, bytes or ModelProto) on the backends of `config` (anything
    `CompilationConfig.create` takes) and compile every partition. `pins` fix nodes to
    targets. `progress` is called with a `tessera.placement.ProgressEvent` at each step of
    every long phase ('support', 'measuring', 'search', 'race', 'build', 'guard',
    'precision'): the units done of all, what it is on, the seconds spent and an estimate
    of the seconds left (None until the rate is known); a callable of three arguments
    (done, total, target), the older form, follows the measuring only. An interrupt
    (KeyboardInterrupt, Ctrl-C) during the search returns the best plan known so far, built
    and checked, with `plan.stats.interrupted` saying where it stopped; it is not remembered,
    so the next compile searches again. Elsewhere, or a second time while that plan builds,
    it raises `tessera.errors.InterruptedCompile`. `options` are
    flow options (partitioner='greedy', fallback=False, accuracy='cosine>=0.999', ...);
    `shapes` (`{"batch": [1, 4], "sequence": (1, 128, 512)}` or its string form) gives the
    sizes of the model's symbolic dimensions to place at and the ranges `run` accepts.
    With `samples` (see `tessera.ir.Samples`), the plan's outputs on the validation samples
    are compared with the reference's, and the report is `plan.stats.accuracy`.
    `executor` picks one of the config's named executors (it may be left out when there is
    one); for a config without them, it is the executor kind (graph)."""
    started = time.perf_counter()
    config = as_config(config, options, executor)
    loaded = loaded_for(model, config)
    checked = Samples.load(samples, loaded) if samples is not None else None  # fail early
    prepare_environment(len(config.priority))
    report = Reporter.of(progress)
    builder = RuntimeBuilder(checked, report)
    placed = place(loaded, config, pins=pins, build=True, samples=checked,
                   tools=Tools(builder=builder, progress=report, started=started))
    builder.release()
    assert placed.built is not None  # build=True with a builder always builds
    compiled = assemble(loaded, config, placed.plan,
                        [p for p in placed.built.parts if p is not None])
    if compiled.plan.stats.accuracy is None:  # the precision search measured it already
        with_accuracy(compiled, checked)
    return compiled


def partition(model: Any, config: Any = None, partitioner: str | None = None,
              pins: PinSpec = None, progress: ProgressLike | None = None,
              samples: SampleSource | Samples | None = None, *, executor: str | None = None,
              **options: Any) -> Plan:
    """The plan for `model` (a path, bytes, ModelProto or loaded Model) on `config`'s
    targets. `partitioner` is 'collage' or 'greedy' (default: the config's, where 'auto' is
    collage with several targets); `pins` maps node names or 're:<regex>' to targets. With
    `samples`, the plan is built and its accuracy recorded as in `compile`; `progress`, an
    interrupt and `executor` as in `compile`."""
    if partitioner is not None:
        options = {**options, "partitioner": partitioner}
    started = time.perf_counter()
    config = as_config(config, options, executor)
    loaded = loaded_for(model, config)
    checked = Samples.load(samples, loaded) if samples is not None else None
    report = Reporter.of(progress)
    builder = RuntimeBuilder(checked, report)
    placed = place(loaded, config, pins=pins, build=checked is not None, samples=checked,
                   tools=Tools(builder=builder, progress=report, started=started))
    builder.release()
    plan = placed.plan
    if checked is None or plan.stats.accuracy is not None:
        return plan
    built = placed.built or builder.build(loaded, config, plan)
    if not isinstance(built.runnable, CompiledModel):
        raise CompileError("the plan failed to build, so its accuracy cannot be measured: "
                           + "; ".join(f"partition {i}: {why}"
                                       for i, why in sorted(built.failures.items())))
    return with_accuracy(built.runnable, checked)


_PROBED = 2  # calibration samples an op's added error is measured on


class RuntimeBuilder:
    """Builds plans for placement's race and guard (`tessera.placement.Builder`). Within one
    compile it keeps what it compiled, so plans that share partitions (the precision
    search's) compile each partition once; `release` lets them go. `progress` follows the
    partitions it builds (the phase 'build')."""

    def __init__(self, samples: Samples | None = None,
                 progress: ProgressLike | None = None) -> None:
        self.samples = samples  # what calibrates a static int8 partition the user asked for
        self.report = Reporter.of(progress)
        # a partition is shared while some build holds it: one the race dropped goes
        self._memo: weakref.WeakValueDictionary[tuple[str, tuple[str, ...]], Compiled] = \
            weakref.WeakValueDictionary()
        self._activations: dict[str, Activations] = {}
        self._builds = 0  # since the last release: one build drops nothing when it goes

    def build(self, model: Model, config: CompilationConfig, plan: Plan,
              samples: Samples | None = None) -> Built:
        plan = assign_devices(plan, config)  # a rival plan of the race has none yet
        self._builds += 1
        policy = policy_for(config, plan)
        samples = samples if samples is not None else self.samples
        activations = None
        if samples is not None:
            count = config.options.calibration_samples
            key = f"{model.content_digest}|{samples.digest}|{count}"
            activations = self._activations.setdefault(key, Activations(model, samples, count))
        parts, failures = build_partitions(model, plan, policy,
                                           warm=config.options.compile_cache,
                                           activations=activations, memo=self._memo,
                                           progress=self.report)
        runnable = None if failures else assemble(
            model, config, plan, [p for p in parts if p is not None], policy)
        return Built(plan, tuple(parts), failures, runnable)

    def op_errors(self, model: Model, config: CompilationConfig, plan: Plan, index: int,
                  samples: Samples) -> tuple[tuple[str, float], ...]:
        from tessera.backends._sensitivity import error_added

        part = plan.partitions[index]
        backend = backends.get(part.target.kind.name)
        mask = model.node_set(part.nodes)
        count = config.options.calibration_samples
        key = f"{model.content_digest}|{samples.digest}|{count}"
        activations = self._activations.setdefault(key, Activations(model, samples, count))
        calibration = activations.for_partition(model.dataflow.boundary(mask)[0])
        # the submodel and calibration the build quantized: its quantized form is remembered
        submodel = extract_submodel(model, mask, widen_float16=widens_float16(plan))
        quantized = backend.prepare(submodel, part.target, calibration)
        if quantized is submodel:
            return ()
        return error_added(quantized, list(calibration)[:_PROBED])

    def release(self) -> None:
        # a full collection costs 0.1 s in a process holding torch or TVM: only where the
        # race or the calibration left something to hand back
        dropped = self._builds > 1 or bool(self._activations)
        self._memo.clear()
        self._activations.clear()
        self._builds = 0
        if dropped:
            trim()  # what the dropped builds held goes back to the system


def build_partitions(model: Model, plan: Plan, policy: ThreadPolicy, *, warm: bool = False,
                     activations: Activations | None = None,
                     memo: MutableMapping[tuple[str, tuple[str, ...]], Compiled] | None = None,
                     progress: ProgressLike | None = None
                     ) -> tuple[list[Compiled | None], dict[int, str]]:
    """Each partition compiled under the plan's thread policy for its device target (through
    the warm cache of compiled partitions with `warm`; None where it failed), and why the
    failed ones failed. While a backend compiles, its target and the partition's device
    target are current (`Target.current()`, `Target.current_device()`). A partition whose
    target quantizes with calibration data gets it from `activations`. The reference's own
    failure is raised: nothing can stand in for it."""
    parts: list[Compiled | None] = []
    failures: dict[int, str] = {}
    report = Reporter.of(progress)
    report.begin(Phase.BUILD, len(plan.partitions))
    for i, part in enumerate(plan.partitions):
        target = policy.apply(part.target, part.device)
        key = (str(target), part.nodes)
        shared = memo.get(key) if memo is not None else None
        if shared is not None:
            parts.append(shared)
            report.advance(Phase.BUILD, str(part.target))
            continue
        mask = model.node_set(part.nodes)
        backend = backends.get(target.kind.name)
        calibration = activations.for_partition(model.dataflow.boundary(mask)[0]) \
            if activations is not None and backend.calibrated(target) else None
        submodel = extract_submodel(model, mask, widen_float16=widens_float16(plan))
        try:
            compiled = (compile_partition(model, mask, submodel, target,
                                          calibration=calibration, device=part.device)
                        if warm else
                        backend.compile(submodel, target, check=False,
                                        calibration=calibration, device=part.device))
        except CompileError as err:
            if part.kind == FALLBACK.kind.name:
                raise
            failures[i] = f"compile failed: {first_line(err)}"
            compiled = None
        if memo is not None and compiled is not None:
            memo[key] = compiled
        parts.append(compiled)
        report.advance(Phase.BUILD, str(part.target))
    return parts, failures



def _direct(check: InputCheck, call: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
            failure: Callable[[Exception], Exception],
            checked: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
            ) -> Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]:
    """`run` of a plan whose one partition takes the model's inputs: inputs of the signature
    the check last accepted go straight to the backend's own call (it only reads them); any
    other call takes the checked path, which checks them in full. On a small model the
    Python around the backend's call is most of the cost, so this is all of it."""
    import numpy as np

    ndarray = np.ndarray

    def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        seen = check.seen  # `check.matches`, inlined: a call costs as much as the compares
        if seen is None or type(inputs) is not dict or len(inputs) != len(seen):
            return checked(inputs)
        for name, dtype, shape in seen:
            value = inputs.get(name)
            if type(value) is not ndarray or value.dtype != dtype or value.shape != shape:
                return checked(inputs)
        try:
            return call(inputs)  # a dict: its type was checked above
        except TesseraError:
            raise
        except Exception as err:
            raise failure(err) from err

    return run


def _spec(name: str, types: Mapping[str, Any], kind: ValueKind) -> TensorSpec:
    import onnx

    if not cuttable(kind):
        return TensorSpec(name, "object", None, kind)
    value_type = types.get(name)
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value_type.elem_type).name \
        if value_type is not None and value_type.elem_type else "float32"
    return TensorSpec(name, dtype, value_type.shape if value_type is not None else None)


__all__ = ["CompiledModel", "RuntimeBuilder", "Transfer", "as_config", "assemble",
           "build_partitions", "check_profile", "compile", "loaded_for", "partition",
           "plan_devices"]
