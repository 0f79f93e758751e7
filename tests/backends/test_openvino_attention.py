"""Exported attention rewritten as OpenVINO's ScaledDotProductAttention (`_ov_attention`):
each spelling a decoder export uses (a lowest-value Select or an additive mask, a Divide or
Multiply scale, a Transpose or transpose_b key) becomes one op with the same outputs, checked
against the unrewritten model on random inputs; what only looks like attention is left."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera import backends

pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="needs openvino")

B, H, S, T, D = 2, 3, 4, 6, 8
LOWEST = float(np.finfo(np.float32).min)


def attention(mask: str, scale: str, key: str, fill: float = LOWEST) -> Any:
    """An openvino.Model of q, k, v ([B, H, S|T, D]) and a boolean `allowed` [B, 1, S, T]."""
    from openvino import Model, opset13

    q, k, v = (opset13.parameter([B, H, n, D], np.float32, name=name)
               for name, n in (("q", S), ("k", T), ("v", T)))
    allowed = opset13.parameter([B, 1, S, T], bool, name="allowed")
    if key == "transpose":
        scores = opset13.matmul(q, opset13.transpose(k, np.array([0, 1, 3, 2])), False, False)
    else:
        scores = opset13.matmul(q, k, False, True)
    factor = np.float32(D ** 0.5)
    scores = opset13.divide(scores, factor) if scale == "divide" else \
        opset13.multiply(scores, np.float32(1 / factor))
    if mask == "select":
        scores = opset13.select(opset13.logical_not(allowed), np.float32(fill), scores)
    else:
        additive = opset13.select(allowed, np.float32(0), np.float32(-1e4))
        scores = opset13.add(scores, additive) if mask == "add" else opset13.add(additive, scores)
    out = opset13.matmul(opset13.softmax(scores, -1), v, False, False)
    return Model([out], [q, k, v, allowed])


def outputs(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from openvino import Core

    compiled = Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled(feeds)[0])


def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    allowed = rng.random((B, 1, S, T)) > 0.3
    allowed[..., 0] = True  # every query sees a key
    return {"q": rng.standard_normal((B, H, S, D), np.float32),
            "k": rng.standard_normal((B, H, T, D), np.float32),
            "v": rng.standard_normal((B, H, T, D), np.float32), "allowed": allowed}


def op_types(model: Any) -> list[str]:
    return sorted(op.get_type_name() for op in model.get_ops())


@pytest.mark.parametrize(("mask", "scale", "key"), [
    ("select", "divide", "transpose"), ("add", "multiply", "transpose_b"),
    ("add_first", "divide", "transpose_b"), ("select", "multiply", "transpose_b")])
def test_each_exported_spelling_becomes_one_op_with_the_same_outputs(
        mask: str, scale: str, key: str) -> None:
    from tessera.backends._ov_attention import fuse_attention

    inputs = feeds()
    plain = outputs(attention(mask, scale, key), inputs)
    model = attention(mask, scale, key)
    assert fuse_attention(model) == 1
    types = op_types(model)
    assert "ScaledDotProductAttention" in types and "Softmax" not in types
    np.testing.assert_allclose(outputs(model, inputs), plain, rtol=1e-5, atol=1e-6)


def test_a_fill_that_a_score_can_survive_is_left_alone() -> None:
    from tessera.backends._ov_attention import fuse_attention

    model = attention("select", "divide", "transpose", fill=-10.0)  # not a mask: a clamp
    assert fuse_attention(model) == 0
    assert "ScaledDotProductAttention" not in op_types(model)


def test_the_beam_gather_reads_every_variable_and_is_an_input() -> None:
    from openvino import Model, PartialShape, Type, opset13
    from openvino.op.util import Variable, VariableInfo

    from tessera.backends._ov_attention import BEAM, gather_beams

    x = opset13.parameter([-1, 4], np.float32, name="x")
    info = VariableInfo()
    info.data_shape, info.data_type = PartialShape([-1, 4]), Type.f32
    info.variable_id = "cache"
    variable = Variable(info)
    read = opset13.read_value(x, variable)
    grown = opset13.concat([read, x], 0)
    model = Model([opset13.result(grown)], [opset13.assign(grown, variable)], [x])
    assert gather_beams(model)
    assert BEAM in {p.get_any_name() for p in model.inputs}
    (user,) = read.output(0).get_target_inputs()
    assert user.get_node().get_type_name() == "Gather"
    assert not gather_beams(Model([opset13.result(x)], [x]))  # no variable: nothing to do
