"""The static int8 recipe as target attributes: activations s8 or u8, symmetric or not,
per-channel weights, the calibration method. Each spelling round-trips through the target's
string and JSON forms, enters the tuning key, and reaches ONNX Runtime's quantizer; the
recipes tried follow the CPU's instruction sets."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import backends
from tessera._private.cores import cpu_flags
from tessera.backends._quantize import Recipe, quantize, recipes_for
from tessera.target import Target

from ..ir.models import mlp

RECIPES = st.fixed_dictionaries({}, optional={
    "int8-activations": st.sampled_from(["s8", "u8"]),
    "int8-symmetric": st.booleans(),
    "int8-per-channel": st.booleans(),
    "int8-calibration": st.sampled_from(["minmax", "percentile", "entropy"]),
})


def _spelled(kind: str, recipe: dict[str, object]) -> str:
    words = [f"-{k}={str(v).lower()}" for k, v in recipe.items()]
    return " ".join([kind, "-precision=int8", *words])


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["onnxruntime", "openvino"]), RECIPES)
def test_a_recipe_round_trips_and_names_what_is_quantized(kind: str,
                                                          recipe: dict[str, object]) -> None:
    target = Target(_spelled(kind, recipe))
    assert Target(str(target)) == target
    assert Target.from_json(target.to_json()) == target
    made = Recipe.of(target.attrs)
    assert made.activations == recipe.get("int8-activations", "s8")
    assert made.symmetric is bool(recipe.get("int8-symmetric", False))
    assert made.per_channel is bool(recipe.get("int8-per-channel", False))
    assert made.calibration == recipe.get("int8-calibration", "minmax")
    # one recipe, one tuning key: the defaults spelled or not are the same target
    assert target.tuning_key() == Target(_spelled(kind, {
        k: v for k, v in recipe.items() if v not in (False, "s8", "minmax")})).tuning_key()
    default = Target(f"{kind} -precision=int8")
    assert (target.tuning_key() == default.tuning_key()) == (made == Recipe())
    # the quantized form is remembered under the recipe's name: one name per recipe
    assert (str(made) == "static") == (made == Recipe())


@given(st.sampled_from(["onnxruntime", "openvino"]), RECIPES)
def test_the_recipe_belongs_to_int8_alone(kind: str, recipe: dict[str, object]) -> None:
    plain = Target(" ".join([kind, *(f"-{k}={str(v).lower()}" for k, v in recipe.items())]))
    assert plain == Target(kind)


NNCF = st.fixed_dictionaries({"int8-quantizer": st.just("nncf")}, optional={
    "int8-preset": st.sampled_from(["performance", "mixed"]),
    "int8-smoothquant": st.sampled_from(["off", "0.15", "0.5"]),
    "int8-ops": st.sampled_from(["auto", "all", "compute"]),
    "int8-float-ops": st.lists(st.sampled_from(["/a/MatMul", "b", "c.1"]), max_size=3),
    "int8-activations": st.sampled_from(["s8", "u8"]),  # ONNX Runtime's: dropped for nncf
})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["onnxruntime", "openvino"]), NNCF)
def test_the_quantizer_and_the_ops_kept_in_float_round_trip(kind: str,
                                                           recipe: dict[str, object]) -> None:
    spelled = " ".join([kind, "-precision=int8", *(
        f"-{k}={','.join(v) if isinstance(v, list) else v}" for k, v in recipe.items()
        if not (isinstance(v, list) and not v))])
    target = Target(spelled)
    assert Target(str(target)) == target
    assert Target.from_json(target.to_json()) == target
    made = Recipe.of(target.attrs)
    assert made.quantizer == "nncf" and made.activations == "s8"  # ort's attribute dropped
    assert made.preset == recipe.get("int8-preset", "performance")
    assert made.smoothquant == recipe.get("int8-smoothquant")
    assert made.ops == recipe.get("int8-ops", "auto")
    assert made.float_ops == tuple(sorted(set(recipe.get("int8-float-ops", []))))  # type: ignore[call-overload]
    assert made.form_name.startswith("nncf-quantizer static nncf")
    ort = Target(f"{kind} -precision=int8")
    assert target.tuning_key() != ort.tuning_key()  # another quantizer, another code


def test_a_smoothquant_alpha_out_of_range_is_refused_with_the_fix() -> None:
    from tessera.errors import TargetError

    with pytest.raises(TargetError, match=r"off or a number in \[0, 1\]"):
        Target("openvino -precision=int8 -int8-quantizer=nncf -int8-smoothquant=1.5")


def test_the_recipes_tried_follow_the_instruction_sets() -> None:
    assert recipes_for(("avx2", "avx512_vnni", "amx_int8", "amx_bf16"))[0] == {
        "int8-activations": "u8"}  # OpenVINO on AMX compiles u8 activations only
    assert recipes_for(("avx2", "avx512_vnni")) == ({},)
    assert recipes_for(("avx2",)) == ({},)
    variants = backends.get("onnxruntime").precision_variants(Target("onnxruntime"))
    forms = [backends.get("onnxruntime").precision_form(v) for v in variants]
    assert forms[-3:] == ["onnxruntime-quantizer dynamic"] + [
        f"onnxruntime-quantizer weights {b}-bit accuracy 4" if any(
            f in cpu_flags() for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
        else f"onnxruntime-quantizer weights {b}-bit" for b in (8, 4)]


def _zero_point_types(model: onnx.ModelProto) -> set[int]:
    weights = {t.name: t for t in model.graph.initializer}
    return {weights[n.input[2]].data_type for n in model.graph.node
            if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in weights}


@pytest.mark.parametrize("recipe, zero_point", [
    (Recipe(), onnx.TensorProto.INT8),
    (Recipe(activations="u8"), onnx.TensorProto.UINT8),
    (Recipe(activations="u8", symmetric=True, per_channel=True, calibration="percentile"),
     onnx.TensorProto.UINT8),
])
def test_the_quantizer_makes_the_recipe_asked_for(recipe: Recipe, zero_point: int) -> None:
    model = mlp(hidden=32)
    rng = np.random.default_rng(0)
    calibration = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(4)]
    quantized = quantize(model, recipe, calibration, backend="onnxruntime")
    assert zero_point in _zero_point_types(quantized)
    scales = [t for t in quantized.graph.initializer if t.name.endswith("_scale")]
    assert scales  # a QDQ form: every quantized value has its scale


@given(st.sampled_from(["-precision=int4", "-precision=int8 -int8-recipe=weights"]),
       st.one_of(st.none(), st.integers(0, 4)))
def test_a_weight_only_form_round_trips_with_its_accuracy_level(
        form: str, level: int | None) -> None:
    spelled = f"onnxruntime {form}" + (f" -matmul-accuracy={level}" if level is not None else "")
    target = Target(spelled)
    assert Target(str(target)) == target and Target.from_json(target.to_json()) == target
    assert target.attrs.get("matmul-accuracy") == level
    backend = backends.get("onnxruntime")
    assert not backend.calibrated(target)  # no samples needed
    named = backend.precision_form(target)
    assert named is not None and named.startswith("onnxruntime-quantizer weights ")
    assert ("4-bit" in named) == ("int4" in form)
    # the level belongs to the weight-only forms alone
    assert Target(f"onnxruntime -precision=int8 -matmul-accuracy={level or 0}") == Target(
        "onnxruntime -precision=int8")


def _cosine_error(compiled: Any, reference: Any, feeds: list[dict[str, np.ndarray]]) -> float:
    """1 - the worst cosine of `compiled`'s output y against `reference`'s on `feeds`."""
    cosines = []
    for feed in feeds:
        got, want = compiled.run(feed)["y"].ravel(), reference.run(feed)["y"].ravel()
        cosines.append(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    return float(1.0 - min(cosines))


@pytest.mark.skipif(not backends.get("onnxruntime").is_available().ok,
                    reason="needs onnxruntime")
def test_weight_only_forms_run_matmul_weights_in_blocks_and_agree() -> None:
    """8-bit blocks keep the fp32 answers (cosine >= 0.999 against the reference, trusted
    for plain float MatMul/Add/Relu/Softmax); 4-bit blocks (16 levels per 32 weights, the
    error sharpened by the softmax) stay near them and never nearer than 8-bit."""
    model = mlp(hidden=64)
    backend = backends.get("onnxruntime")
    reference = backends.get("reference").compile(model, check=False)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(3)]
    error = {}
    for spelled in ("onnxruntime -precision=int8 -int8-recipe=weights -matmul-accuracy=4",
                    "onnxruntime -precision=int4"):
        prepared = backend.prepare(model, Target(spelled), None)
        assert [n.op_type for n in prepared.graph.node].count("MatMulNBits") == 2
        error[spelled.split()[1]] = _cosine_error(backend.compile(model, spelled), reference,
                                                  feeds)
    assert error["-precision=int8"] <= 1e-3
    assert error["-precision=int8"] < error["-precision=int4"] <= 0.1


def test_the_ops_an_openvino_int8_form_leaves_in_float_may_compute_in_bf16() -> None:
    from tessera.backends.openvino import compile_config

    mixed = Target("openvino -precision=int8 -int8-float-precision=bf16")
    assert compile_config(mixed)["INFERENCE_PRECISION_HINT"] == "bf16"
    assert compile_config(Target("openvino -precision=int8"))["INFERENCE_PRECISION_HINT"] == "f32"
    assert Target("openvino -precision=int8 -int8-float-precision=f32") == Target(
        "openvino -precision=int8")  # the default, never spelled
    assert Target("openvino -int8-float-precision=bf16") == Target("openvino")  # int8's alone
    assert mixed.tuning_key() != Target("openvino -precision=int8").tuning_key()


def _agreement(model: onnx.ModelProto, quantized: onnx.ModelProto,
               feeds: list[dict[str, np.ndarray]]) -> float:
    """The worst cosine of `quantized` against the reference evaluator on `feeds`."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    exact, session = ReferenceEvaluator(model), ort.InferenceSession(
        quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    worst = 1.0
    for feed in feeds:
        want = np.asarray(exact.run(None, feed)[0], np.float64).ravel()
        got = np.asarray(session.run(None, feed)[0], np.float64).ravel()
        worst = min(worst, float(want @ got / np.linalg.norm(want) / np.linalg.norm(got)))
    return worst


