"""bench/threads.py runs end to end on a small model: its chain section (with the one-thread
variant of the mixed chains) and its table. Timings are not asserted: only that every number
is there and every chain computes what the whole model computes."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import backends, zoo
from tessera.backends._threads import ThreadPolicy
from tessera.ir import load_model

pytestmark = pytest.mark.skipif(
    not all(backends.get(b).is_available().ok for b in ("onnxruntime", "openvino")),
    reason="bench/threads needs onnxruntime and openvino")


def test_the_chain_section_runs_and_renders() -> None:
    from bench.threads import bench_chain, markdown

    rows = bench_chain("mlp", rounds=1, seconds=0.02)
    assert [(r["targets"], r["k"]) for r in rows] == [
        ("onnxruntime", 2), ("onnxruntime", 4), ("onnxruntime", 10),
        ("onnxruntime/openvino", 2), ("onnxruntime/openvino", 4),
        ("onnxruntime/openvino", 10)]
    for row in rows:
        assert row["ratio"] > 0 and row["sum_of_parts_ms"] > 0
        assert row["cold_ratio"] > 0 and row["sum_of_cold_parts_ms"] > 0
        assert row["vs_bare_chain"] > 0 and row["bare_chain"]["median_ms"] > 0
        assert len(row["chain"]["blocks_ms"]) == 1  # one per round: the paired ratios' input
        assert ("one_thread" in row) == ("openvino" in row["targets"])
    variant = rows[-1]["one_thread"]
    assert variant["speedup"] > 0 and all(0 <= i < 10 for i in variant["parts"])
    table = markdown({"machine": "test", "rounds": 1, "single": [], "chain": rows,
                      "policy": []})
    assert "one-thread choice" in table
    assert table.count("| mlp | 10 |") == 1
    assert "chain / bare chain (lower is cheaper)" in table
    assert "| speed vs native (higher is faster) |" in table


def test_the_bare_chain_computes_what_the_executor_computes() -> None:
    from bench.threads import bare_chain, chained

    model = load_model(zoo.export("mlp", 1))
    feeds = zoo.example_inputs("mlp", 1)
    chain = chained(model, 4, ["onnxruntime", "openvino"], ThreadPolicy.for_partitions(2))
    bare = bare_chain(chain)(feeds)
    for name, value in chain.run(feeds).items():
        np.testing.assert_allclose(bare[name], value, rtol=1e-6, atol=1e-7)


def test_paired_ratios_cancel_drift_between_rounds() -> None:
    from bench._rounds import Measured, paired

    # the machine slows down 2x in the last round: every configuration alike
    a = Measured(2.0, 1.0, 4.0, 3, (1.0, 2.0, 4.0))
    b = Measured(1.0, 0.5, 2.0, 3, (0.5, 1.0, 2.0))
    assert paired(a, b) == 2.0
    assert paired([b, b], a) == 1.0  # parts summed round by round


def test_a_one_thread_chain_computes_what_the_model_computes() -> None:
    from bench.threads import chained, one_thread_targets

    model = load_model(zoo.export("mlp", 1))
    feeds = zoo.example_inputs("mlp", 1)
    mix = ["onnxruntime", "openvino"]
    chain = chained(model, 4, mix, ThreadPolicy.for_partitions(2))
    targets = one_thread_targets(model, 4, mix, ThreadPolicy.for_partitions(2), feeds)
    assert len(targets) == 4 and all(t.split()[0] in mix for t in targets)
    variant = chained(model, 4, targets, ThreadPolicy.for_partitions(2))
    want = backends.get("reference").compile(model.proto).run(feeds)
    for got in (chain.run(feeds), variant.run(feeds)):
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
