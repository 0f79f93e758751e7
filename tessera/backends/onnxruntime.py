"""ONNX Runtime backend: the CPU execution provider, and CUDA with the onnxruntime-gpu build."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tessera._private.cores import cpu_flags
from tessera.backends import _deviations as dev
from tessera.backends import _quantize
from tessera.backends._availability import library_availability
from tessera.backends._protocol import (
    BACKENDS,
    Backend,
    CacheFormat,
    Compiled,
    Constants,
    NativeRunner,
    PolicyName,
    StatefulDecoder,
    Support,
    ValueTypes,
)
from tessera.backends._schema import input_type_strings, standard_schema
from tessera.backends._threads import core_budget, threads_attr
from tessera.errors import BackendUnavailableError, CompileError
from tessera.ir import _dtypes as dtypes
from tessera.ir import inline_weights
from tessera.ir._weights import directory_of
from tessera.target import AttrSpec, AttrType, Availability, Target, register_kind

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import onnx

    from tessera.backends._quantize import Calibration


def _canonicalize(attrs: dict[str, Any]) -> dict[str, Any]:
    """fp32 is the unset precision; an int8 target always names its recipe, and a float one
    none (it changes nothing there, so the two spellings are one target and one tuning key)."""
    if attrs.get("precision") == "fp32":
        del attrs["precision"]
    int8 = attrs.get("precision") == "int8"
    if int8:
        attrs.setdefault("int8-recipe", "static")
    else:
        attrs.pop("int8-recipe", None)
    _quantize.canonical_int8(attrs, int8 or attrs.get("precision") == "int4",
                             static=int8 and attrs.get("int8-recipe") == "static")
    if _recipe(attrs).form != "weights":
        attrs.pop("matmul-accuracy", None)  # MatMulNBits' alone
    return attrs


def _accuracy_level(value: int) -> str | None:
    return None if value <= 4 else f"{value} is not a MatMulNBits accuracy level (0-4)"


def _recipe(attrs: Mapping[str, Any]) -> _quantize.Recipe:
    """The quantizer's recipe a target's attributes name: int4 is weight-only by nature."""
    if attrs.get("precision") == "int4":
        return _quantize.Recipe("weights", bits=4, accuracy_level=attrs.get("matmul-accuracy"),
                                float_ops=tuple(attrs.get("int8-float-ops") or ()))
    recipe = attrs.get("int8-recipe")
    if recipe == "weights":
        return _quantize.Recipe("weights", accuracy_level=attrs.get("matmul-accuracy"),
                                float_ops=tuple(attrs.get("int8-float-ops") or ()))
    return _quantize.Recipe.of(attrs, "dynamic" if recipe == "dynamic" else "static")


KIND = register_kind(
    "onnxruntime",
    serves=("cpu", "cuda"),
    aliases=("ort",),
    doc="ONNX Runtime sessions (CPU EP; CUDA EP with onnxruntime-gpu).",
    availability=library_availability("onnxruntime", ("onnxruntime", "onnxruntime-gpu"), "all"),
    attrs=(
        AttrSpec("opt-level", AttrType.STR, "all", "graph optimisation level",
                 choices=("disable", "basic", "extended", "all")),
        threads_attr("intra-op threads"),
        AttrSpec("spinning", AttrType.BOOL, None,
                 "let idle pool threads spin (unset: the plan's thread policy decides)",
                 runtime=True),
        AttrSpec("spin-stop", AttrType.BOOL, None,
                 "stop the pool spinning as soon as a run returns, so the next partition "
                 "gets the cores (unset: the plan's thread policy decides)", runtime=True),
        AttrSpec("execution-mode", AttrType.STR, "sequential", "operator scheduling",
                 choices=("sequential", "parallel"), runtime=True),
        AttrSpec("precision", AttrType.STR, None, choices=("fp32", "int8", "int4"), doc=(
            "fp32 (unset: the model's own types), int8 (ONNX Runtime's quantizer: see "
            "-int8-recipe) or int4 (MatMul weights only, 4-bit blocks as MatMulNBits)")),
        AttrSpec("int8-recipe", AttrType.STR, None,
                 "how -precision=int8 quantizes: static (default; QDQ format, activation "
                 "ranges calibrated on sample inputs, which compile needs; suits "
                 "convolutions) or dynamic (int8 weights, activations quantized at run "
                 "time, no calibration; suits MatMul/Gemm-heavy parts such as transformers) "
                 "or weights (MatMul weights only, 8-bit blocks as MatMulNBits); dropped "
                 "without -precision=int8",
                 choices=("static", "dynamic", "weights")),
        AttrSpec("matmul-accuracy", AttrType.INT, None,
                 "weight-only forms: MatMulNBits' accuracy level, 0-4 (4: int8 dot products, "
                 "fastest with VNNI or AMX; unset: ONNX Runtime's default)",
                 minimum=0, check=_accuracy_level),
        *_quantize.int8_attrs(),
    ),
    canonicalizer=_canonicalize,
)


# -- support table and compile --------------------------------------------------------------
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
               "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


@functools.cache
def _kernels(provider: str) -> dict[tuple[str, str], list[tuple[int, int, dict[str, list[str]]]]]:
    """ORT's own kernel registry for one execution provider: (domain, op) -> version ranges
    and type constraints. This is what makes `supports` honest."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

    table: dict[tuple[str, str], list[tuple[int, int, dict[str, list[str]]]]] = {}
    for kernel in ort_state.get_all_opkernel_def():
        if kernel.provider == provider:
            start, end = kernel.version_range
            table.setdefault((kernel.domain, kernel.op_name), []).append(
                (start, end, dict(kernel.type_constraints)))
    return table