def test_nncf_makes_a_qdq_form_that_keeps_its_ignored_ops_in_float() -> None:
    pytest.importorskip("nncf")
    model = mlp(hidden=32)
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(8)]
    quantized = quantize(model, Recipe(quantizer="nncf"), samples[::2], backend="openvino")
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)
    assert _agreement(model, quantized, samples[1::2]) > 0.999
    first = next(n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm"))
    kept = quantize(model, Recipe(quantizer="nncf", float_ops=(first,)), samples[::2],
                    backend="openvino")
    reader = next(n for n in kept.graph.node if n.name == first)
    dequantized = {o for n in kept.graph.node if n.op_type == "DequantizeLinear"
                   for o in n.output}
    assert not any(i in dequantized for i in reader.input)  # it reads float values only


def test_attention_is_a_softmax_over_a_product_of_activations() -> None:
    from tessera import zoo
    from tessera.backends._quantize import has_attention, quantized_ops

    assert not has_attention(mlp())  # a closing Softmax over a product with weights
    bert = onnx.load(str(zoo.export("bert-tiny")))
    assert has_attention(bert)
    assert quantized_ops(bert, Recipe()) == ("Conv", "ConvTranspose", "Gemm", "MatMul")
    assert quantized_ops(bert, Recipe(ops="all")) is None
    assert quantized_ops(mlp(), Recipe()) is None


@given(st.sampled_from(["-precision=int4", "-precision=int8 -int8-recipe=weights"]),
       st.lists(st.sampled_from(["mm1", "mm2"]), max_size=2))
def test_openvinos_weight_only_forms_round_trip_and_name_nncfs_form(
        form: str, float_ops: list[str]) -> None:
    kept = f" -int8-float-ops={','.join(float_ops)}" if float_ops else ""
    target = Target(f"openvino {form}{kept}")
    assert Target(str(target)) == target and Target.from_json(target.to_json()) == target
    backend = backends.get("openvino")
    assert not backend.calibrated(target)  # compress_weights needs no samples
    bits = 4 if "int4" in form else 8
    named = backend.precision_form(target)
    assert named is not None and named.startswith(f"nncf-quantizer weights {bits}-bit")
    assert named != backends.get("onnxruntime").precision_form(
        Target(f"onnxruntime {form}"))  # another quantizer, another form
    # static is int8's default form, never spelled; the recipe is int8's alone
    assert Target("openvino -precision=int8 -int8-recipe=static") == Target(
        "openvino -precision=int8")
    assert Target("openvino -int8-recipe=weights") == Target("openvino")


def _wide_mlp() -> onnx.ModelProto:
    """x[1, 256] -> MatMul 256x512 -> Relu -> MatMul 512x256: rows that split into groups."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32),
                                       name) for name, shape in (("w1", (256, 512)),
                                                                 ("w2", (512, 256)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not backends.get("openvino").is_available().ok
                    or importlib.util.find_spec("nncf") is None, reason="needs openvino, nncf")
def test_openvinos_weight_only_forms_compress_the_weights_and_agree() -> None:
    """NNCF's 8-bit per-channel form keeps the answers (cosine >= 0.999 against the
    reference, trusted for plain float MatMul/Relu); its 4-bit groups of 128 stay near them
    and never nearer than 8-bit; a node kept in float keeps its weights."""
    model = _wide_mlp()
    backend = backends.get("openvino")
    reference = backends.get("reference").compile(model, check=False)
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((1, 256)).astype(np.float32)} for _ in range(3)]
    error = {}
    for spelled, compressed in (("openvino -precision=int8 -int8-recipe=weights",
                                 "DequantizeLinear"), ("openvino -precision=int4", "MatMulNBits")):
        prepared = backend.prepare(model, Target(spelled), None)
        assert [n.op_type for n in prepared.graph.node].count(compressed) == 2
        error[spelled.split()[1]] = _cosine_error(backend.compile(model, spelled), reference,
                                                  feeds)
    assert error["-precision=int8"] <= 1e-3
    assert error["-precision=int8"] < error["-precision=int4"] <= 0.05
    kept = backend.prepare(model, Target("openvino -precision=int4 -int8-float-ops=mm2"), None)
    assert [n.op_type for n in kept.graph.node].count("MatMulNBits") == 1
    assert "w2" in {t.name for t in kept.graph.initializer}  # mm2's weights as they were


def test_a_weight_only_form_suits_parts_whose_weights_feed_matrix_products() -> None:
    from tessera.backends._quantize import weight_bound

    variant = Target("openvino -precision=int4")
    assert weight_bound(variant, {"MatMul": 900, "Conv": 100})
    refused = weight_bound(variant, {"MatMul": 100, "Conv": 900})
    assert not refused and "hold 10% of the weights" in refused.reason
    assert not weight_bound(variant, {})


def _conv_then_matmul() -> onnx.ModelProto:
    """x[1, 4, 8, 8] -> Conv 16x4x3x3 -> Flatten -> MatMul 576x256: a convolution's 4-D
    weight (ViT's patches) before a matrix product."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32),
                                       name) for name, shape in (("k", (16, 4, 3, 3)),
                                                                 ("w", (576, 256)))]
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], name="conv"),
             helper.make_node("Flatten", ["c"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "conv_mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not backends.get("openvino").is_available().ok
                    or importlib.util.find_spec("nncf") is None, reason="needs openvino, nncf")
def test_openvinos_weight_only_form_keeps_convolutions_and_groups_activations_as_asked() -> None:
    """A convolution keeps its float weights (OpenVINO's reader refuses NNCF's rank-4
    scales), the matrix product's are compressed; each activation group size reaches
    OpenVINO and agrees with the reference (trusted for float Conv/MatMul)."""
    from tessera.backends.openvino import compile_config

    model = _conv_then_matmul()
    backend = backends.get("openvino")
    prepared = backend.prepare(model, Target("openvino -precision=int8 -int8-recipe=weights"),
                               None)
    assert [n.op_type for n in prepared.graph.node].count("DequantizeLinear") == 1
    assert "k" in {t.name for t in prepared.graph.initializer}
    reference = backends.get("reference").compile(model, check=False)
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)} for _ in range(3)]
    for group in (0, 64, 192):
        spelled = f"openvino -precision=int8 -int8-recipe=weights -dq-group-size={group}"
        assert compile_config(Target(spelled))["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == str(group)
        assert _cosine_error(backend.compile(model, spelled), reference, feeds) <= 1e-3
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in compile_config(
        Target("openvino -precision=int8 -int8-recipe=weights"))
