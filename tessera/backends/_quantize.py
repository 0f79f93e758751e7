"""int8 forms of a partition, made with ONNX Runtime's quantizer: `dynamic` (int8 weights,
activations quantized at run time; pays off on MatMul/Gemm-heavy parts) and `static` (the QDQ
format, activation ranges calibrated on sample inputs; ONNX Runtime and OpenVINO both run it
as int8; also made by NNCF, `_nncf.py`), with chosen nodes kept in float. Quantizing works
on a copy in a temporary directory that is always removed, and the quantizer writes nowhere
else (`_contained`)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tessera.backends._answer import Support
from tessera.errors import CompileError
from tessera.target import AttrSpec, AttrType, Target

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["COMPUTE_OPS", "Calibration", "DigestedCalibration", "Form", "Recipe",
           "calibration_digest", "canonical_int8", "int8_attrs", "is_quantized", "model_digest",
           "quantize", "recipes_for", "weight_bound"]

Form = Literal["dynamic", "static", "weights"]


Ops = Literal["auto", "all", "compute"]
# the ops whose int8 kernels save time; the rest (Add, Mul, Softmax, LayerNormalization...)
# only add quantization error where they are quantized too (ViT-B/16: cosine 0.970 with every
# op in QDQ form, 0.9988 with these alone)
COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class Recipe:
    """How a partition is quantized: the form (`static`: QDQ with activation ranges
    calibrated on samples; `dynamic`: int8 weights, activations quantized at run time), and
    for the static form, the activations' type (s8 or u8: OpenVINO on AMX compiles only u8),
    whether their ranges are symmetric, whether weights are quantized per output channel,
    how ranges are calibrated (min-max, a percentile, or entropy), which ops are quantized
    (`compute`: the matrix products and convolutions; `all`: every op the quantizer knows;
    `auto`: compute where the part has attention, a Softmax, else all), and the quantizer
    (ONNX Runtime's, or NNCF's with its `preset` and SmoothQuant alpha, "off" or a number).
    `weights`: only MatMul weights quantized, to `bits` (8 or 4) in blocks, as ONNX
    Runtime's MatMulNBits, which computes at its `accuracy_level` (4: int8 dot products;
    None: its default). In every form, the nodes named in `float_ops` stay in float (the
    op-level mix the precision search finds)."""

    form: Form = "static"
    activations: Literal["s8", "u8"] = "s8"
    symmetric: bool = False
    per_channel: bool = False
    calibration: Literal["minmax", "percentile", "entropy"] = "minmax"
    bits: int = 8
    accuracy_level: int | None = None
    ops: Ops = "auto"
    quantizer: Literal["ort", "nncf"] = "ort"
    preset: Literal["performance", "mixed"] = "performance"
    smoothquant: str | None = None
    float_ops: tuple[str, ...] = ()

    @classmethod
    def of(cls, attrs: Mapping[str, Any], form: Form = "static") -> Recipe:
        """The recipe a target's attributes name (those of `int8_attrs`)."""
        return cls(form, attrs.get("int8-activations") or "s8",
                   bool(attrs.get("int8-symmetric")), bool(attrs.get("int8-per-channel")),
                   attrs.get("int8-calibration") or "minmax",
                   ops=attrs.get("int8-ops") or "auto",
                   quantizer=attrs.get("int8-quantizer") or "ort",
                   preset=attrs.get("int8-preset") or "performance",
                   smoothquant=attrs.get("int8-smoothquant"),
                   float_ops=tuple(attrs.get("int8-float-ops") or ()))

    @property
    def form_name(self) -> str:
        """The name of the quantized model: the same for every backend that runs it."""
        return f"{'nncf' if self.quantizer == 'nncf' else 'onnxruntime'}-quantizer {self}"

    def __str__(self) -> str:
        """The form, then what differs from the defaults: 'static', 'static u8 symmetric'."""
        mixed = [f"{len(self.float_ops)} op(s) in float"] if self.float_ops else []
        if self.form == "dynamic":
            return " ".join(["dynamic", *mixed])
        if self.form == "weights":
            level = f" accuracy {self.accuracy_level}" if self.accuracy_level is not None else ""
            return " ".join([f"weights {self.bits}-bit{level}", *mixed])
        if self.quantizer == "nncf":
            changed = ["nncf", self.preset if self.preset != "performance" else "",
                       f"smoothquant {self.smoothquant}" if self.smoothquant else ""]
        else:
            changed = [self.activations if self.activations != "s8" else "",
                       "symmetric" if self.symmetric else "",
                       "per-channel" if self.per_channel else "",
                       self.calibration if self.calibration != "minmax" else ""]
        changed.append(f"{self.ops} ops" if self.ops != "auto" else "")
        return " ".join(["static", *(c for c in changed if c), *mixed])


