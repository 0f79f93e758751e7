"""Mixing precision op by op: a model built so that its whole-model int8 just misses the
budget (one activation carries an outlier channel that the next product never reads, so its
per-tensor range leaves the other channels a few int8 steps), ranked by the error each op
adds, and compiled with the fewest ops in float that meet the budget, as one partition."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.backends._quantize import Recipe, quantize
from tessera.backends._sensitivity import error_added
from tessera.config import AccuracyBudget, accuracy_of
from tessera.ir import Samples, load_model
from tessera.oracle import reference_answers

WIDTH = 512
ROWS = 128  # enough work that int8 products pay


def outlier_mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH ** 0.5
    shift = np.zeros(WIDTH, np.float32)
    shift[0] = 30.0  # the outlier channel
    w2 = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) / WIDTH ** 0.5
    w2[0] = 0.0  # which the next product never reads
    w3 = rng.standard_normal((WIDTH, 10)).astype(np.float32) / WIDTH ** 0.5
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="first"),
             helper.make_node("Add", ["h1", "shift"], ["h2"], name="shifted"),
             helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="second"),
             helper.make_node("Relu", ["h3"], ["h4"], name="relu"),
             helper.make_node("MatMul", ["h4", "w3"], ["y"], name="third")]
    weights = [numpy_helper.from_array(a, n) for a, n in
               ((w1, "w1"), (shift, "shift"), (w2, "w2"), (w3, "w3"))]
    graph = helper.make_graph(
        nodes, "outlier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, 10])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _samples(count: int) -> list[dict[str, np.ndarray]]:
    """The first (a calibrating one) twice as wide: the ranges cover what validates."""
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((ROWS, WIDTH)).astype(np.float32) * (2 if i == 0 else 1)}
            for i in range(count)]


def test_the_op_that_reads_the_outlier_adds_the_most_error() -> None:
    model, samples = outlier_mlp(), _samples(4)
    quantized = quantize(model, Recipe(), samples, backend="onnxruntime")
    ranked = error_added(quantized, samples)
    names = [name for name, _ in ranked]
    assert names[0] == "second"
    assert ranked[0][1] > 3 * max(error for name, error in ranked[1:])
    # kept in float, it reads no quantized value: it is not ranked again
    mixed = quantize(model, Recipe(float_ops=("second",)), samples, backend="onnxruntime")
    assert "second" not in dict(error_added(mixed, samples))


def test_compile_keeps_the_fewest_ops_in_float_that_meet_the_budget() -> None:
    model, samples = outlier_mlp(), _samples(12)
    budget = "cosine>=0.999"
    compiled = tessera.compile(model, "onnxruntime", samples=samples, accuracy=budget,
                               compile_cache=False)
    plan = compiled.plan
    record = plan.stats.precision
    assert record is not None and record.searched
    static = next(v for v in record.variants if "int8-recipe=static" in v.target)
    assert static.whole_used is not None and static.whole_used > 1.0  # whole: misses
    assert static.met and static.reverted == 1 and static.note.startswith("op by op")
    (part,) = plan.partitions  # the mix is one partition
    assert part.target.attrs["precision"] == "int8"
    assert part.target.attrs["int8-float-ops"] == ("second",)
    assert "quantized within the accuracy budget" in plan.decisions["first"]
    assert record.partition_used[0] is not None  # the mixed partition is the variant's
    # judged against the consensus oracle's answers on samples it never calibrated on
    validation = Samples.load(samples, load_model(model)).split()[1]
    truth = reference_answers(load_model(model), validation)
    got = [compiled.run(feed) for feed in truth.feeds]
    report = accuracy_of(got, list(truth.outputs), AccuracyBudget.parse(budget), truth.judges)
    assert report.met


@pytest.mark.parametrize("quantizer", ["ort", "nncf"])
def test_a_mix_is_the_whole_form_with_its_float_ops_reading_the_float_weights(
        quantizer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mix is made from the one whole form (a build, not a quantization): the ops kept
    in float read the float activations and the model's own float weights."""
    if quantizer == "nncf":
        pytest.importorskip("nncf")
    from tessera.backends import _quantize

    model, samples = outlier_mlp(), _samples(4)
    whole = quantize(model, Recipe(quantizer=quantizer), samples, backend="openvino")  # type: ignore[arg-type]
    made: list[Recipe] = []
    monkeypatch.setattr(_quantize, "_quantize", lambda *a, **k: made.append(a[1]))
    mixed = quantize(model, Recipe(quantizer=quantizer, float_ops=("second", "third")),  # type: ignore[arg-type]
                     samples, backend="openvino")
    assert made == []  # no second quantization
    assert [t.name for t in model.graph.initializer] == ["w1", "shift", "w2", "w3"]  # untouched
    values = {t.name: numpy_helper.to_array(t) for t in mixed.graph.initializer}
    producer = {out: node for node in mixed.graph.node for out in node.output}
    for name, weight in (("second", "w2"), ("third", "w3")):
        node = next(n for n in mixed.graph.node if n.name == name)
        assert not any(i in producer and producer[i].op_type == "DequantizeLinear"
                       for i in node.input)
        original = numpy_helper.to_array(next(t for t in model.graph.initializer
                                              if t.name == weight))
        np.testing.assert_array_equal(values[node.input[1]], original)
    # the first product (renamed where ONNX Runtime fuses it) still reads int8 values
    assert any(producer[i].op_type == "DequantizeLinear" for n in mixed.graph.node
               if n.op_type in ("MatMul", "Gemm") for i in n.input if i in producer)
    assert sum(n.op_type == "QuantizeLinear" for n in whole.graph.node) > \
        sum(n.op_type == "QuantizeLinear" for n in mixed.graph.node)
    # and it runs, closer to fp32 than the whole form
    import onnxruntime as ort

    feed = samples[1]
    exact = ort.InferenceSession(model.SerializeToString()).run(None, feed)[0]

    def error(form: onnx.ModelProto) -> float:
        got = ort.InferenceSession(form.SerializeToString()).run(None, feed)[0]
        return float(np.linalg.norm(got - exact) / np.linalg.norm(exact))

    assert error(mixed) < error(whole)
