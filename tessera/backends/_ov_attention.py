"""A decoder's attention as OpenVINO's ScaledDotProductAttention, so that the CPU plugin
keeps the key/value cache inside its attention kernel.

Exported decoders spell attention out: MatMul(q, Transpose(k)), a scale (Divide or
Multiply by a constant), a mask (Select of the lowest value, or an additive mask), Softmax,
MatMul(·, v). OpenVINO's CPU plugin fuses none of that into its cached attention: it needs a
ScaledDotProductAttention op whose keys and values are Concat(Gather(ReadValue, beam_idx),
new) with the Concat going to the Assign (OpenVINO GenAI's stateful layout). Without the
fusion each step copies the whole cache in the Concat. `fuse_attention` writes the op, and
`gather_beams` puts the beam Gather between each variable and its Concat."""

from __future__ import annotations

from typing import Any

BEAM = "beam_idx"  # the input the beam Gather reads: the batch rows, in order


def fuse_attention(model: Any) -> int:
    """Rewrite each attention of `model` (an `openvino.Model`) that has the exported pattern
    as one ScaledDotProductAttention; the number rewritten. Numerics are unchanged: the
    lowest-value Select becomes the same additive mask (the lowest value absorbs any score)."""
    fused = 0
    for softmax in model.get_ordered_ops():
        if softmax.get_type_name() == "Softmax":
            fused += _fuse_one(softmax)
    if fused:
        model.validate_nodes_and_infer_types()
    return fused


def gather_beams(model: Any) -> bool:
    """Read each variable of `model` through Gather(variable, beam_idx, 0), a new i32 input:
    the form the CPU plugin's cached attention matches. False (and nothing changed) when the
    model has no variable."""
    import numpy as np
    from openvino import Type, opset13

    variables = [op for op in model.get_ordered_ops() if op.get_type_name() == "ReadValue"]
    if not variables:
        return False
    beam = opset13.parameter([-1], Type.i32, name=BEAM)
    beam.output(0).get_tensor().set_names({BEAM})
    axis = opset13.constant(np.int64(0))
    for variable in variables:
        users = list(variable.output(0).get_target_inputs())
        gathered = opset13.gather(variable.output(0), beam, axis)
        for user in users:
            user.replace_source_output(gathered.output(0))
    model.add_parameters([beam])
    model.validate_nodes_and_infer_types()
    return True


def _fuse_one(softmax: Any) -> int:
    import numpy as np
    from openvino import opset13

    if softmax.get_attributes().get("axis") not in (-1, 3) or \
            softmax.get_output_partial_shape(0).rank.get_length() != 4:
        return 0
    users = list(softmax.output(0).get_target_inputs())
    if len(users) != 1 or users[0].get_index() != 0:
        return 0
    weighted = users[0].get_node()  # MatMul(probabilities, v)
    if weighted.get_type_name() != "MatMul" or any(weighted.get_attributes().values()):
        return 0
    scores, mask = _masked(softmax.input_value(0))
    if scores is None:
        return 0
    dtype = scores.get_element_type().to_dtype()
    scores, scale = _scaled(scores)
    query_key = scores.get_node()
    if scale is None or query_key.get_type_name() != "MatMul" or \
            query_key.get_attributes()["transpose_a"]:
        return 0
    key = _untransposed(query_key.input_value(1), query_key.get_attributes()["transpose_b"])
    if key is None:
        return 0
    zero = opset13.constant(np.zeros((), dtype))
    if mask is None:
        mask = zero.output(0)
    elif isinstance(mask, tuple):  # Select(condition, lowest, scores)
        condition, lowest = mask
        mask = opset13.select(condition, lowest, zero).output(0)
    attention = opset13.scaled_dot_product_attention(
        query_key.input_value(0), key, weighted.input_value(1), mask,
        opset13.constant(np.array(scale, dtype)), causal=False)
    weighted.output(0).replace(attention.output(0))
    return 1


def _masked(value: Any) -> tuple[Any, Any]:
    """(the scores, the mask) of Softmax's input: (condition, lowest) for a Select of the
    lowest value, an additive mask's output, or None; (None, None) for another pattern."""
    node = value.get_node()
    if node.get_type_name() == "Select":
        lowest = _scalar(node.input_value(1).get_node())
        if lowest is None or lowest > -1e30:  # only a fill that no score survives
            return None, None
        return node.input_value(2), (node.input_value(0), node.input_value(1))
    if node.get_type_name() == "Add":
        for scores, mask in ((0, 1), (1, 0)):
            if _scaled(node.input_value(scores))[0].get_node().get_type_name() == "MatMul":
                return node.input_value(scores), node.input_value(mask)
        return None, None
    return value, None


def _scaled(value: Any) -> tuple[Any, float | None]:
    """(the unscaled scores, the scale) of a Divide or Multiply by a scalar constant, or
    (value, 1.0); the scale is None for a non-constant factor."""
    node = value.get_node()
    kind = node.get_type_name()
    if kind not in ("Divide", "Multiply"):
        return value, 1.0
    factor = _scalar(node.input_value(1).get_node())
    if factor is None or factor == 0.0:
        return value, None
    return node.input_value(0), 1.0 / factor if kind == "Divide" else factor


def _untransposed(value: Any, transposed: bool) -> Any:
    """The keys, [batch, heads, length, head_dim], behind the scores MatMul's second input,
    or None where it is not the keys with their last two axes swapped."""
    if transposed:
        return value
    node = value.get_node()
    if node.get_type_name() != "Transpose" or node.input_value(1).get_node().get_type_name() \
            != "Constant" or list(node.input_value(1).get_node().get_data()) != [0, 1, 3, 2]:
        return None
    return node.input_value(0)


def _scalar(node: Any) -> float | None:
    if node.get_type_name() != "Constant":
        return None
    data = node.get_data()
    return float(data.reshape(-1)[0]) if data.size == 1 else None


__all__ = ["BEAM", "fuse_attention", "gather_beams"]
