"""Measurement isolation for a model whose weights live in its weights file: the worker opens
the model's skeleton and extracts each candidate itself, and a backend that really crashes
on some candidates still loses only those (the worker is restarted and opens the skeleton
again)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import tessera
from tessera import backends
from tessera.placement.measure._worker import shared_worker

from ..ir.models import mlp
from .test_isolation import faulty  # noqa: F401  (the fixture)


@pytest.mark.timeout(300)
def test_a_crashing_backend_only_loses_its_candidates_on_a_weights_file(
        faulty: None, tmp_path: Path) -> None:  # noqa: F811
    proto = mlp(hidden=512)
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, path)
    worker = shared_worker()
    before, sent = worker.restarts, worker.sent_bytes
    compiled = tessera.compile(path, "test-segfault,onnxruntime", partitioner="collage")
    assert compiled.model.weights is not None
    stats = compiled.plan.stats.measuring
    assert stats is not None and stats.invalid >= 1
    assert worker.restarts - before == stats.invalid
    assert any("SIGSEGV" in str(e) and "softmax" in e.nodes
               for e in stats.invalid_examples)
    # every candidate crossed the pipe as a path and a mask: far less than its weights
    weights = sum(len(t.raw_data) for t in proto.graph.initializer)
    assert 0 < worker.sent_bytes - sent < weights
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    expected = backends.get("reference").compile(proto).run({"x": x})["y"]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
