"""Which quantized ops cost the accuracy: each node of a static (QDQ) int8 form ranked by the
error that quantizing its inputs adds, measured on calibration samples. The form runs op by
op (ONNX Runtime, no graph optimisation, so every value is there to read); each node that
reads a dequantized activation then runs alone twice, on what it reads and on the float
values before they were quantized, and the relative difference of its outputs is its error.
Names are the quantized form's own, which are the names its quantizer excludes (ONNX
Runtime's pre-processing renames the nodes it fuses). Keeping the nodes that add the most in
float, in that order, is the op-level mix the precision search tries (where NNCF's accuracy
control pays a validation run per quantizer)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import onnx

__all__ = ["error_added", "quantized_activations"]

_QDQ = ("QuantizeLinear", "DequantizeLinear")


def error_added(quantized: onnx.ModelProto, samples: Sequence[Mapping[str, np.ndarray]]
                ) -> tuple[tuple[str, float], ...]:
    """The nodes of the QDQ form `quantized` that read a quantized activation, with the
    relative error quantizing their inputs adds on `samples`, the largest first (ties by
    name: one order); () for a form without QDQ pairs."""
    import numpy as np

    graph = quantized.graph
    quantizers = quantized_activations(graph)
    source = {value: q.input[0] for value, q in quantizers.items()}
    span = {value: _span(graph, q) for value, q in quantizers.items()}  # what it represents
    readers = [node for node in graph.node if node.op_type not in _QDQ and node.name
               and any(i in source for i in node.input)]
    if not readers or not samples:
        return ()
    weights = {t.name for t in graph.initializer}
    wanted = list(dict.fromkeys(
        name for node in readers for i in node.input if i and i not in weights
        for name in (i, source.get(i)) if name))
    values = _values(quantized, wanted, samples)
    added: dict[str, float] = {}
    for node in readers:
        single = _single(quantized, node, weights)
        errors = []
        for value in values:
            read = {i: value[i] for i in node.input if i and i not in weights}
            # the float values within the represented range: a quantizer that folds a
            # Relu or Clip into the range (ONNX Runtime's) quantizes the value before it
            exact = {i: np.clip(value[source[i]], *span[i]).astype(v.dtype)
                     if i in source else v for i, v in read.items()}
            got, want = single(read), single(exact)
            errors.append(_relative(want, got))
        added[node.name] = float(np.mean(errors))
    return tuple(sorted(added.items(), key=lambda item: (-item[1], item[0])))


def quantized_activations(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Each dequantized activation (a DequantizeLinear's output fed by a QuantizeLinear), and
    the QuantizeLinear it undoes (whose input is the float value quantized)."""
    producer = {out: node for node in graph.node for out in node.output}
    found: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        made = producer.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if made is not None and made.op_type == "QuantizeLinear":
            found[node.output[0]] = made
    return found


def _span(graph: onnx.GraphProto, quantize: onnx.NodeProto) -> tuple[float, float]:
    """The float range a QuantizeLinear represents (per tensor; per channel: the widest)."""
    import numpy as np
    from onnx import numpy_helper

    consts = {t.name: t for t in graph.initializer if t.name in quantize.input[1:]}
    if quantize.input[1] not in consts:
        return (-np.inf, np.inf)
    scale = numpy_helper.to_array(consts[quantize.input[1]]).astype(np.float64)
    point = (numpy_helper.to_array(consts[quantize.input[2]])
             if len(quantize.input) > 2 and quantize.input[2] in consts else np.zeros((), np.uint8))
    info = np.iinfo(point.dtype) if point.dtype.kind in "iu" else None
    if info is None:
        return (-np.inf, np.inf)
    low = scale * (info.min - point.astype(np.float64))
    high = scale * (info.max - point.astype(np.float64))
    return (float(np.min(low)), float(np.max(high)))


def _relative(exact: np.ndarray, approx: np.ndarray) -> float:
    import numpy as np

    e = np.asarray(exact, np.float64).ravel()
    a = np.asarray(approx, np.float64).ravel()
    return float(np.linalg.norm(e - a) / (np.linalg.norm(e) + 1e-12))


def _session(model: onnx.ModelProto) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _single(model: onnx.ModelProto, node: onnx.NodeProto, weights: set[str]
            ) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    """`node` alone as a function of the values it reads (its weights built in)."""
    import numpy as np
    from onnx import helper

    inputs = [i for i in node.input if i and i not in weights]
    consts = [t for t in model.graph.initializer if t.name in set(node.input)]
    sessions: dict[tuple[str, ...], object] = {}

    def run(feeds: Mapping[str, np.ndarray]) -> np.ndarray:
        key = tuple(f"{feeds[i].dtype}{feeds[i].shape}" for i in inputs)
        if key not in sessions:
            graph = helper.make_graph(
                [node], "single",
                [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(
                    feeds[i].dtype), feeds[i].shape) for i in inputs],
                [helper.make_empty_tensor_value_info(node.output[0])], consts)
            single = helper.make_model(graph, opset_imports=model.opset_import,
                                       ir_version=model.ir_version)
            sessions[key] = _session(single)
        out = sessions[key].run([node.output[0]], dict(feeds))  # type: ignore[attr-defined]
        return np.asarray(out[0])

    return run


def _values(model: onnx.ModelProto, names: Sequence[str],
            samples: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """`names` computed by `model` on each sample, op by op."""
    import onnx

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n)
                              for n in names if n not in have)
    session = _session(probe)
    inputs = {i.name for i in session.get_inputs()}  # type: ignore[attr-defined]
    found = []
    for sample in samples:
        outs = session.run(list(names), {k: v for k, v in sample.items() if k in inputs})  # type: ignore[attr-defined]
        found.append(dict(zip(names, outs, strict=True)))
    return found
