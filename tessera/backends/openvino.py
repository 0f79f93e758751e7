"""OpenVINO backend: models read from ONNX by OpenVINO's ONNX frontend, compiled for the CPU
plugin. Support for a whole model is one `Core.query_model` call (`_ov_query.py`); a node its
answer cannot be mapped back to, or that it leaves out, is probed alone: OpenVINO itself
converts and compiles that kind of node. The same answer is OpenVINO's proposal to Collage:
the connected regions the CPU plugin runs."""

from __future__ import annotations

import functools
import importlib.util
import io
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tessera._private.cores import cpu_flags
from tessera._private.text import typed_line
from tessera.backends import _deviations as dev
from tessera.backends import _ov_stateful, _quantize
from tessera.backends._answer import Support
from tessera.backends._availability import library_availability
from tessera.backends._devices import DeviceSettings, core_cap
from tessera.backends._ov_projections import split_projections
from tessera.backends._ov_query import QueryAnswer, query_model
from tessera.backends._probe import ProbedBackend
from tessera.backends._proposals import Proposal
from tessera.backends._protocol import (
    BACKENDS,
    CacheFormat,
    Compiled,
    NativeRunner,
    PolicyName,
    StatefulDecoder,
    TensorSpec,
)
from tessera.backends._threads import core_budget, threads_attr
from tessera.errors import CompileError
from tessera.ir._decoder import DecoderNames
from tessera.ir._weights import staged
from tessera.target import AttrSpec, AttrType, Target, register_kind

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import onnx

    from tessera.backends._quantize import Calibration
    from tessera.ir import Model

KIND = register_kind(
    "openvino",
    serves=("cpu",),
    aliases=("ov",),
    doc="OpenVINO runtime, CPU plugin.",
    availability=library_availability("openvino", ("openvino",), "openvino"),
    attrs=(
        threads_attr("inference threads"),
        AttrSpec("precision", AttrType.STR, "f32",
                 "f32, bf16, f16: the inference precision hint (bf16 and f16 need a CPU "
                 "with that capability); int8: the partition quantized (see -int8-recipe), "
                 "which OpenVINO runs as int8; int4: its matrix products' weights "
                 "compressed to 4 bits in groups of 128 by NNCF (needs nncf)",
                 choices=("f32", "bf16", "f16", "int8", "int4")),
        AttrSpec("int8-recipe", AttrType.STR, None,
                 "how -precision=int8 quantizes: static (default; the QDQ format, "
                 "activation ranges calibrated on sample inputs, which compile needs) or "
                 "weights (the matrix products' weights alone, 8-bit per output channel by "
                 "NNCF's compress_weights, no calibration: for parts bound by reading "
                 "weights, as a decoder's step is); dropped without -precision=int8",
                 choices=("static", "weights")),
        AttrSpec("performance-hint", AttrType.STR, "latency", "OpenVINO performance mode",
                 choices=("latency", "throughput"), runtime=True),
        AttrSpec("num-streams", AttrType.INT, 1, "parallel inference streams", minimum=1,
                 runtime=True),
        AttrSpec("cpu-pinning", AttrType.BOOL, None,
                 "pin inference threads to cores (unset: the plan's thread policy decides; "
                 "pinned threads fight the next backend's pool in a mixed plan)",
                 runtime=True),
        AttrSpec("snippets", AttrType.STR, "auto",
                 "OpenVINO's snippets (JIT code for fused subgraphs): enable, disable, or "
                 "auto: disabled for int8, OpenVINO's default otherwise (its int8 snippets "
                 "miscompute or fail to compile QDQ MatMul chains on some AVX-512 CPUs)",
                 choices=("auto", "enable", "disable")),
        AttrSpec("cache-dir", AttrType.STR, doc="compiled-blob cache directory", tuning=False),
        *_quantize.int8_attrs(),
        AttrSpec("int8-float-precision", AttrType.STR, None,
                 "int8: the precision of the ops left in float, f32 (unset) or bf16 (a CPU "
                 "with bf16)", choices=("f32", "bf16")),
        AttrSpec("dq-group-size", AttrType.INT, None,
                 "weight-only forms (-int8-recipe=weights, int4): the activations' elements "
                 "per scale when OpenVINO quantizes them at run time for int8 dot products "
                 "(unset: OpenVINO's default, 32; 0: no such quantization, float dot "
                 "products); larger groups are faster and coarser", minimum=0),
    ),
    canonicalizer=lambda attrs: _int8_only(attrs),
)


DQ_GROUP_DEFAULT = 32  # OpenVINO's DYNAMIC_QUANTIZATION_GROUP_SIZE on CPU
# the larger groups worth racing on a weight-only form: on BERT-base, ViT-B/16 and
# GPT-2-small (rows of 768) at 128-197 tokens, 256 runs 1.3x faster than 32 at cosine
# 0.9996-0.9999; a group that does not divide a row (512, 1024 there) runs unquantized
DQ_GROUP_CHOICES = (256, 128)