def _alpha(value: str) -> str | None:
    if value == "off":
        return None
    try:
        alpha = float(value)
    except ValueError:
        alpha = -1.0
    return None if 0.0 <= alpha <= 1.0 else (
        f"{value!r} is not a SmoothQuant alpha: give off or a number in [0, 1]")


def int8_attrs() -> tuple[AttrSpec, ...]:
    """The int8 recipe's attributes, declared alike by every backend that runs the QDQ form
    (unset: s8 asymmetric per-tensor min-max by ONNX Runtime's quantizer). Each enters the
    tuning key: it changes the code."""
    return (
        AttrSpec("int8-quantizer", AttrType.STR, None,
                 "static int8: the quantizer, ort (unset: ONNX Runtime's) or nncf (NNCF's, "
                 "with its transformer preset where the part has attention)",
                 choices=("ort", "nncf")),
        AttrSpec("int8-activations", AttrType.STR, None,
                 "static int8 by ort: the activations' type, s8 (unset) or u8",
                 choices=("s8", "u8")),
        AttrSpec("int8-symmetric", AttrType.BOOL, None,
                 "static int8 by ort: symmetric activation ranges (unset: asymmetric)"),
        AttrSpec("int8-per-channel", AttrType.BOOL, None,
                 "static int8 by ort: weights quantized per output channel (unset: per "
                 "tensor)"),
        AttrSpec("int8-calibration", AttrType.STR, None,
                 "static int8 by ort: how activation ranges are calibrated, minmax (unset), "
                 "percentile or entropy", choices=("minmax", "percentile", "entropy")),
        AttrSpec("int8-ops", AttrType.STR, None,
                 "static int8: the ops quantized, compute (matrix products and "
                 "convolutions), all (every op the quantizer knows) or auto (unset: compute "
                 "where the part has a Softmax, else all)", choices=("auto", "all", "compute")),
        AttrSpec("int8-preset", AttrType.STR, None,
                 "static int8 by nncf: its preset, performance (unset) or mixed",
                 choices=("performance", "mixed")),
        AttrSpec("int8-smoothquant", AttrType.STR, None,
                 "static int8 by nncf: the SmoothQuant alpha, off or a number in [0, 1] "
                 "(unset: NNCF's default for the model type)", check=_alpha),
        AttrSpec("int8-float-ops", AttrType.STR_LIST, None,
                 "int8: the nodes (by name) kept in float, the rest quantized"),
    )


SMOOTHQUANT_ALPHA = "0.15"  # NNCF's published alpha for ViT-B/16, and the suite's best

_ORT_ONLY = ("int8-activations", "int8-symmetric", "int8-per-channel", "int8-calibration")
_NNCF_ONLY = ("int8-preset", "int8-smoothquant")
_DEFAULTS: dict[str, Any] = {
    "int8-quantizer": "ort", "int8-activations": "s8", "int8-symmetric": False,
    "int8-per-channel": False, "int8-calibration": "minmax", "int8-ops": "auto",
    "int8-preset": "performance", "int8-float-ops": (), "int8-smoothquant": None}


