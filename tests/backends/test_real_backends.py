"""OpenVINO, torch, IREE and TVM: target attributes honoured, support reasons, errors."""

import numpy as np
import pytest
from onnx import helper

from tessera import Target, backends, load_model
from tessera.backends import ProbedBackend
from tessera.errors import CompileError, InputError
from tessera.ir import ValueType

from ..ir.models import mlp


def _available(name: str) -> bool:
    return backends.get(name).is_available().ok


def _needs(name: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not _available(name), reason=f"{name} is not installed")


@_needs("openvino")
def test_openvino_properties_come_from_the_target() -> None:
    from tessera.backends.openvino import compile_config

    config = compile_config(Target("openvino -num-threads=2 -performance-hint=throughput "
                                   "-num-streams=2 -cache-dir=/tmp/ov"))
    assert config == {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT",
                      "NUM_STREAMS": "2", "INFERENCE_NUM_THREADS": "2", "CACHE_DIR": "/tmp/ov"}
    compiled = backends.get("openvino").compile(mlp(), "openvino -num-threads=1")
    assert compiled.compiled.get_property("INFERENCE_NUM_THREADS") == 1


@_needs("openvino")
@pytest.mark.parametrize(("target", "mode"), [
    ("openvino", None),  # OpenVINO's own default
    ("openvino -precision=int8", "DISABLE"),
    ("openvino -precision=int8 -snippets=enable", "ENABLE"),
    ("openvino -snippets=disable", "DISABLE")])
def test_openvino_snippets_are_off_for_int8_unless_asked(target: str, mode: str | None) -> None:
    from tessera.backends.openvino import compile_config

    assert compile_config(Target(target)).get("SNIPPETS_MODE") == mode
    # it changes the generated code: costs and compiled partitions are kept apart
    other = Target(target).with_attrs(snippets="disable" if mode == "ENABLE" else "enable")
    assert Target(target).tuning_key != other.tuning_key
    assert Target(target).codegen_key != other.codegen_key


@_needs("openvino")
def test_openvino_outputs_come_back_in_the_declared_types() -> None:
    from onnx import TensorProto

    from tessera.backends.openvino import _declared_types

    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["y"], axis=1),
         helper.make_node("Cast", ["y"], ["z"], to=TensorProto.INT32)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 1]),
         helper.make_tensor_value_info("z", TensorProto.INT32, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = backends.get("openvino").compile(model, "openvino")
    x = np.array([[0, 3, 1, 2, 0], [4, 0, 0, 0, 1]], dtype=np.float32)
    got = compiled.run({"x": x})
    assert {k: v.dtype for k, v in got.items()} == {"y": np.int64, "z": np.int32}
    assert got["y"].ravel().tolist() == [1, 0]
    # where OpenVINO's type differs from the declared one, every run converts
    dtypes = [np.dtype(np.int64), np.dtype(np.int32)]
    assert _declared_types(compiled.compiled, dtypes)
    assert not _declared_types(compiled.compiled, dtypes[::-1])
    assert not _declared_types(compiled.compiled, dtypes[:1])
    compiled._exact = False  # the converting path gives the same values and types
    again = compiled.run({"x": x})
    assert {k: (v.dtype, v.tolist()) for k, v in again.items()} == \
        {k: (v.dtype, v.tolist()) for k, v in got.items()}


@_needs("openvino")
def test_openvino_precision_the_cpu_lacks_is_a_clear_error() -> None:
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" in capabilities:
        pytest.skip("this CPU has bf16")
    with pytest.raises(CompileError, match="no BF16 support"):
        backends.get("openvino").compile(mlp(), "openvino -precision=bf16")


@_needs("iree")
def test_iree_compiler_flags_come_from_the_target() -> None:
    from tessera.backends.iree import compiler_flags

    assert compiler_flags(Target("iree -opt-level=O3 -cpu-features=skylake")) == [
        "--iree-opt-level=O3", "--iree-llvmcpu-target-cpu=skylake"]


@_needs("torch")
def test_torch_supports_is_its_converter_table() -> None:
    from tessera.backends._torch_ops import OPS

    torch_backend = backends.get("torch")
    node = helper.make_node("Relu", ["x"], ["y"])
    assert torch_backend.supports(node, 17)
    assert "Relu" in OPS.names()
    missing = helper.make_node("Det", ["x"], ["y"])
    reason = torch_backend.supports(missing, 17).reason
    assert "no rule for Det" in reason
    pool = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    image = {"x": ValueType(1, (1, 3, 8, 8))}
    assert "Indices" in torch_backend.supports(pool, 17, image).reason
    assert torch_backend.supports(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2]),
                                  17, image)


