"""A one-partition plan calls its backend directly on inputs of the signature last checked;
any other call pays the full check, so validation is unchanged."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import backends
from tessera.backends._protocol import InputCheck, TensorSpec
from tessera.errors import ExecutionError, InputError

DIRECT = [t for t in ("onnxruntime", "openvino") if backends.get(t).is_available().ok]


@pytest.fixture(autouse=True)
def cost_db(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


def _relu() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_signature_of_the_last_accepted_call_is_kept() -> None:
    check = InputCheck([TensorSpec("x", "float32", ("n", 3))])
    good = {"x": np.zeros((2, 3), np.float32)}
    assert not check.matches(good)  # nothing accepted yet
    assert check(good)["x"] is good["x"]
    assert check.seen == (("x", np.dtype("float32"), (2, 3)),)
    assert check.matches({"x": np.ones((2, 3), np.float32)})
    assert not check.matches({"x": np.ones((4, 3), np.float32)})  # another size: full check
    assert not check.matches({"x": np.ones((2, 3), np.float64)})
    assert not check.matches({"x": [[0.0] * 3] * 2})  # not an array: converted by the check
    check({"x": np.ones((4, 3), np.float32)})
    assert check.seen == (("x", np.dtype("float32"), (4, 3)),)
    with pytest.raises(InputError, match="dtype float64"):
        check({"x": np.ones((4, 3), np.float64)})
    assert check.seen == (("x", np.dtype("float32"), (4, 3)),)  # a refused call leaves it


@pytest.mark.parametrize("target", DIRECT)
def test_a_direct_run_still_refuses_what_the_model_does_not_take(target: str) -> None:
    compiled = tessera.compile(_relu(), target, accuracy="exact")
    assert compiled.executor.whole is not None
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    for _ in range(2):  # the first call is checked in full, the second goes direct
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(InputError, match="dtype float64"):
        compiled.run({"x": x.astype(np.float64)})
    with pytest.raises(InputError, match="shape"):
        compiled.run({"x": np.zeros((3, 3), np.float32)})
    with pytest.raises(InputError, match="unexpected"):
        compiled.run({"x": x, "z": x})
    proxy = MappingProxyType({"x": x})  # not a dict: checked in full, and converted
    np.testing.assert_array_equal(compiled.run(proxy)["y"], np.maximum(x, 0))
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("target", DIRECT)
def test_a_direct_calls_failure_is_an_execution_error_naming_the_nodes(target: str) -> None:
    compiled = tessera.compile(_relu(), target, accuracy="exact")
    call = compiled.parts[0].direct_call()
    assert call is not None
    error = compiled.parts[0].failure(RuntimeError("out of memory"))
    assert isinstance(error, ExecutionError)
    assert "relu" in str(error) and "RuntimeError: out of memory" in str(error)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(call({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("target", DIRECT)
def test_a_direct_run_takes_read_only_and_strided_arrays(target: str) -> None:
    """The direct call shares the caller's arrays with the backend where it can; arrays it
    cannot share (read-only, not C-contiguous) are copied as the backend's own API would."""
    compiled = tessera.compile(_relu(), target, accuracy="exact")
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    compiled.run({"x": x})  # the signature is seen: the next calls go direct
    frozen = x.copy()
    frozen.flags.writeable = False
    wide = np.zeros((2, 6), np.float32)
    wide[:, ::2] = x
    for value in (frozen, np.asfortranarray(x), wide[:, ::2], x):
        np.testing.assert_array_equal(compiled.run({"x": value})["y"], np.maximum(x, 0))
    assert np.array_equal(x, [[-1, 2, -3], [4, -5, 6]])  # the inputs are left as they were


@pytest.mark.skipif("openvino" not in DIRECT, reason="needs openvino")
def test_openvino_goes_below_its_input_dispatch_for_plain_tensors() -> None:
    from tessera.backends.openvino import _lean_infer

    part = tessera.compile(_relu(), "openvino", accuracy="exact").parts[0]
    assert _lean_infer(part.compiled, part.inputs) is not None  # type: ignore[attr-defined]
    mismatched = [type(s)(s.name, "float64", s.shape) for s in part.inputs]
    assert _lean_infer(part.compiled, mismatched) is None  # converted by OpenVINO's dispatch
