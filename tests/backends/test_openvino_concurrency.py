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