def recipes_for(flags: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The static recipes worth trying on a CPU with these instruction-set flags, as
    target attributes: OpenVINO on AMX compiles QDQ models only with u8 activations, so
    there u8 asymmetric comes first; elsewhere ONNX Runtime's s8 default."""
    u8: dict[str, Any] = {"int8-activations": "u8"}
    return (u8, {}) if "amx_int8" in flags else ({},)


def canonical_int8(attrs: dict[str, Any], int8: bool, static: bool | None = None) -> None:
    """The recipe's attributes dropped where they change nothing (not int8, a form or
    quantizer they do not apply to), and a default value never spelled (one target, one
    tuning key). `static`: whether the int8 form is the static one (default: `int8`)."""
    static = int8 if static is None else static
    nncf = attrs.get("int8-quantizer") == "nncf"
    for spec in int8_attrs():
        name = spec.name
        applies = int8 and (static or name == "int8-float-ops") and not (
            (nncf and name in _ORT_ONLY) or (not nncf and name in _NNCF_ONLY))
        value = attrs.get(name)
        if not applies or value is None or value == _DEFAULTS[name] or (
                isinstance(value, (list, tuple)) and not value):
            attrs.pop(name, None)
    if "int8-float-ops" in attrs:  # one order, one key
        attrs["int8-float-ops"] = tuple(sorted(dict.fromkeys(attrs["int8-float-ops"])))


# sample inputs of a submodel: one dict per sample, arrays keyed by the submodel's input names
Calibration = Sequence[Mapping[str, "np.ndarray"]]


class DigestedCalibration(Sequence[Mapping[str, "np.ndarray"]]):
    """Calibration samples that carry their own `digest`, so a cache key of the form
    calibrated on them needs no reading of them (samples computed only when read)."""

    digest: str


def quantize(submodel: onnx.ModelProto, recipe: Recipe, calibration: Calibration | None, *,
             backend: str) -> onnx.ModelProto:
    """`submodel` quantized to int8 by `recipe`. Static needs `calibration`; a quantizer
    failure is a CompileError naming `backend` and the recipe."""
    if is_quantized(submodel):  # already an int8 form (an artifact keeps that form)
        return submodel
    key = _memo_key(submodel, recipe, calibration)
    if key in _MEMO:  # ONNX Runtime and OpenVINO run the same QDQ form: quantize it once
        _MEMO.move_to_end(key)
        return _MEMO[key]
    if recipe.form == "static" and recipe.float_ops:
        # a mix is the whole form with some ops reading float again: each mix the search
        # tries costs a build, not a quantization (NNCF's: 10-25 s on the suite's transformers)
        whole = quantize(submodel, replace(recipe, float_ops=()), calibration, backend=backend)
        quantized = with_float_ops(whole, submodel, recipe.float_ops)
    else:
        samples = _checked_samples(submodel, recipe, calibration, backend) \
            if recipe.form == "static" else []
        quantized = _quantize(submodel, recipe, samples, backend)
    _MEMO[key] = quantized
    while len(_MEMO) > 1 and sum(_weight_bytes(m) for m in _MEMO.values()) > _MEMO_BYTES:
        _MEMO.popitem(last=False)
    return quantized


# ops only a quantized model holds
_INT8_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
             "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul",
             "MatMulNBits")
_BLOCK = 32  # weights per scale in the weight-only form: finer blocks keep more accuracy
_MEMO: OrderedDict[tuple[str, str, str], onnx.ModelProto] = OrderedDict()


def _weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of a model's weights, without serialising it: ByteSize walks the whole
    proto (1.2 s on GPT-2-small), and the memo is summed after every quantize."""
    return sum(len(t.raw_data) or 4 * (len(t.float_data) + len(t.int32_data))
               for t in model.graph.initializer)
# the forms last quantized, kept while they fit (int8 weights: a quarter of fp32's): a
# precision search builds each form again in its final race, and NNCF's takes 20-40 s
_MEMO_BYTES = 1 << 30


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(node.op_type in _INT8_OPS for node in model.graph.node)


def _memo_key(submodel: onnx.ModelProto, recipe: Recipe, calibration: Calibration | None
              ) -> tuple[str, str, str]:
    return (model_digest(submodel), repr(recipe),
            calibration_digest(calibration) if recipe.form == "static" else "")


def model_digest(model: onnx.ModelProto) -> str:
    """A digest of `model`: its graph without the weights serialised, then each weight's
    bytes hashed as they are (serialising GPT-2-small whole to hash it took 2.5 s); a weight
    kept in the model's weights file by where it is there (the file's name is its
    content's key)."""
    from tessera.ir._external import directory_of

    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(str(directory_of(model)).encode())
    graph = model.graph
    skeleton = type(graph)(name=graph.name)
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(skeleton, field).extend(getattr(graph, field))
    digest.update(skeleton.SerializeToString(deterministic=True))
    for opset in model.opset_import:
        digest.update(f"\x00{opset.domain}:{opset.version}".encode())
    for weight in graph.initializer:
        digest.update(f"\x00{weight.name}\x00{weight.data_type}\x00{list(weight.dims)}"
                      f"\x00{weight.data_location}".encode())
        if weight.raw_data:
            digest.update(weight.raw_data)
        else:  # typed fields or external data: small, or a location that names the bytes
            bare = type(weight)()
            bare.CopyFrom(weight)
            digest.update(bare.SerializeToString(deterministic=True))
    return digest.hexdigest()