_FLOAT16, _FLOAT = "tensor(float16)", "tensor(float)"

DEVIATIONS = (
    dev.Deviation(("MaxUnpool",), "output_shape is not honoured",
                  lambda facts: facts.has_input(2)),
    dev.Deviation(("Resize",), "align_corners with scales uses the rounded output length",
                  dev.resize_align_corners_with_scales),
    dev.Deviation(("Mod",), "float16 with fmod=0 fails at run time (conformance matrix)",
                  lambda facts: facts.attr("fmod") in (None, 0)
                  and dev.FLOAT16 in facts.elem_types()),
)


class OnnxRuntimeBackend(Backend):
    kind = KIND
    per_partition_threads = True  # a session's own count
    external_weights = True  # a session reads them from the model's weights file
    device_note = ("its kernels are prebuilt and choose their instructions on the CPU they "
                   "run on")
    in_all, rank, colour = True, 10, "#1f77b4"
    runs_whole_regions = True  # sequences, optionals and maps, as its own runtime does

    def supports(self, node: onnx.NodeProto, opset: int, types: ValueTypes | None = None,
                 constants: Constants | None = None, *, target: Target | None = None
                 ) -> Support:
        """Judged by the kernels of the target's execution provider (`-device=cuda`: CUDA's)."""
        refusal = dev.first_deviation(DEVIATIONS, "ONNX Runtime", node, opset, types, constants)
        if refusal is not None:
            return refusal
        provider = _PROVIDERS[target.device_type if target is not None else "cpu"]
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        kernels = _kernels(provider).get((domain, node.op_type))
        if domain:
            if kernels:
                return Support(True, f"ONNX Runtime {provider} kernel {domain}.{node.op_type}")
            return Support(False, f"ONNX Runtime has no {provider} kernel for "
                                  f"{domain}.{node.op_type}")
        schema, settled = standard_schema(node, opset,
                                          "ONNX Runtime folds Constant into an initializer")
        if settled is not None:
            return settled
        if not kernels:
            if schema.has_function or schema.has_context_dependent_function:
                return Support(True, f"ONNX Runtime expands the function op {node.op_type} "
                                     "into its body")
            return Support(False, f"ONNX Runtime has no {provider} kernel for {node.op_type}")
        since = schema.since_version
        in_range = [k for k in kernels if k[0] <= since <= k[1]]
        if not in_range:
            ranges = ", ".join(f"{a}-{b}" for a, b, _ in kernels)
            return Support(False, f"ONNX Runtime has no {node.op_type} kernel for version {since} "
                                  f"(kernels cover {ranges})")
        known = input_type_strings(node, types)
        params = [p.type_str for p in schema.inputs]
        for _, _, constraints in in_range:
            if all(_allowed(constraints, params, i, t) for i, t in known.items()):
                return Support(True, f"ONNX Runtime {provider} kernel {node.op_type}-{since}")
        wanted = ", ".join(sorted(set(known.values())))
        if provider == "CPUExecutionProvider" and _FLOAT16 in known.values():
            # its InsertCastTransformer computes such a node in float32 between Casts
            widened = {i: _FLOAT if t == _FLOAT16 else t for i, t in known.items()}
            for _, _, constraints in in_range:
                if all(_allowed(constraints, params, i, t) for i, t in widened.items()):
                    return Support(True, f"ONNX Runtime computes {node.op_type}-{since} on "
                                         "float16 in float32, between Casts it inserts")
        return Support(False, f"ONNX Runtime has no {node.op_type}-{since} kernel for {wanted}")

    def device_available(self, target: Target) -> Availability:
        found = super().device_available(target)
        provider = _PROVIDERS[target.device_type]
        if not found.ok or target.device_type == "cpu":
            return found
        import onnxruntime as ort

        if provider in ort.get_available_providers():
            return found
        return Availability(False, f"ONNX Runtime here has no {provider}; install "
                                   "onnxruntime-gpu (in place of onnxruntime)")

    def prepare(self, submodel: onnx.ModelProto, target: Target,
                calibration: Calibration | None) -> onnx.ModelProto:
        if target.attrs.get("precision") not in ("int8", "int4"):
            return submodel
        return _quantize.quantize(submodel, _recipe(target.attrs), calibration,
                                  backend="onnxruntime")  # it reads the weights it needs

    def precision_variants(self, target: Target) -> tuple[Target, ...]:
        if "precision" in target.explicit_attrs or target.device_type != "cpu":
            return ()
        flags = cpu_flags()
        static = tuple(target.with_attrs(**{"precision": "int8", "int8-recipe": "static",
                                            **recipe})
                       for recipe in _quantize.recipes_for(flags))
        # MatMulNBits computes with int8 dot products at accuracy level 4: VNNI's or AMX's
        level = {"matmul-accuracy": 4} if any(
            f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8")) else {}
        weights = (target.with_attrs(**{"precision": "int8", "int8-recipe": "weights", **level}),
                   target.with_attrs(precision="int4", **level))
        return (*static, target.with_attrs(**{"precision": "int8", "int8-recipe": "dynamic"}),
                *weights)

    def calibrated(self, target: Target) -> bool:
        return target.attrs.get("int8-recipe") == "static"

    def variant_suits(self, variant: Target, weights_by_op: Mapping[str, int]) -> Support:
        if _recipe(variant.attrs).form == "weights":
            return _quantize.weight_bound(variant, weights_by_op)
        # quantize_dynamic is for MatMul/Gemm-heavy parts: it runs convolutions as
        # ConvInteger, 5-11x slower than fp32 (ResNet-50, MobileNetV2)
        if variant.attrs.get("int8-recipe") != "dynamic":
            return Support(True)
        conv = sum(n for op, n in weights_by_op.items() if op in ("Conv", "ConvTranspose"))
        total = sum(weights_by_op.values())
        if total and conv * 2 > total:
            return Support(False, f"dynamic int8 runs convolutions as ConvInteger, several "
                                  f"times slower than fp32, and {conv / total:.0%} of the "
                                  "weights are in convolutions")
        return Support(True)

    def precision_form(self, target: Target) -> str | None:
        if target.attrs.get("precision") not in ("int8", "int4"):
            return None
        return _recipe(target.attrs).form_name

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        wide, widened = widen_boundary(submodel)
        session = _session(wide.SerializeToString(), target, weights=directory_of(submodel))
        return _OrtCompiled(self.name, submodel, target, session, widened)

    def thread_settings(self, policy: PolicyName, budget: int) -> dict[str, Any]:
        if policy is PolicyName.NATIVE:  # ONNX Runtime's own default pool spins
            return {"spinning": True}
        # spin while running, stop the moment the run returns
        return {"num-threads": budget, "spinning": True, "spin-stop": True}

    # Concurrent runs of one session share its intra-op pool: with several callers, a pool
    # of each caller's share of the cores, or none at all (each caller computes on its own
    # thread). One caller: operators of independent branches run at once.
    setting_attrs = ("num-threads", "execution-mode")

    def setting_choices(self, target: Target, objective: str, concurrency: int
                         ) -> list[Target]:
        if concurrency == 1:
            return [target.with_attrs(**{"execution-mode": "parallel"})]
        counts = dict.fromkeys((1, max(1, core_budget() // concurrency)))
        return [target.with_attrs(**{"num-threads": n}) for n in counts]

    native_import = True

    def native_runner(self, model: bytes) -> NativeRunner:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4  # its failures raise, with the message
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, dict(feeds))

    # The warm cache is ONNX Runtime's own optimized model, its weights in a file beside it
    # that it maps when it loads; reloading skips the graph optimisers and the protobuf copy
    # of the weights (GPT-2-small: 0.3 s instead of 1.9 s).
    warm_cache = True

    def _compile_warm(self, submodel: onnx.ModelProto, target: Target, directory: Path,
                      reuse: bool) -> Compiled:
        wide, widened = widen_boundary(submodel)
        weights = {t.name for t in wide.graph.initializer}
        # weights listed as graph inputs (IR < 4) are inputs one may override: ONNX Runtime's
        # optimized model folds them away, so such a model is kept as it is
        plain = any(i.name in weights for i in wide.graph.input)
        path = directory / ("model.onnx" if plain else "optimized.onnx")
        if reuse:
            session = _session(str(path), target, optimized=not plain)
            _check_inputs(session, [i.name for i in wide.graph.input if i.name not in weights])
            if target.attrs.get("precision") in ("int8", "int4"):  # the entry: the int form
                return _OrtCompiled(self.name, submodel, target, session, widened, saved=path)
        elif plain:  # the entry holds its weights: its directory is not the model's
            path.write_bytes(inline_weights(wide).SerializeToString())
            session = _session(str(path), target)
        else:
            session = _session(wide.SerializeToString(), target, optimized_path=str(path),
                               external_weights="weights.bin", weights=directory_of(wide))
        return _OrtCompiled(self.name, submodel, target, session, widened)

    # ONNX Runtime's optimized model: at opt-level 'all' it holds layout choices for this CPU,
    # so an artifact reuses it only on a machine with the same fingerprint.
    cache_format = CacheFormat.ONNX

    def export_cache(self, compiled: Compiled) -> bytes | None:
        import tempfile
        from pathlib import Path

        assert isinstance(compiled, _OrtCompiled)
        with tempfile.TemporaryDirectory(prefix="tessera-ort-") as tmp:
            path = Path(tmp, "optimized.onnx")
            _session(compiled.wide_bytes, compiled.target, optimized_path=str(path),
                     weights=compiled.weights, runs=False)
            return path.read_bytes()

    def _compile_cached(self, submodel: onnx.ModelProto, target: Target, cache: bytes
                        ) -> Compiled:
        import onnx

        _, widened = widen_boundary(submodel)
        # the cache's weights may refer to a weights file (an artifact's): read from there
        weights = directory_of(onnx.load_from_string(cache))
        session = _session(cache, target, optimized=True, weights=weights)
        return _OrtCompiled(self.name, submodel, target, session, widened)


def _session(model: bytes | str, target: Target, *, optimized: bool = False,
             optimized_path: str | None = None, external_weights: str | None = None,
             weights: Path | None = None, runs: bool = True) -> Any:
    """A session of `model`; `weights` is the directory its external data resolves in,
    for a model given as bytes. A session that never `runs` (it only writes its optimized
    graph) packs no copy of its weights; one that runs must, or ONNX Runtime's MatMulNBits
    unpacks its weights on every run (a decode step of the 0.5B decoder at int8 weights:
    0.77 s instead of 0.032)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if weights is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(weights))
    level = "disable" if optimized else target.attrs["opt-level"]
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVELS[level])
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    if not runs:
        options.add_session_config_entry("session.disable_prepacking", "1")
    if external_weights:  # a file name beside `optimized_path`
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", external_weights)
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if target.attrs["num-threads"]:
        options.intra_op_num_threads = target.attrs["num-threads"]
        # the parallel mode's pool of concurrent operators keeps to the same count
        options.inter_op_num_threads = target.attrs["num-threads"]
    options.add_session_config_entry(
        "session.intra_op.allow_spinning", "1" if target.attrs.get("spinning") else "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.add_session_config_entry(
        "session.force_spinning_stop", "1" if target.attrs.get("spin-stop") else "0")
    options.execution_mode = (ort.ExecutionMode.ORT_PARALLEL
                              if target.attrs["execution-mode"] == "parallel"
                              else ort.ExecutionMode.ORT_SEQUENTIAL)
    options.log_severity_level = 4  # errors reach the user as CompileError/ExecutionError
    provider = _PROVIDERS[target.device_type]
    if provider not in ort.get_available_providers():
        raise BackendUnavailableError(
            f"ONNX Runtime here has no {provider}; install onnxruntime-gpu on a CUDA machine")
    return ort.InferenceSession(model, options, providers=[provider])


def _check_inputs(session: Any, expected: list[str]) -> None:
    unexpected = [i.name for i in session.get_inputs() if i.name not in expected]
    if unexpected:
        raise CompileError(f"the cached ONNX Runtime model asks for inputs {unexpected} the "
                           f"partition does not have (it has {expected})")


class _OrtCompiled(Compiled):
    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, session: Any,
                 widened: Mapping[str, str], *, saved: Path | None = None) -> None:
        super().__init__(backend, model, target)
        self.session = session
        self.model = model
        self._saved = saved  # the compiled form's file, where `model` is not what it ran
        self._widened = dict(widened)
        self._names = [o.name for o in self.outputs]
        self._session_names = [_WIDE_OUT + n if n in widened else n for n in self._names]
        self._dtypes = {s.name: s.dtype for s in (*self.inputs, *self.outputs)}

    @property
    def weights(self) -> Path | None:
        """Where the external data of `wide_bytes` resolves."""
        return None if self._saved is not None else directory_of(self.model)

    @property
    def wide_bytes(self) -> bytes:
        if self._saved is not None:
            import onnx

            return bytes(onnx.load_model(str(self._saved)).SerializeToString())
        return bytes(widen_boundary(self.model)[0].SerializeToString())

    def stateful_decoder(self, cache: Mapping[str, str], tokens: str, logits: str
                         ) -> StatefulDecoder | None:
        """This partition as a `StatefulDecoder` whose cache stays ONNX Runtime values
        between steps, through I/O binding (`_ort_binding`). None where it does not hold
        every pair of `cache`, or its boundary is widened (types numpy cannot exchange)."""
        import numpy as np

        from tessera.backends._ort_binding import OrtBoundDecoder
        from tessera.ir._decoder import empty_cache

        inputs = {spec.name: spec for spec in self.inputs}
        outputs = {spec.name: spec for spec in self.outputs}
        if not cache or self._widened or tokens not in inputs or logits not in outputs or \
                not set(cache) <= set(inputs) or not set(cache.values()) <= set(outputs) or \
                any(inputs[past].shape is None for past in cache):
            return None

        def empty(past: str, batch: int) -> tuple[int, ...]:
            shape = inputs[past].shape
            assert shape is not None
            return empty_cache(shape, outputs[cache[past]].shape, batch)

        return OrtBoundDecoder(self.session, cache, logits, empty,
                               {p: np.dtype(inputs[p].dtype) for p in cache}, self.failure)

    def direct_call(self) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None:
        if self._widened:
            return None
        names, run = self._names, self._session_run
        return lambda feeds: dict(zip(names, run(names, feeds), strict=False))

    @functools.cached_property
    def _session_run(self) -> Callable[[list[str], dict[str, np.ndarray]], list[np.ndarray]]:
        """The session's run for checked feeds: below its Python wrapper, whose input
        validation repeats the check already made, on the CPU EP alone (with another EP the
        wrapper falls back to the CPU when that EP fails)."""
        session = self.session
        inner = vars(session).get("_sess")  # the C session below the Python wrapper
        if inner is None or session.get_providers() != ["CPUExecutionProvider"]:
            return session.run  # type: ignore[no-any-return]
        lean = inner.run
        return lambda names, feeds: lean(names, feeds, None)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._widened:
            return dict(zip(self._names, self._session_run(self._names, feeds), strict=False))
        wide = {(_WIDE_IN + n if n in self._widened else n):
                (v.astype(self._widened[n]) if n in self._widened else v)
                for n, v in feeds.items()}
        results = self.session.run(self._session_names, wide)
        return {n: (r.astype(self._dtypes[n]) if n in self._widened else r)
                for n, r in zip(self._names, results, strict=True)}


# ONNX Runtime has kernels for these types, but its Python API cannot exchange them as numpy
# (ml_dtypes) arrays. At the boundary they travel in a wider type that holds them exactly.
_WIDER = {**dict.fromkeys((dtypes.BFLOAT16, *sorted(dtypes.FLOAT8)), dtypes.FLOAT),
          dtypes.UINT4: dtypes.UINT8, dtypes.INT4: dtypes.INT8, dtypes.UINT2: dtypes.UINT8,
          dtypes.INT2: dtypes.INT8}
_WIDE_IN, _WIDE_OUT = "tessera.wide_in/", "tessera.wide_out/"


def widen_boundary(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """`model` with narrow-typed inputs and outputs carried in a wider type through a Cast,
    and the widened names with the numpy dtype they travel in."""
    import onnx
    from onnx import helper

    weights = {t.name for t in model.graph.initializer}
    narrow = {v.name: v.type.tensor_type.elem_type
              for v in (*model.graph.input, *model.graph.output)
              if v.name not in weights and v.type.tensor_type.elem_type in _WIDER}
    if not narrow:
        return model, {}
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    graph = wide.graph
    casts_in, casts_out = [], []
    for value in graph.input:
        if value.name in narrow:
            casts_in.append(helper.make_node("Cast", [_WIDE_IN + value.name], [value.name],
                                             to=value.type.tensor_type.elem_type))
            value.name = _WIDE_IN + value.name
            value.type.tensor_type.elem_type = _WIDER[narrow[value.name[len(_WIDE_IN):]]]
    for value in graph.output:
        if value.name in narrow:
            wider = _WIDER[value.type.tensor_type.elem_type]
            casts_out.append(helper.make_node("Cast", [value.name], [_WIDE_OUT + value.name],
                                              to=wider))
            value.name = _WIDE_OUT + value.name
            value.type.tensor_type.elem_type = wider
    nodes = [*casts_in, *graph.node, *casts_out]
    del graph.node[:]
    graph.node.extend(nodes)
    return wide, {name: helper.tensor_dtype_to_np_dtype(_WIDER[t]).name
                  for name, t in narrow.items()}


def _allowed(constraints: dict[str, list[str]], params: list[str], index: int, type_str: str
             ) -> bool:
    param = params[min(index, len(params) - 1)] if params else ""
    allowed = constraints.get(param)
    return allowed is None or type_str in allowed


BACKEND = BACKENDS.register("onnxruntime", OnnxRuntimeBackend())