def _int8_only(attrs: dict[str, Any]) -> dict[str, Any]:
    """The int8 recipe's attributes only on an int8 target (one spelling, one tuning key)."""
    int8 = attrs.get("precision") == "int8"
    if not int8 or attrs.get("int8-recipe") == "static":
        attrs.pop("int8-recipe", None)  # static is the default int8 form
    weights = _recipe(attrs).form == "weights"
    _quantize.canonical_int8(attrs, int8 or weights, static=int8 and not weights)
    if not int8 or weights or attrs.get("int8-float-precision") == "f32":
        attrs.pop("int8-float-precision", None)
    if not weights or attrs.get("dq-group-size") == DQ_GROUP_DEFAULT:
        attrs.pop("dq-group-size", None)  # it acts on compressed weights alone
    return attrs


def _recipe(attrs: Mapping[str, Any]) -> _quantize.Recipe:
    """The recipe a target names: int4, and int8 with -int8-recipe=weights, are NNCF's
    weight-only forms."""
    if attrs.get("precision") == "int4" or attrs.get("int8-recipe") == "weights":
        return _quantize.Recipe("weights", bits=4 if attrs.get("precision") == "int4" else 8,
                                quantizer="nncf",
                                float_ops=tuple(attrs.get("int8-float-ops") or ()))
    return _quantize.Recipe.of(attrs)

_CAPABILITY = {"bf16": "BF16", "f16": "FP16"}
_QUANTIZED = ("int8", "int4")  # the precisions a quantizer makes
_QUERIES_KEPT = 32  # whole-model answers kept by digest: a few bytes per node each


@functools.cache
def _core() -> Any:
    import openvino as ov

    return ov.Core()


def compile_config(target: Target) -> dict[str, str]:
    """OpenVINO CPU properties from the target's attributes."""
    attrs = target.attrs
    config = {
        # a QDQ model runs as int8 by OpenVINO's own transformations; the rest stays f32
        # unless the target says bf16
        "INFERENCE_PRECISION_HINT": (attrs.get("int8-float-precision") or "f32")
        if attrs["precision"] in _QUANTIZED else attrs["precision"],
        "PERFORMANCE_HINT": attrs["performance-hint"].upper(),
        "NUM_STREAMS": str(attrs["num-streams"]),
    }
    snippets = attrs["snippets"]
    if snippets == "auto" and attrs["precision"] in _QUANTIZED:
        snippets = "disable"  # correct int8 first: enabling is an explicit choice
    if snippets != "auto":
        config["SNIPPETS_MODE"] = snippets.upper()
    if attrs["num-threads"]:
        config["INFERENCE_NUM_THREADS"] = str(attrs["num-threads"])
    if attrs.get("cpu-pinning") is not None:
        config["ENABLE_CPU_PINNING"] = "YES" if attrs["cpu-pinning"] else "NO"
    if attrs.get("cache-dir"):
        config["CACHE_DIR"] = attrs["cache-dir"]
    if attrs.get("dq-group-size") is not None:
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = str(attrs["dq-group-size"])
    return config


def _read(core: Any, submodel: onnx.ModelProto) -> Any:
    """The submodel as an OpenVINO model. One that refers to the model's weights file is read
    from a file beside it (OpenVINO resolves external data only from a model's path), and
    maps the weights rather than copying them. A form with quantized activations has its
    fused projections split (`_ov_projections`)."""
    if any(node.op_type == "QuantizeLinear" for node in submodel.graph.node):
        submodel = split_projections(submodel)
    with staged(submodel) as path:
        return core.read_model(str(path) if path is not None else submodel.SerializeToString())


def _probe(model: onnx.ModelProto, target: Target) -> None:
    core = _core()  # the CPU plugin, whatever the target's settings
    core.compile_model(core.read_model(model.SerializeToString()), "CPU",
                       {"INFERENCE_NUM_THREADS": "1"})


_REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
               "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")


def _runtime_shape(facts: dev.NodeFacts, index: int) -> tuple[int | str | None, ...] | None:
    """The shape of input `index` where it is known and not a constant."""
    if not facts.has_input(index) or facts.is_constant(index):
        return None
    value_type = facts.types.get(facts.node.input[index])
    return value_type.shape if value_type is not None else None


_PASS_THROUGH = ("Identity", "Dropout")
_DOT_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN")
MIN_FLOAT_FORM_WEIGHTS = 16_384  # below this, a float form saves less than timing noise