def _quantize(submodel: onnx.ModelProto, recipe: Recipe, samples: list[dict[str, np.ndarray]],
              backend: str) -> onnx.ModelProto:
    import onnx

    try:
        from onnxruntime import quantization as q
    except ImportError as err:
        raise CompileError(f"{backend} int8 ({recipe}) quantizes with ONNX Runtime, which is "
                           "not installed: pip install onnxruntime") from err
    from tessera.ir import inline_weights

    whole = inline_weights(submodel)
    with tempfile.TemporaryDirectory(prefix="tessera-int8-", dir=_scratch_root(whole)) as tmp, \
            _contained(tmp):
        source, prepared, output = (Path(tmp, n) for n in ("model.onnx", "pre.onnx", "q.onnx"))
        try:
            excluded = list(recipe.float_ops)
            if recipe.form == "weights" and recipe.quantizer == "nncf":
                from tessera.backends._nncf import nncf_compress

                return nncf_compress(whole, bits=recipe.bits, float_ops=recipe.float_ops,
                                     scratch=tmp)
            if recipe.form == "weights":
                return _weights_only(whole, recipe)
            if recipe.quantizer == "nncf":
                from tessera.backends._nncf import nncf_quantize

                return nncf_quantize(whole, samples, preset=recipe.preset,
                                     smoothquant=recipe.smoothquant,
                                     transformer=has_attention(submodel), scratch=tmp)
            onnx.save_model(whole, str(source))
            if recipe.form == "dynamic":
                # no pre-processing: it costs a shape inference and an optimised copy of the
                # model (14 s for GPT-2-small), and its MatMul+Add fusion into Gemm leaves
                # the weight products unquantized, the very part dynamic int8 speeds up
                with _quiet("pre-processing"):
                    q.quantize_dynamic(str(source), str(output), nodes_to_exclude=excluded)
            else:
                _pre_process(q, source, prepared, _static_shapes(submodel))
                ops = quantized_ops(submodel, recipe)
                q.quantize_static(
                    str(prepared), str(output), _reader(q, samples),
                    quant_format=q.QuantFormat.QDQ, per_channel=recipe.per_channel,
                    activation_type=q.QuantType.QUInt8 if recipe.activations == "u8"
                    else q.QuantType.QInt8,
                    calibrate_method=_CALIBRATIONS[recipe.calibration](q),
                    op_types_to_quantize=list(ops) if ops else None,
                    extra_options={"ActivationSymmetric": recipe.symmetric},
                    calibration_providers=["CPUExecutionProvider"])
            return onnx.load_model(str(output))
        except CompileError:
            raise
        except Exception as err:
            from tessera._private.text import typed_line

            raise CompileError(f"{backend} could not quantize the partition to int8 "
                               f"({recipe}): {typed_line(err, 100_000)}") from err


