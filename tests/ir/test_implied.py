"""Inputs in the ranges a model implies: token ids inside the table they index (through
casts and reshapes), masks of ones, type ids of zero, floats from a normal."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tessera.ir import load_model
from tessera.ir._implied import implied_inputs, index_bound


def _encoder() -> object:
    table = helper.make_tensor("table", TensorProto.FLOAT, [37, 4], [0.0] * 148)
    types = helper.make_tensor("types", TensorProto.FLOAT, [2, 4], [0.0] * 8)
    nodes = [helper.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
             helper.make_node("Gather", ["table", "ids64"], ["emb"]),
             helper.make_node("Gather", ["types", "token_type_ids"], ["temb"]),
             helper.make_node("Add", ["emb", "temb"], ["sum"]),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
             helper.make_node("Mul", ["sum", "mask3"], ["masked"]),
             helper.make_node("Add", ["masked", "x"], ["y"])]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("ids", TensorProto.INT32, ["batch", "sequence"]),
         helper.make_tensor_value_info("token_type_ids", TensorProto.INT64,
                                       ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch", "sequence"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 4])],
        [table, types, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_ids_stay_inside_their_table_and_masks_are_ones() -> None:
    model = load_model(_encoder(), require_static=False)
    assert index_bound(model, "ids") == 37  # through the Cast
    assert index_bound(model, "token_type_ids") == 2
    assert index_bound(model, "x") is None
    samples = implied_inputs(model, 4, seed=3, sizes={"batch": 2, "sequence": 16})
    assert len(samples) == 4
    for feeds in samples:
        assert feeds["ids"].shape == (2, 16) and feeds["ids"].dtype == np.int32
        assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 37
        assert set(np.unique(feeds["token_type_ids"])) <= {0, 1}
        np.testing.assert_array_equal(feeds["attention_mask"], np.ones((2, 16), np.int64))
        assert feeds["x"].shape == (2, 16, 4) and feeds["x"].dtype == np.float32
    assert len({f["ids"].tobytes() for f in samples}) == 4  # each sample its own draw
    again = implied_inputs(model, 4, seed=3, sizes={"batch": 2, "sequence": 16})
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(samples, again, strict=True))


def test_without_sizes_a_sequence_is_128_and_a_batch_1() -> None:
    model = load_model(_encoder(), require_static=False)
    (feeds,) = implied_inputs(model, 1)
    assert feeds["ids"].shape == (1, 128)