DEVIATIONS = (
    dev.Deviation(("*",), "the CPU plugin computes float64 as float32 (infinities saturate)",
                  dev.any_type(frozenset({dev.FLOAT64}))),
    dev.Deviation(("*",), "bfloat16 tensors come back as other types or wrong values",
                  dev.any_type(frozenset({dev.BFLOAT16}))),
    dev.Deviation(("*",), "the CPU plugin rejects float8/float4 tensors at run time",
                  dev.any_type(dev.FLOAT8)),
    dev.Deviation(("*",), "its Python runtime takes no string tensors ('Unsupported data "
                  "type: object')", dev.any_type(frozenset({dev.STRING}))),
    dev.Deviation(("BitShift",), "signed shifts saturate where ONNX wraps",
                  dev.any_type(dev.SIGNED_INTEGERS)),
    dev.Deviation(("ReduceMax", "ReduceMin"), "a row of infinities reduces to the largest "
                  "finite value, not to the infinity (masked attention rows)"),
    dev.Deviation(("TopK",), "equal values are not ordered lower index first"),
    dev.Deviation(("Hardmax",), "ties do not go to the first index (differential fuzzing: "
                  "Hardmax after Clip)"),
    dev.Deviation(("RoiAlign",), "mode=max follows an older definition",
                  lambda facts: facts.attr("mode") == "max"),
    dev.Deviation(("DynamicQuantizeLinear",), "rounds halves away from zero, not to even"),
    # with a constant scale too (1 value in 100,000 on a random input), but there QDQ models
    # are its int8 route and the guard's tolerance holds; a scale computed at run time is
    # dynamic quantization, whose answers are compared exactly
    dev.Deviation(("QuantizeLinear",), "it multiplies by 1/scale, so a value on a rounding "
                  "boundary lands one step off (dynamic quantization's expanded form)",
                  lambda facts: not facts.is_constant(1)),
    dev.Deviation(("Tile",), "repeats given at run time give zeros",
                  lambda facts: not facts.is_constant(1)),
    dev.Deviation(("NonMaxSuppression",), "boxes whose overlap equals iou_threshold are "
                  "suppressed; ONNX keeps them"),
    dev.Deviation(("Resize",), "align_corners with scales uses the rounded output length",
                  dev.resize_align_corners_with_scales),
    dev.Deviation(("Attention",), "left_window_size and nonpad_kv_seqlen are not honoured",
                  lambda facts: facts.attr("left_window_size") not in (None, -1)
                  or facts.has_input(6)),
    dev.Deviation(_REDUCE_OPS, "an empty axes tensor given at run time fails the inference",
                  lambda facts: _runtime_shape(facts, 1) == (0,)),
    dev.Deviation(("SpaceToDepth",), "mode=CRD is computed as DCR",
                  lambda facts: facts.attr("mode") == "CRD"),
    dev.Deviation(("Resize",), "antialias is not honoured",
                  lambda facts: facts.attr("antialias") == 1),
    dev.Deviation(("Resize",), "keep_aspect_ratio_policy not_larger/not_smaller gives other "
                  "output sizes (the node tests' outputs)",
                  lambda facts: facts.attr("keep_aspect_ratio_policy") not in (None, "stretch")),
    dev.Deviation(("DFT",), "an axis given at run time fails the inference",
                  lambda facts: facts.has_input(2) and not facts.is_constant(2)),
    dev.Deviation(("RNN", "GRU", "LSTM"), "the batch-major layout (layout=1) gives other "
                  "answers than ONNX's (conformance matrix, and the node tests' outputs)",
                  lambda facts: facts.attr("layout") == 1),
    dev.Deviation(("OneHot",), "negative and out-of-range indices are not handled as ONNX "
                  "defines (conformance matrix)", lambda facts: not facts.is_constant(0)),
    dev.Deviation(("Resize",), "cubic with exclude_outside=1 weighs outside samples "
                  "(conformance matrix)", lambda facts: facts.attr("mode") == "cubic"
                  and facts.attr("exclude_outside") == 1),
    dev.Deviation(("Softmax",), "at opsets 11 and 12 it normalises along the last axis, not "
                  "over the input coerced to 2-D at axis (found by differential fuzzing)",
                  lambda facts: facts.opset >= 11 and dev.flattens_before_13(facts)),
)


def _check_not_pass_through(submodel: onnx.ModelProto) -> None:
    """OpenVINO folds a model of pass-through nodes with a Dropout away and loses its input
    names at run time ('Port for tensor name x was not found'; found by the conformance
    matrix). Identity alone keeps them (the ONNX node tests)."""
    nodes = submodel.graph.node
    if nodes and all(n.op_type in _PASS_THROUGH for n in nodes) and \
            any(n.op_type == "Dropout" for n in nodes):
        raise CompileError(f"openvino cannot run a model of pass-through nodes only "
                           f"({', '.join(dict.fromkeys(n.op_type for n in nodes))}): it folds "
                           "them away and loses the input names; run them on another backend")


