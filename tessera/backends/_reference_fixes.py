"""Corrections to ONNX's reference evaluator (the reference backend's), where it computes
another op version's meaning. Each correction was
found by comparing it with ONNX Runtime and OpenVINO (the consensus oracle) and has a
regression test (tests/oracle/test_reference_fixes.py):

- `Softmax`, `LogSoftmax`, `Hardmax` before opset 13: the input is coerced to 2-D at `axis`
  (default 1) and normalised over the flattened tail; onnx.reference applies opset 13's
  meaning (default axis -1, no coercion), which on a `[1, 1000, 1, 1]` input gives 1.0
  everywhere.
- `BatchNormalization` before opset 14 with one output: inference, whatever `momentum`
  says; onnx.reference takes a `momentum` attribute for training and normalises with the
  batch's own statistics (off by 282 on values of 294 on DenseNet-121's first one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx


def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _coerced(x: Any, axis: int) -> tuple[Any, tuple[int, ...]]:
    """`x` as 2-D at `axis` (ONNX before opset 13), with its shape to restore."""
    import numpy as np

    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, -1), x.shape


def _legacy_softmax(x: Any, axis: int, log: bool) -> Any:
    import numpy as np

    if x.size == 0:
        return x
    flat, shape = _coerced(x, axis)
    shifted = flat - flat.max(axis=1, keepdims=True)
    if log:
        out = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    else:
        out = np.exp(shifted)
        out /= out.sum(axis=1, keepdims=True)
    return out.reshape(shape).astype(x.dtype)


def _legacy_hardmax(x: Any, axis: int) -> Any:
    import numpy as np

    if x.size == 0:
        return x
    flat, shape = _coerced(x, axis)
    out = np.zeros_like(flat)
    out[np.arange(flat.shape[0]), np.argmax(flat, axis=1)] = 1
    return out.reshape(shape)


def _inference_batchnorm(node: onnx.NodeProto, x: Any, scale: Any, bias: Any, mean: Any,
                         var: Any) -> Any:
    epsilon = float(_attr(node, "epsilon", 1e-5))
    ones = (1,) * (x.ndim - 2)
    scale, bias, mean, var = (a.reshape(-1, *ones) for a in (scale, bias, mean, var))
    import numpy as np

    return (scale * (x - mean) / np.sqrt(var + epsilon) + bias).astype(x.dtype)


def fixes_for(opset: int) -> list[type]:
    """The corrected implementations the reference backend's evaluator of a model at default-domain
    `opset` is given (`new_ops`): each replaces onnx.reference's op of the same name."""
    from onnx.reference.op_run import OpRun

    fixes: list[type] = []
    if opset < 13:
        class Softmax(OpRun):
            op_domain = ""

            def _run(self, x: Any, axis: Any = None) -> tuple[Any]:
                return (_legacy_softmax(x, int(_attr(self.onnx_node, "axis", 1)), False),)

        class LogSoftmax(OpRun):
            op_domain = ""

            def _run(self, x: Any, axis: Any = None) -> tuple[Any]:
                return (_legacy_softmax(x, int(_attr(self.onnx_node, "axis", 1)), True),)

        class Hardmax(OpRun):
            op_domain = ""

            def _run(self, x: Any, axis: Any = None) -> tuple[Any]:
                return (_legacy_hardmax(x, int(_attr(self.onnx_node, "axis", 1))),)

        fixes += [Softmax, LogSoftmax, Hardmax]
    if opset < 14:
        from onnx.reference.ops import load_op

        original = load_op("", "BatchNormalization", opset)

        class BatchNormalization(OpRun):
            op_domain = ""

            def _run(self, x: Any, scale: Any, bias: Any, mean: Any, var: Any,
                     **attrs: Any) -> tuple[Any, ...]:
                outputs = [o for o in self.onnx_node.output if o]
                if len(outputs) == 1:  # inference: the running statistics, always
                    return (_inference_batchnorm(self.onnx_node, x, scale, bias, mean, var),)
                return original._run(self, x, scale, bias, mean, var, **attrs)  # type: ignore[no-any-return]

        fixes.append(BatchNormalization)
    return fixes


def default_opset(model: onnx.ModelProto) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


__all__ = ["default_opset", "fixes_for"]
