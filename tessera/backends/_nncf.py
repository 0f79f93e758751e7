"""The static QDQ form made by NNCF, OpenVINO's own quantizer (`-int8-quantizer=nncf`): its
transformer preset where the part has attention, its preset and SmoothQuant alpha as the
recipe says, the recipe's float ops as its ignored scope. NNCF loads only here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from tessera.errors import CompileError

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["nncf_quantize"]


def nncf_quantize(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], *,
                  preset: str, smoothquant: str | None, float_ops: Sequence[str],
                  transformer: bool) -> onnx.ModelProto:
    """The static QDQ form by NNCF: its transformer preset where the part has attention."""
    try:
        import nncf
    except ImportError as err:
        raise CompileError("int8 by NNCF (-int8-quantizer=nncf) needs NNCF: "
                           "pip install nncf") from err
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
    )

    options: dict[str, Any] = {}
    if smoothquant is not None:
        alpha = -1.0 if smoothquant == "off" else float(smoothquant)
        options["advanced_parameters"] = AdvancedQuantizationParameters(
            smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))
    if float_ops:
        options["ignored_scope"] = nncf.IgnoredScope(names=list(float_ops),
                                                     validate=False)
    if transformer:
        options["model_type"] = nncf.ModelType.TRANSFORMER
    preset = nncf.QuantizationPreset.MIXED if preset == "mixed" \
        else nncf.QuantizationPreset.PERFORMANCE
    with _silenced():
        quantized: onnx.ModelProto = nncf.quantize(
            model, nncf.Dataset(samples), preset=preset, subset_size=len(samples), **options)
    return quantized


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
