"""bench/scaling.py and bench/search_plans.py: the generated model, a real run on a small
model, and the tables' figures. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from bench import scaling, search_plans
from bench._generated import conv_stack
from tessera import backends

needs_both = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="the scaling bench needs onnxruntime and openvino")


def test_the_generated_stack_has_four_nodes_a_block_and_runs() -> None:
    model = onnx.load_from_string(conv_stack(5, channels=4, size=8))
    assert len(model.graph.node) == 20
    assert [n.op_type for n in model.graph.node[:4]] == ["Conv", "Relu", "Conv", "Add"]
    from onnx.reference import ReferenceEvaluator

    x = np.ones((1, 4, 8, 8), np.float32)
    (y,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert y.shape == (1, 4, 8, 8) and np.isfinite(y).all()


@needs_both
def test_the_scaling_table_runs_a_cold_compile_in_a_fresh_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert scaling.main(["--models", "conv-stack-100", "--all-targets", "--out",
                         str(out)]) == 0
    result = json.loads((out / "scaling.json").read_text())
    (row,) = result["rows"]
    assert row["model"] == "conv-stack-100" and row["config"] == scaling.CONFIG
    assert (row["file_nodes"], row["nodes"]) == (100, 100)
    assert row["seconds"] > 0 and row["partitions"] >= 1
    text = (out / "scaling.md").read_text()
    assert "| conv-stack-100 | 100 / 100 | openvino,onnxruntime,cpu |" in text


def test_the_scaling_table_compares_every_backend_with_two() -> None:
    row = {"file_nodes": 415, "nodes": 176, "partitions": 1, "candidates": 12,
           "measurements": 12, "measure_seconds": 8.0, "search_seconds": 0.001, "plan": "p"}
    result = {"command": "c", "commit": "abc", "machine": "m", "limit_s": 120.0,
              "all_targets": "onnxruntime,openvino,torch",
              "rows": [{"model": "r", "config": scaling.CONFIG, "seconds": 20.0, **row},
                       {"model": "r", "config": "onnxruntime,openvino,torch",
                        "seconds": 70.0, **row},
                       {"model": "big", "config": scaling.CONFIG, "seconds": 130.0, **row},
                       {"model": "bad", "config": scaling.CONFIG, "error": "boom"},
                       {"model": "slow", "config": scaling.CONFIG,
                        "error": "stopped after 300 s", "over_s": 300.0}]}
    text = scaling.table(result)
    assert "| ms per loaded node (lower is faster) |" in text
    assert "| r | 415 / 176 | openvino,onnxruntime,cpu | 20.0 | ✓ | 114 |" in text
    assert "| r | 415 / 176 | all | 70.0 | ✓ | 398 |" in text
    assert "| big | 415 / 176 | openvino,onnxruntime,cpu | 130.0 | ✗ |" in text
    assert "| bad | | openvino,onnxruntime,cpu | failed: boom | ✗" in text
    assert "| slow | | openvino,onnxruntime,cpu | over 300 (stopped) | ✗" in text
    assert "- r: every backend 70.0 s against two 20.0 s: 3.50x" in text


def test_the_search_plans_table_says_where_plans_differ() -> None:
    compiled = {"seconds": 10.0, "nodes": 122, "plan": [["openvino", 122]],
                "measurements": 10, "coarse": "3 region(s)"}
    exact = {**compiled, "seconds": 40.0, "measurements": 200}
    other = {**exact, "plan": [["onnxruntime", 122]]}
    result = {"command": "c", "commit": "abc", "machine": "m", "config": "x",
              "rows": [{"model": "a", "auto": compiled, "everywhere": exact, "same": True},
                       {"model": "b", "auto": compiled, "everywhere": other, "same": False,
                        "timed": {"ms": {"auto": 47.0, "everywhere": 48.0},
                                  "speed": 1.02}}]}
    text = search_plans.table(result)
    assert "| a | 122 | 10.0 | 40.0 | 0.25 | 10 / 200 | openvino[122] | openvino[122] | " \
           "same plan |" in text
    assert "47.000 vs 48.000 ms: auto 1.02x the speed (higher is faster)" in text
    assert "Same plan on 1 of 2 model(s)." in text
