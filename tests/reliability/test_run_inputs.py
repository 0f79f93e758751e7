"""Bad inputs to `run` on a mixed plan: each a clear InputError naming what is expected, or
defined behaviour (NaN and Inf pass through; non-contiguous arrays give the same answers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import backends, zoo
from tessera.errors import InputError

TARGETS = [t for t in ("onnxruntime", "openvino", "torch") if backends.get(t).is_available().ok]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tessera.CompiledModel:
    pins = {"/Erf": TARGETS[1]} if len(TARGETS) > 1 else None
    return tessera.compile(zoo.export("mlp", 1), TARGETS, partitioner="greedy", pins=pins)




def _x() -> np.ndarray:
    return np.asarray(zoo.example_inputs("mlp", 1)["x"])


@pytest.mark.parametrize("feeds, message", [
    (lambda x: {"x": x.astype(np.float64)}, "dtype float64, expected float32"),
    (lambda x: {"x": x[:, :10]}, "shape [1, 10], expected [1, 64]"),
    (lambda x: {}, "missing ['x']"),
    (lambda x: {"x": x, "extra": x}, "unexpected ['extra']"),
    (lambda x: {"x": x.tolist()}, "expected float32"),
], ids=["dtype", "shape", "missing", "extra", "list"])
def test_bad_inputs_are_input_errors_listing_what_is_expected(
        compiled: tessera.CompiledModel, feeds: object, message: str) -> None:
    with pytest.raises(InputError) as raised:
        compiled.run(feeds(_x()))  # type: ignore[operator]
    assert message in str(raised.value)
    assert "x: float32[1, 64]" in str(raised.value)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_pass_through(compiled: tessera.CompiledModel, value: float) -> None:
    x = _x()
    x[0, :5] = value
    out = compiled.run({"x": x})["output"]
    expected = backends.get("reference").compile(compiled.model.proto).run({"x": x})["output"]
    assert out.shape == (1, 10)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))


def test_non_contiguous_inputs_give_the_same_answers(compiled: tessera.CompiledModel) -> None:
    x = _x()
    wide = np.asfortranarray(np.repeat(x, 2, axis=1))[:, ::2]
    assert not wide.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(compiled.run({"x": wide})["output"],
                               compiled.run({"x": x})["output"], rtol=1e-6)


def test_no_input_is_modified(compiled: tessera.CompiledModel, tmp_path: Path) -> None:
    x = _x()
    before = x.copy()
    compiled.run({"x": x})
    np.testing.assert_array_equal(x, before)
