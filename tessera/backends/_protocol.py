"""The backend protocol: availability, an honest per-node support table with reasons, and
compile() returning something that runs numpy inputs, whose inputs `_input_check` checks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from tessera._private.cores import core_budget
from tessera._private.registry import Registry
from tessera.backends._answer import Constants, Proposal, Support, ValueTypes
from tessera.backends._check import check_supported
from tessera.backends._input_check import InputCheck, TensorSpec, tensor_spec
from tessera.errors import (
    BackendUnavailableError,
    CompileError,
    ExecutionError,
    TesseraError,
)
from tessera.target import Availability, Target, TargetKind, kind_for_device

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import onnx

    from tessera.backends._devices import DeviceSettings
    from tessera.backends._quantize import Calibration
    from tessera.ir import Model

__all__ = ["BACKENDS", "Backend", "Compiled", "Constants", "InputCheck", "KeepsDecoderCache",
           "NativeRunner", "StatefulDecoder", "Support", "TensorSpec", "ValueTypes"]

# the whole model run by a backend's own library, as its users would call it: the model's
# outputs in its graph's order
NativeRunner = Callable[[Mapping[str, "np.ndarray"]], Sequence[Any]]


# a plan's thread policy: each backend's own fastest pool, or one shared budget of cores


class CacheFormat(StrEnum):
    """What a backend's compiled cache is, as an artifact stores it."""

    ONNX = "onnx"  # an ONNX model: its weights kept with the artifact's, and read from its
    # weights file when loaded (the model given to `compile_cached` refers to them)
    BLOB = "blob"  # opaque bytes


class PolicyName(StrEnum):
    """A thread policy as a backend applies it (`_threads.ThreadPolicy`)."""

    NATIVE = "native"  # the backend's own fastest pool settings
    SHARED = "shared"  # the whole budget of cores, one backend at a time