class OpenVinoBackend(ProbedBackend):
    kind = KIND
    per_partition_threads = True  # a compiled model's own count
    device_note = "its CPU plugin chooses its kernels for the CPU it runs on"
    in_all, rank, colour = True, 20, "#9467bd"
    external_weights = True  # its ONNX reader maps them from the model's weights file
    probe_label = "OpenVINO"
    _probe = staticmethod(_probe)
    deviations = DEVIATIONS

    def __init__(self) -> None:
        super().__init__()
        # query_model's answer per model and probed target's tuning key: by the digest of
        # the bytes a model was read from (a model read twice is asked once, as the probes'
        # cache would have it), else for as long as the model object lives
        self._queried: weakref.WeakKeyDictionary[Model, dict[str, QueryAnswer]] = \
            weakref.WeakKeyDictionary()
        self._read: dict[tuple[str, str], QueryAnswer] = {}
        self._query_lock = threading.Lock()

    def query(self, model: Model, target: Target | None = None) -> QueryAnswer:
        """query_model's verdict per node of `model` for the probed form of `target`."""
        key = self.probe_target(target).tuning_key()
        with self._query_lock:
            answers = self._queried.setdefault(model, {})
            if key not in answers:
                read = (model.source_digest, key) if model.source_digest else None
                found = self._read.get(read) if read else None
                answers[key] = found if found is not None else query_model(model, _core())
                if read is not None:
                    self._read.pop(read, None)
                    self._read[read] = answers[key]
                    while len(self._read) > _QUERIES_KEPT:
                        del self._read[next(iter(self._read))]  # the oldest
            return answers[key]

    def supports_model(self, model: Model, target: Target | None = None) -> list[Support]:
        flow, opset = model.dataflow, model.opset
        types, constants = flow.value_types, flow.constants
        answer = self.query(model, target)
        found = []
        for node, verdict in zip(flow.nodes, answer.verdicts, strict=True):
            refused = dev.first_deviation(self.deviations, self.probe_label, node, opset,
                                          types, constants)
            if refused is None:  # a Support is falsy when refused: no `or` here
                refused = self._prober.refusal(node, opset)
            if refused is not None:
                found.append(refused)
            elif verdict.runs:
                found.append(Support(True, f"OpenVINO's CPU plugin runs {node.op_type} "
                                           "(query_model on the whole model)"))
            else:  # the whole-model answer says nothing certain about it: probed alone
                probed = self.supports(node, opset, types, constants, target=target)
                found.append(Support(probed.ok, f"{probed.reason} (probed alone: "
                                                f"{verdict.note})"))
        return found

    def propose(self, model: Model, target: Target) -> list[Proposal]:
        """The connected regions of nodes query_model says the CPU plugin runs (as OpenVINO's
        own HETERO device would split the model), each of two nodes or more."""
        flow = model.dataflow
        answers = self.supports_model(model, target)
        verdicts = self.query(model, target).verdicts
        runs = [v.runs and a.ok for v, a in zip(verdicts, answers, strict=True)]
        proposals = []
        for region in _regions(flow.producers, flow.consumers, runs):
            if len(region) > 1:
                proposals.append(Proposal(
                    tuple(flow.names[i] for i in region),
                    f"OpenVINO's CPU plugin runs these {len(region)} connected nodes "
                    "(query_model on the whole model)", "query_model"))
        return proposals

    def thread_settings(self, policy: PolicyName, budget: int) -> dict[str, Any]:
        if policy is PolicyName.NATIVE:
            return {}
        # pinned OpenVINO threads slow the partitions around them
        return {"num-threads": budget, "num-streams": 1, "cpu-pinning": False}

    def device_settings(self, target: Target, device: Target) -> DeviceSettings:
        """Besides the threads, a device's `-num-cores` caps the streams: each needs a core."""
        settings = super().device_settings(target, device)
        cores = core_cap(device)
        if cores is None or target.attrs["num-streams"] <= cores:
            return settings
        note = (f"-num-streams={target.attrs['num-streams']} of openvino lowered to {cores} "
                f"by -num-cores={cores}",) if "num-streams" in target.explicit_attrs else ()
        return settings + DeviceSettings((("num-streams", cores),), note)

    # One stream runs one inference at a time: concurrent callers queue for it. With
    # several callers, as many streams (up to the cores), each with its share of the cores
    # (every calling thread has its own infer request, so the streams are used).
    # A weight-only form also races larger groups of its run-time activation quantization.
    setting_attrs = ("performance-hint", "num-streams", "num-threads", "dq-group-size")

    def setting_choices(self, target: Target, objective: str, concurrency: int
                         ) -> list[Target]:
        choices: list[Target] = []
        if _recipe(target.attrs).form == "weights":
            choices += [target.with_attrs(**{"dq-group-size": g}) for g in DQ_GROUP_CHOICES]
        streams = min(concurrency, core_budget())  # a stream needs a core of its own
        if streams > 1:
            choices.insert(0, target.with_attrs(**{"performance-hint": "throughput",
                                                   "num-streams": streams}))
        return choices

    native_import = True
    weight_only_rows = True

    def native_runner(self, model: bytes) -> NativeRunner:
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(core.read_model(model), "CPU")
        request = compiled.create_infer_request()
        return lambda feeds: request.infer(dict(feeds), share_inputs=True).to_tuple()

    def native_precision(self) -> str | None:
        precision = str(_core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name())
        return None if precision == "f32" else precision

    def prepare(self, submodel: onnx.ModelProto, target: Target,
                calibration: Calibration | None) -> onnx.ModelProto:
        if target.attrs["precision"] not in _QUANTIZED:
            return submodel
        return _quantize.quantize(submodel, _recipe(target.attrs), calibration,
                                  backend="openvino")

    def variant_suits(self, variant: Target, weights_by_op: Mapping[str, int]) -> Support:
        if _recipe(variant.attrs).form == "weights":
            return _quantize.weight_bound(variant, weights_by_op)
        # bf16 and f16 speed up the dot products of matrix products and convolutions only
        if variant.attrs["precision"] not in ("bf16", "f16"):
            return Support(True)
        dot = sum(n for op, n in weights_by_op.items() if op in _DOT_OPS)
        if dot < MIN_FLOAT_FORM_WEIGHTS:
            return Support(False, f"{variant.attrs['precision']} speeds up matrix products "
                                  f"and convolutions, and their weights here are {dot:,} "
                                  f"elements (under {MIN_FLOAT_FORM_WEIGHTS:,}): no "
                                  "measurable time to save")
        return Support(True)

    def precision_variants(self, target: Target) -> tuple[Target, ...]:
        if "precision" in target.explicit_attrs:
            return ()
        capabilities = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        wider = tuple(target.with_attrs(precision=p) for p in ("bf16", "f16")
                      if _CAPABILITY[p] in capabilities)  # where the CPU has the instructions
        int8 = tuple(target.with_attrs(precision="int8", **recipe)
                     for recipe in _quantize.recipes_for(cpu_flags()))
        weights: tuple[Target, ...] = ()
        if importlib.util.find_spec("nncf") is not None:  # OpenVINO's own quantizer too
            nncf = {"precision": "int8", "int8-quantizer": "nncf"}
            # SmoothQuant's alpha for a transformer: NNCF's default, its ViT value, and off
            int8 += tuple(target.with_attrs(**nncf, **alpha) for alpha in (
                {}, {"int8-smoothquant": _quantize.SMOOTHQUANT_ALPHA}, {"int8-smoothquant": "off"}))
            weights = (target.with_attrs(**{"precision": "int8", "int8-recipe": "weights"}),
                       target.with_attrs(precision="int4"))
        return (*int8, *wider, *weights)

    def calibrated(self, target: Target) -> bool:
        return target.attrs["precision"] == "int8" and _recipe(target.attrs).form == "static"

    def precision_form(self, target: Target) -> str | None:
        # the quantized forms are the quantizer's (`_quantize`); bf16/f16 are OpenVINO's own
        precision = target.attrs["precision"]
        return _recipe(target.attrs).form_name if precision in _QUANTIZED else (
            None if precision == "f32" else f"openvino {precision}")

    @staticmethod
    def _check_precision(target: Target) -> None:
        wanted = _CAPABILITY.get(target.attrs.get("int8-float-precision") or "") \
            if target.attrs["precision"] == "int8" else _CAPABILITY.get(target.attrs["precision"])
        capabilities = _core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        if wanted and wanted not in capabilities:
            raise CompileError(
                f"this CPU has no {wanted} support in OpenVINO; use f32 ('openvino "
                f"-precision=f32', or -int8-float-precision=f32 for int8) "
                f"(capabilities: {', '.join(capabilities)})")

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        core = _core()
        self._check_precision(target)
        _check_not_pass_through(submodel)
        model = _read(core, submodel)
        compiled = core.compile_model(model, "CPU", compile_config(target))
        return _OpenVinoCompiled(self.name, submodel, target, compiled,
                                 lambda: _read(core, submodel))

    # The warm cache is the model as OpenVINO IR: reading it maps the weights in place of
    # the ONNX frontend's conversion (BERT-base: 0.04 s instead of 2.7 s with serialising).
    warm_cache = True

    def _compile_warm(self, submodel: onnx.ModelProto, target: Target, directory: Path,
                      reuse: bool) -> Compiled:
        import openvino as ov

        core = _core()
        self._check_precision(target)
        xml = directory / "model.xml"
        if reuse:
            model = core.read_model(str(xml))
        else:
            model = _read(core, submodel)
            ov.save_model(model, str(xml), compress_to_fp16=False)
        compiled = core.compile_model(model, "CPU", compile_config(target))
        # on reuse, `submodel` is the partition before `prepare`: the entry's IR is the form
        # compiled (an evicted entry of an unquantized partition reads the submodel instead)
        exact = not reuse or target.attrs["precision"] not in _QUANTIZED

        def read() -> Any:
            if xml.is_file() or not exact:
                return core.read_model(str(xml))
            return _read(core, submodel)
        return _OpenVinoCompiled(self.name, submodel, target, compiled, read)

    # OpenVINO's exported compiled model: a serialised graph and weights, no native code.
    cache_format = CacheFormat.BLOB

    def export_cache(self, compiled: Compiled) -> bytes | None:
        assert isinstance(compiled, _OpenVinoCompiled)
        if compiled.decoder:  # loaded, it compiles its stateful form from the submodel
            return _FROM_SUBMODEL
        exported = compiled.compiled.export_model()  # a BytesIO in recent releases
        return exported.getvalue() if isinstance(exported, io.BytesIO) else bytes(exported)

    def _compile_cached(self, submodel: onnx.ModelProto, target: Target, cache: bytes
                        ) -> Compiled:
        core = _core()
        # an artifact's submodel is the form compiled (a quantized partition's prepared form)
        if DecoderNames.of_graph(submodel.graph) is not None:
            # a loaded decoder generates through its stateful form, compiled from the
            # submodel: its plain form is compiled only for `run`, so the two hold the
            # weights twice only where both are used
            config = compile_config(target)
            return _OpenVinoCompiled(
                self.name, submodel, target, None, lambda: _read(core, submodel),
                lambda: core.compile_model(_read(core, submodel), "CPU", config))
        imported = core.import_model(cache, "CPU", compile_config(target))
        return _OpenVinoCompiled(self.name, submodel, target, imported,
                                 lambda: _read(core, submodel))


