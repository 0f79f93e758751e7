"""The static QDQ form made by NNCF, OpenVINO's own quantizer (`-int8-quantizer=nncf`): its
transformer preset where the part has attention, its preset and SmoothQuant alpha as the
recipe says (the recipe's float ops are taken out of the whole form after, `_quantize`); and
its weight compression, the float ops as its ignored scope. NNCF loads only here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera.errors import CompileError

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["nncf_compress", "nncf_quantize"]


def nncf_quantize(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], *,
                  preset: str, smoothquant: str | None, transformer: bool, scratch: str
                  ) -> onnx.ModelProto:
    """The static QDQ form by NNCF: its transformer preset where the part has attention.
    `model`'s weights are written to `scratch` (a private directory) and NNCF reads them
    from there: it shape-infers the model ten times, each a copy of the model serialised
    whole (11 of 33 s on BERT-base with the weights inline)."""
    from nncf.quantization.advanced_parameters import AdvancedSmoothQuantParameters

    nncf, bare, advanced = _prepared(model, scratch, compression=False)
    if smoothquant is not None:
        alpha = -1.0 if smoothquant == "off" else float(smoothquant)
        advanced.smooth_quant_alphas = AdvancedSmoothQuantParameters(matmul=alpha)
    options: dict[str, Any] = {"advanced_parameters": advanced}
    if transformer:
        options["model_type"] = nncf.ModelType.TRANSFORMER
    preset = nncf.QuantizationPreset.MIXED if preset == "mixed" \
        else nncf.QuantizationPreset.PERFORMANCE
    with _silenced():
        quantized: onnx.ModelProto = nncf.quantize(
            bare, nncf.Dataset(samples), preset=preset, subset_size=len(samples), **options)
    return quantized  # its weights read back in by NNCF


def _prepared(model: onnx.ModelProto, scratch: str, *, compression: bool
              ) -> tuple[Any, onnx.ModelProto, Any]:
    """NNCF, `model` with its weights in a file in `scratch`, and the advanced parameters
    (of quantization, or of weight compression) that tell NNCF where that file is."""
    try:
        import nncf
    except ImportError as err:
        raise CompileError("int8 by NNCF (-int8-quantizer=nncf, and OpenVINO's weight-only "
                           "forms) needs NNCF: pip install nncf") from err
    import onnx
    from nncf.onnx.quantization.backend_parameters import BackendParameters
    from nncf.quantization.advanced_parameters import (
        AdvancedCompressionParameters,
        AdvancedQuantizationParameters,
    )

    source, copy = Path(scratch, "nncf.onnx"), onnx.ModelProto()
    copy.CopyFrom(model)  # saving with external data rewrites the model it is given
    onnx.save_model(copy, str(source), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="nncf.weights", size_threshold=1024)
    bare = onnx.load_model(str(source), load_external_data=False)
    where = {BackendParameters.EXTERNAL_DATA_DIR: str(Path(scratch).resolve())}
    advanced = AdvancedCompressionParameters(backend_params=where) if compression \
        else AdvancedQuantizationParameters(backend_params=where)
    return nncf, bare, advanced


INT4_GROUP = 128  # weights per scale in the int4 form (NNCF's default)


def nncf_compress(model: onnx.ModelProto, *, bits: int, float_ops: Sequence[str],
                  scratch: str) -> onnx.ModelProto:
    """The matrix products' weights compressed by NNCF, with no calibration: 8-bit
    asymmetric per output channel (DequantizeLinear on int8 weights), or 4-bit symmetric in
    groups of `INT4_GROUP` (MatMulNBits below opset 21), every layer; the nodes in
    `float_ops` keep their weights. Its weights are read from `scratch` (`nncf_quantize`)."""
    nncf, bare, advanced = _prepared(model, scratch, compression=True)
    options: dict[str, Any] = {"advanced_parameters": advanced}
    # NNCF's ONNX int4 form of an embedding's Gather is a MatMulNBits over the token ids,
    # which no runtime takes: embeddings keep their weights (a step reads one row of them);
    # a convolution's (ViT's patches) gets per-channel scales of rank 4, which OpenVINO's
    # reader refuses ("Dequantization scale needs to be a scalar or a vector")
    ignored_types = ["Conv", "ConvTranspose", *(["Gather"] if bits == 4 else [])]
    if float_ops or ignored_types:
        options["ignored_scope"] = nncf.IgnoredScope(names=list(float_ops),
                                                     types=ignored_types, validate=False)
    if bits == 4:
        options.update(mode=nncf.CompressWeightsMode.INT4_SYM, group_size=INT4_GROUP,
                       ratio=1.0, all_layers=True)
    else:
        options["mode"] = nncf.CompressWeightsMode.INT8_ASYM
    with _silenced():
        compressed: onnx.ModelProto = nncf.compress_weights(bare, **options)
    _import_domains(compressed)
    return compressed  # its weights read back in by NNCF


def _import_domains(model: onnx.ModelProto) -> None:
    """Declare the opsets of the domains NNCF's nodes use (MatMulNBits: com.microsoft), which
    it leaves undeclared; OpenVINO's reader refuses such a model."""
    import onnx

    declared = {o.domain for o in model.opset_import}
    for domain in dict.fromkeys(n.domain for n in model.graph.node):
        if domain not in declared and domain not in ("", "ai.onnx"):
            model.opset_import.append(onnx.helper.make_opsetid(domain, 1))


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """NNCF's log and progress bars (written to the standard output) held back."""
    import io

    import nncf

    logger = logging.getLogger("nncf")
    level = logger.level
    nncf.set_log_level(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)
