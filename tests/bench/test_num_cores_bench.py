"""bench/num_cores.py runs end to end on a small model, each configuration in its own process:
under `cpu -num-cores=1` every backend is given one thread, and the table shows it next to
the CPU and wall time per run. Timings are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera import backends

pytestmark = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="bench/num_cores needs onnxruntime and openvino")


def test_the_configurations_pair_each_plan_with_its_one_core_form() -> None:
    from bench.num_cores import configs

    assert [config for _, config in configs(["onnxruntime", "openvino"], 1)] == [
        "openvino,onnxruntime,cpu", "openvino,onnxruntime,cpu -num-cores=1",
        "onnxruntime,cpu", "onnxruntime,cpu -num-cores=1",
        "openvino,cpu", "openvino,cpu -num-cores=1"]
    assert [config for _, config in configs(["onnxruntime"], 2)][-1] == \
        "onnxruntime,cpu -num-cores=2"


def test_the_bench_runs_on_a_small_model(tmp_path: Path) -> None:
    from bench import num_cores

    out = tmp_path / "out"
    assert num_cores.main(["--models", "mlp", "--backends", "openvino", "--runs", "2",
                           "--rounds", "1", "--warmup", "1", "--out", str(out)]) == 0
    result = json.loads((out / "num-cores.json").read_text())
    assert result["command"].startswith("python -m bench.num_cores --models mlp")
    assert result["commit"] and result["machine"] and result["cores"] == 1
    rows = {row["config"]: row for row in result["rows"]}
    assert list(rows) == ["openvino,onnxruntime,cpu", "openvino,onnxruntime,cpu -num-cores=1",
                          "openvino,cpu", "openvino,cpu -num-cores=1"]
    for config, row in rows.items():
        assert "error" not in row, row
        assert row["cpu_ms_per_run"] > 0 and row["wall_ms_per_run"] > 0
        assert row["cpu_over_wall"] > 0 and len(row["rounds_cpu_ms"]) == 1
        if config.endswith("-num-cores=1"):
            assert {(p["device"], p["num_threads"]) for p in row["parts"]} == {
                ("cpu -num-cores=1", 1)}
    one = rows["openvino,cpu -num-cores=1"]["parts"]
    assert [(p["backend"], p["library"]) for p in one] == [
        ("openvino", "INFERENCE_NUM_THREADS 1")]
    table = (out / "num-cores.md").read_text()
    assert f"at commit `{result['commit']}`" in table
    assert "| mlp | `openvino,cpu -num-cores=1` |" in table
    assert "openvino: 1 (INFERENCE_NUM_THREADS 1)" in table
    assert "| CPU / wall (cores kept busy: higher is more, 1.0 is one) |" in table