# a decoder's saved "cache": loading compiles its stateful form from the submodel, and its
# plain form only if it is run (an exported model would be read whole: 0.8 GB for a 0.5B)
_FROM_SUBMODEL = b"openvino: compiled from the submodel on load"


class _PerThread(threading.local):
    """A calling thread's infer request, the inputs it shares memory with until the next
    call, and the buffers it writes its outputs into."""

    request: Any = None
    shared: dict[str, Any] | None = None
    outputs: _OutputBuffers | None = None


class _Buffer:
    """An output buffer and the OpenVINO tensor over its memory; `free_at`: its reference
    count (as `sys.getrefcount` reads it) when nothing outside holds it."""

    __slots__ = ("array", "free_at", "tensor")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        import sys

        import numpy as np
        from openvino import Tensor

        self.array = np.empty(shape, dtype)
        self.tensor = Tensor(self.array, shared_memory=True)
        self.free_at = sys.getrefcount(self.array)


class _OutputBuffers:
    """The arrays a request writes its outputs into, so that an output is not copied out of
    OpenVINO's memory after each call (GPT-2-small's logits, 25 MB at 128 tokens: 4-6 ms of
    a 27-33 ms call). A buffer is written again only once nothing outside holds it (an
    array's views and exports hold it too), so an output handed out stays as it was; two
    per output serve the usual loop that holds one result while asking for the next."""

    KEPT = 2

    def __init__(self, specs: list[tuple[tuple[int, ...], Any]]):
        self._specs = specs
        self._kept: list[list[_Buffer]] = [[] for _ in specs]
        self._bound: list[_Buffer | None] = [None] * len(specs)

    def bind(self, request: Any) -> list[np.ndarray]:
        """The arrays this call's outputs are written into, each bound to `request`."""
        import sys

        arrays = []
        for index, (shape, dtype) in enumerate(self._specs):
            kept = self._kept[index]
            chosen = next((b for b in kept if sys.getrefcount(b.array) <= b.free_at), None)
            if chosen is None:
                chosen = _Buffer(shape, dtype)
                if len(kept) < self.KEPT:
                    kept.append(chosen)
            if self._bound[index] is not chosen:
                request.set_output_tensor(index, chosen.tensor)
                self._bound[index] = chosen
            arrays.append(chosen.array)
        return arrays

    @staticmethod
    def specs_of(compiled: Any) -> list[tuple[tuple[int, ...], Any]] | None:
        """Each output's static shape and numeric type, or None where one has no fixed
        shape or no plain numeric type (those come back as OpenVINO returns them)."""
        specs = []
        try:
            for output in compiled.outputs:
                shape = output.get_partial_shape()
                dtype = output.get_element_type().to_dtype()
                if not shape.is_static or dtype.kind not in "fiu":
                    return None
                specs.append((tuple(shape.to_shape()), dtype))
        except Exception:  # a type with no numpy twin
            return None
        return specs