class Compiled:
    """A compiled submodel. `run` validates inputs, then calls the backend's `_run`.
    Backends whose runtime objects are not safe to call from several threads at once set
    `thread_safe = False`, and their runs are serialised."""

    thread_safe = True
    # what `prepare` made of the submodel, where it rewrote it (an int8 form), in memory or
    # in a warm cache entry: an artifact keeps this form, so loading it quantizes nothing
    prepared: onnx.ModelProto | None = None
    prepared_path: Path | None = None
    # the device target it was built for (`target` is the backend target specialised for it)
    device_target: Target | None = None

    def prepared_form(self) -> onnx.ModelProto | None:
        if self.prepared is None and self.prepared_path is not None:
            import onnx

            try:
                return onnx.load_model(str(self.prepared_path))
            except (OSError, ValueError):  # evicted from the cache since: none to keep
                return None
        return self.prepared

    def __init__(self, backend: str, model: onnx.ModelProto, target: Target) -> None:
        self.backend = backend
        self._lock = None if self.thread_safe else threading.Lock()
        self.target = target
        weights = {t.name for t in model.graph.initializer}
        self.inputs = [tensor_spec(v) for v in model.graph.input if v.name not in weights]
        self.outputs = [tensor_spec(v) for v in model.graph.output]
        self.node_names = [n.name or n.op_type for n in model.graph.node]

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check = self.__dict__.get("_check")
        if check is None or check.specs is not self.inputs:
            check = self._check = InputCheck(self.inputs)
        return self.run_checked(check(inputs))

    def run_checked(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`run` for feeds already checked (the executor checks once, at the model's
        boundary): backend failures still become an ExecutionError."""
        try:
            if self._lock is None:
                return self._run(feeds)
            with self._lock:
                return self._run(feeds)
        except TesseraError:
            raise
        except Exception as err:
            raise self.failure(err) from err

    def direct_call(self) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None:
        """The backend's own call on checked feeds (which it only reads) with the least
        Python around it, for a plan of this one partition: its failures are not wrapped
        (the caller turns them into `failure`). None where `_run` does more than call the
        runtime (a lock, widened types): the caller uses `run_checked`."""
        return None

    def failure(self, err: Exception) -> ExecutionError:
        """`err`, raised by the backend's runtime, as the ExecutionError naming its nodes."""
        from tessera._private.text import informative_lines

        # the informative line first: native libraries open with where they raised
        text = "\n".join(informative_lines(str(err))) or str(err)
        return ExecutionError(
            f"{self.backend} failed running nodes {self.node_names[:6]}"
            f"{' ...' if len(self.node_names) > 6 else ''}: {type(err).__name__}: {text}")

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class StatefulDecoder(Protocol):
    """A decoder whose key/value cache stays inside the backend between calls. `reset`
    empties the cache, so the next `step` is a prefill; `step` takes the new tokens' inputs
    alone (token ids, and the attention mask and position ids where the decoder has them;
    no past), gives back the logits and keeps the cache grown by the new tokens. `cache`
    says where the cache lives ("openvino state", "onnxruntime I/O binding"). Each calling
    thread has a cache of its own."""

    cache: str

    def reset(self) -> None: ...

    def step(self, feeds: Mapping[str, np.ndarray]) -> np.ndarray: ...

    def load(self, cache: Mapping[str, np.ndarray]) -> None:
        """Start the calling thread's cache from `cache` (each past input's value, as a
        prefill on another backend left it): the next `step` decodes after those tokens.
        The cache is handed over once, here."""
        ...


@runtime_checkable
class KeepsDecoderCache(Protocol):
    """A compiled partition that can run a whole decoder with its key/value cache kept
    inside the backend (OpenVINO's state; ONNX Runtime's values, through I/O binding), where
    the generic loop feeds every step's presents back as the next pasts."""

    def stateful_decoder(self, cache: Mapping[str, str], tokens: str, logits: str
                         ) -> StatefulDecoder | None:
        """This partition as a `StatefulDecoder`: `cache` maps each past input to the
        present output that gives it back one step longer, `tokens` names the token ids
        input (whose first dimension is the batch) and `logits` the output `step` gives
        back. None where the partition does not hold every pair of `cache`. Built once per
        `cache`; a backend failure is a CompileError."""
        ...


class Backend:
    """One backend. Subclasses set `kind` and implement `supports` and `_compile`; every
    other method has a default that fits a backend with nothing special to say. See
    docs/backends.md for a complete out-of-tree example."""

    kind: TargetKind

    # `-t all` takes every available backend with `in_all`, by `rank` (lower first)
    in_all = False
    # whether a compiled partition runs every size of a symbolic dimension; a backend that
    # compiles for one shape is a candidate only for models with static shapes
    dynamic_shapes = True
    rank = 100
    # the colour of this backend's partitions in placement pictures (None: a spare colour)
    colour: str | None = None
    # whether `_compile` takes a submodel whose weights are references into the model's
    # weights file (`tessera.ir.Weights`: ONNX external data, its directory named in the
    # submodel's metadata); others are handed a copy holding their submodel's weights
    external_weights = False
    # whether it runs a region kept whole (`tessera.ir` wraps the nodes around a sequence,
    # optional or map in one model-local function) when it runs each node inside
    runs_whole_regions = False

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def pip_extra(self) -> str | None:
        """tessera's pip extra that installs this backend's library, where it has one."""
        return self.is_available().extra

    def is_available(self) -> Availability:
        return self.kind.is_available()

    def device_available(self, target: Target) -> Availability:
        """Whether this machine runs `target`'s device through this backend: the device
        itself (a CUDA driver), and a backend whose build serves it (override). Placement
        refuses a device nothing here serves rather than move its nodes to another."""
        return kind_for_device(target.device_type).is_available()

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        """Whether this backend runs `node` correctly on `target` (None: the kind's default
        target), with the reason either way."""
        raise NotImplementedError

    def supports_model(self, model: Model, target: Target | None = None) -> list[Support]:
        """`supports()` for every node of `model.dataflow`, in its order. A backend that can
        judge a whole model in one call (OpenVINO's `query_model`) overrides it."""
        flow = model.dataflow
        return [self.supports(node, model.opset, flow.value_types, flow.constants,
                              target=target) for node in flow.nodes]

    def propose(self, model: Model, target: Target) -> list[Proposal]:
        """Subgraphs of `model` this backend asks to run on `target` as one partition each,
        besides what `supports()` allows node by node (none by default). Collage measures
        each as a candidate; proposers registered with `register_proposer` add to these."""
        return []

    def compile(self, submodel: onnx.ModelProto, target: Target | str | None = None, *,
                check: bool = True, calibration: Calibration | None = None,
                device: Target | str | None = None) -> Compiled:
        """`submodel` compiled for `target` on the device target `device` (None: the current
        device target, else the plain device kind): the target is specialised for the device
        (`for_device`), and while the backend compiles, `Target.current()` is that target and
        `Target.current_device()` the device. With `check`, a node that `supports()` refuses
        is a CompileError listing each one with its reason, before the backend sees it;
        tessera's own builds pass `check=False` for partitions a placement already judged.
        `calibration` (sample input dicts keyed by the submodel's input names) is what a
        target that `calibrated()` quantizes with."""
        chosen, where = self._placed(target, device)
        if check:
            check_supported(self, submodel, chosen)

        def prepared_and_compiled() -> Compiled:
            source = self._with_weights(submodel)
            prepared = self.prepare(source, chosen, calibration)
            compiled = self._compile(prepared, chosen)
            if prepared is not source:
                compiled.prepared = prepared
            return compiled

        return self._built(submodel, chosen, where, prepared_and_compiled)

    def _with_weights(self, submodel: onnx.ModelProto) -> onnx.ModelProto:
        """What `prepare` and `_compile` are given: `submodel` itself, or for a backend
        without `external_weights`, a copy holding its weights."""
        if self.external_weights:
            return submodel
        from tessera.ir import inline_weights

        return inline_weights(submodel)

    def prepare(self, submodel: onnx.ModelProto, target: Target,
                calibration: Calibration | None) -> onnx.ModelProto:
        """The model this backend compiles for `target`: `submodel` itself, or a rewritten
        form of it (an int8 form, for a target of int8 precision)."""
        return submodel

    def precision_variants(self, target: Target) -> tuple[Target, ...]:
        """Lower-precision forms of `target` that placement may choose under an accuracy
        budget (`onnxruntime -precision=int8 -int8-recipe=dynamic`, ...); none where the
        user fixed the precision or this machine cannot run them."""
        return ()

    # whether its weight-only forms run many rows at once (a prompt, a full sequence) as
    # fast as a static int8 form: OpenVINO quantizes their activations per row as it runs;
    # ONNX Runtime's MatMulNBits ran BERT-base's 128 tokens 1.3x slower than fp32
    weight_only_rows: ClassVar[bool] = False

    def calibrated(self, target: Target) -> bool:
        """Whether compiling for `target` depends on calibration data (static int8), so that
        the data belongs to the key of a kept compiled form."""
        return False

    def variant_suits(self, variant: Target, weights_by_op: Mapping[str, int]) -> Support:
        """Whether the precision variant `variant` is worth trying on a part of a model whose
        weights (elements) sit in these operators; a refusal says why."""
        return Support(True)

    def precision_form(self, target: Target) -> str | None:
        """The name of the lower-precision model `target` compiles from, the same for every
        backend that runs that model (ONNX Runtime's static QDQ form runs on ONNX Runtime
        and OpenVINO), so its accuracy judged on one holds for the other; None in fp32."""
        return None

    # -- thread policy and native baseline -----------------------------------------------
    def thread_settings(self, policy: PolicyName, budget: int) -> dict[str, Any]:
        """Target attributes the plan's thread policy sets where the user left them open:
        'native' (a plan of one partition: the backend's own fastest settings) or 'shared'
        (a mixed plan: each backend gets the `budget` of cores in turn, and no pool may keep
        spinning once its partition returns)."""
        return {"num-threads": budget} if policy is PolicyName.SHARED else {}

    # whether `native_runner` goes through the library's own ONNX entry; without one (the
    # default), the baseline is tessera's own backend, so its failures are tessera's too
    native_import = False

    def native_runner(self, model: bytes) -> NativeRunner:
        """The whole `model` run as this backend's users would run it, with no tessera in
        between: the baseline of `tessera bench`, and the library's own answer where
        tessera's fails. A backend whose library has no ONNX entry of its own (no
        `native_import`) is run by its tessera backend on the native thread policy."""
        import onnx

        target = self.with_thread_settings(Target(self.name), PolicyName.NATIVE, core_budget())
        compiled = self.compile(onnx.load_from_string(model), target, check=False)
        names = [o.name for o in compiled.outputs]

        def run(feeds: Mapping[str, np.ndarray]) -> list[Any]:
            outputs = compiled.run(feeds)
            return [outputs[name] for name in names]
        return run

    def native_precision(self) -> str | None:
        """The precision `native_runner` computes floating-point models in where that is
        not fp32 (OpenVINO's default is bf16 on a CPU that has it), else None: a native row
        in a lower precision is not the fp32 numerics tessera keeps without a budget."""
        return None

    def with_thread_settings(self, target: Target, policy: PolicyName, budget: int) -> Target:
        """`target` with what `thread_settings` asks for, where the user left it open."""
        explicit = target.explicit_attrs
        wanted = self.thread_settings(policy, budget)
        changes = {k: v for k, v in wanted.items() if k not in explicit and k in target.kind.schema}
        return target.with_attrs(**changes) if changes else target

    # -- runtime settings the end-to-end race may try -----------------------------------
    # the attributes `setting_choices` may set; a target on which the user set any of them
    # is raced as it is (so a choice's own target is always the target less these)
    setting_attrs: tuple[str, ...] = ()

    def setting_choices(self, target: Target, objective: str, concurrency: int
                         ) -> list[Target]:
        """A few choices of `target`'s runtime settings worth racing when it runs a whole
        model, for `objective` ('latency' or 'throughput') with `concurrency` callers at
        once. Each sets only `setting_attrs`; each is one more build and timing, so few."""
        return []

    # -- the device a partition runs on -------------------------------------------------
    # device attributes this backend's code generator takes, as {device attribute: its own
    # attribute} (IREE: {"mcpu": "cpu-features", ...}); it honours no others
    device_attrs: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # why it cannot honour the other code-generation attributes of a device target
    device_note = "it has no setting for it"

    def device_settings(self, target: Target, device: Target) -> DeviceSettings:
        """What `device`'s attributes ask of this backend's build of `target`: its threads
        capped by `-num-cores`, the attributes in `device_attrs` set where the user left them
        open, and a note for each device attribute not honoured (`explain` shows them)."""
        from tessera.backends._devices import default_settings

        return default_settings(self, target, device)

    def for_device(self, target: Target, device: Target | None) -> Target:
        """`target` specialised for the device target `device`: what is built."""
        if device is None:
            return target
        changes = dict(self.device_settings(target, device).attrs)
        return target.with_attrs(**changes) if changes else target

    def _placed(self, target: Target | str | None, device: Target | str | None
                ) -> tuple[Target, Target]:
        """The usable target specialised for its device target, and that device target."""
        chosen = self._usable(target)
        if device is not None:
            where = Target(device)
        else:
            current = Target.current_device()
            where = current if current is not None and \
                current.device_type == chosen.device_type else \
                Target(kind_for_device(chosen.device_type).name)
        return self.for_device(chosen, where), where

    def _built(self, submodel: onnx.ModelProto, target: Target, device: Target,
               build: Callable[[], Compiled]) -> Compiled:
        """`build()` with `target` and `device` current, its result knowing its device."""
        with target.scope(device=device):
            compiled = self._guarded(submodel, build)
        compiled.device_target = device
        return compiled

    def _usable(self, target: Target | str | None) -> Target:
        chosen = Target(target) if target is not None else Target(self.name)
        if chosen.kind != self.kind:
            raise CompileError(f"backend {self.name!r} cannot compile for target {str(chosen)!r}")
        availability = self.is_available()
        if not availability.ok:
            raise BackendUnavailableError(f"backend {self.name!r} is unavailable: "
                                          f"{availability.reason}")
        return chosen

    def _guarded(self, submodel: onnx.ModelProto, build: Callable[[], Compiled]) -> Compiled:
        """`build()`, any failure but tessera's own a CompileError naming the nodes."""
        try:
            return build()
        except TesseraError:
            raise
        except Exception as err:
            nodes = [n.name or n.op_type for n in submodel.graph.node][:6]
            raise CompileError(
                f"{self.name} failed to compile nodes {nodes}: {type(err).__name__}: "
                f"{_first_line(str(err))}"
            ) from err

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        raise NotImplementedError

    # -- compiled caches, for saved artifacts --------------------------------------------
    # A cache is what the backend itself can reload without recompiling: data only, never
    # code (no pickles, no shared libraries), since loading an artifact must not run it.
    cache_format: CacheFormat | None = None

    def export_cache(self, compiled: Compiled) -> bytes | None:
        """The compiled form of `compiled` as bytes, or None where this backend has none."""
        return None

    def compile_cached(self, submodel: onnx.ModelProto, target: Target, cache: bytes, *,
                       device: Target | str | None = None) -> Compiled:
        """`compile`, reusing a cache from `export_cache` of the same submodel and target.
        No support check: the cache is an exact earlier build of this very submodel."""
        chosen, where = self._placed(target, device)
        try:
            with chosen.scope(device=where):
                compiled = self._compile_cached(self._with_weights(submodel), chosen, cache)
        except TesseraError:
            raise
        except Exception as err:
            raise CompileError(f"{self.name} could not reload its saved compiled cache: "
                               f"{type(err).__name__}: {_first_line(str(err))}") from err
        compiled.device_target = where
        return compiled

    def _compile_cached(self, submodel: onnx.ModelProto, target: Target, cache: bytes
                        ) -> Compiled:
        return self.compile(submodel, target, check=False)

    # -- warm caches, for later compiles on this machine ---------------------------------
    # What `compile` can keep in a directory so that compiling the same submodel again skips
    # the slow steps (OpenVINO: its ONNX frontend; ONNX Runtime: serialising the model).
    warm_cache = False

    # whether `num-threads` belongs to one compiled partition (a session, a compiled model),
    # so that partitions of one plan may run on different thread counts
    per_partition_threads = False

    def compile_warm(self, submodel: onnx.ModelProto, target: Target, directory: Path,
                     reuse: bool, *, check: bool = True, calibration: Calibration | None = None,
                     device: Target | str | None = None) -> Compiled:
        """`compile`, reusing what an earlier call left in `directory` (`reuse`), or else
        leaving it there (a fresh directory the caller publishes once this returns). What is
        left is the compiled form of what `prepare` made, so a reuse prepares nothing."""
        chosen, where = self._placed(target, device)
        if not self.warm_cache:
            return self.compile(submodel, chosen, check=check, calibration=calibration,
                                device=where)
        if check:
            check_supported(self, submodel, chosen)

        def prepared_and_compiled() -> Compiled:
            source = self._with_weights(submodel)
            if reuse:
                compiled = self._compile_warm(source, chosen, directory, reuse)
                if (directory / _PREPARED).is_file():
                    compiled.prepared_path = directory / _PREPARED
                return compiled
            prepared = self.prepare(source, chosen, calibration)
            compiled = self._compile_warm(prepared, chosen, directory, reuse)
            if prepared is not source:  # kept, so an artifact can hold this form
                (directory / _PREPARED).write_bytes(prepared.SerializeToString())
                compiled.prepared = prepared
            return compiled

        return self._built(submodel, chosen, where, prepared_and_compiled)

    def _compile_warm(self, submodel: onnx.ModelProto, target: Target, directory: Path,
                      reuse: bool) -> Compiled:
        """On `reuse`, `submodel` is the partition as given, not what `prepare` made of it:
        the compiled form is read from `directory`."""
        raise NotImplementedError


_PREPARED = "prepared.onnx"
BACKENDS: Registry[Backend] = Registry("backend")


def _first_line(text: str) -> str:
    from tessera._private.text import first_line

    return first_line(text, 100_000) if text.strip() else text