@_needs("torch")
def test_torch_compile_mode_matches_eager() -> None:
    model = load_model(mlp())
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    eager = backends.get("torch").compile(model.proto, "torch").run({"x": x})["y"]
    compiled = backends.get("torch").compile(model.proto, "torch -compile").run({"x": x})["y"]
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)


PROBED = [n for n in backends.names() if isinstance(backends.get(n), ProbedBackend)]


@pytest.mark.parametrize("name", PROBED)
def test_probed_support_gives_the_backends_own_reason(name: str) -> None:
    if not _available(name):
        pytest.skip(f"{name} is not installed")
    node = helper.make_node("Relu", ["x"], ["y"])
    types = {"x": load_model(mlp()).dataflow.value_types["x"]}
    assert backends.get(name).supports(node, 17, types)
    strings = helper.make_node("StringNormalizer", ["s"], ["t"])
    unsupported = backends.get(name).supports(strings, 17, {"s": ValueType(8, (3,))})
    assert not unsupported and unsupported.reason


@pytest.mark.parametrize("name", backends.names())
def test_every_backend_checks_inputs(name: str) -> None:
    if not _available(name):
        pytest.skip(f"{name} is not installed")
    compiled = backends.get(name).compile(mlp())
    with pytest.raises(InputError, match="expected"):
        compiled.run({"x": np.zeros((2, 8), np.float64)})
    with pytest.raises(InputError, match="missing"):
        compiled.run({})


def test_a_backend_that_fails_to_compile_names_itself_and_the_nodes() -> None:
    node = helper.make_node("Unknown", ["x"], ["y"], name="the_node", domain="my.ops")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("my.ops", 1)])
    for name in ("openvino", "tvm"):
        if _available(name):
            with pytest.raises(CompileError, match=rf"{name} failed .*the_node"):
                backends.get(name).compile(model, check=False)  # past the support check


@_needs("openvino")
def test_openvinos_f16_form_keeps_the_weights_of_products_in_f16_in_an_artifact() -> None:
    """`-precision=f16` computes in f16, so the form an artifact keeps stores the weights of
    its matrix products in f16 (half the bytes to load), and answers as the build did."""
    import onnx
    import openvino as ov

    if "FP16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        pytest.skip("this CPU has no f16 in OpenVINO")
    model = mlp(hidden=256)  # w1 and w2 at least 1024 elements, the biases fewer
    backend = backends.get("openvino")
    target = Target("openvino -precision=f16")
    assert backend.prepare(model, target, None) is model  # a build compiles the fp32 form
    compiled = backend.compile(model, target)
    kept = compiled.prepared_form()
    assert kept is not None
    types = {t.name: t.data_type for t in kept.graph.initializer}
    assert types["w1.f16"] == types["w2.f16"] == onnx.TensorProto.FLOAT16
    assert types["b1"] == onnx.TensorProto.FLOAT and "w1" not in types
    casts = {n.output[0]: n.input[0] for n in kept.graph.node if n.op_type == "Cast"}
    assert casts == {"w1": "w1.f16", "w2": "w2.f16"}
    assert backend.compile(model, "openvino -precision=f32").prepared_form() is None
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(backend.compile(kept, target).run({"x": x})["y"],
                               compiled.run({"x": x})["y"], rtol=2e-3, atol=1e-4)