class _OpenVinoCompiled(Compiled):
    """A compiled partition (`compiled`, the `openvino.CompiledModel`); `read` reads the
    model it was compiled from again, for its stateful form (`stateful_decoder`). It holds
    the submodel, a skeleton whose weights are references into the model's weights file."""

    def __init__(self, backend: str, model: onnx.ModelProto, target: Target,
                 compiled: Any | None, read: Callable[[], Any],
                 compile_later: Callable[[], Any] | None = None):
        super().__init__(backend, model, target)
        self._compiled = compiled
        self._compile_later = compile_later  # where `compiled` is None: made on first use
        self._compiled_lock = threading.Lock()
        self._reread = read
        self._stateful: dict[tuple[Any, ...], StatefulDecoder] = {}
        self._stateful_lock = threading.Lock()
        self.decoder = DecoderNames.of_graph(model.graph) is not None
        self._model = model  # a skeleton: its weights stay in the model's weights file
        import numpy as np

        self._names = [o.name for o in self.outputs]
        self._dtypes = [np.dtype(o.dtype) for o in self.outputs]  # compared per run: no .name
        self._local = _PerThread()
        # outputs already of the declared types need no per-run check: after an inference
        # evicted the interpreter's caches, that check alone cost ~5 us (bert-tiny: 2.5%)
        self._exact = compiled is not None and _declared_types(compiled, self._dtypes)
        self._infer = self._make_infer() if compiled is not None else self._first_infer

    @property
    def compiled(self) -> Any:
        """The `openvino.CompiledModel`, compiled here on first use where it was deferred."""
        if self._compiled is None:
            with self._compiled_lock:
                if self._compiled is None:
                    assert self._compile_later is not None
                    try:
                        self._compiled = self._compile_later()
                    except Exception as err:
                        raise CompileError(f"openvino could not compile the partition: "
                                           f"{typed_line(err)}") from err
        return self._compiled

    def prepared_form(self) -> onnx.ModelProto | None:
        """The form an artifact keeps: at f16, the weights of products stored in f16
        (`half_weights`; made only here, not for each build of a search): loading it reads
        half the bytes, and the answers are the same."""
        found = super().prepared_form()
        if found is None and self.target.attrs["precision"] == "f16":
            from tessera.backends._half_weights import half_weights

            return half_weights(self._model, _DOT_OPS)
        return found

    def _first_infer(self, feeds: dict[str, np.ndarray]) -> Any:
        self.compiled  # noqa: B018 (compiled once, under its lock)
        self._infer = self._make_infer()
        return self._infer(feeds)

    def stateful_decoder(self, cache: Mapping[str, str], tokens: str, logits: str
                         ) -> StatefulDecoder | None:
        """This partition with its key/value cache as OpenVINO state (`_ov_stateful`),
        compiled once per `cache` with the partition's own properties (`compile_config` of
        its target: threads, precision hint)."""
        inputs = {spec.name for spec in self.inputs}
        outputs = {spec.name for spec in self.outputs}
        if not cache or tokens not in inputs or logits not in outputs or \
                not set(cache) <= inputs or not set(cache.values()) <= outputs:
            return None
        key = (tuple(sorted(cache.items())), tokens, logits)
        with self._stateful_lock:
            found = self._stateful.get(key)
            if found is None:
                found = self._stateful[key] = _ov_stateful.build(
                    self._reread, _core(), compile_config(self.target), cache, tokens, logits,
                    self.failure, _numpy_aliases())
        return found

    def direct_call(self) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None:
        if not self._exact:
            return None
        names, infer = self._names, self._infer
        return lambda feeds: dict(zip(names, infer(feeds), strict=False))

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self._infer(feeds)
        if self._exact:
            return dict(zip(self._names, results, strict=False))  # equal by construction
        return {name: _as_expected(value, dtype)
                for name, value, dtype in zip(self._names, results, self._dtypes, strict=True)}

    def _make_infer(self) -> Callable[[dict[str, np.ndarray]], Any]:
        """The outputs' values for checked feeds, zero-copy on the inputs (below OpenVINO's
        input dispatch where every array can be shared as it is) and, where their shapes and
        types are fixed, on the outputs (`_OutputBuffers`)."""
        import numpy as np

        local, compiled = self._local, self.compiled
        lean = _lean_infer(compiled, self.inputs)
        declared = {spec.name: np.dtype(spec.dtype) for spec in self.inputs}
        aliases = _numpy_aliases()
        # outputs written in place need the declared types (no conversion after the call)
        specs = _OutputBuffers.specs_of(compiled) if self._exact else None

        def infer(feeds: dict[str, np.ndarray]) -> Any:
            request = local.request
            if request is None:
                request = local.request = compiled.create_infer_request()
            arrays = None
            if specs is not None:
                if local.outputs is None:
                    local.outputs = _OutputBuffers(specs)
                arrays = local.outputs.bind(request)  # what this call writes into
            if lean is not None:
                call, tensor = lean
                shared = {}
                for name, value in feeds.items():
                    if value.dtype.char in aliases:
                        value = value.view(aliases[value.dtype.char])
                    flags = value.flags
                    if not (flags.c_contiguous and flags.writeable) or not value.ndim or \
                            value.dtype != declared.get(name):
                        break  # OpenVINO's own dispatch copies or converts these
                    shared[name] = tensor(value, shared_memory=True)
                else:
                    # the request keeps using shared memory after the call, until the next
                    # one: held alive as OpenVINO's own dispatch holds it (request._inputs_data),
                    # or the allocator hands it on and another backend's outputs get written
                    local.shared = shared
                    results = call(request, shared, arrays is not None, True)
                    return arrays if arrays is not None else results.values()
            results = request.infer({n: v.view(aliases[v.dtype.char])
                                     if isinstance(v, np.ndarray) and v.dtype.char in aliases
                                     else v for n, v in feeds.items()},
                                    share_inputs=True, share_outputs=arrays is not None)
            return arrays if arrays is not None else results.to_tuple()

        return infer


