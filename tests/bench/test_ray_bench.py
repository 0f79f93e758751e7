"""bench/ray_measure.py: the rows and the table from recorded runs (the bench itself is run by
hand: it starts Ray clusters and searches ResNet-50). Timings are never asserted."""

from __future__ import annotations

from bench import ray_measure


def _run(nodes: int, seconds: float, measure_seconds: float) -> dict[str, object]:
    return {"nodes": nodes, "seconds": seconds, "cluster_seconds": 3.0 if nodes else 0.0,
            "measurements": 100, "measure_seconds": measure_seconds, "plan": "3 partitions"}


def test_rows_give_throughput_and_the_overhead_of_one_node_against_the_local_worker() -> None:
    rows = ray_measure.summarise({0: [_run(0, 50.0, 40.0), _run(0, 52.0, 41.0)],
                                  1: [_run(1, 53.0, 42.0)], 2: [_run(2, 60.0, 48.0)]})
    local, one, two = rows
    assert local["setup"] == "local worker" and local["median_seconds"] == 51.0
    assert one["setup"] == "Ray, 1 node" and two["setup"] == "Ray, 2 nodes"
    assert one["per_second"] == round(100 / 53.0, 2)
    # the local worker's median round (52 s) measured 41 s over 100: one node 10 ms more each
    assert one["overhead_ms"] == 10.0 and one["overhead_share"] == round(0.01 / 0.41, 4)
    assert "overhead_ms" not in two and "overhead_ms" not in local


def test_the_table_states_the_cores_command_and_every_setup() -> None:
    rows = ray_measure.summarise({0: [_run(0, 50.0, 40.0)], 1: [_run(1, 51.0, 41.0)]})
    text = ray_measure.table({"command": "python -m bench.ray_measure", "commit": "abc",
                              "machine": "x86_64, 2 cores", "model": "resnet50",
                              "targets": "openvino,onnxruntime", "rounds": 1, "rows": rows})
    assert "2 cores" in text and "sharing its cores" in text
    assert "`python -m bench.ray_measure` at commit `abc`" in text
    assert "| local worker | 50.0; 50.0 | 100 | 2.0 |" in text
    assert "| Ray, 1 node | 51.0; 51.0 | 100 |" in text and "10.0 ms (2.5%)" in text
    assert "| Ray overhead per measurement (lower is better) |" in text
