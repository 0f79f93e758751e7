"""int8 forms of a partition, made with ONNX Runtime's quantizer: `dynamic` (int8 weights,
activations quantized at run time; pays off on MatMul/Gemm-heavy parts) and `static` (the QDQ
format, activation ranges calibrated on sample inputs; ONNX Runtime and OpenVINO both run it
as int8). Quantizing works on a copy in a temporary directory that is always removed, and
the quantizer writes nowhere else (`_contained`)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tessera.errors import CompileError
from tessera.target import AttrSpec, AttrType

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["Calibration", "DigestedCalibration", "Form", "Recipe", "calibration_digest",
           "canonical_int8", "int8_attrs", "is_quantized", "model_digest", "quantize",
           "recipes_for"]

Form = Literal["dynamic", "static", "weights"]


@dataclass(frozen=True)
class Recipe:
    """How a partition is quantized: the form (`static`: QDQ with activation ranges
    calibrated on samples; `dynamic`: int8 weights, activations quantized at run time), and
    for the static form, the activations' type (s8 or u8: OpenVINO on AMX compiles only u8),
    whether their ranges are symmetric, whether weights are quantized per output channel,
    and how ranges are calibrated (min-max, a percentile, or entropy). `weights`: only
    MatMul weights quantized, to `bits` (8 or 4) in blocks, as ONNX Runtime's MatMulNBits,
    which computes at its `accuracy_level` (4: int8 dot products; None: its default)."""

    form: Form = "static"
    activations: Literal["s8", "u8"] = "s8"
    symmetric: bool = False
    per_channel: bool = False
    calibration: Literal["minmax", "percentile", "entropy"] = "minmax"
    bits: int = 8
    accuracy_level: int | None = None

    @classmethod
    def of(cls, attrs: Mapping[str, Any], form: Form = "static") -> Recipe:
        """The recipe a target's attributes name (those of `int8_attrs`)."""
        return cls(form, attrs.get("int8-activations") or "s8",
                   bool(attrs.get("int8-symmetric")), bool(attrs.get("int8-per-channel")),
                   attrs.get("int8-calibration") or "minmax")

    def __str__(self) -> str:
        """The form, then what differs from the defaults: 'static', 'static u8 symmetric'."""
        if self.form == "dynamic":
            return "dynamic"
        if self.form == "weights":
            level = f" accuracy {self.accuracy_level}" if self.accuracy_level is not None else ""
            return f"weights {self.bits}-bit{level}"
        changed = [self.activations if self.activations != "s8" else "",
                   "symmetric" if self.symmetric else "",
                   "per-channel" if self.per_channel else "",
                   self.calibration if self.calibration != "minmax" else ""]
        return " ".join(["static", *(c for c in changed if c)])


def int8_attrs() -> tuple[AttrSpec, ...]:
    """The static int8 recipe's attributes, declared alike by every backend that runs the
    QDQ form (unset: s8 asymmetric per-tensor min-max, ONNX Runtime's own defaults). Each
    enters the tuning key: it changes the code."""
    return (
        AttrSpec("int8-activations", AttrType.STR, None,
                 "static int8: the activations' type, s8 (unset) or u8",
                 choices=("s8", "u8")),
        AttrSpec("int8-symmetric", AttrType.BOOL, None,
                 "static int8: symmetric activation ranges (unset: asymmetric)"),
        AttrSpec("int8-per-channel", AttrType.BOOL, None,
                 "static int8: weights quantized per output channel (unset: per tensor)"),
        AttrSpec("int8-calibration", AttrType.STR, None,
                 "static int8: how activation ranges are calibrated, minmax (unset), "
                 "percentile or entropy", choices=("minmax", "percentile", "entropy")),
    )


def recipes_for(flags: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The static recipes worth trying on a CPU with these instruction-set flags, as
    target attributes: OpenVINO on AMX compiles QDQ models only with u8 activations, so
    there u8 asymmetric comes first; elsewhere ONNX Runtime's s8 default."""
    u8: dict[str, Any] = {"int8-activations": "u8"}
    return (u8, {}) if "amx_int8" in flags else ({},)


def canonical_int8(attrs: dict[str, Any], int8: bool) -> None:
    """The recipe's attributes dropped where the target is not int8, and a default value
    never spelled (one target, one tuning key)."""
    for spec in int8_attrs():
        if not int8 or attrs.get(spec.name) in (None, spec.default, False, "s8", "minmax"):
            attrs.pop(spec.name, None)
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
    samples = _checked_samples(submodel, recipe, calibration, backend) \
        if recipe.form == "static" \
        else []
    quantized = _quantize(submodel, recipe, samples, backend)
    _MEMO[key] = quantized
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return quantized


# ops only a quantized model holds
_INT8_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
             "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul",
             "MatMulNBits")
_BLOCK = 32  # weights per scale in the weight-only form: finer blocks keep more accuracy
_MEMO: OrderedDict[tuple[str, str, str], onnx.ModelProto] = OrderedDict()
_MEMO_SIZE = 2  # the forms of the last partitions quantized (int8 weights: a quarter size)


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(node.op_type in _INT8_OPS for node in model.graph.node)


def _memo_key(submodel: onnx.ModelProto, recipe: Recipe, calibration: Calibration | None
              ) -> tuple[str, str, str]:
    return (model_digest(submodel), str(recipe),
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

    with tempfile.TemporaryDirectory(prefix="tessera-int8-") as tmp, _contained(tmp):
        source, prepared, output = (Path(tmp, n) for n in ("model.onnx", "pre.onnx", "q.onnx"))
        try:
            onnx.save_model(inline_weights(submodel), str(source))
            if recipe.form == "weights":
                return _weights_only(inline_weights(submodel), recipe)
            if recipe.form == "dynamic":
                # no pre-processing: it costs a shape inference and an optimised copy of the
                # model (14 s for GPT-2-small), and its MatMul+Add fusion into Gemm leaves
                # the weight products unquantized, the very part dynamic int8 speeds up
                with _quiet("pre-processing"):
                    q.quantize_dynamic(str(source), str(output))
            else:
                _pre_process(q, source, prepared, _static_shapes(submodel))
                q.quantize_static(
                    str(prepared), str(output), _reader(q, samples),
                    quant_format=q.QuantFormat.QDQ, per_channel=recipe.per_channel,
                    activation_type=q.QuantType.QUInt8 if recipe.activations == "u8"
                    else q.QuantType.QInt8,
                    calibrate_method=_CALIBRATIONS[recipe.calibration](q),
                    extra_options={"ActivationSymmetric": recipe.symmetric},
                    calibration_providers=["CPUExecutionProvider"])
            return onnx.load_model(str(output))
        except CompileError:
            raise
        except Exception as err:
            from tessera._private.text import typed_line

            raise CompileError(f"{backend} could not quantize the partition to int8 "
                               f"({recipe}): {typed_line(err, 100_000)}") from err


_CALIBRATIONS: dict[str, Any] = {
    "minmax": lambda q: q.CalibrationMethod.MinMax,
    "percentile": lambda q: q.CalibrationMethod.Percentile,
    "entropy": lambda q: q.CalibrationMethod.Entropy,
}
_CONTAINED = threading.Lock()  # the working directory is the process's: one at a time


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
    quantizer = MatMulNBitsQuantizer(copy, algo_config=config)
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