@functools.cache
def _numpy_aliases() -> dict[str, Any]:
    """numpy's second names for 64-bit integers ('q', long long, where int64 is 'l'), which
    ONNX Runtime's outputs carry and OpenVINO's Python takes for no type ('Unsupported data
    type: int64'): each maps to the name OpenVINO knows, viewed without a copy."""
    import numpy as np

    aliases: dict[str, Any] = {}
    for alias, name in ((np.longlong, "int64"), (np.ulonglong, "uint64")):
        if np.dtype(alias).char != np.dtype(name).char:
            aliases[np.dtype(alias).char] = np.dtype(name)
    return aliases



def _regions(producers: list[list[int]], consumers: list[list[int]], chosen: list[bool]
             ) -> list[list[int]]:
    """The connected components of the chosen nodes, each in ascending (topological) order,
    by their lowest node."""
    seen = [False] * len(chosen)
    regions = []
    for start, wanted in enumerate(chosen):
        if not wanted or seen[start]:
            continue
        seen[start] = True
        region, stack = [], [start]
        while stack:
            i = stack.pop()
            region.append(i)
            for j in (*producers[i], *consumers[i]):
                if chosen[j] and not seen[j]:
                    seen[j] = True
                    stack.append(j)
        regions.append(sorted(region))
    return regions


