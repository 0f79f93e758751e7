"""OpenVINO's compiled model run from several threads at once: every calling thread has its
own infer request, so concurrent callers use the streams a throughput target asks for, and
each caller gets the outputs of its own inputs, as the reference computes them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tessera import backends
from tessera._private.numeric import agree

from ..ir.models import mlp

pytestmark = pytest.mark.skipif(not backends.get("openvino").is_available().ok,
                                reason="openvino is not installed")
CALLERS = 4


@pytest.mark.parametrize(("target", "streams"), [
    ("openvino", 1), ("openvino -performance-hint=throughput -num-streams=2", 2)])
def test_openvino_runs_correctly_from_four_threads_at_once(target: str, streams: int) -> None:
    model = mlp(hidden=64)
    compiled = backends.get("openvino").compile(model, target)
    assert compiled.compiled.get_property("NUM_STREAMS") == streams
    reference = backends.get("reference").compile(model)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(CALLERS * 25)]
    want = [reference.run(f) for f in feeds]
    together = threading.Barrier(CALLERS)

    def caller(first: int) -> list[tuple[int, dict[str, Any]]]:
        together.wait()  # every caller starts at once
        return [(i, compiled.run(feeds[i])) for i in range(first, len(feeds), CALLERS)]

    with ThreadPoolExecutor(CALLERS) as pool:
        results = [r for batch in pool.map(caller, range(CALLERS)) for r in batch]
    assert sorted(i for i, _ in results) == list(range(len(feeds)))
    for i, got in results:
        verdict = agree(got, want[i])
        assert verdict, f"call {i}: {verdict.why}"


def _softmax_mlp(model: Any, x: np.ndarray) -> np.ndarray:
    """The oracle: the MLP's product in numpy."""
    from onnx import numpy_helper

    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    h = np.maximum(x @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_an_output_handed_out_is_never_written_again_while_it_is_held() -> None:
    model = mlp(hidden=64)
    compiled = backends.get("openvino").compile(model, "openvino")
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(6)]
    held = [compiled.run(f)["y"] for f in feeds]  # every result kept: none may be reused
    assert len({a.__array_interface__["data"][0] for a in held}) == len(held)
    view = held[0][:1]  # a view holds its array too
    del held[0]
    for f in feeds:
        compiled.run(f)
    for f, got in zip(feeds[1:], held, strict=True):
        np.testing.assert_allclose(got, _softmax_mlp(model, f["x"]), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(view, _softmax_mlp(model, feeds[0]["x"])[:1], rtol=1e-4,
                               atol=1e-6)


def test_outputs_no_longer_held_are_written_in_place_and_not_copied() -> None:
    model = mlp(hidden=64)
    compiled = backends.get("openvino").compile(model, "openvino")
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    addresses = set()
    result = None
    for _ in range(8):  # the usual loop: one result held while the next is asked for
        result = compiled.run({"x": x})["y"]
        addresses.add(result.__array_interface__["data"][0])
        np.testing.assert_allclose(result, _softmax_mlp(model, x), rtol=1e-4, atol=1e-6)
    assert len(addresses) == 2  # two buffers, taking turns
