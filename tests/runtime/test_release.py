"""What a compile hands back to the system when it ends: a full collection only where the race
or the calibration dropped builds (it costs 0.1 s in a process holding torch or TVM)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.runtime import _compiled

from ..ir.models import mlp


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(_compiled, "trim", lambda: calls.append(1))
    return calls


def test_a_compile_that_builds_one_plan_collects_nothing(trims: list[int]) -> None:
    compiled = tessera.compile(mlp(), "onnxruntime", partitioner="greedy")
    assert trims == []
    x = np.ones((2, 8), np.float32)
    want = tessera.compile(mlp(), "reference").run({"x": x})["y"]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)


def test_a_builder_that_built_rivals_hands_them_back(trims: list[int]) -> None:
    from tessera.ir import load_model

    model = load_model(mlp())
    config = tessera.CompilationConfig.create("onnxruntime")
    builder = _compiled.RuntimeBuilder()
    plan = tessera.partition(model, config, partitioner="greedy")
    builder.build(model, config, plan)
    builder.release()
    assert trims == []
    builder.build(model, config, plan)
    builder.build(model, config, plan)
    builder.release()
    assert trims == [1]
    builder.release()  # a release counts the builds since the last one
    assert trims == [1]