def _lean_infer(compiled: Any, inputs: list[TensorSpec]) -> tuple[Any, Any] | None:
    """The inference call below OpenVINO's Python input dispatch, and its Tensor type, where
    every input is a plain numeric tensor of the declared type: inputs already checked need
    no dispatch, which costs more than the inference of a small model (an MLP: ~20 us of
    ~70). None where the dispatch's conversions may be needed, or this OpenVINO lacks it."""
    import numpy as np

    try:
        from openvino import Tensor
        from openvino._pyopenvino import InferRequest

        infer = InferRequest.infer
        ports = {port.get_any_name(): port.get_element_type() for port in compiled.inputs}
        for spec in inputs:
            kind = ports.get(spec.name)
            if kind is None or kind.get_type_name() in ("string", "bf16") or \
                    kind.to_dtype() != np.dtype(spec.dtype):
                return None
    except Exception:  # an OpenVINO without these names: its own dispatch
        return None
    return infer, Tensor


def _declared_types(compiled: Any, dtypes: list[np.dtype[Any]]) -> bool:
    """Whether every output of `compiled` comes back as the numpy type the model declares."""
    try:
        return len(compiled.outputs) == len(dtypes) and all(
            output.get_element_type().to_dtype() == dtype
            for output, dtype in zip(compiled.outputs, dtypes, strict=True))
    except Exception:  # a type with no numpy twin (dynamic, string): check every run
        return False


def _as_expected(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """OpenVINO may hand back a narrower type than the model declares (i32 for i64)."""
    import numpy as np

    array = np.asarray(value)
    return array if array.dtype == dtype else array.astype(dtype)


BACKEND = BACKENDS.register("openvino", OpenVinoBackend())