def with_float_ops(quantized: onnx.ModelProto, original: onnx.ModelProto,
                   float_ops: Sequence[str]) -> onnx.ModelProto:
    """A copy of the QDQ form `quantized` (of `original`) with the nodes named in
    `float_ops` reading float values: the activations their quantization pairs start from
    (a neighbour may still quantize a value it writes), and their weights as `original`
    holds them (dequantized where `original` has no node of that name); the pairs no one
    reads then go. The search's op-level mixes are made this way from the one whole form."""
    import onnx
    from onnx import numpy_helper

    from tessera.backends._sensitivity import quantized_activations

    model = onnx.ModelProto()
    model.CopyFrom(quantized)
    graph = model.graph
    source = {value: q.input[0] for value, q in quantized_activations(graph).items()}
    producer = {out: node for node in graph.node for out in node.output}
    consts = {t.name: t for t in graph.initializer}
    have = {*producer, *consts, *(i.name for i in graph.input)}
    before = {node.name: node for node in original.graph.node if node.name}
    made_before = {out: node for node in original.graph.node for out in node.output}
    wanted = set(float_ops)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.name not in wanted:
            nodes.append(node)
            continue
        old = before.get(node.name)
        for position, name in enumerate(node.input):
            made = producer.get(name)
            read = old.input[position] if old is not None and position < len(old.input) \
                else ""
            if name in source:
                start, folded = source[name], made_before.get(read)
                if folded is not None and folded.op_type in _FOLDED and \
                        getattr(producer.get(start), "name", None) != folded.name:
                    # a Relu or Clip the quantizer folded into the range: back in float
                    start = _unfolded(folded, start, original, consts, graph, nodes, have)
                node.input[position] = start
            elif made is not None and made.op_type == "DequantizeLinear" \
                    and made.input[0] in consts:  # a weight stored in int8
                weight = _float_weight(original, old, position)
                if weight is None:  # no node of that name before: its dequantized values
                    weight = numpy_helper.from_array(_dequantized(made, consts))
                weight.name = f"{name}.float"
                if weight.name not in consts:
                    graph.initializer.append(weight)
                    consts[weight.name] = weight
                node.input[position] = weight.name
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    while True:  # pairs left without a reader go, their quantize after their dequantize
        read = {i for node in graph.node for i in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if node.op_type in ("QuantizeLinear",
                "DequantizeLinear") and not any(o in read for o in node.output)]
        if not dead:
            kept = [t for t in graph.initializer if t.name in read]
            del graph.initializer[:]
            graph.initializer.extend(kept)
            return model
        for node in dead:
            graph.node.remove(node)


_FOLDED = ("Relu", "Clip")  # ONNX Runtime's quantizer folds these into the range after them


def _unfolded(folded: onnx.NodeProto, start: str, original: onnx.ModelProto,
              consts: dict[str, onnx.TensorProto], graph: onnx.GraphProto,
              nodes: list[onnx.NodeProto], have: set[str]) -> str:
    """The value `original`'s Relu or Clip `folded` computes from `start`, its node added to
    `nodes` (with a Clip's constant bounds) once; `start` where a bound is not a constant."""
    import onnx

    out = f"{start}.{folded.op_type.lower()}"
    if out in have:
        return out
    bounds = {t.name: t for t in original.graph.initializer if t.name in folded.input[1:]}
    if any(b and b not in consts and b not in bounds for b in folded.input[1:]):
        return start
    for name, bound in bounds.items():
        if name not in consts:
            graph.initializer.append(bound)
            consts[name] = bound
    copy = onnx.NodeProto()
    copy.CopyFrom(folded)
    copy.input[0], copy.output[0], copy.name = start, out, f"{folded.name}.float"
    nodes.append(copy)
    have.add(out)
    return out


def _float_weight(original: onnx.ModelProto, node: onnx.NodeProto | None, position: int
                  ) -> onnx.TensorProto | None:
    """The weight `node` of `original` reads at `position`, its bytes in the proto."""
    from tessera.ir._external import inline_weights_of

    if node is None or position >= len(node.input):
        return None
    found = next((t for t in original.graph.initializer if t.name == node.input[position]),
                 None)
    if found is None:
        return None
    weight: onnx.TensorProto = type(found)()  # a copy: the caller renames it
    weight.CopyFrom(next(inline_weights_of(original, [found])))
    return weight


