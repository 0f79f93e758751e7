"""bench/memory.py: the generated transformer stack, the sampler of a process and what it
starts, a real cold compile of a tiny stack sampled from outside, and the table's figures.
Memory figures are asserted only as bounds the work itself sets (an allocation of 64 MB is
seen), never as the bench's results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from bench import memory
from bench._sampler import Sampler
from bench._transformer import transformer_stack, weights_bytes
from tessera import backends

needs_both = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="the memory bench compiles on onnxruntime and openvino")


def test_the_generated_stack_keeps_its_weights_beside_it_and_runs(tmp_path: Path) -> None:
    path = transformer_stack(tmp_path, layers=2, width=64, heads=4, sequence=8, name="t")
    per_layer = 64 * 3 * 64 + 3 * 64 + 64 * 64 + 64 + 2 * 64  # QKV, output, LayerNorm
    assert (tmp_path / "t.weights").stat().st_size == 4 * 2 * per_layer
    assert weights_bytes(path) == 4 * 2 * per_layer + 5 * 8 + 4  # and the shapes, the scale
    model = onnx.load(str(path), load_external_data=False)
    assert path.stat().st_size < 20_000  # the graph only
    assert sum(t.data_location == onnx.TensorProto.EXTERNAL
               for t in model.graph.initializer) == 2 * 6
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    (expected,) = ReferenceEvaluator(str(path)).run(None, {"x": x})
    (got,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    assert got.shape == (8, 64)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_the_sampler_sees_a_process_and_what_it_starts() -> None:
    code = ("import subprocess, sys, time; "
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import time; x = bytearray(96 << 20); time.sleep(1.5)']); "
            "y = bytearray(64 << 20); child.wait()")
    process = subprocess.Popen([sys.executable, "-c", code])
    sampler = Sampler(process.pid, 0.02).start()
    process.wait()
    peaks = sampler.stop()
    assert peaks.samples > 5
    assert peaks.main.rss >= 64 << 20 and peaks.children.rss >= 96 << 20
    assert peaks.total.pss >= (64 + 96) << 20
    assert peaks.total.pss <= peaks.total.rss


def test_the_table_gives_the_limit_and_whether_each_model_keeps_it() -> None:
    def row(model: str, weights: float, total: float, **extra: object) -> dict[str, object]:
        usage = {"rss": total * 1.2e9, "pss": total * 1e9, "uss": total * 0.9e9}
        half = {k: v / 2 for k, v in usage.items()}
        return {"model": model, "weights_bytes": weights * 1e9,
                "limit_bytes": memory.limit(int(weights * 1e9)),
                "peak": {"total": usage, "main": half, "children": half}, **extra}

    result = {"command": "python -m bench.memory", "commit": "abc1234", "machine": "m",
              "config": memory.CONFIG, "interval_s": 0.05,
              "rows": [row("small", 0.65, 2.27, seconds=43.4, plan="1 partition(s)"),
                       row("big", 1.61, 7.0, seconds=60.0, plan="1 partition(s)"),
                       row("stopped", 1.0, 18.5, error="stopped above 18.0 GB")]}
    text = memory.table(result)
    assert memory.limit(10**9) == 4.5e9
    assert "at commit `abc1234`" in text
    assert "| small | 0.65 | 3.45 | 2.27 | ✓ | 1.14 | 1.14 | 2.72 |" in text
    assert "| big | 1.61 | 6.33 | 7.00 | ✗ |" in text
    assert "| stopped | 1.00 | 4.50 | 18.50 | ✗ |" in text and "stopped above 18.0 GB" in text


@needs_both
@pytest.mark.timeout(600)
def test_the_memory_table_samples_a_cold_compile_in_a_fresh_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert memory.main(["--models", "transformer-2x64", "--out", str(out)]) == 0
    result = json.loads((out / "memory.json").read_text())
    assert result["command"] == "python -m bench.memory --models transformer-2x64 --out " \
        + str(out)
    assert result["commit"] and result["machine"] and result["config"] == memory.CONFIG
    (row,) = result["rows"]
    assert "error" not in row, row
    assert row["weights_bytes"] == 4 * 2 * (64 * 3 * 64 + 3 * 64 + 64 * 64 + 64 + 2 * 64) + 44
    assert row["limit_bytes"] == memory.limit(row["weights_bytes"])
    peak = row["peak"]
    assert 0 < peak["main"]["pss"] <= peak["total"]["pss"] <= peak["total"]["rss"]
    assert peak["children"]["pss"] > 0  # the measuring worker was seen
    assert row["seconds"] > 0 and row["plan"]
    text = (out / "memory.md").read_text()
    assert "| transformer-2x64 | 0.00 |" in text