def _dequantized(dequantize: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto]
                 ) -> np.ndarray:
    """What a DequantizeLinear of constants computes: (x - zero point) * scale, per tensor
    or along its axis."""
    import numpy as np
    from onnx import numpy_helper

    values = numpy_helper.to_array(consts[dequantize.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(consts[dequantize.input[1]]).astype(np.float32)
    point = numpy_helper.to_array(consts[dequantize.input[2]]).astype(np.float32) \
        if len(dequantize.input) > 2 and dequantize.input[2] else np.zeros_like(scale)
    if scale.ndim == 1 and values.ndim > 1:
        axis = next((a.i for a in dequantize.attribute if a.name == "axis"), 1)
        shape = [1] * values.ndim
        shape[axis] = -1
        scale, point = scale.reshape(shape), point.reshape(shape)
    result: np.ndarray = (values - point) * scale
    return result


_SCORE_PATH = ("Add", "Sub", "Mul", "Div", "Where", "Cast", "Identity")  # scale and mask


def has_attention(model: onnx.ModelProto) -> bool:
    """Whether the part computes attention: a Softmax over the product of two activations
    (a few scaling and masking ops between), where quantizing the elementwise ops around it
    costs the accuracy int8 needs. A classifier's closing Softmax is not attention."""
    weights = {t.name for t in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    for node in model.graph.node:
        if node.op_type != "Softmax":
            continue
        frontier = list(node.input[:1])
        for _ in range(4):
            feeding = [producer[x] for x in frontier if x in producer]
            if any(n.op_type == "MatMul" and not any(
                    i in weights or producer.get(i, n).op_type == "Constant" for i in n.input)
                   for n in feeding):
                return True
            frontier = [x for n in feeding if n.op_type in _SCORE_PATH for x in n.input]
    return False


def weight_bound(variant: Target, weights_by_op: Mapping[str, int]) -> Support:
    """Whether a weight-only form suits a part: most of its weights feed matrix products
    (it leaves convolutions in float, and saves only the time weights take to read)."""
    matmul = sum(n for op, n in weights_by_op.items() if op in ("MatMul", "Gemm"))
    total = sum(weights_by_op.values())
    if not total or matmul * 2 < total:
        return Support(False, f"{variant} compresses the weights of matrix products only, "
                              f"and they hold {matmul / total if total else 0:.0%} of the "
                              "weights here")
    return Support(True)


def quantized_ops(model: onnx.ModelProto, recipe: Recipe) -> tuple[str, ...] | None:
    """The op types the static form quantizes; None: every op the quantizer knows."""
    compute = recipe.ops == "compute" or (recipe.ops == "auto" and has_attention(model))
    return COMPUTE_OPS if compute else None


_CALIBRATIONS: dict[str, Any] = {
    "minmax": lambda q: q.CalibrationMethod.MinMax,
    "percentile": lambda q: q.CalibrationMethod.Percentile,
    "entropy": lambda q: q.CalibrationMethod.Entropy,
}
_CONTAINED = threading.Lock()  # the working directory is the process's: one at a time


_RAM_DISK = Path("/dev/shm")
_COPIES = 5  # copies of the model a quantizer writes, at most (source, pre-processed, ...)


def _scratch_root(model: onnx.ModelProto) -> str | None:
    """Where the quantizers write their copies of the model: the machine's RAM disk where it
    has room for them (writing four copies of BERT-base to a disk took 3.6 s of ONNX
    Runtime's 15 s quantize), else the system's temporary directory (None)."""
    need = _COPIES * model.ByteSize() + (1 << 30)
    try:
        free = shutil.disk_usage(_RAM_DISK).free if os.access(_RAM_DISK, os.W_OK) else 0
        available = _available_memory()  # its files take memory: half of it at most
    except (OSError, ValueError):
        return None
    return str(_RAM_DISK) if min(free, available // 2) > need else None


def _available_memory() -> int:
    """Bytes of memory the machine can give (Linux's MemAvailable, else its free pages)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def _contained(tmp: str) -> Iterator[None]:
    """The quantizer run with `tmp` as its working and temporary directory. Where its
    symbolic shape inference is incomplete, ONNX Runtime saves the model it got to
    `sym_shape_infer_temp.onnx` in the working directory, its weights beside it as
    `<uuid>.data` (256 MB for GPT-2-small); its own temporary files go to the system's
    (Python's and, through TMPDIR, its C++ library's). Here all of them land in `tmp`, which
    is removed after, also on an error or Ctrl-C."""
    with _CONTAINED:
        saved, env = tempfile.tempdir, os.environ.get("TMPDIR")
        tempfile.tempdir = os.environ["TMPDIR"] = tmp
        try:
            with contextlib.chdir(tmp):
                yield
        finally:
            tempfile.tempdir = saved
            if env is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = env


def _weights_only(model: onnx.ModelProto, recipe: Recipe) -> onnx.ModelProto:
    """MatMul weights quantized in blocks (ONNX Runtime's MatMulNBitsQuantizer)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(block_size=_BLOCK, is_symmetric=True,
                                          accuracy_level=recipe.accuracy_level,
                                          bits=recipe.bits)
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # the quantizer rewrites the model it is given in place
    quantizer = MatMulNBitsQuantizer(copy, algo_config=config,
                                     nodes_to_exclude=list(recipe.float_ops))
    log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = log.level
    log.setLevel(logging.WARNING)  # its INFO lines name every node it leaves alone
    try:
        quantizer.process()
    finally:
        log.setLevel(level)
    quantized: onnx.ModelProto = quantizer.model.model
    return quantized


@contextlib.contextmanager
def _quiet(phrase: str) -> Iterator[None]:
    """The quantizer's root-logger warnings containing `phrase` dropped while it runs."""
    import logging

    def drop(record: logging.LogRecord) -> bool:
        return phrase not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def calibration_digest(calibration: Calibration | None) -> str:
    """A digest of the calibration samples: names, dtypes, shapes and bytes, in order (or the
    digest a `DigestedCalibration` carries)."""
    import numpy as np

    if isinstance(calibration, DigestedCalibration):
        return calibration.digest
    digest = hashlib.sha1(usedforsecurity=False)
    for sample in calibration or ():
        digest.update(b"\x00sample")
        for name in sorted(sample):
            array = np.ascontiguousarray(sample[name])
            digest.update(f"\x00{name}\x00{array.dtype.str}\x00{array.shape}".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def _pre_process(q: Any, source: Path, prepared: Path, static_shapes: bool) -> None:
    """ONNX Runtime's recommended step before quantizing (shape inference and graph
    optimisation); where it fails on a model, the model is quantized as it is. A model of
    fixed shapes skips the symbolic shape inference, which only names dimensions ONNX's
    own inference leaves open (GPT-2-small: 4 s, and the same quantized graph). ONNX's shape
    inference is left to `quantize_static`, which runs it again (BERT-base: 1.5 s saved)."""
    try:
        q.quant_pre_process(str(source), str(prepared), skip_symbolic_shape=static_shapes,
                            skip_onnx_shape=True)
    except Exception:
        try:
            q.quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True,
                                skip_onnx_shape=True)
        except Exception:
            prepared.write_bytes(source.read_bytes())


def _static_shapes(model: onnx.ModelProto) -> bool:
    """Whether every graph input has a fixed shape."""
    weights = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in weights:
            continue
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type" or not value.type.tensor_type.HasField("shape"):
            return False
        if any(not d.HasField("dim_value") for d in value.type.tensor_type.shape.dim):
            return False
    return True


def _checked_samples(submodel: onnx.ModelProto, recipe: Recipe,
                     calibration: Calibration | None,
                     backend: str) -> list[dict[str, np.ndarray]]:
    import numpy as np

    weights = {t.name for t in submodel.graph.initializer}
    names = [i.name for i in submodel.graph.input if i.name not in weights]
    if not calibration:
        raise CompileError(
            f"{backend} int8 ({recipe}) needs calibration data to fix activation "
            f"ranges: give a few representative samples of the inputs {names} "
            "(compile(..., calibration=[{name: array, ...}, ...])), or use -int8-recipe=dynamic")
    samples = []
    for index, sample in enumerate(calibration):
        missing = [n for n in names if n not in sample]
        extra = [n for n in sample if n not in names]
        if missing or extra:
            raise CompileError(f"{backend} calibration sample {index} does not match the "
                               f"partition's inputs {names}: missing {missing}, "
                               f"unexpected {extra}")
        samples.append({n: np.asarray(sample[n]) for n in names})
    return samples


def _reader(q: Any, samples: list[dict[str, np.ndarray]]) -> Any:
    """A CalibrationDataReader over `samples` (defined here: its base class lives in
    onnxruntime, which `import tessera` must not load)."""

    class _Samples(q.CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._items: Iterator[dict[str, np.ndarray]] = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._items, None)

        def rewind(self) -> None:
            self._items = iter(samples)

    return _Samples()
